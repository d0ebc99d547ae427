"""Elastic scaling with batch-size choice by dynamic programming (Saxena et al., MASCOTS'20). Pure.

Each job's value for k GPUs is its throughput scaling factor: the best throughput over the batch sizes allowed on
k GPUs (its range is the application's [init_batch, max_batch], and at most max_local_batch per GPU: the paper
bounds the per-GPU batch by GPU memory, without gradient accumulation) divided by its best
throughput on 1 GPU; 0 GPUs are worth 0. A dynamic program over jobs x GPU counts picks the counts that maximise
the sum of these values within the cluster, and each job runs at the batch that achieved its value. Like the
paper's optimizer this looks at throughput only (the paper relies on the batch range being safe for accuracy);
statistical efficiency is not in the objective. Ties go to earlier arrivals (a 1e-9 bonus per rank) and, within
a job, to fewer GPUs. Batch candidates: 4 geometric points of the allowed range, its ends included (throughput
rises with the per-GPU batch, so the top end usually wins).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from coach.simulator.grants import gpu_cap, memory_bounds
from coach.simulator.view import AppModel, ClusterSnapshot, Grant, packed_nodes

BATCH_POINTS = 4
TIE_BONUS = 1e-9


def best_throughput(app: AppModel, gpus: int, nodes: int) -> tuple[int, float]:
    """(batch, samples/s): the fastest allowed batch size on this allocation."""
    low, high = memory_bounds(app, gpus)
    candidates = sorted({int(round(b)) for b in np.geomspace(low, high, BATCH_POINTS)} | {low, high})
    best = (low, -1.0)
    for batch in candidates:
        speed = float(app.throughput(gpus, nodes, batch))
        if speed > best[1]:
            best = (batch, speed)
    return best


def solve(values: list[np.ndarray], total: int) -> list[int]:
    """GPU counts maximising sum(values[j][k_j]) subject to sum(k_j) <= total; values[j][0] must be 0."""
    best = np.zeros(total + 1)
    choices = []
    rows = np.arange(total + 1)
    for value in values:
        kmax = min(len(value) - 1, total)
        padded = np.concatenate([np.full(kmax, -np.inf), best])
        # table[t, k] = best[t - k] + value[k] (-inf where k > t): a reversed sliding window over the padded
        # best, a view rather than a gather (the Philly trace solves this with thousands of jobs queued)
        table = sliding_window_view(padded, kmax + 1)[:, ::-1] + value[:kmax + 1]
        choice = table.argmax(axis=1)
        choices.append(choice)
        best = table[rows, choice]
    counts, left = [], total
    for choice in reversed(choices):
        counts.append(int(choice[left]))
        left -= counts[-1]
    return counts[::-1]


@dataclass
class ElasticBatchDp:
    elastic: bool = True
    # (id(app), gpus per node) -> (app, values by GPU count, batches by GPU count), extended on demand: throughput
    # does not change with progress, so each point is computed once per simulation (the app is held so that its
    # id stays unique)
    tables: dict[tuple[int, int], tuple[AppModel, list[float], list[int]]] = field(default_factory=dict)
    # the last round's jobs (name, app, cap, in order) and cluster, and its answer: values do not change with
    # progress, so the same jobs on the same cluster get the same answer without solving again (apps held: ids)
    last: tuple[tuple, Mapping[str, Grant]] | None = None

    # (id(app), gpus per node, cap) -> `table`'s answer (the app is held in `tables`)
    values: dict[tuple[int, int, int], tuple[np.ndarray, list[int]]] = field(default_factory=dict)

    def table(self, app: AppModel, cap: int, per_node: int) -> tuple[np.ndarray, list[int]]:
        """Values (speed-up over 1 GPU; 0 at 0 GPUs) and batches for 0..cap GPUs."""
        found = self.values.get((id(app), per_node, cap))
        if found is not None:
            return found
        _, speeds, batches = self.tables.setdefault((id(app), per_node), (app, [0.0], [0]))
        for gpus in range(len(speeds), cap + 1):
            batch, speed = best_throughput(app, gpus, packed_nodes(gpus, per_node))
            speeds.append(speed)
            batches.append(batch)
        base = speeds[1] if cap >= 1 and speeds[1] > 0 else 1.0
        found = self.values[(id(app), per_node, cap)] = (np.array(speeds[:cap + 1]) / base, batches[:cap + 1])
        return found

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        total, jobs = snapshot.total_gpus, snapshot.jobs
        asked = (snapshot.node_gpus, tuple((job.name, job.app, gpu_cap(job, total)) for job in jobs))
        if self.last is not None and self.last[0] == asked:
            return dict(self.last[1])
        grants = self._solve(snapshot)
        self.last = (asked, grants)
        return dict(grants)

    def _solve(self, snapshot: ClusterSnapshot) -> dict[str, Grant]:
        total, jobs = snapshot.total_gpus, snapshot.jobs
        tables = [self.table(job.app, gpu_cap(job, total), snapshot.gpus_per_node) for job in jobs]
        values = []
        for rank, (value, _) in enumerate(tables):
            bonus = np.full(len(value), TIE_BONUS * (len(jobs) - rank))
            bonus[0] = 0.0
            bonused = value + bonus
            # more GPUs than where the value first peaks are never chosen: the peak is worth as much on fewer
            # (and the table's argmax takes the fewest), so they are left out of the table (most applications peak
            # at 5 to 86 GPUs, far below a 512-GPU cluster)
            values.append(bonused[:int(np.argmax(bonused)) + 1])
        counts = solve(values, total)
        return {job.name: Grant(k, tables[j][1][k]) for j, (job, k) in enumerate(zip(jobs, counts)) if k > 0}


def elastic_batch_dp(seed: int) -> ElasticBatchDp:
    return ElasticBatchDp()
