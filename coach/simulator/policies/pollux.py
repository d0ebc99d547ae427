"""Pollux's goodput-driven co-adaptive allocation (Qiao et al., OSDI'21), with a greedy instead of its GA. Pure.

goodput(g) = throughput x statistical efficiency at the batch size that maximises it on g packed GPUs
(app.best_batch), speedup(g) = goodput(g) / goodput(1 GPU) (the artifact's base), and the allocation maximises
the sum over jobs of speedup^p / p, i.e. the power mean with the paper's fairness knob p = -1.
The artifact searches with a genetic algorithm (NSGA-II) that can give a job any number of GPUs in one step; we
use a deterministic greedy: jobs in order of attained service (then arrival) get 1 GPU each while GPUs last, then
the next step goes to the job with the largest marginal utility per GPU, where a step is any number of GPUs up to
the job's limit (up to one node more, or a whole number of nodes), so a job can cross a node boundary where
goodput dips (bert: 4.07 at 4 GPUs, 4.02 at 5, 10.3 at 16) instead of stalling before it. Steps continue until
GPUs run out or no job gains.
Exploration ramp, as the artifact: a job may get at most twice the most GPUs it has trained on so far (1 before
it has trained), so it grows 1, 2, 4, 8... while its speed is being measured.
Re-allocation penalty: the artifact discounts a job's speedup by max(age - restarts*30 s, 0) / (age + 30 s) when
its allocation changes; we compute a second candidate that starts from every running job's GPUs (a job without
GPUs gets one from the running job that loses least by it; then growth into free GPUs) and keep it unless the
fresh greedy scores better after that discount.
A candidate leaving fewer jobs without GPUs always wins (the power mean with p < 0 is 0 if any speedup is 0).
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field
from typing import Mapping

from coach.simulator.grants import fit_batch, gpu_cap, stage
from coach.simulator.view import AppModel, ClusterJobView, ClusterSnapshot, Grant, packed_nodes

#: Seconds a re-allocation stalls a job in the Pollux artifact's simulator (every application).
RESTART_S = 30.0


def step_sizes(gpus: int, cap: int, per_node: int) -> list[int]:
    """The sizes a job on `gpus` GPUs may grow to in one step: every size up to one node more, then every whole
    number of nodes, up to `cap`."""
    per_node = max(per_node, 1)
    near = range(gpus + 1, min(gpus + per_node, cap) + 1)
    far = range((gpus + per_node) // per_node * per_node + per_node, cap + 1, per_node)
    return [*near, *far]


@dataclass
class _Table:
    """What GPU counts are worth to every job of one application at one stage of training (a queue of jobs that
    have not started shares one, a job keeps its own for an epoch): GPUs -> (batch, goodput), GPUs -> utility."""

    app: AppModel  # held so that the id in the table's key stays this application's
    best: dict[int, tuple[int, float]] = field(default_factory=dict)
    utilities: dict[int, float] = field(default_factory=dict)
    steps: dict[int, _Steps] = field(default_factory=dict)  # GPUs now -> the best steps from there


@dataclass(frozen=True)
class _Steps:
    """From some GPU count, the step sizes up to `limit` and, for each, the best step among it and the smaller ones
    ((utility gained per GPU, GPUs added); the first of equal gains; (0.0, 0) while none gains): a step within a
    smaller limit is a prefix, since step_sizes(g, c) are the sizes of step_sizes(g, C) up to c."""

    limit: int
    sizes: list[int]
    best: list[tuple[float, int]]


class _Search:
    """One round's greedy: speedups cached per (application, stage, GPUs), the utility of the policy's p.
    `tables` are the last round's; those this round uses are kept in `used`, for the next."""

    def __init__(self, policy: Pollux, snapshot: ClusterSnapshot, caps: list[int],
                 tables: Mapping[tuple[int, float, int], _Table]):
        self.policy, self.jobs, self.caps = policy, snapshot.jobs, caps
        self.total, self.per_node = snapshot.total_gpus, snapshot.gpus_per_node
        self.used: dict[tuple[int, float, int], _Table] = {}
        self.tables: list[_Table] = []  # per job
        for job in self.jobs:
            key = (id(job.app), stage(job), self.per_node)  # goodputs are of replicas packed on such nodes
            table = self.used.get(key) or tables.get(key) or _Table(job.app)
            self.used[key] = table
            self.tables.append(table)
        self.order = sorted(range(len(self.jobs)), key=lambda i: (self.jobs[i].attained_gpu_s, i))

    def best(self, index: int, gpus: int) -> tuple[int, float]:
        known = self.tables[index].best
        found = known.get(gpus)
        if found is None:
            job = self.jobs[index]
            batch, goodput = job.app.best_batch(gpus, packed_nodes(gpus, self.per_node), job.progress)
            found = known[gpus] = (fit_batch(job.app, gpus, batch), float(goodput))
        return found

    def utility_at(self, index: int, gpus: int) -> float:
        known = self.tables[index].utilities
        value = known.get(gpus)
        if value is None:
            base = self.best(index, 1)[1]
            goodput = self.best(index, gpus)[1]
            value = known[gpus] = self.policy.utility(goodput / base if base > 0 else goodput)
        return value

    def step(self, index: int, gpus: int, free: int) -> tuple[float, int]:
        """(utility gained per GPU, GPUs added) of the job's best step within `free` GPUs; gain 0 if none."""
        limit = min(self.caps[index], gpus + free)
        table = self.tables[index]
        steps = table.steps.get(gpus)
        if steps is None or steps.limit < limit:  # worked out to the job's cap: later asks within it are answered
            steps = table.steps[gpus] = self._steps(index, gpus, self.caps[index])
        found = bisect.bisect_right(steps.sizes, limit)
        return steps.best[found - 1] if found else (0.0, 0)

    def _steps(self, index: int, gpus: int, limit: int) -> _Steps:
        now = self.utility_at(index, gpus)
        sizes = step_sizes(gpus, limit, self.per_node)
        best, running = [], (0.0, 0)
        for size in sizes:
            gain = (self.utility_at(index, size) - now) / (size - gpus)
            if gain > running[0]:
                running = (gain, size - gpus)
            best.append(running)
        return _Steps(limit, sizes, best)

    def seat(self, alloc: dict[int, int]) -> int:
        """Every job without GPUs gets one, in order, while GPUs last (from the kept job that loses least by it)."""
        free = self.total - sum(alloc.values())
        for index in self.order:
            if index in alloc:
                continue
            if free < 1:
                donors = [i for i, g in alloc.items() if g > 1]
                if not donors:
                    break
                donor = min(donors, key=lambda i: (self.utility_at(i, alloc[i]) - self.utility_at(i, alloc[i] - 1), i))
                alloc[donor] -= 1
                free += 1
            alloc[index] = 1
            free -= 1
        return free

    def greedy(self, start: dict[int, int]) -> dict[int, int]:
        alloc = dict(start)
        free = self.seat(alloc)
        heap: list[tuple[float, int, int]] = []
        for index in alloc:
            gain, add = self.step(index, alloc[index], free)
            if add:
                heapq.heappush(heap, (-gain, index, add))
        while free > 0 and heap:
            _, index, add = heapq.heappop(heap)
            if add > free:  # the step no longer fits: the job's best step within what is left
                gain, add = self.step(index, alloc[index], free)
                if add:
                    heapq.heappush(heap, (-gain, index, add))
                continue
            alloc[index] += add
            free -= add
            gain, add = self.step(index, alloc[index], free)
            if add:
                heapq.heappush(heap, (-gain, index, add))
        return alloc


@dataclass
class Pollux:
    p: float = -1.0  # fairness knob: 1 = total speedup, -1 = the paper's default, -> -inf = max-min
    restart_s: float = RESTART_S
    ramp: bool = True  # at most twice the most GPUs a job has trained on (the artifact's exploration)
    elastic: bool = True
    restarts: dict[str, int] = field(default_factory=dict)  # allocation changes per job so far
    trained: dict[str, int] = field(default_factory=dict)  # the most GPUs each job has run on so far
    tables: dict[tuple[int, float, int], _Table] = field(default_factory=dict)  # the last round's, for the next

    def utility(self, speedup: float) -> float:
        if speedup <= 0:
            return -math.inf if self.p <= 0 else 0.0
        return math.log(speedup) if self.p == 0 else speedup ** self.p / self.p

    def cap(self, job: ClusterJobView, total: int) -> int:
        """The most GPUs the job may get this round: its limit, and with the ramp twice its largest so far."""
        limit = gpu_cap(job, total)
        if not self.ramp:
            return limit
        return max(min(limit, 2 * self.trained.get(job.name, 0)), 1)

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        jobs, total = snapshot.jobs, snapshot.total_gpus
        self.restarts = {job.name: self.restarts[job.name] for job in jobs if job.name in self.restarts}
        self.trained = {job.name: max(self.trained.get(job.name, 0), job.gpus) for job in jobs
                        if job.gpus or job.name in self.trained}
        caps = [self.cap(job, total) for job in jobs]
        search = _Search(self, snapshot, caps, self.tables)
        self.tables = search.used

        def score(alloc: dict[int, int]) -> tuple[int, float]:
            value = 0.0
            for index, gpus in alloc.items():
                job, factor = jobs[index], 1.0
                if 0 < job.gpus != gpus:
                    age_s = max(snapshot.now_s - job.arrival_s, 0.0)
                    done_s = self.restarts.get(job.name, 0) * self.restart_s
                    factor = max(age_s - done_s, 0.0) / (age_s + self.restart_s)
                base = search.best(index, 1)[1]
                goodput = search.best(index, gpus)[1]
                value += self.utility((goodput / base if base > 0 else goodput) * factor)
            return len(alloc), value

        fresh = search.greedy({})
        chosen = fresh
        running = {i: job.gpus for i, job in enumerate(jobs) if job.gpus > 0}
        if running and all(g <= caps[i] for i, g in running.items()) and sum(running.values()) <= total:
            keep = search.greedy(running)
            if score(keep) >= score(fresh):
                chosen = keep
        for index, gpus in chosen.items():
            if gpus != jobs[index].gpus:
                self.restarts[jobs[index].name] = self.restarts.get(jobs[index].name, 0) + 1
        return {jobs[i].name: Grant(g, search.best(i, g)[0]) for i, g in chosen.items()}


def pollux(seed: int) -> Pollux:
    return Pollux()
