"""How many training samples each worker of an epoch trains on, and which: one rule for the epoch that trains them
and for the warm-up that prepares a host for their batch shapes (coach_functions/warmup.py)."""

from __future__ import annotations

import math
from typing import Any

from coach.domain.contracts import EpochRequest


def shard_samples(num_samples: int, num_workers: int, data_fraction: float = 1.0) -> int:
    """Each worker's share of the first `data_fraction` of `num_samples` (the same for every rank, at least one
    sample each while there are enough): the rest of the division is left out, so that every worker runs as many
    steps and none waits at the synchronous update."""
    keep = max(num_workers, int(math.ceil(num_samples * data_fraction)))
    return min(keep, num_samples) // num_workers


def shard_size(num_samples: int, request: EpochRequest) -> int:
    """How many samples each worker trains on (the same for every rank)."""
    return shard_samples(num_samples, request.ps.num_workers, request.data_fraction)


def shard(data: dict, request: EpochRequest, rank: int) -> tuple[Any, Any]:
    """This worker's equal-sized slice of a seeded permutation of the (optionally reduced) training set.

    Every worker draws the same permutation (the job's seed) and keeps its own block of it, so the shards
    are disjoint without the workers talking to each other."""
    import numpy as np

    x, y = data["X_train"], data["y_train"]
    order = np.random.RandomState(request.hyper.seed).permutation(len(x))
    per_worker = shard_size(len(x), request)
    mine = order[rank * per_worker : (rank + 1) * per_worker]
    return x[mine], y[mine]
