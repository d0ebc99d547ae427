"""Pollux's goodput-driven co-adaptive allocation (Qiao et al., OSDI'21), with a greedy instead of its GA. Pure.

goodput(g) = throughput x statistical efficiency at the batch size that maximises it on g packed GPUs
(app.best_batch), speedup(g) = goodput(g) / goodput(1 GPU) (the artifact's base), and the allocation maximises
the sum over jobs of speedup^p / p, i.e. the power mean with the paper's fairness knob p = -1.
The artifact searches with a genetic algorithm (NSGA-II); we use a deterministic greedy: jobs in order of
attained service (then arrival) get 1 GPU each while GPUs last, then each next GPU goes to the job with the
largest marginal utility, until GPUs run out or no job gains. Greedy is exact for concave utilities and close
otherwise. Re-allocation penalty: the artifact discounts a job's speedup by max(age - restarts*30 s, 0) /
(age + 30 s) when its allocation changes; we compute a second candidate that starts from every running job's
GPUs (a job without GPUs gets one from the running job that loses least by it; then growth into free GPUs) and
keep it unless the fresh greedy scores better after that discount.
A candidate leaving fewer jobs without GPUs always wins (the power mean with p < 0 is 0 if any speedup is 0).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Mapping

from coach.simulator.grants import fit_batch, gpu_cap
from coach.simulator.view import ClusterSnapshot, Grant, packed_nodes

#: Seconds a re-allocation stalls a job in the Pollux artifact's simulator (every application).
RESTART_S = 30.0


@dataclass
class Pollux:
    p: float = -1.0  # fairness knob: 1 = total speedup, -1 = the paper's default, -> -inf = max-min
    restart_s: float = RESTART_S
    elastic: bool = True
    restarts: dict[str, int] = field(default_factory=dict)  # allocation changes per job so far

    def utility(self, speedup: float) -> float:
        if speedup <= 0:
            return -math.inf if self.p <= 0 else 0.0
        return math.log(speedup) if self.p == 0 else speedup ** self.p / self.p

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        jobs, total, per_node = snapshot.jobs, snapshot.total_gpus, snapshot.gpus_per_node
        self.restarts = {job.name: self.restarts[job.name] for job in jobs if job.name in self.restarts}
        cache: dict[tuple[int, int], tuple[int, float]] = {}

        def best(index: int, gpus: int) -> tuple[int, float]:
            key = (index, gpus)
            if key not in cache:
                batch, goodput = jobs[index].app.best_batch(gpus, packed_nodes(gpus, per_node), jobs[index].progress)
                cache[key] = (fit_batch(jobs[index].app, gpus, batch), float(goodput))
            return cache[key]

        def speedup(index: int, gpus: int) -> float:
            base = best(index, 1)[1]
            return best(index, gpus)[1] / base if base > 0 else best(index, gpus)[1]

        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].attained_gpu_s, i))

        def greedy(start: dict[int, int]) -> dict[int, int]:
            alloc = dict(start)
            free = total - sum(alloc.values())
            for index in order:
                if index in alloc:
                    continue
                if free < 1:  # make room: one GPU from the job that loses least by it (only from kept jobs)
                    donors = [i for i, g in alloc.items() if g > 1]
                    if not donors:
                        break
                    donor = min(donors, key=lambda i: (self.utility(speedup(i, alloc[i])) -
                                                       self.utility(speedup(i, alloc[i] - 1)), i))
                    alloc[donor] -= 1
                    free += 1
                alloc[index] = 1
                free -= 1
            heap: list[tuple[float, int]] = []

            def push(index: int) -> None:
                if alloc[index] < gpu_cap(jobs[index], total):
                    gain = self.utility(speedup(index, alloc[index] + 1)) - self.utility(speedup(index, alloc[index]))
                    if gain > 0:
                        heapq.heappush(heap, (-gain, index))

            for index in alloc:
                push(index)
            while free > 0 and heap:
                _, index = heapq.heappop(heap)
                alloc[index] += 1
                free -= 1
                push(index)
            return alloc

        def score(alloc: dict[int, int]) -> tuple[int, float]:
            value = 0.0
            for index, gpus in alloc.items():
                job, factor = jobs[index], 1.0
                if 0 < job.gpus != gpus:
                    age_s = max(snapshot.now_s - job.arrival_s, 0.0)
                    done_s = self.restarts.get(job.name, 0) * self.restart_s
                    factor = max(age_s - done_s, 0.0) / (age_s + self.restart_s)
                value += self.utility(speedup(index, gpus) * factor)
            return len(alloc), value

        fresh = greedy({})
        chosen = fresh
        running = {i: job.gpus for i, job in enumerate(jobs) if job.gpus > 0}
        if running and all(g <= gpu_cap(jobs[i], total) for i, g in running.items()) \
                and sum(running.values()) <= total:
            keep = greedy(running)
            if score(keep) >= score(fresh):
                chosen = keep
        for index, gpus in chosen.items():
            if gpus != jobs[index].gpus:
                self.restarts[jobs[index].name] = self.restarts.get(jobs[index].name, 0) + 1
        return {jobs[i].name: Grant(g, best(i, g)[0]) for i, g in chosen.items()}


def pollux(seed: int) -> Pollux:
    return Pollux()
