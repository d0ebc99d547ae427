"""Whether a set of pods fits the nodes all at once, and kube's words for why a pod fits no node.

A gang runs only when every pod of its quorum has a node at the same time, so the gang plugins ask whether the
pods a job still needs fit *together*: each pod placed in turn on a simulated copy of the nodes' shapes, judged by
the profile's Filter plugins, every placement taking its slots and resources before the next pod is tried.
The placing is greedy (the biggest pods first, each on the first shape it fits in bucket order, i.e. the
fullest capped node first): it may miss a packing a cleverer search would find, and never reports one that does
not exist. It works on buckets (shape -> count), so its cost grows with the number of distinct shapes, not nodes.

Side effects: none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from scheduler_fork.constraints import CPU, MEMORY
from scheduler_fork.framework import FilterReason, Pod, PodGroup

#: kube's message when there is no node at all (ErrNoNodesAvailable).
NO_NODES = "no nodes available to schedule pods"


def fit_error(nodes: int, failures: Mapping[str, int]) -> str:
    """kube's FitError: '0/5 nodes are available: 2 Insufficient cpu, 3 node(s) were unschedulable.'

    `failures` maps each reason to the nodes it kept the pod off (a node may count under several reasons); the
    "count reason" parts are sorted as strings, as kube sorts them."""
    if nodes == 0:
        return NO_NODES
    parts = sorted(f"{count} {reason}" for reason, count in failures.items())
    return f"0/{nodes} nodes are available" + (": " + ", ".join(parts) if parts else "") + "."


def add_failure(failures: dict[str, int], why: FilterReason, nodes: int) -> None:
    """Count `nodes` nodes under the reason(s) `why` (a Filter plugin's answer that is not None)."""
    if type(why) is str:
        failures[why] = failures.get(why, 0) + nodes
    else:
        for reason in why:
            failures[reason] = failures.get(reason, 0) + nodes


@dataclass(frozen=True)
class Misfit:
    """Why some pods do not fit the nodes at once: the first of them that found no node, and why not."""

    pod: int  # its position among the pods asked about
    nodes: int  # how many nodes there were
    failures: tuple[tuple[str, int], ...]  # (reason, nodes it kept the pod off), as fit_error counts them

    def message(self) -> str:
        return fit_error(self.nodes, dict(self.failures))


def filters_for(state, filters: Sequence, pod: Pod) -> list:
    """The Filter plugins among `filters` that can fail some node in placement for `pod` (see FilterPlugin.skip)."""
    return [f for f in filters if not (hasattr(f, "skip") and f.skip(state, pod))]


def _size_first(pods: Sequence[Pod]) -> list[int]:
    """Positions of `pods`, biggest first (cpu, then memory, then slots), otherwise in the order given."""
    def key(k: int):
        requests = dict(pods[k].requests)
        return (-requests.get(CPU, 0), -requests.get(MEMORY, 0), -pods[k].slots, k)
    return sorted(range(len(pods)), key=key)


def place_at_once(state, filters: Sequence, pods: Sequence[Pod], shapes: Mapping) -> Misfit | None:
    """None when `pods` fit the nodes `shapes` describes (shape -> how many nodes) all at once, else a Misfit.

    `filters` are Filter plugins with the bucket form (`bucket_filter(state, pod, shape)`); `state` answers
    `shape_after(shape, pod)`. See the module docstring for how the pods are placed."""
    if not pods:
        return None
    counts = {shape: n for shape, n in shapes.items() if n > 0}
    nodes = sum(counts.values())
    for k in _size_first(pods):
        pod = pods[k]
        failures: dict[str, int] = {}
        judges = filters_for(state, filters, pod)
        for shape in sorted(counts):
            for plugin in judges:
                why = plugin.bucket_filter(state, pod, shape)
                if why is not None:
                    add_failure(failures, why, counts[shape])
                    break
            else:
                left = counts[shape] - 1
                if left:
                    counts[shape] = left
                else:
                    del counts[shape]
                after = state.shape_after(shape, pod)
                counts[after] = counts.get(after, 0) + 1
                break
        else:
            return Misfit(k, nodes, tuple(sorted(failures.items())))
    return None


def quorum_members(group: PodGroup, candidates: Sequence[Pod], held: Mapping[str, int]) -> list[Pod]:
    """The pods, among `candidates` (in the order given), that complete the quorum of a job already holding
    `held` (role -> pods): for each role the ones it lacks, then, when the group wants its whole set, any others
    up to it. Fewer than needed when the candidates run out."""
    counts = dict(held)
    chosen: list[Pod] = []
    others: list[Pod] = []
    for pod in candidates:
        if counts.get(pod.role, 0) < group.min_member.get(pod.role, 0):
            chosen.append(pod)
            counts[pod.role] = counts.get(pod.role, 0) + 1
        else:
            others.append(pod)
    if group.whole is not None:
        chosen += others[:max(0, group.whole - sum(counts.values()))]
    return chosen


__all__ = ["NO_NODES", "fit_error", "add_failure", "Misfit", "filters_for", "place_at_once", "quorum_members"]
