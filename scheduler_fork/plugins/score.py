"""Score plugins (with their NormalizeScore): which feasible node is best for a pod.

Side effects: none.
"""

from __future__ import annotations

from typing import Mapping

from scheduler_fork.framework import MAX_NODE_SCORE, Pod, normalize_to_max


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

    def bucket_score(self, state, pod: Pod, capacity: int, free: int) -> int:
        """Fast path: a node with every slot free holds no pod at all; any other node holds some job's pods."""
        return MAX_NODE_SCORE if free == capacity else 0

    def node_overrides(self, state, pod: Pod) -> Mapping[int, int]:
        """The nodes that hold only this job's pods score 100 although their bucket scores 0."""
        jobs_on = state.jobs_on
        return {node: MAX_NODE_SCORE for node in state.job_nodes.get(pod.job, ()) if len(jobs_on[node]) == 1}


class LeastAllocated:
    """kube's NodeResourcesLeastAllocated on slots: (free slots after placing the pod) * 100 // capacity.

    Its scores are already on 0..100, so NormalizeScore leaves them as they are (as in kube).
    """

    name = "LeastAllocated"

    def score(self, state, pod: Pod, node: int) -> int:
        return self.bucket_score(state, pod, state.capacity[node], state.free[node])

    def normalize(self, scores: dict) -> dict:
        return dict(scores)

    def bucket_score(self, state, pod: Pod, capacity: int, free: int) -> int:
        if capacity <= 0:
            return 0
        return max(0, free - pod.slots) * MAX_NODE_SCORE // capacity

    def node_overrides(self, state, pod: Pod) -> Mapping[int, int]:
        return {}
