"""Cost of an epoch: price x slot-seconds of every function it used. Pure."""

from __future__ import annotations

from typing import Mapping, Sequence


def epoch_cost(duration_s_by_function: Mapping[str, float], node_by_function: Mapping[str, str],
               price_per_slot_s_by_node: Mapping[str, float]) -> float:
    """Each function holds one slot for as long as its invocation lasted."""
    return sum(
        duration_s * price_per_slot_s_by_node[node_by_function[name]]
        for name, duration_s in duration_s_by_function.items()
    )


def predict_next_epoch_cost(costs: Sequence[float]) -> float | None:
    """Static counts: the next epoch costs what the last one did; None before any epoch."""
    return costs[-1] if costs else None
