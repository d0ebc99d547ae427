"""How many training samples each worker of an epoch trains on: one rule for the epoch that trains them and for the
warm-up that prepares a host for their batch shapes (coach_functions/warmup.py)."""

from __future__ import annotations

import math


def shard_samples(num_samples: int, num_workers: int, data_fraction: float = 1.0) -> int:
    """Each worker's share of the first `data_fraction` of `num_samples` (the same for every rank, at least one
    sample each while there are enough): the rest of the division is left out, so that every worker runs as many
    steps and none waits at the synchronous update."""
    keep = max(num_workers, int(math.ceil(num_samples * data_fraction)))
    return min(keep, num_samples) // num_workers
