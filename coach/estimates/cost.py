"""What an epoch costs and is predicted to cost: price x slot-seconds. Pure.

One module for every cost prediction: from the last measured epoch (scaled by slots) and from a fitted speed.
"""

from __future__ import annotations

import math
from typing import Mapping

from coach.domain.identity import slots_for


def epoch_cost(duration_s_by_function: Mapping[str, float], node_by_function: Mapping[str, str],
               price_per_slot_s_by_node: Mapping[str, float]) -> float:
    """Each function holds one slot for as long as its invocation lasted."""
    return sum(
        duration_s * price_per_slot_s_by_node[node_by_function[name]]
        for name, duration_s in duration_s_by_function.items()
    )


def cost_like_last(last_cost: float | None, last_counts: tuple[int, int] | None,
                   counts: tuple[int, int]) -> float | None:
    """The next epoch costs what the last one did, scaled by the slots it uses; None before any epoch."""
    if last_cost is None or last_counts is None:
        return None
    return last_cost * slots_for(*counts) / slots_for(*last_counts)


def cost_from_speed(epochs_per_s: float, workers: int, servers: int, price_per_slot_s: float) -> float:
    """slots x predicted epoch time x price; infinite when the speed predicts no progress."""
    if not (math.isfinite(epochs_per_s) and epochs_per_s > 0):
        return math.inf
    return slots_for(workers, servers) / epochs_per_s * price_per_slot_s


#: The shortest epoch: the fixed part alone (ps-lite rendezvous and teardown, model build, checkpoint,
#: validation), which benchmarks/epoch_overhead.py measures (benchmarks/results.md), takes no less. No epoch costs
#: less.
MIN_EPOCH_S = 0.3


def cost_floor(workers: int, servers: int, price_per_slot_s: float) -> float:
    """The least an epoch at (workers, servers) can cost: every slot held for the shortest epoch."""
    return slots_for(workers, servers) * MIN_EPOCH_S * price_per_slot_s


def predicted_cost(last_cost: float | None, last_counts: tuple[int, int] | None, counts: tuple[int, int],
                   price_per_slot_s: float) -> float:
    """The next step's cost: like the last one, scaled by slots; before any step, the floor."""
    like_last = cost_like_last(last_cost, last_counts, counts)
    return cost_floor(*counts, price_per_slot_s) if like_last is None else like_last
