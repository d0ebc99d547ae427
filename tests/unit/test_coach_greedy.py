"""The simulator's greedy (coach/simulator/policies/coach_greedy.py) gives allocate's workers."""

from __future__ import annotations

import math
import random

import pytest

from coach.policy.allocation import JobDemand, allocate
from coach.simulator.policies.coach_greedy import GreedyJob, greedy_counts
from coach.simulator.policies.pollux import step_sizes


class _Curve:
    """Epochs per second by workers, whatever the servers; past its end, `tail`."""

    def __init__(self, speeds: list[float], tail: float):
        self.speeds, self.tail = speeds, tail

    def epochs_per_s(self, workers: int, servers: int) -> float:
        return self.speeds[workers] if workers < len(self.speeds) else self.tail

    def at(self, workers: int) -> float:
        return self.epochs_per_s(workers, 1)


def _curve(rng: random.Random, per_node: int) -> _Curve:
    """Rising, flat, dipping at node boundaries or falling; rounded so that gains tie; now and then a count with
    no usable speed (0, infinite, negative: what an unaffordable or unknown count gives)."""
    speeds, speed, digits = [0.0], rng.uniform(0.5, 2.0), rng.choice([1, 2, 9])
    for workers in range(1, rng.randint(1, 48) + 1):
        if workers > 1:
            speed += rng.choice([0.0, 0.25, 0.5, 1.0, 1.0, -0.25]) * (0.3 if workers % per_node == 1 else 1.0)
        value = round(max(speed, 0.05), digits)
        if rng.random() < 0.04:
            value = rng.choice([0.0, math.inf, -1.0])
        speeds.append(value)
    return _Curve(speeds, rng.choice([0.0, speeds[-1]]))


def _instance(rng: random.Random):
    per_node = rng.choice([1, 2, 4, 8])
    curves = [_curve(rng, per_node) for _ in range(rng.randint(1, 12))]
    caps = [rng.randint(1, 60) for _ in curves]
    budgets = [rng.choice([math.inf, math.inf, 1.0, 0.0, -1.0]) for _ in curves]
    free = rng.choice([0, 2, 3 * len(curves) - 1, 3 * len(curves)]) + rng.randint(0, 80)
    min_gain = rng.choice([0.0, 0.0, 0.05])
    kind = rng.choice(["one", "pollux", "odd"])
    odd = {(i, w): sorted(rng.sample(range(0, 70), rng.randint(0, 6))) for i in range(len(curves)) for w in range(70)}

    def sizes(index: int, workers: int, cap: int) -> list[int]:
        if kind == "pollux":
            return step_sizes(workers, cap, per_node)
        return odd[(index, workers)]  # sizes below, at and past the cap, repeated or not

    return curves, caps, budgets, free, min_gain, (None if kind == "one" else sizes)


@pytest.mark.parametrize("seed", range(4))
def test_the_greedy_gives_allocate_s_workers_on_random_jobs(seed):
    rng = random.Random(f"coach-greedy-{seed}")
    for trial in range(400):
        curves, caps, budgets, free, min_gain, sizes = _instance(rng)
        demands = [JobDemand(job=f"j{i}", speed=curve, remaining_epochs=1.0, remaining_budget=budget,
                             price_per_slot_s=0.0, max_workers=cap, max_servers=1)
                   for i, (curve, cap, budget) in enumerate(zip(curves, caps, budgets))]
        named = None if sizes is None else (lambda name, workers, cap, sizes=sizes: sizes(int(name[1:]), workers, cap))
        expected = allocate(demands, free, min_gain, worker_sizes=named)
        workers = [expected[f"j{i}"].workers for i in range(len(curves))]
        jobs = [GreedyJob(curve.at, cap, budget) for curve, cap, budget in zip(curves, caps, budgets)]
        assert greedy_counts(jobs, free, min_gain, sizes) == workers, (seed, trial)
        # with a memo of each job's ordered steps (one per job: their sizes differ), filled by a first call
        # with other free slots and read by the next
        memos = [GreedyJob(curve.at, cap, budget, {}) for curve, cap, budget in zip(curves, caps, budgets)]
        greedy_counts(memos, free + rng.randint(-3, 30), min_gain, sizes)
        assert greedy_counts(memos, free, min_gain, sizes) == workers, (seed, trial)
