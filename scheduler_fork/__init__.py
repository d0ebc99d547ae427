"""scheduler_fork: Coach's cluster scheduler in kube-scheduler's shape, as a pure library.

A queue sorted by a QueueSort plugin, then per pod PreFilter, Filter, Score/NormalizeScore, Reserve, Permit and
Bind plugins, chosen by a named profile:

- "gang": the thesis's gang-like FIFO (jobs in creation order, held until their roles exist, kept apart),
  with head of line so that it cannot deadlock;
- "gang-strict": gang plus coscheduling's all-or-nothing Permit;
- "default": kube-scheduler's default behaviour (priority, least allocated, no gang), which can deadlock;
- "gang-thesis": the thesis's fork without head of line, kept to show that it can deadlock.

Nodes fit pods as they do for kube-scheduler (NodeUnschedulable, TaintToleration, NodeAffinity,
NodeResourcesFit), with Coach's optional slot cap on top (NodeSlotsFit).

No I/O, no clock, no sleeping: times are arguments, randomness is seeded. See README.md in this folder.
"""

from scheduler_fork.constraints import Requirement, Taint, Term, Toleration
from scheduler_fork.framework import CycleResult, Deadlock, Node, Pod, PodGroup, Profile
from scheduler_fork.plugins import PLUGINS
from scheduler_fork.profiles import PROFILES
from scheduler_fork.scheduler import Scheduler

__all__ = ["Pod", "Node", "PodGroup", "Profile", "Scheduler", "CycleResult", "Deadlock", "PROFILES", "PLUGINS",
           "Taint", "Toleration", "Requirement", "Term"]
