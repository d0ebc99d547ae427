"""Where each function of a job goes: pure placement over ClusterState (no I/O, no clock).

First-fit, all or nothing per request: a job's functions bind together or not at all, so a job never holds
slots it cannot use. The gang and default schedulers of `scheduler_fork/` will register beside it.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from coach.cluster import ClusterState

#: A placer takes the state and the function names to place (one slot each) and returns name -> node, or None.
Placer = Callable[[ClusterState, Sequence[str]], "Mapping[str, str] | None"]


def first_fit(state: ClusterState, names: Sequence[str]) -> Mapping[str, str] | None:
    """Fill nodes in file order; None when the whole request does not fit now."""
    free = {node.name: state.free(node.name) for node in state.spec.nodes}
    placement: dict[str, str] = {}
    for name in names:
        node = next((n for n, slots in free.items() if slots > 0), None)
        if node is None:
            return None
        placement[name] = node
        free[node] -= 1
    return placement


PLACERS: dict[str, Placer] = {"first-fit": first_fit}
