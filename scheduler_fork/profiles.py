"""The scheduler profiles: which plugin runs at each extension point (kube: KubeSchedulerProfile).

Choose one by name (`Scheduler(nodes, profile="gang")`); code never branches on a profile's name.
Side effects: none.
"""

from __future__ import annotations

from scheduler_fork.framework import Profile

_GANG_PRE_FILTER = ("PodGroupRoles", "HeadOfLine", "QuorumFirst")

#: Whether a pod may go onto a node, in kube-scheduler's order (cordon, taints, node affinity, resources), then
#: Coach's slot cap. Every profile uses them all: a node fits a pod as it would for kube-scheduler.
NODE_FILTERS = ("NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodeResourcesFit", "NodeSlotsFit")

#: Profile name -> Profile.
PROFILES: dict[str, Profile] = {
    profile.name: profile
    for profile in (
        Profile(
            name="default",
            queue_sort="PrioritySort",
            filter=NODE_FILTERS,
            score=(("LeastAllocated", 1),),
            summary="kube-scheduler's defaults: priority then arrival, fit, least allocated, no gang",
        ),
        Profile(
            name="gang",
            queue_sort="JobCreationOrder",
            pre_filter=_GANG_PRE_FILTER,
            filter=NODE_FILTERS,
            score=(("JobIsolation", 1),),
            summary="the thesis's gang-like FIFO: jobs in creation order, roles first, jobs apart; "
            "one job starts at a time",
        ),
        Profile(
            name="gang-pack",
            queue_sort="JobCreationOrder",
            pre_filter=_GANG_PRE_FILTER,
            filter=NODE_FILTERS,
            score=(("Packing", 1),),
            summary="gang with packing: a job's pods on as few nodes as possible, its own nodes first "
            "(GPU replicas, as the Pollux artifact places them)",
        ),
        Profile(
            name="gang-strict",
            queue_sort="JobCreationOrder",
            pre_filter=_GANG_PRE_FILTER,
            filter=NODE_FILTERS,
            score=(("JobIsolation", 1),),
            reserve=("Coscheduling",),
            permit=("Coscheduling",),
            summary="gang plus coscheduling's all-or-nothing Permit: a job's quorum binds together or not at all",
        ),
        Profile(
            name="gang-thesis",
            queue_sort="JobCreationOrder",
            pre_filter=("PodGroupRoles",),
            filter=NODE_FILTERS,
            score=(("JobIsolation", 1),),
            summary="the thesis's fork exactly as it was, without head of line: can deadlock (kept to show it)",
        ),
    )
}
