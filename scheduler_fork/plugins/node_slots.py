"""Filter plugin: does the pod fit the node's free slots (kube: NodeResourcesFit, with slots as the resource).

Side effects: none.
"""

from __future__ import annotations

from scheduler_fork.framework import Pod, Reason


class NodeSlotsFit:
    """A node passes when it has at least `pod.slots` free slots."""

    name = "NodeSlotsFit"

    def filter(self, state, pod: Pod, node: int) -> Reason:
        return self.bucket_filter(state, pod, state.capacity[node], state.free[node])

    def bucket_filter(self, state, pod: Pod, capacity: int, free: int) -> Reason:
        """Fast path: the answer depends only on the node's free slots."""
        if free >= pod.slots:
            return None
        return f"fewer than {pod.slots} free slot{'s' if pod.slots != 1 else ''}"
