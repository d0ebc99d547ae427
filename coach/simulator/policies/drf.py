"""Dominant resource fairness over GPUs (Ghodsi et al., NSDI'11). Pure.

With GPUs the only resource modelled, every job's dominant share is its GPU share, so DRF is max-min fairness by
progressive filling: GPUs go one at a time to the job holding the fewest (ties: the earlier arrival), a job stops
at its request (and its max_gpus). With more jobs than GPUs, the earliest arrivals get one each.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Mapping

from coach.simulator.grants import requested_grant, requested_gpus
from coach.simulator.view import ClusterSnapshot, Grant


def max_min_shares(caps: list[int], total: int) -> list[int]:
    """Progressive filling: integer max-min fair shares of `total` under per-job caps, ties to the lower index."""
    shares = [0] * len(caps)
    heap = [(0, index) for index, cap in enumerate(caps) if cap > 0]
    heapq.heapify(heap)
    for _ in range(total):
        if not heap:
            break
        held, index = heapq.heappop(heap)
        shares[index] = held + 1
        if held + 1 < caps[index]:
            heapq.heappush(heap, (held + 1, index))
    return shares


@dataclass
class Drf:
    elastic: bool = True

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        total = snapshot.total_gpus
        caps = [requested_gpus(job, total) for job in snapshot.jobs]
        shares = max_min_shares(caps, total)
        return {job.name: requested_grant(job, gpus) for job, gpus in zip(snapshot.jobs, shares) if gpus > 0}


def drf(seed: int) -> Drf:
    return Drf()
