"""Batch scaling on money as well as time: the test `coach compare` runs on JCT, run on each job's total cost.

Why: `coach compare` tests JCTs only; issue 13 (part 4) asks whether `adaptive` reaches LeNet's target in less wall
time *or money* than `fixed`. This reads two selections of an experiment (the forms `coach compare` takes, e.g.
`DIR:model=lenet-fixed DIR:model=lenet-adaptive`, from jobs/experiments/batch-scaling.yaml) and prints, per
metric (jct_s, total_cost, epochs): the means, Welch's t-test, and the smallest difference the samples detect
(alpha 0.05, power 0.8), with the same functions `coach compare` uses; plus the global batches each group chose.

    .venv/bin/python benchmarks/batch_scaling.py EXPERIMENT_DIR:model=lenet-fixed EXPERIMENT_DIR:model=lenet-adaptive

Side effects: reads the experiment folder only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from coach.analysis.stats import detectable
from coach.analysis.stats import run_test
from coach.experiments.matrix import SelectionError, select_runs

METRICS = ("jct_s", "total_cost", "epochs")


def _values(selection, metric: str) -> list[float]:
    """One value per job that reached its target (other endings are left out, as compare leaves them out)."""
    return [float(job[metric]) for run in selection.runs for job in run.summary["jobs"].values()
            if job.get("stop_reason") == "target_loss" and job.get(metric) is not None]


def _batches(selection) -> list[list[int]]:
    return [[line["global_batch"] for line in log if line.get("phase") == "training" and "global_batch" in line]
            for run in selection.runs for log in run.logs.values()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    args = parser.parse_args(argv)
    try:
        a, b = select_runs(args.a), select_runs(args.b)
    except SelectionError as error:
        print(f"batch_scaling: {error}", file=sys.stderr)
        return 2
    out: dict = {"a": args.a, "b": args.b, "runs": [len(a.runs), len(b.runs)]}
    for metric in METRICS:
        xa, xb = _values(a, metric), _values(b, metric)
        test = run_test("welch", xa, xb)
        power = detectable(xa, xb)
        sd_units = power["jct_s"]  # detectable() names the difference in the metric's own units `jct_s`
        out[metric] = {"a": xa, "b": xb, "mean_a": statistics.fmean(xa) if xa else None,
                       "mean_b": statistics.fmean(xb) if xb else None, "p_value": test.p_value,
                       "cohens_d": test.effect_sizes.get("cohens_d"), "detectable_difference": sd_units,
                       "detectable_percent_of_a": power["percent_of_a_mean"]}
    out["global_batches"] = {"a": _batches(a), "b": _batches(b)}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
