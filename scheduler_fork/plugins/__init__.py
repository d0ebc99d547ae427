"""The plugin registry: every plugin by the name profiles use (kube: the in-tree plugin registry).

Side effects: none.
"""

from __future__ import annotations

from scheduler_fork.plugins.binder import DefaultBinder
from scheduler_fork.plugins.gang import Coscheduling, HeadOfLine, PodGroupRoles, QuorumFirst
from scheduler_fork.plugins.node_resources import NodeResourcesFit
from scheduler_fork.plugins.node_rules import NodeAffinity, NodeUnschedulable, TaintToleration
from scheduler_fork.plugins.node_slots import NodeSlotsFit
from scheduler_fork.plugins.queue_sort import JobCreationOrder, PrioritySort
from scheduler_fork.plugins.score import JobIsolation, LeastAllocated, Packing

#: Plugin name -> plugin (stateless; one instance serves every scheduler).
PLUGINS = {
    plugin.name: plugin
    for plugin in (
        JobCreationOrder(),
        PrioritySort(),
        PodGroupRoles(),
        HeadOfLine(),
        QuorumFirst(),
        NodeUnschedulable(),
        TaintToleration(),
        NodeAffinity(),
        NodeResourcesFit(),
        NodeSlotsFit(),
        JobIsolation(),
        LeastAllocated(),
        Packing(),
        Coscheduling(),
        DefaultBinder(),
    )
}

__all__ = [
    "PLUGINS",
    "Coscheduling",
    "DefaultBinder",
    "HeadOfLine",
    "JobCreationOrder",
    "JobIsolation",
    "LeastAllocated",
    "NodeAffinity",
    "NodeResourcesFit",
    "NodeSlotsFit",
    "NodeUnschedulable",
    "Packing",
    "PodGroupRoles",
    "PrioritySort",
    "QuorumFirst",
    "TaintToleration",
]
