"""Score plugins (with their NormalizeScore): which feasible node is best for a pod.

Side effects: none.
"""

from __future__ import annotations

from typing import Mapping

from scheduler_fork.constraints import CPU, MEMORY
from scheduler_fork.framework import MAX_NODE_SCORE, Pod, normalize_to_max
from scheduler_fork.nodes import NO_SLOT_CAP

#: The resources LeastAllocated weighs (kube's defaults, each with weight 1), besides slots.
SCORED_RESOURCES = (CPU, MEMORY)


class JobIsolation:
    """The thesis's score: 100 on a node that holds no pod of another job, else 0 (keeps jobs apart).

    Empty nodes and nodes holding only this job's pods score 100. NormalizeScore is kube's default
    (the best becomes 100; all zero stays zero).
    """

    name = "JobIsolation"

    def score(self, state, pod: Pod, node: int) -> int:
        others = state.jobs_on[node]
        return MAX_NODE_SCORE if not others or (len(others) == 1 and pod.job in others) else 0

    def normalize(self, scores: dict) -> dict:
        return normalize_to_max(scores)

    def bucket_score(self, state, pod: Pod, shape) -> int:
        """Fast path: a node with every slot free holds no Coach pod; any other node holds some job's pods."""
        return MAX_NODE_SCORE if shape.free == shape.capacity else 0

    def node_overrides(self, state, pod: Pod) -> Mapping[int, int]:
        """The nodes that hold only this job's pods score 100 although their bucket scores 0."""
        jobs_on = state.jobs_on
        return {node: MAX_NODE_SCORE for node in state.job_nodes.get(pod.job, ()) if len(jobs_on[node]) == 1}


class LeastAllocated:
    """kube's NodeResourcesLeastAllocated: the mean, over the node's slots (when capped) and its cpu and memory
    (when it has them), of (what is left after placing the pod) * 100 // what it has.

    A bare `Node(name, slots)` is scored on slots alone. The scores are already on 0..100, so NormalizeScore
    leaves them as they are (as in kube).
    """

    name = "LeastAllocated"

    def score(self, state, pod: Pod, node: int) -> int:
        return self.bucket_score(state, pod, state.shape[node])

    def normalize(self, scores: dict) -> dict:
        return dict(scores)

    def bucket_score(self, state, pod: Pod, shape) -> int:
        capacity = shape.capacity
        allocatable = state.classes[shape.cls].allocatable
        if not allocatable:  # slots alone
            if capacity == NO_SLOT_CAP or capacity <= 0:
                return 0
            return max(0, shape.free - pod.slots) * MAX_NODE_SCORE // capacity
        parts = []
        if capacity != NO_SLOT_CAP:
            parts.append(max(0, shape.free - pod.slots) * MAX_NODE_SCORE // capacity if capacity > 0 else 0)
        used, requests = dict(shape.used), dict(pod.requests)
        for resource in SCORED_RESOURCES:
            have = allocatable.get(resource, 0)
            if have > 0:
                left = have - used.get(resource, 0) - requests.get(resource, 0)
                parts.append(max(0, left) * MAX_NODE_SCORE // have)
        return sum(parts) // len(parts) if parts else 0

    def node_overrides(self, state, pod: Pod) -> Mapping[int, int]:
        return {}


class Packing:
    """Fewest nodes per job, the job's own nodes first: how the Pollux artifact's GPU replicas sit (its policies
    place a job on as few nodes as its GPUs need, filling one node before opening another).

    A node that already holds a pod of this job scores 100. Any other node: when it has room for all of the job's
    pods still pending, 50..99, the tighter the fit the higher (best fit: the rest of the job lands on that one
    node and larger holes stay whole for larger jobs); when no room for them all, 0..49 by its free slots (the
    emptiest node first, so the job spreads over as few nodes as it must). NormalizeScore leaves the scores as
    they are. Ties (equal nodes) fall to the scheduler's seeded draw, as with every score.
    """

    name = "Packing"

    def score(self, state, pod: Pod, node: int) -> int:
        if pod.job in state.jobs_on[node]:
            return MAX_NODE_SCORE
        return self.bucket_score(state, pod, state.shape[node])

    def normalize(self, scores: dict) -> dict:
        return dict(scores)

    def bucket_score(self, state, pod: Pod, shape) -> int:
        capacity, free = shape.capacity, shape.free
        if capacity == NO_SLOT_CAP or capacity <= 0:
            return 0
        ledger = state.jobs.get(pod.job)
        need = max(ledger.n_pending if ledger is not None else 1, 1) * pod.slots  # this pod and the job's others
        half = MAX_NODE_SCORE // 2
        if free >= need:
            return MAX_NODE_SCORE - 1 - (free - need) * (half - 1) // capacity
        return max(free, 0) * (half - 1) // capacity

    def node_overrides(self, state, pod: Pod) -> Mapping[int, int]:
        """The nodes holding pods of this job score 100 whatever their bucket scores."""
        return {node: MAX_NODE_SCORE for node in state.job_nodes.get(pod.job, ())}
