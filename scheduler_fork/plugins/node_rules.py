"""Filter plugins that keep a pod off nodes whatever room they have: NodeUnschedulable, TaintToleration and
NodeAffinity, as kube-scheduler's plugins of those names decide (and word) it.

- NodeUnschedulable: a cordoned node takes only pods that tolerate node.kubernetes.io/unschedulable:NoSchedule.
- TaintToleration: each NoSchedule or NoExecute taint of the node must be tolerated; the first one that is not
  is the reason. PreferNoSchedule is not a filter. (A not-ready node is kept out this way: the admission gives
  every new node the node.kubernetes.io/not-ready:NoSchedule taint, and pods tolerate only the NoExecute one.)
- NodeAffinity: spec.nodeSelector and the required node affinity's terms must match the node's labels (and
  name, for matchFields).
All three read only the node's class (scheduler_fork.nodes), so they judge a bucket at once.
Side effects: none.
"""

from __future__ import annotations

from scheduler_fork.constraints import selects, tolerates_unschedulable, untolerated
from scheduler_fork.framework import FilterReason, Pod

#: kube's reasons.
UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY_MISMATCH = "node(s) didn't match Node's node affinity/selector"


def untolerated_taint(key: str, value: str) -> str:
    """kube's reason for a taint: 'node(s) had untolerated taint {node.kubernetes.io/not-ready: }'."""
    return f"node(s) had untolerated taint {{{key}: {value}}}"


class NodeUnschedulable:
    """A cordoned node passes only pods that tolerate its unschedulable taint."""

    name = "NodeUnschedulable"

    def skip(self, state, pod: Pod) -> bool:
        return state.cordoned == 0 or tolerates_unschedulable(pod.tolerations)

    def filter(self, state, pod: Pod, node: int) -> FilterReason:
        return self.bucket_filter(state, pod, state.shape[node])

    def bucket_filter(self, state, pod: Pod, shape) -> FilterReason:
        if not state.classes[shape.cls].unschedulable or tolerates_unschedulable(pod.tolerations):
            return None
        return UNSCHEDULABLE


class TaintToleration:
    """A node passes when the pod tolerates every NoSchedule and NoExecute taint it has."""

    name = "TaintToleration"

    def skip(self, state, pod: Pod) -> bool:
        return state.tainted == 0

    def filter(self, state, pod: Pod, node: int) -> FilterReason:
        return self.bucket_filter(state, pod, state.shape[node])

    def bucket_filter(self, state, pod: Pod, shape) -> FilterReason:
        taints = state.classes[shape.cls].taints
        if not taints:
            return None
        taint = untolerated(taints, pod.tolerations)
        return None if taint is None else untolerated_taint(taint.key, taint.value)


class NodeAffinity:
    """A node passes when it carries the pod's nodeSelector labels and matches one of its required terms."""

    name = "NodeAffinity"

    def skip(self, state, pod: Pod) -> bool:
        return not pod.node_selector and pod.node_affinity is None

    def filter(self, state, pod: Pod, node: int) -> FilterReason:
        if not pod.node_selector and pod.node_affinity is None:
            return None
        found = state.nodes[node]
        if selects(pod.node_selector, pod.node_affinity, dict(found.labels), found.name):
            return None
        return AFFINITY_MISMATCH

    def bucket_filter(self, state, pod: Pod, shape) -> FilterReason:
        """From the node's class, which holds every label (and the name) a known pod's selection reads."""
        if not pod.node_selector and pod.node_affinity is None:
            return None
        cls = state.classes[shape.cls]
        return None if selects(pod.node_selector, pod.node_affinity, cls.labels, cls.name) else AFFINITY_MISMATCH
