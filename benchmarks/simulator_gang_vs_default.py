"""The thesis's question at scale: does the gang profile place better than Kubernetes' default one?

For every workload (1-8) at the given loads and every policy given, simulates the workload twice, with the gang
and the default profile of scheduler_fork, writes both runs into --results, compares the two with `coach compare`
(Welch's t-test on the JCTs) and prints one line: average JCT, makespan, jobs that were ever deadlocked, and
GPU-hours held by jobs that could not run, for each profile, and the test's p-value.

    .venv/bin/python benchmarks/simulator_gang_vs_default.py --data DIR --results /tmp/gvd
    .venv/bin/python benchmarks/simulator_gang_vs_default.py --data DIR --results /tmp/gvd --loads 2.0 --policies fifo
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

from coach.ui.cli import main as coach

FOLDER = {0.5: "workloads-0.5", 1.0: "workloads", 1.5: "workloads-1.5", 2.0: "workloads-2.0"}


def run(workload: Path, policy: str, profile: str, results: Path) -> Path:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = coach(["simulate", str(workload), "--policy", policy, "--scheduler", profile, "--results",
                      str(results), "--quiet"])
    if code != 0:
        raise SystemExit(f"coach simulate {workload} {policy} {profile}: exit code {code}")
    return Path(out.getvalue().strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--results", required=True, type=Path)
    parser.add_argument("--loads", type=float, nargs="*", default=[1.0, 2.0], choices=sorted(FOLDER))
    parser.add_argument("--policies", nargs="*", default=["fifo", "tiresias", "pollux"])
    parser.add_argument("--workloads", type=int, nargs="*", default=list(range(1, 9)))
    args = parser.parse_args()
    print("load policy   wl | gang: avg JCT h, makespan h, deadlocked, held GPU-h | default: the same | p (Welch)")
    for load in args.loads:
        for policy in args.policies:
            for number in args.workloads:
                workload = args.data / FOLDER[load] / f"workload-{number}.csv"
                results = args.results / f"load-{load}"
                dirs = {p: run(workload, policy, p, results) for p in ("gang", "default")}
                stats = {p: json.loads((d / "summary.json").read_text())["stats"] for p, d in dirs.items()}
                out_dir = results / f"compare-{policy}-{number}"
                with contextlib.redirect_stdout(io.StringIO()):
                    coach(["compare", str(dirs["gang"]), str(dirs["default"]), "--out", str(out_dir)])
                p_value = json.loads((out_dir / "compare.json").read_text())["test"]["p_value"]
                cells = [f"{s['avg_jct_s'] / 3600:5.2f} {s['makespan_s'] / 3600:6.2f} {s['deadlocked_jobs']:3d} "
                         f"{s['held_gpu_hours']:8.1f}" for s in (stats["gang"], stats["default"])]
                print(f"{load:4} {policy:<8} {number:2} | {cells[0]} | {cells[1]} | {p_value:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
