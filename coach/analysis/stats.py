"""Statistics for `coach compare`: is one scheduler or setting faster than another, and by how much?

The thesis compared its gang scheduler with the default one by a t-test over job completion times (JCT) and a
descriptive table. This module computes the same from plain data -- summary.json dicts and log records -- so it
can be tested against scipy on fixed samples. Pure: no I/O, no clock; scipy (imported when a test runs) does
the distributions.

Conventions:
- A *side* is one group of runs (a run, an experiment's cell, or a selection of cells). Its samples are the
  per-job JCTs of every run (summary.json `jobs.*.jct_s`). Jobs without a JCT, or stopped by `interrupted`,
  are left out and listed, because an interrupted job's time says nothing about its scheduler.
- Differences and effect sizes are A minus B: a positive Cohen's d or rank-biserial correlation means A's jobs
  took longer.
- A test that cannot be computed (fewer than 2 samples on a side, or constant samples) gives `None` values and a
  `reason`, never an exception.
"""

from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Callable, Mapping, Sequence

import numpy as np

from coach.analysis import DEFAULT_TEST
from coach.analysis.power import ALPHA, POWER, detectable_effect

MIN_SAMPLES_PER_SIDE = 2  # below this no test, and no standard deviation, means anything

#: The descriptive table's columns, in the thesis's (and pandas' `describe`) order.
DESCRIBE_COLUMNS: tuple[str, ...] = ("count", "mean", "std", "min", "25%", "50%", "75%", "max")

#: Stop reasons whose JCT is not a measurement of the run's scheduling (the run was cut short).
EXCLUDED_STOP_REASONS = frozenset({"interrupted"})


# --------------------------------------------------------------------------- descriptive statistics


def describe(samples: Sequence[float]) -> dict[str, float | int | None]:
    """count, mean, std (sample, ddof=1), min, 25/50/75 % (numpy's linear interpolation) and max.

    The same numbers as pandas' `describe()`, without pandas. Empty samples give None everywhere but count;
    a single sample has no standard deviation (None).
    """
    values = np.asarray([float(v) for v in samples], dtype=float)
    n = int(values.size)
    if n == 0:
        return {"count": 0, **{key: None for key in DESCRIBE_COLUMNS[1:]}}
    q25, q50, q75 = (float(q) for q in np.percentile(values, [25, 50, 75]))
    return {
        "count": n,
        "mean": float(values.mean()),
        "std": float(values.std(ddof=1)) if n >= MIN_SAMPLES_PER_SIDE else None,
        "min": float(values.min()),
        "25%": q25,
        "50%": q50,
        "75%": q75,
        "max": float(values.max()),
    }


def pooled_std(a: Sequence[float], b: Sequence[float]) -> float | None:
    """sqrt(((n_a - 1) s_a^2 + (n_b - 1) s_b^2) / (n_a + n_b - 2)); None below 2 samples per side."""
    if len(a) < MIN_SAMPLES_PER_SIDE or len(b) < MIN_SAMPLES_PER_SIDE:
        return None
    var_a = float(np.var(np.asarray(a, dtype=float), ddof=1))
    var_b = float(np.var(np.asarray(b, dtype=float), ddof=1))
    return math.sqrt(((len(a) - 1) * var_a + (len(b) - 1) * var_b) / (len(a) + len(b) - 2))


def cohens_d(a: Sequence[float], b: Sequence[float]) -> float | None:
    """(mean_a - mean_b) / pooled std; None when it is undefined (too few samples, or no spread at all)."""
    spread = pooled_std(a, b)
    if spread is None or spread == 0.0:
        return None
    return (float(np.mean(a)) - float(np.mean(b))) / spread


def rank_biserial(u_a: float, n_a: int, n_b: int) -> float:
    """2·U_a / (n_a·n_b) − 1, from the Mann–Whitney U of A: +1 when every A sample is larger, −1 when smaller."""
    return 2.0 * u_a / (n_a * n_b) - 1.0


# --------------------------------------------------------------------------- tests


@dataclass(frozen=True)
class TestResult:
    """One hypothesis test of A against B (two-sided)."""

    __test__ = False  # not a pytest test class

    test: str  # key in TESTS
    title: str  # human name, e.g. "Welch's t-test"
    statistic_name: str  # "t" or "U"
    statistic: float | None  # None when the test could not be computed
    p_value: float | None  # two-sided; None when the test could not be computed
    reason: str | None  # why statistic/p_value are None, else None
    effect_sizes: Mapping[str, float | None]  # cohens_d always; rank_biserial for Mann-Whitney

    def to_dict(self) -> dict:
        data = asdict(self)
        data["effect_sizes"] = dict(self.effect_sizes)
        return data


@dataclass(frozen=True)
class StatTest:
    """How one test is computed: scipy's function, and what it adds to the effect sizes."""

    title: str  # shown in tables
    statistic_name: str  # the statistic's conventional letter
    compute: Callable[[np.ndarray, np.ndarray], tuple[float, float]]  # (statistic, two-sided p-value)
    extra_effects: Mapping[str, Callable[[float, int, int], float]] | None = None  # name -> f(statistic, n_a, n_b)
    needs_spread: bool = True  # a t statistic is undefined when both samples are constant


def _ttest(equal_var: bool) -> Callable[[np.ndarray, np.ndarray], tuple[float, float]]:
    def compute(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
        from scipy import stats  # here, so `coach --help` does not pay for importing scipy

        result = stats.ttest_ind(a, b, equal_var=equal_var)
        return float(result.statistic), float(result.pvalue)

    return compute


def _mannwhitney(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    from scipy import stats

    result = stats.mannwhitneyu(a, b, alternative="two-sided")
    return float(result.statistic), float(result.pvalue)


#: The tests `coach compare --test` offers. Welch's is the default: it does not assume equal variances,
#: which two schedulers need not have.
TESTS: dict[str, StatTest] = {
    "welch": StatTest("Welch's t-test", "t", _ttest(equal_var=False)),
    "student": StatTest("Student's t-test", "t", _ttest(equal_var=True)),
    "mannwhitney": StatTest("Mann-Whitney U", "U", _mannwhitney,
                            extra_effects={"rank_biserial": rank_biserial},
                            needs_spread=False),
}



def run_test(name: str, a: Sequence[float], b: Sequence[float]) -> TestResult:
    """Run TESTS[name] on A vs B; degenerate samples give a result with None values and a reason."""
    test = TESTS[name]
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    effects: dict[str, float | None] = {"cohens_d": cohens_d(xa, xb)}

    def unavailable(reason: str) -> TestResult:
        extra = {key: None for key in test.extra_effects or {}}
        return TestResult(name, test.title, test.statistic_name, None, None, reason, {**effects, **extra})

    if xa.size < MIN_SAMPLES_PER_SIDE or xb.size < MIN_SAMPLES_PER_SIDE:
        return unavailable(f"needs at least {MIN_SAMPLES_PER_SIDE} samples per side, got {xa.size} and {xb.size}")
    if test.needs_spread and np.ptp(xa) == 0.0 and np.ptp(xb) == 0.0:
        return unavailable("both samples are constant, so the t statistic is undefined")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # degenerate inputs come back as nan, handled below
        statistic, p_value = test.compute(xa, xb)
    if not (math.isfinite(statistic) and math.isfinite(p_value)):
        return unavailable(f"{test.title} is undefined for these samples (scipy returned nan)")
    for key, effect in (test.extra_effects or {}).items():
        effects[key] = effect(statistic, int(xa.size), int(xb.size))
    return TestResult(name, test.title, test.statistic_name, statistic, p_value, None, effects)


# --------------------------------------------------------------------------- runs -> samples


def _seconds(iso_time: str) -> float:
    return datetime.fromisoformat(iso_time).timestamp()


@dataclass(frozen=True)
class RunTimes:
    """When a run's first and last jobs finished, and its makespan, in seconds after the run started."""

    first_job_done_s: float | None  # min over jobs of finished - run start; None when no job finished
    last_job_done_s: float | None  # max over jobs of finished - run start
    makespan_s: float | None  # summary.json makespan_s (None while a job is unfinished)


def run_times(summary: Mapping) -> RunTimes:
    """First/last completion from a summary.json dict (`started` and each job's `finished`)."""
    started = _seconds(summary["started"])
    done = [_seconds(job["finished"]) - started for job in summary.get("jobs", {}).values() if job.get("finished")]
    return RunTimes(min(done) if done else None, max(done) if done else None, summary.get("makespan_s"))


@dataclass(frozen=True)
class JobSample:
    """One job's JCT as a sample of its side, with where it came from."""

    run: str  # label of its run (e.g. `<cell>/<run-id>`)
    job: str  # job name
    jct_s: float  # job completion time: finished - submitted
    stop_reason: str | None  # why the job ended


def jct_samples(run: str, summary: Mapping) -> tuple[list[JobSample], list[dict]]:
    """(samples, excluded): every job with a JCT, and the jobs left out with the reason."""
    samples, excluded = [], []
    for job, outcome in summary.get("jobs", {}).items():
        reason = outcome.get("stop_reason")
        if outcome.get("jct_s") is None:
            excluded.append({"run": run, "job": job, "reason": "no jct_s (the job did not finish)"})
        elif reason in EXCLUDED_STOP_REASONS:
            excluded.append({"run": run, "job": job, "reason": f"stop_reason {reason}"})
        else:
            samples.append(JobSample(run, job, float(outcome["jct_s"]), reason))
    return samples, excluded


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def side_stats(runs: Sequence[tuple[str, Mapping]]) -> dict:
    """Everything compare reports about one side, from (run label, summary.json dict) pairs."""
    samples: list[JobSample] = []
    excluded: list[dict] = []
    per_run = []
    stop_reasons: dict[str, int] = {}
    for label, summary in runs:
        got, left_out = jct_samples(label, summary)
        samples += got
        excluded += left_out
        for sample in got:
            stop_reasons[str(sample.stop_reason)] = stop_reasons.get(str(sample.stop_reason), 0) + 1
        per_run.append({"run": label, **asdict(run_times(summary))})
    return {
        "runs": len(runs),
        "jct_s": describe([s.jct_s for s in samples]),
        "first_job_done_s": _mean([r["first_job_done_s"] for r in per_run]),
        "last_job_done_s": _mean([r["last_job_done_s"] for r in per_run]),
        "makespan_s": _mean([r["makespan_s"] for r in per_run]),
        "stop_reasons": dict(sorted(stop_reasons.items())),
        "samples": [asdict(s) for s in samples],
        "excluded_jobs": excluded,
        "per_run": per_run,
    }


def detectable(a: Sequence[float], b: Sequence[float], alpha: float = ALPHA, wanted_power: float = POWER) -> dict:
    """What compare.json says about the comparison's power: the smallest detectable d, in seconds and in % of
    A's mean, with the sample sizes it has."""
    d = detectable_effect(len(a), len(b), alpha, wanted_power)
    sd = pooled_std(a, b)
    seconds = None if d is None or sd is None else d * sd
    mean_a = sum(a) / len(a) if a else None
    percent = None if seconds is None or not mean_a else 100 * seconds / mean_a
    return {"alpha": alpha, "power": wanted_power, "n_a": len(a), "n_b": len(b), "cohens_d": d,
            "jct_s": seconds, "percent_of_a_mean": percent}


MIN_PAIRS = 3  # fewer jobs in common: no paired test


def paired(a: Mapping[str, float], b: Mapping[str, float], alpha: float = ALPHA) -> dict:
    """Two runs of one workload hold the same jobs, so their JCTs pair up job by job: over the jobs both
    completed, the mean difference (B - A), the paired t-test and Wilcoxon's signed-rank test (far more sensitive
    than tests over two independent samples), the smallest mean difference the t-test detects (alpha, power 0.8)
    and a verdict. Used by `coach compare` on two single runs and by `coach simulate`'s sweep."""
    from scipy import stats  # here: `coach --help` does not pay for scipy

    names = sorted(set(a) & set(b))
    diffs = [b[n] - a[n] for n in names]
    result: dict = {"pairs": len(names), "mean_diff_s": None, "t_p": None, "wilcoxon_p": None,
                    "detectable_s": None, "verdict": "too few jobs completed in both"}
    if len(names) < MIN_PAIRS:
        return result
    mean = statistics.fmean(diffs)
    spread = statistics.stdev(diffs)
    result["mean_diff_s"] = round(mean, 3)
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(POWER)
    result["detectable_s"] = round(z * spread / math.sqrt(len(diffs)), 3)
    if spread == 0:
        result["verdict"] = "identical" if mean == 0 else ("B slower" if mean > 0 else "B faster")
        return result
    t_p = round(float(stats.ttest_rel([b[n] for n in names], [a[n] for n in names]).pvalue), 6)
    result["t_p"] = t_p
    if any(diffs):
        result["wilcoxon_p"] = round(float(stats.wilcoxon(diffs).pvalue), 6)
    if t_p < alpha:
        result["verdict"] = "B slower" if mean > 0 else "B faster"
    else:
        result["verdict"] = "no detectable difference"
    return result


def paired_runs(a_runs: Sequence[tuple[str, Mapping]], b_runs: Sequence[tuple[str, Mapping]]) -> dict | None:
    """The paired test over jobs when each side is one run and they share at least MIN_PAIRS job names (two
    simulations of one workload, say); else None."""
    if len(a_runs) != 1 or len(b_runs) != 1:
        return None
    a = {s.job: s.jct_s for s in jct_samples(*a_runs[0])[0]}
    b = {s.job: s.jct_s for s in jct_samples(*b_runs[0])[0]}
    return paired(a, b) if len(set(a) & set(b)) >= MIN_PAIRS else None


def compare(a_runs: Sequence[tuple[str, Mapping]], b_runs: Sequence[tuple[str, Mapping]],
            test: str = DEFAULT_TEST) -> dict:
    """compare.json's statistics: both sides, the test of A's JCTs against B's, and A − B differences."""
    a, b = side_stats(a_runs), side_stats(b_runs)
    a_jct, b_jct = [s["jct_s"] for s in a["samples"]], [s["jct_s"] for s in b["samples"]]
    result = run_test(test, a_jct, b_jct)

    def minus(key: str, inner: str | None = None) -> float | None:
        x = a[key][inner] if inner else a[key]
        y = b[key][inner] if inner else b[key]
        return None if x is None or y is None else x - y

    return {
        "a": a,
        "b": b,
        "test": result.to_dict(),
        "detectable": detectable(a_jct, b_jct),  # the smallest difference these samples detect (power 0.8)
        "paired": paired_runs(a_runs, b_runs),  # over jobs, when both sides are one run of the same jobs
        "difference_a_minus_b": {
            "mean_jct_s": minus("jct_s", "mean"),
            "median_jct_s": minus("jct_s", "50%"),
            "first_job_done_s": minus("first_job_done_s"),
            "last_job_done_s": minus("last_job_done_s"),
            "makespan_s": minus("makespan_s"),
        },
    }


# --------------------------------------------------------------------------- series for plots


def epoch_times(records: Sequence[Mapping]) -> list[tuple[int, float]]:
    """(epoch, epoch_time_s) of every training epoch in the records (calibration and retries left out)."""
    return [(int(r["epoch"]), float(r["epoch_time_s"])) for r in records
            if r.get("phase") == "training" and r.get("epoch_time_s") is not None]


def mean_by_epoch(points: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """Mean epoch time per epoch number, sorted by epoch."""
    by_epoch: dict[int, list[float]] = {}
    for epoch, seconds in points:
        by_epoch.setdefault(epoch, []).append(seconds)
    return [(epoch, float(np.mean(values))) for epoch, values in sorted(by_epoch.items())]


def since_start_s(iso_time: str, started: str) -> float:
    """Seconds between the run's start and an ISO-8601 time of one of its records."""
    return _seconds(iso_time) - _seconds(started)
