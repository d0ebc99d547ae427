"""Optimus's greedy marginal-gain allocation (Peng et al., EuroSys'18), as the Pollux paper ran it. Pure.

Every job (arrival order) first gets 1 GPU while GPUs last; then GPUs are added one at a time to the job whose
estimated remaining time, remaining_progress / speed(g), drops the most with one more GPU, until GPUs run out or
no job gains. Optimus fits its speed model online; like the Pollux artifact's "Optimus+Oracle" we use the true
speed instead: the application's throughput at the job's own batch size (Optimus does not tune it) times that
batch's statistical efficiency, with replicas packed onto as few nodes as possible. A job grows up to its
max_gpus (the artifact's cap is batch // min local batch, which the application limits already imply).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Mapping

from coach.simulator.grants import fit_batch, gpu_cap
from coach.simulator.view import AppModel, ClusterSnapshot, Grant, ClusterJobView, packed_nodes


@dataclass
class Optimus:
    elastic: bool = True
    # (id(app), gpus, nodes, batch) -> (app, samples/s): throughput does not change with progress, so it is
    # asked once per simulation (the app is held so that its id stays unique)
    speeds: dict[tuple[int, int, int, int], tuple[AppModel, float]] = field(default_factory=dict)
    # (id(app), requested batch, GPUs per node) -> (app, [(batch, samples/s) on g packed GPUs for g = 0, 1, ...]):
    # what a job's GPU counts give before statistical efficiency, the same for every job of that application and
    # batch, every round
    lines: dict[tuple[int, int, int], tuple[AppModel, list[tuple[int, float]]]] = field(default_factory=dict)

    def throughput(self, app: AppModel, gpus: int, nodes: int, batch: int) -> float:
        key = (id(app), gpus, nodes, batch)
        if key not in self.speeds:
            self.speeds[key] = (app, float(app.throughput(gpus, nodes, batch)))
        return self.speeds[key][1]

    def on_gpus(self, job: ClusterJobView, gpus: int, per_node: int) -> tuple[int, float]:
        """(the job's batch fitted to `gpus` GPUs, samples/s there, packed)."""
        key = (id(job.app), job.requested_batch, per_node)
        entry = self.lines.get(key)
        if entry is None:
            entry = self.lines[key] = (job.app, [(0, 0.0)])
        line = entry[1]
        while len(line) <= gpus:
            more = len(line)
            batch = fit_batch(job.app, more, job.requested_batch)
            line.append((batch, self.throughput(job.app, more, packed_nodes(more, per_node), batch)))
        return line[gpus]

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        total, per_node = snapshot.total_gpus, snapshot.gpus_per_node
        efficiency: dict[tuple[str, int], float] = {}  # this round's, by (job, batch)

        def remaining_s(job: ClusterJobView, gpus: int) -> float:
            batch, throughput = self.on_gpus(job, gpus, per_node)
            found = efficiency.get((job.name, batch))
            if found is None:
                found = efficiency[job.name, batch] = float(job.app.efficiency(batch, job.progress))
            speed = throughput * found
            return job.remaining_progress / speed if speed > 0 else math.inf

        gpus: dict[int, int] = {}
        times: dict[int, float] = {}
        free = total
        for index, job in enumerate(snapshot.jobs):
            if free < 1:
                break
            gpus[index], times[index] = 1, remaining_s(job, 1)
            free -= 1
        heap: list[tuple[float, int, float]] = []  # (-gain, index, time after the step)

        def push(index: int) -> None:
            job = snapshot.jobs[index]
            if gpus[index] < gpu_cap(job, total):
                after = remaining_s(job, gpus[index] + 1)
                gain = times[index] - after
                if gain > 0 and not math.isnan(gain):
                    heapq.heappush(heap, (-gain, index, after))

        for index in gpus:
            push(index)
        while free > 0 and heap:
            _, index, after = heapq.heappop(heap)
            gpus[index] += 1
            times[index] = after
            free -= 1
            push(index)
        return {snapshot.jobs[i].name: Grant(g, self.on_gpus(snapshot.jobs[i], g, per_node)[0]) for i, g in gpus.items()}


def optimus(seed: int) -> Optimus:
    return Optimus()
