"""How much of each budget is spent usefully now that the budget is a hard cap (issue 13, part 1)?

Runs seeded random jobs (dynamic and static, random budgets, node prices and epoch times; the cases of
tests/unit/test_budget_cap.py) in virtual time through the same lifecycle, policy and placement as `coach run`,
and splits every job's spending into: finished epochs and calibration steps, whole or partial (useful: a step
its deadline cut replies with what it trained), attempts that trained nothing before their deadline or failed
(lost), and what was left unspent. Prints the totals and the worst job.

    .venv/bin/python benchmarks/budget_use.py              # 200 jobs
    .venv/bin/python benchmarks/budget_use.py --jobs 50
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coach.app.virtual_run import run_virtual  # noqa: E402
from tests.unit.test_budget_cap import random_case  # noqa: E402  (the same random cases as the test)

USEFUL = frozenset({"training", "calibration"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    useful, lost, unspent, over = [], [], [], 0
    for seed in range(args.jobs):
        spec, cluster, model, policy = random_case(seed)
        records = run_virtual([spec], cluster, policy=policy, models={"j": model},
                              placement_timeout_s=1e9).records["j"]
        spent_useful = sum(r["cost"] for r in records if r["phase"] in USEFUL)
        spent_lost = sum(r["cost"] for r in records if r["phase"] not in USEFUL)
        over += any(r["cumulative_cost"] > spec.budget for r in records)
        useful.append(spent_useful / spec.budget)
        lost.append(spent_lost / spec.budget)
        unspent.append(1 - (spent_useful + spent_lost) / spec.budget)
    n = args.jobs
    print(f"{n} jobs; shares of each budget (mean, median, worst):")
    for name, shares, worst in (("useful", useful, min), ("lost", lost, max),
                                ("left unspent", unspent, max)):
        print(f"  {name:<20} {statistics.fmean(shares):6.1%} {statistics.median(shares):6.1%} {worst(shares):6.1%}")
    print(f"  jobs with a line above their budget: {over} of {n}")
    return 0 if over == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
