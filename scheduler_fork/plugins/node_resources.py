"""Filter plugin NodeResourcesFit: the node has room for the pod's requests and for one more pod (kube's).

Every pod bound to a node counts against it, whichever scheduler placed it: its requests against the node's
allocatable resources, and itself against allocatable `pods`. A node without allocatable (a bare `Node(name,
slots)`) has unlimited resources. As in kube, a resource the pod does not request is not checked, and a node
whose pods already take more than it has fails every pod that requests that resource.
Side effects: none.
"""

from __future__ import annotations

from scheduler_fork.constraints import PODS
from scheduler_fork.framework import FilterReason, Pod

#: kube's reason when a node holds as many pods as its allocatable `pods`.
TOO_MANY_PODS = "Too many pods"


def insufficient(resource: str) -> str:
    """kube's reason for a resource the node lacks: 'Insufficient cpu'."""
    return f"Insufficient {resource}"


class NodeResourcesFit:
    """A node passes when one more pod fits its `pods` and every request fits what its pods leave free."""

    name = "NodeResourcesFit"

    def skip(self, state, pod: Pod) -> bool:
        return state.with_resources == 0

    def filter(self, state, pod: Pod, node: int) -> FilterReason:
        return self.bucket_filter(state, pod, state.shape[node])

    def bucket_filter(self, state, pod: Pod, shape) -> FilterReason:
        """Every reason that applies (kube reports them all): 'Too many pods', 'Insufficient cpu', ..."""
        allocatable = state.classes[shape.cls].allocatable
        if allocatable is None:
            return None
        used = dict(shape.used)
        reasons = []
        if used.get(PODS, 0) + 1 > allocatable.get(PODS, 0):
            reasons.append(TOO_MANY_PODS)
        for resource, amount in pod.requests:
            if amount > allocatable.get(resource, 0) - used.get(resource, 0):
                reasons.append(insufficient(resource))
        if not reasons:
            return None
        return reasons[0] if len(reasons) == 1 else tuple(reasons)
