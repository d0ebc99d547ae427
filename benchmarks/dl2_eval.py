"""How does the learned `dl2` policy do on workloads it was not trained on? (issue 15)

Runs `coach simulate` for every policy on every held-out workload (default: workloads 5-8 of the Pollux
artifact's `workloads/`; the shipped model was trained on 1-4), prints average JCT and makespan per policy (mean
over the workloads), and runs `coach compare` of `dl2` against `drf` and `optimus` on each workload (Welch's test
over the jobs' JCTs; compare.json and plots in the compare folders). DL2's published gains are printed beside.

    .venv/bin/python benchmarks/dl2_eval.py --data DATA --out results/dl2-eval [--workloads 5 6 7 8]

DATA is the folder the Pollux artifact's data came in (workloads/, traces/). Takes about 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

POLICIES = ("drf", "optimus", "tiresias", "pollux", "coach", "dl2-imitation", "dl2")
COMPARED = (("dl2", "drf"), ("dl2", "optimus"), ("dl2-imitation", "drf"))
PUBLISHED = {"drf": -0.441, "optimus": -0.175}  # DL2's average-JCT change against these, as its authors report


def coach(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coach.ui.cli", *args], capture_output=True, text=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, type=Path, help="the Pollux artifact's data folder")
    parser.add_argument("--out", required=True, type=Path, help="folder for the simulations and comparisons")
    parser.add_argument("--workloads", nargs="+", type=int, default=[5, 6, 7, 8])
    parser.add_argument("--cluster", default="16x4")
    args = parser.parse_args(argv)
    runs: dict[tuple[str, int], Path] = {}
    for number in args.workloads:
        workload = args.data / "workloads" / f"workload-{number}.csv"
        for policy in POLICIES:
            done = coach("simulate", str(workload), "--policy", policy, "--cluster", args.cluster,
                         "--results", str(args.out), "--quiet")
            if done.returncode != 0:
                print(f"error: {policy} on {workload}: {done.stderr.strip()}", file=sys.stderr)
                return 1
            runs[policy, number] = Path(done.stdout.strip().splitlines()[-1])
            print(f"workload-{number} {policy}: {runs[policy, number]}", flush=True)
    stats = {key: json.loads((path / "summary.json").read_text())["stats"] for key, path in runs.items()}
    table = {}
    print(f"\n| policy | avg JCT (h) | makespan (h) |  (mean over workloads {args.workloads}, {args.cluster})")
    print("|---|---|---|")
    for policy in POLICIES:
        jct = statistics.mean(stats[policy, n]["avg_jct_s"] for n in args.workloads) / 3600
        makespan = statistics.mean(stats[policy, n]["makespan_s"] for n in args.workloads) / 3600
        table[policy] = {"avg_jct_h": jct, "makespan_h": makespan}
        print(f"| {policy} | {jct:.3f} | {makespan:.2f} |")
    print("\n| comparison | avg JCT change (ours) | DL2's published | per-workload p (Welch, jobs' JCT) |")
    print("|---|---|---|---|")
    comparisons = {}
    for mine, other in COMPARED:
        change = table[mine]["avg_jct_h"] / table[other]["avg_jct_h"] - 1
        ps = []
        for n in args.workloads:
            folder = args.out / f"compare-{mine}-vs-{other}-workload-{n}"
            done = coach("compare", str(runs[mine, n]), str(runs[other, n]), "--out", str(folder))
            if done.returncode != 0:
                print(f"error: coach compare {mine} {other} on workload-{n}: {done.stderr.strip()}", file=sys.stderr)
                return 1
            result = json.loads((folder / "compare.json").read_text()) if (folder / "compare.json").exists() else {}
            ps.append(_p_value(result))
        published = f"{PUBLISHED[other]:+.1%}" if mine == "dl2" and other in PUBLISHED else "-"
        comparisons[f"{mine} vs {other}"] = {"jct_change": round(change, 4), "p_values": ps}
        shown = ", ".join("-" if p is None else f"{p:.2g}" for p in ps)
        print(f"| {mine} vs {other} | {change:+.1%} | {published} | {shown} |")
    (args.out / "dl2_eval.json").write_text(json.dumps({"table": table, "comparisons": comparisons,
                                                        "workloads": args.workloads}, indent=1) + "\n")
    return 0


def _p_value(result: dict) -> float | None:
    """The p value of compare.json's test of the jobs' JCTs (None when it could not test)."""
    test = result.get("test") if isinstance(result.get("test"), dict) else {}
    return test.get("p_value")


if __name__ == "__main__":
    sys.exit(main())
