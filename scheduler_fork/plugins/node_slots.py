"""Filter plugin: Coach's slot cap on a node (the coach.io/slots label), on top of kube's fitness.

A node with a cap holds at most that many slots of Coach's pods (each function takes one); a node without one is
limited by its resources only (NodeResourcesFit). Pods of other schedulers take no slot.
Side effects: none.
"""

from __future__ import annotations

from scheduler_fork.framework import FilterReason, Pod

#: The reason a node's slot cap gives, in kube's words for a resource.
INSUFFICIENT_SLOTS = "Insufficient slots"


class NodeSlotsFit:
    """A node passes when it has at least `pod.slots` free slots (always, without a cap)."""

    name = "NodeSlotsFit"

    def skip(self, state, pod: Pod) -> bool:
        return state.uncapped == state.active_nodes

    def filter(self, state, pod: Pod, node: int) -> FilterReason:
        return self.bucket_filter(state, pod, state.shape[node])

    def bucket_filter(self, state, pod: Pod, shape) -> FilterReason:
        """The answer depends only on the shape's free slots."""
        return None if shape.free >= pod.slots else INSUFFICIENT_SLOTS
