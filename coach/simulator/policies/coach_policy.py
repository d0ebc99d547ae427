"""The thesis's policy in the simulator: greedy marginal utility within each job's budget (coach.policy). Pure.

It reuses coach.policy.allocation.allocate unchanged, mapping one simulated job to one JobDemand:
- workers = GPUs; max_servers = 1, so the job sits at 1 server and only ever grows workers (GPU jobs here have
  no parameter servers). allocate counts a scheduler and a server slot per job, which take no GPU: we pass
  free_slots = GPUs + 2 x candidates and let at most total_gpus jobs be candidates, so every candidate starts
  (3 slots each) and every slot beyond the starts is one GPU; the GPUs granted never exceed the cluster's.
- one "epoch" is the job's whole remaining work (remaining_epochs = 1), so epochs_per_s(w, s) = goodput at w
  packed GPUs (app.best_batch, the batch the job then runs at) / remaining progress, and min_gain (5%, the
  module's default) is the smallest relative speed-up one more GPU must bring.
- Budget: money is spent per GPU-second (price_per_gpu_s), not per slot, so allocate's own per-slot cost is set
  to 0 and the budget is enforced in the speed adapter instead: a GPU count whose predicted spend to finish,
  gpus x price_per_gpu_s x remaining_progress / goodput, exceeds job.remaining_budget predicts no progress, so
  allocate never takes that step; a job that cannot afford to finish even on 1 GPU is not started.
Candidates are taken in arrival order (allocate starts jobs in the order given, as the thesis's Coach did).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

from coach.policy.allocation import JobDemand, allocate
from coach.simulator.grants import fit_batch, gpu_cap
from coach.simulator.view import ClusterSnapshot, Grant, ClusterJobView, packed_nodes

MIN_GAIN = 0.05


@dataclass(frozen=True)
class _Speed:
    """SpeedModel adapter: epochs (= the whole remaining job) per second on `workers` GPUs, 0 if unaffordable."""

    job: ClusterJobView
    goodput: Callable[[int], float]  # M0-samples per second on that many packed GPUs
    price_per_gpu_s: float

    def affordable(self, gpus: int) -> bool:
        goodput = self.goodput(gpus)
        if goodput <= 0:
            return False
        if math.isinf(self.job.remaining_budget) and self.job.remaining_budget > 0:
            return True
        return gpus * self.price_per_gpu_s * self.job.remaining_progress / goodput <= self.job.remaining_budget

    def epochs_per_s(self, workers: int, servers: int) -> float:
        if not self.affordable(workers):
            return 0.0
        return self.goodput(workers) / self.job.remaining_progress


@dataclass
class Coach:
    min_gain: float = MIN_GAIN
    elastic: bool = True

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        total, per_node = snapshot.total_gpus, snapshot.gpus_per_node
        cache: dict[tuple[str, int], tuple[int, float]] = {}

        def best(job: ClusterJobView, gpus: int) -> tuple[int, float]:
            key = (job.name, gpus)
            if key not in cache:
                batch, goodput = job.app.best_batch(gpus, packed_nodes(gpus, per_node), job.progress)
                cache[key] = (fit_batch(job.app, gpus, batch), float(goodput))
            return cache[key]

        speeds: list[_Speed] = []
        for job in snapshot.jobs:
            if len(speeds) >= total:
                break
            speed = _Speed(job, lambda gpus, job=job: best(job, gpus)[1], snapshot.price_per_gpu_s)
            if job.remaining_progress > 0 and gpu_cap(job, total) >= 1 and speed.affordable(1):
                speeds.append(speed)
        demands = [JobDemand(job=s.job.name, speed=s, remaining_epochs=1.0, remaining_budget=s.job.remaining_budget,
                             price_per_slot_s=0.0, max_workers=gpu_cap(s.job, total), max_servers=1)
                   for s in speeds]
        chosen = allocate(demands, free_slots=total + 2 * len(demands), min_gain=self.min_gain)
        jobs = {s.job.name: s.job for s in speeds}
        return {name: Grant(a.workers, best(jobs[name], a.workers)[0]) for name, a in chosen.items() if a.workers}


def coach(seed: int) -> Coach:
    return Coach()
