"""allocate's greedy (coach.policy.allocation, rules 1-3) for the simulator's coach policy, on plain numbers. Pure.

Why: over Philly the coach policy asks the greedy nearly every round, with a hundred candidates or more and
hundreds of steps, and the general allocator, built to tell why (a step is an object with its cost, its money and
the constraint it breaks, for any counts of workers and servers), took four fifths of the run. A simulated job
sits at one server, money is per GPU-second (the allocator's price per slot is 0 and one epoch remains), and the
policy wants the counts alone, so a step here is a few numbers. The rules, their order and their roundings are
allocate's: every job starts on (1,1) while 3 slots are free; the step with the most gain per slot (equal to 9
decimals: the smaller money ratio, then the earlier job) is taken while it is worth taking; a job's step is its
useful size with the most gain per slot that is allowed (within its cap, its budget and the free slots).
tests/unit/test_coach_greedy.py checks the counts equal allocate's on random instances.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple, Sequence

from coach.policy.allocation import SLOTS_PER_STEP, START_SLOTS, by_gain, money_ratio

#: (job index, workers now, the job's cap) -> the worker counts one step may reach (allocate's worker_sizes)
Sizes = Callable[[int, int, int], Iterable[int]]


class GreedyJob(NamedTuple):  # made for every candidate every round: a tuple is the cheapest record
    """One candidate: its speed at w GPUs on one server, its cap on GPUs and the budget one epoch may cost.
    `memo`, when given, keeps the job's ordered steps from each count (`_Greedy.ordered`) across calls: only for
    jobs whose speeds, sizes and budget are the same as those of every other job given that memo (the coach
    policy's jobs without a budget, of one application at one stage of training)."""

    speed: Callable[[int], float]  # epochs per second at that many workers (0: unaffordable or no progress)
    cap: int  # most workers (>= 1)
    budget: float  # money the epoch may cost (allocate's per_epoch_budget; negative: nothing)
    memo: dict[tuple[int, int], list[_Step]] | None = None  # (workers, cap) -> ordered steps


class _Step(NamedTuple):  # made hundreds of thousands of times a round: a tuple is the cheapest record
    rank: float  # minus the gain per slot to 9 decimals: the heap's order, most gain first (allocate's rounding)
    ratio: float  # money per epoch after the step / before
    size: int  # workers added
    utility: float  # epochs per second gained (> 0: only useful steps are kept); an unusable speed counts as 0
    gain: float  # utility / speed now
    within: bool  # within the job's cap and its budget (what the free slots do not change)


def _usable(speed: float) -> bool:
    return math.isfinite(speed) and speed > 0


@dataclass
class _Greedy:
    jobs: Sequence[GreedyJob]
    free: int
    min_gain: float
    sizes: Sizes | None
    workers: list[int] = field(default_factory=list)
    speeds: list[dict[int, float]] = field(default_factory=list)  # per job: workers -> speed, asked once

    def speed(self, index: int, workers: int) -> float:
        known = self.speeds[index]
        found = known.get(workers)
        if found is None:
            found = known[workers] = float(self.jobs[index].speed(workers))
        return found

    def step(self, index: int, workers: int, target: int, now: float) -> _Step:
        """From `workers` to `target`, as allocate's _step weighs it (price 0: an epoch costs 0 where the speed is
        usable, else infinity)."""
        job = self.jobs[index]
        after = self.speed(index, target)
        usable = _usable(after)
        utility = (after if usable else 0.0) - now
        size = target - workers
        cost = 0.0 if usable else math.inf
        gain = utility / now
        return _Step(-round(gain / (SLOTS_PER_STEP * size), 9), money_ratio(now, after, workers + 2, target + 2), size, utility,
                     gain, not (target > job.cap or cost > job.budget))

    def ordered(self, index: int, workers: int) -> list[_Step]:
        """The job's useful steps from `workers`, in the order allocate's _first_allowed tries them: +1 worker, and
        with sizes every useful size, most gain per slot first (by_gain). allocate takes the first allowed. Kept in
        the job's memo, when it has one (`candidate` looks there first)."""
        job = self.jobs[index]
        now = self.speed(index, workers)
        one = self.step(index, workers, workers + 1, now)
        useful = [(one.gain / SLOTS_PER_STEP, workers + 1)] if one.utility > 0 else []  # step's gain per slot
        if self.sizes is not None:
            for target in sorted({t for t in self.sizes(index, workers, job.cap) if t > workers + 1}):
                after = self.speed(index, target)
                utility = (after if 0.0 < after < math.inf else 0.0) - now
                if utility > 0:
                    useful.append((utility / now / (SLOTS_PER_STEP * (target - workers)), target))
        steps = [one if target == workers + 1 else self.step(index, workers, target, now)
                 for target in (by_gain(useful) if useful else ())]
        if job.memo is not None:
            job.memo[(workers, job.cap)] = steps
        return steps

    def candidate(self, index: int) -> _Step | None:
        """The job's first allowed step (within its cap, its budget and the free slots), when it is worth taking."""
        job, workers = self.jobs[index], self.workers[index]
        steps = job.memo.get((workers, job.cap)) if job.memo is not None else None
        if steps is None:
            steps = self.ordered(index, workers)
        free = self.free
        for step in steps:
            if step.within and step.size * SLOTS_PER_STEP <= free:
                return step if step.gain >= self.min_gain else None
        return None

    def run(self) -> list[int]:
        growing = []
        for index, job in enumerate(self.jobs):  # rule 1: starts, in order
            self.speeds.append({})
            if self.free < START_SLOTS:
                self.workers.append(0)
                continue
            self.workers.append(1)
            self.free -= START_SLOTS
            start = self.speed(index, 1)
            if _usable(start) and not 0.0 > job.budget:  # else held at (1,1): no bounded cost, or over budget
                growing.append(index)
        if self.free >= 1:
            self.grow(growing)
        return self.workers

    def grow(self, growing: list[int]) -> None:
        """Rules 2-3: the step ahead of every other job's, one at a time. A heap holds each growing job's step once
        (keyed by gain, money ratio and the job's index, which no two share, so the order is allocate's); the job
        whose step is taken, or no longer fits, is weighed again in its place."""
        heap = []
        for index in growing:
            chosen = self.candidate(index)
            if chosen is not None:
                heap.append((chosen.rank, chosen.ratio, index, chosen))
        heapq.heapify(heap)
        workers = self.workers
        while self.free >= 1 and heap:
            index, chosen = heap[0][2], heap[0][3]
            if SLOTS_PER_STEP * chosen.size <= self.free:  # else a step of several workers no longer fits
                workers[index] += chosen.size
                self.free -= SLOTS_PER_STEP * chosen.size
            chosen = self.candidate(index)
            if chosen is None:
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, (chosen.rank, chosen.ratio, index, chosen))


def greedy_counts(jobs: Sequence[GreedyJob], free_slots: int, min_gain: float, sizes: Sizes | None) -> list[int]:
    """Workers per job, in order (0: not started), as allocate would give them for these jobs at one server
    each, price per slot 0 and one epoch left."""
    return _Greedy(jobs, free_slots, min_gain, sizes).run()
