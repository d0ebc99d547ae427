"""How does the learned `dl2` policy decide Coach's own jobs (workers and servers) on job mixes it never saw? (issue 15)

Generates `--episodes` seeded job mixes of the kind the counts network trains on (coach.dl2.learn_run.episode,
but from a seed stream training never draws from), runs each in virtual time (`coach run`'s lifecycle, placement
and policy interface over the simulated platform) under `coach`, `dl2-imitation` (the shipped training before
reinforcement learning) and `dl2`, writing every run as a results folder (OUT/<policy>/episode-NN/). Prints the
mean JCT and makespan per policy, the paired comparison across episodes (mean of the per-episode relative change,
Wilcoxon's signed-rank test and the paired t-test), and runs `coach compare` (Welch over the jobs' JCTs, with plots)
of `dl2` against `coach` on every episode, counting how often either is significantly faster.

    .venv/bin/python benchmarks/dl2_counts_eval.py --out results/dl2-counts-eval [--episodes 30] [--no-compare]

Takes about a minute on 2 cores (plus ~2 s per `coach compare`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from coach.dl2.learn_run import CountsTrainSettings, episode
from coach.dl2.run_policy import Dl2RunPolicy
from coach.app.virtual_run import run_virtual
from coach.policy.run_policy import CoachPolicy
from coach.dl2 import RUN_IMITATION_MODEL, RUN_MODEL

POLICIES = {"coach": CoachPolicy, "dl2-imitation": lambda: Dl2RunPolicy(RUN_IMITATION_MODEL),
            "dl2": lambda: Dl2RunPolicy(RUN_MODEL)}
HELD_OUT_STREAM = 20  # training draws its episodes from streams 10-12


def paired(ours: list[float], theirs: list[float]) -> dict:
    """Mean per-episode change, wins, and the two paired tests' p (1.0 when every pair is equal: no difference)."""
    change = [a / b - 1 for a, b in zip(ours, theirs)]
    same = all(a == b for a, b in zip(ours, theirs))
    return {"mean_change": statistics.fmean(change), "wins": sum(a < b for a, b in zip(ours, theirs)),
            "wilcoxon_p": 1.0 if same else float(stats.wilcoxon(ours, theirs).pvalue),
            "paired_t_p": 1.0 if same else float(stats.ttest_rel(ours, theirs).pvalue)}


def compare(a: Path, b: Path, out: Path) -> dict | None:
    done = subprocess.run([sys.executable, "-m", "coach.ui.cli", "compare", str(a), str(b), "--out", str(out)],
                          capture_output=True, text=True)
    path = out / "compare.json"
    return json.loads(path.read_text()) if done.returncode == 0 and path.is_file() else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for the runs and comparisons")
    parser.add_argument("--episodes", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-compare", action="store_true", help="skip `coach compare` per episode")
    args = parser.parse_args(argv)
    settings = CountsTrainSettings(seed=args.seed)
    figures: dict[str, dict[str, list[float]]] = {name: {"jct_s": [], "makespan_s": []} for name in POLICIES}
    for number in range(args.episodes):
        ep = episode(settings, np.random.default_rng([args.seed, HELD_OUT_STREAM, number]))
        for name, make in POLICIES.items():
            run_dir = args.out / name / f"episode-{number:02d}"
            run_dir.mkdir(parents=True, exist_ok=True)
            summary = run_virtual(ep.specs, ep.cluster, policy=name, models=ep.models, run_dir=run_dir,
                                  run_id=f"{name}-{number:02d}", deciding=make()).summary
            jcts = [job["jct_s"] for job in summary["jobs"].values() if job.get("jct_s") is not None]
            figures[name]["jct_s"].append(statistics.fmean(jcts))
            figures[name]["makespan_s"].append(float(summary["makespan_s"]))
    print(f"{args.episodes} held-out episodes, {settings.nodes}x{settings.slots_per_node} slots")
    print(f"{'policy':<15}{'avg JCT (s)':>12}{'makespan (s)':>14}")
    for name, values in figures.items():
        print(f"{name:<15}{statistics.fmean(values['jct_s']):>12.2f}{statistics.fmean(values['makespan_s']):>14.2f}")
    result = {"episodes": args.episodes, "figures": figures, "paired": {}}
    for ours, theirs in (("dl2", "coach"), ("dl2-imitation", "coach"), ("dl2", "dl2-imitation")):
        for metric in ("jct_s", "makespan_s"):
            test = paired(figures[ours][metric], figures[theirs][metric])
            result["paired"][f"{ours} vs {theirs} {metric}"] = test
            print(f"{ours} vs {theirs}, {metric}: {test['mean_change']:+.1%} per episode, better in {test['wins']} of "
                  f"{args.episodes}, Wilcoxon p = {test['wilcoxon_p']:.3g}, paired t p = {test['paired_t_p']:.3g}")
    if not args.no_compare:
        significant = {"dl2": 0, "coach": 0}
        for number in range(args.episodes):
            answer = compare(args.out / "dl2" / f"episode-{number:02d}", args.out / "coach" / f"episode-{number:02d}",
                             args.out / "compare" / f"episode-{number:02d}")
            if answer is None:
                print(f"coach compare failed on episode {number}", file=sys.stderr)
                continue
            p_value = answer["test"]["p_value"]
            if p_value is not None and p_value < 0.05:
                significant["dl2" if answer["difference_a_minus_b"]["mean_jct_s"] < 0 else "coach"] += 1
        result["coach_compare_significant"] = significant
        print(f"coach compare (Welch over jobs, p < 0.05): dl2 faster in {significant['dl2']}, coach faster in "
              f"{significant['coach']} of {args.episodes} episodes")
    (args.out / "dl2_counts_eval.json").write_text(json.dumps(result, indent=1, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
