"""The run level's one registry: every policy that decides a run's workers and servers, by the name `coach run
--policy` and `coach serve --policy` take.

The pure policies (coach.policy.run_policy: `coach`, `static`) and the learned one (coach.dl2.run_policy: `dl2`)
meet here, where a run is composed, because coach.policy may not name `dl2`: its network reads a model file, and
the pure core touches no file system. The cluster simulator's policies are the other level and have their own
registry (coach.simulator.policies.CLUSTER_POLICIES). No side effects: `dl2` reads its model when first asked to decide.
"""

from __future__ import annotations

from coach.dl2.run_policy import Dl2RunPolicy
from coach.policy.run_policy import CoachPolicy, RunPolicy, StaticPolicy

#: name -> the policy every run of this process shares (a policy keeps no state of its own between runs)
RUN_POLICIES: dict[str, RunPolicy] = {"coach": CoachPolicy(), "static": StaticPolicy(), "dl2": Dl2RunPolicy()}
