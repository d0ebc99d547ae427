"""How many runs does a comparison need? Power of the two-sided two-sample t-test. Pure.

The thesis reported p = 0.4 from a handful of runs and could not tell "no difference" from "too few runs". These
functions say both ways round: the smallest effect a comparison with its sample sizes detects (alpha 0.05, power
0.8), and the samples per side a wanted effect needs, from the noncentral t distribution (scipy), not from the
normal approximation, so small samples are not flattered. Effects are Cohen's d: a difference in means over the
pooled standard deviation. For Mann-Whitney's test the t-test's figures are a close guide (its asymptotic
efficiency against the t-test is 0.955 for normal samples), not an exact answer.
"""

from __future__ import annotations

import math
import statistics

ALPHA = 0.05
POWER = 0.8
MAX_SAMPLES = 1_000_000  # per side; beyond this the answer is "more than a million"


def power(d: float, n_a: int, n_b: int, alpha: float = ALPHA) -> float:
    """Probability that a two-sided Student's t-test at `alpha` rejects when the true effect is `d`."""
    from scipy import stats

    if n_a < 2 or n_b < 2:
        return 0.0
    freedom = n_a + n_b - 2
    shift = abs(d) * math.sqrt(n_a * n_b / (n_a + n_b))
    critical = stats.t.ppf(1 - alpha / 2, freedom)
    # P(T < -critical) as P(-T > critical), -T having the shift negated: scipy's nct.cdf is NaN far in the lower
    # tail (thousands of jobs a side), where its sf is exact.
    return float(stats.nct.sf(critical, freedom, shift) + stats.nct.sf(critical, freedom, -shift))


def detectable_effect(n_a: int, n_b: int, alpha: float = ALPHA, wanted_power: float = POWER) -> float | None:
    """The smallest Cohen's d detected with `wanted_power`; None with fewer than 2 samples on a side."""
    from scipy.optimize import brentq

    if n_a < 2 or n_b < 2:
        return None
    high = 1.0
    while power(high, n_a, n_b, alpha) < wanted_power:
        high *= 2
    return float(brentq(lambda d: power(d, n_a, n_b, alpha) - wanted_power, 0.0, high, xtol=1e-6))


def samples_needed(d: float, alpha: float = ALPHA, wanted_power: float = POWER) -> int:
    """Samples per side (equal sides) for the t-test to detect effect `d` with `wanted_power`."""
    if not (math.isfinite(d) and d > 0):
        return MAX_SAMPLES
    low, high = 2, 2
    while power(d, high, high, alpha) < wanted_power:
        low, high = high, high * 2
        if high > MAX_SAMPLES:
            return MAX_SAMPLES
    while low < high:  # the smallest n with enough power
        middle = (low + high) // 2
        if power(d, middle, middle, alpha) >= wanted_power:
            high = middle
        else:
            low = middle + 1
    return high


def repetitions_to_detect(fraction: float, pilot: dict[str, list[list[float]]], most: int) -> dict:
    """How many repetitions of every cell let `coach compare` detect a difference of `fraction` x a cell's mean
    JCT between any two cells (alpha 0.05, power 0.8), from a pilot: cell -> the JCTs of each of its pilot runs.

    Per cell: d = fraction x mean / sd of its pilot JCTs; jobs needed per side = samples_needed(d); runs = those
    jobs over the jobs a run gives. The answer is the largest over cells, at least the pilot's, at most `most`
    (`capped` then says so). A cell without 2 JCTs in its pilot cannot be planned for: it asks for `most`."""
    planned = {}
    for cell, runs in pilot.items():
        jcts = [jct for run in runs for jct in run]
        per_run = max(1, round(len(jcts) / max(len(runs), 1)))
        if len(jcts) < 2:
            planned[cell] = {"mean_jct_s": None, "sd_jct_s": None, "cohens_d": None, "jobs_needed": None,
                             "runs_needed": most}
            continue
        mean, sd = statistics.fmean(jcts), statistics.stdev(jcts)
        d = math.inf if sd == 0 else fraction * mean / sd
        jobs = 2 if sd == 0 else samples_needed(d)
        planned[cell] = {"mean_jct_s": mean, "sd_jct_s": sd, "cohens_d": None if sd == 0 else d,
                         "jobs_needed": jobs, "runs_needed": math.ceil(jobs / per_run)}
    pilot_runs = max((len(runs) for runs in pilot.values()), default=0)
    wanted = max([pilot_runs, *(p["runs_needed"] for p in planned.values())])
    return {"effect": fraction, "alpha": ALPHA, "power": POWER, "pilot": pilot_runs,
            "repeat": min(wanted, most), "wanted": wanted, "capped": wanted > most, "cells": planned}
