"""Finish-time fairness ρ (Themis, Mahajan et al., NSDI'20) of a simulated run. Pure.

A job's ρ = its JCT in the run / its JCT alone on a 1/N share of the cluster, where N is the time-average number
of jobs in the system (arrived, not yet finished) over the job's own life, from its arrival to its finish. With
G GPUs, its share is s = G / N GPUs:
- s at least its request: alone at its request (engine.alone_s, as the slowdown's denominator);
- 1 <= s < request: alone on floor(s) GPUs (packed, its batch fitted to them);
- s < 1: alone on 1 GPU time-shared, its time divided by s.
Each includes one restart delay. ρ <= 1: the job did no worse than with its fair share; Themis minimises the
largest ρ. Per run: mean and max ρ and the share of jobs with ρ <= 1. Jobs that did not finish have no ρ.
N is computed with one sweep over arrivals and finishes (the integral of the number of jobs present, by
bisection at each job's ends), so the whole Philly trace costs O(n log n).
"""

from __future__ import annotations

import bisect
import math
import statistics
from typing import Sequence

from coach.simulator.engine import JobRun, alone_s


def contention(jobs: Sequence[JobRun], end_s: float) -> dict[str, float]:
    """Per finished job: the time-average number of jobs present over [arrival, finish] (at least 1)."""
    events = sorted([(job.spec.arrival_s, 1) for job in jobs]
                    + [(job.finished_s if job.finished_s is not None else end_s, -1) for job in jobs])
    times: list[float] = []
    areas: list[float] = []  # the integral of the number present up to each event
    after: list[int] = []  # jobs present just after each event
    present, area = 0, 0.0
    for time_s, change in events:
        if times:
            area += present * (time_s - times[-1])
        present += change
        times.append(time_s)
        areas.append(area)
        after.append(present)

    def area_at(time_s: float) -> float:
        i = bisect.bisect_right(times, time_s) - 1
        return 0.0 if i < 0 else areas[i] + after[i] * (time_s - times[i])

    found = {}
    for job in jobs:
        if job.finished_s is not None and job.finished_s > job.spec.arrival_s:
            life = job.finished_s - job.spec.arrival_s
            found[job.name] = max((area_at(job.finished_s) - area_at(job.spec.arrival_s)) / life, 1.0)
    return found


def fair_share_s(job: JobRun, share_gpus: float, gpus_per_node: int, restart_s: float) -> float:
    """Seconds the job takes alone on `share_gpus` GPUs (see the module docstring)."""
    if share_gpus >= job.spec.gpus:
        return alone_s(job, gpus_per_node, restart_s)
    if share_gpus >= 1:
        return alone_s(job, gpus_per_node, restart_s, gpus=math.floor(share_gpus))
    return restart_s + (alone_s(job, gpus_per_node, restart_s, gpus=1) - restart_s) / share_gpus


def finish_time_fairness(jobs: Sequence[JobRun], total_gpus: int, gpus_per_node: int, restart_s: float,
                         end_s: float) -> dict[str, float]:
    """ρ per finished job, by name."""
    by_name = {job.name: job for job in jobs}
    rho = {}
    for name, n in contention(jobs, end_s).items():
        job = by_name[name]
        assert job.finished_s is not None
        shared_s = job.finished_s - job.spec.arrival_s
        rho[name] = shared_s / fair_share_s(job, total_gpus / n, gpus_per_node, restart_s)
    return rho


def summary(rho: dict[str, float]) -> dict[str, float | None]:
    """Per run: mean and max ρ, share of jobs with ρ <= 1."""
    values = list(rho.values())
    if not values:
        return {"mean_rho": None, "max_rho": None, "share_rho_le_1": None}
    return {"mean_rho": round(statistics.fmean(values), 4), "max_rho": round(max(values), 4),
            "share_rho_le_1": round(sum(v <= 1 for v in values) / len(values), 4)}
