"""Paired comparisons over jobs and fairness over slowdowns: what a policy sweep reports. Pure (scipy inside).

The paired test over jobs is coach.analysis.stats.paired, the one `coach compare` runs on two single runs of the
same jobs (one implementation); this module adds the fairness measures.
"""

from __future__ import annotations

import math
from typing import Sequence

from coach.analysis.stats import MIN_PAIRS, paired

__all__ = ["MIN_PAIRS", "jain", "paired"]


def jain(values: Sequence[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one takes all."""
    xs = [x for x in values if x > 0 and math.isfinite(x)]
    if not xs:
        return None
    return round(sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)), 4)
