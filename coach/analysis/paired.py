"""Paired comparisons over jobs and fairness over slowdowns: what a policy sweep reports. Pure (scipy inside).

Two runs of one workload hold the same jobs, so their JCTs pair up job by job: the paired t-test and Wilcoxon's
signed-rank test use that, and are far more sensitive than tests over two independent samples. When neither finds
a difference, `detectable_s` says how large a mean difference the t-test would find (alpha 0.05, power 0.8).
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Mapping, Sequence

from coach.analysis.power import ALPHA, POWER

MIN_PAIRS = 3


def paired(a: Mapping[str, float], b: Mapping[str, float], alpha: float = ALPHA) -> dict:
    """JCTs of A and B over the jobs both completed: mean difference (B - A), tests, what is detectable, verdict."""
    from scipy import stats  # here: `coach --help` does not pay for scipy

    names = sorted(set(a) & set(b))
    diffs = [b[n] - a[n] for n in names]
    result: dict[str, Any] = {"pairs": len(names), "mean_diff_s": None, "t_p": None, "wilcoxon_p": None, "detectable_s": None,
              "verdict": "too few jobs completed in both"}
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


def jain(values: Sequence[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one takes all."""
    xs = [x for x in values if x > 0 and math.isfinite(x)]
    if not xs:
        return None
    return round(sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)), 4)
