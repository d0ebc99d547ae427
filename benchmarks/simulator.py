"""How fast is `coach simulate`? Goals on a 2-core machine: the whole Philly trace (82,247 jobs) with `fifo` in
<= 60 s and with every other policy in <= 10 min, and each 160-job Pollux workload with every policy in <= 10 s.

    .venv/bin/python benchmarks/simulator.py --data ../shared/data/pollux              # both parts
    .venv/bin/python benchmarks/simulator.py --data ../shared/data/pollux --part philly
    .venv/bin/python benchmarks/simulator.py --data ../shared/data/pollux --part philly --philly-policies round-robin
    .venv/bin/python benchmarks/simulator.py --data ../shared/data/pollux --part workloads --workloads 1 2

Each line: wall seconds of the simulation (workload and traces read, apps fitted, rounds simulated; results not
written), its CPU seconds (the figure on a machine shared with other work), jobs/s, events/s (arrivals, grants, bindings, completions, releases), rounds, and the average JCT.
The applications' fits are cached per process, so the first simulation of a process pays for them (~2 s): the
line of the first run says so. Nothing is written.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from coach.simulator.policies import CLUSTER_POLICIES
from coach.simulator.session import Settings, cluster_from, simulate

PHILLY_GOAL_S = 60.0
PHILLY_OTHER_GOAL_S = 600.0
WORKLOAD_GOAL_S = 10.0
PHILLY_CLUSTER = "64x8"  # 512 GPUs: the trace asks for 374 GPUs on average (load ~0.73)


def one(workload: Path, cluster: str, policy: str, scheduler: str = "gang-pack") -> tuple[float, dict]:
    started, cpu_started = time.perf_counter(), time.process_time()
    outcome, count = simulate(Settings(workload, cluster_from(cluster), policy, scheduler))
    wall_s = time.perf_counter() - started
    done = [r.finished_s - r.spec.arrival_s for r in outcome.jobs if r.stop_reason == "completed"]
    return wall_s, {"jobs": count, "events": outcome.events, "rounds": outcome.rounds,
                    "cpu_s": time.process_time() - cpu_started,
                    "avg_jct_h": sum(done) / len(done) / 3600 if done else float("nan")}


def line(label: str, wall_s: float, found: dict, goal_s: float) -> str:
    verdict = "ok" if wall_s <= goal_s else f"OVER the {goal_s:g} s goal"
    return (f"{label:<34} {wall_s:7.2f} s ({found['cpu_s']:.1f} s CPU)  {found['jobs'] / wall_s:9.0f} jobs/s  {found['events'] / wall_s:9.0f} "
            f"events/s  {found['rounds']:7d} rounds  avg JCT {found['avg_jct_h']:.2f} h  {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, type=Path, help="the pollux data folder (workloads*/, traces/)")
    parser.add_argument("--part", choices=("philly", "workloads", "both"), default="both")
    parser.add_argument("--workloads", type=int, nargs="*", default=list(range(1, 9)))
    parser.add_argument("--policies", nargs="*", default=sorted(CLUSTER_POLICIES))
    parser.add_argument("--philly-policies", nargs="*", default=["fifo"],
                        help="policies to run the whole Philly trace under (default fifo)")
    args = parser.parse_args()
    worst = 0.0
    if args.part in ("workloads", "both"):
        for number in args.workloads:
            for policy in args.policies:
                wall_s, found = one(args.data / "workloads" / f"workload-{number}.csv", "16x4", policy)
                worst = max(worst, wall_s / WORKLOAD_GOAL_S)
                print(line(f"workload-{number} {policy}", wall_s, found, WORKLOAD_GOAL_S), flush=True)
    if args.part in ("philly", "both"):
        for policy in args.philly_policies:
            goal_s = PHILLY_GOAL_S if policy == "fifo" else PHILLY_OTHER_GOAL_S
            wall_s, found = one(args.data / "traces" / "philly.csv", PHILLY_CLUSTER, policy)
            worst = max(worst, wall_s / goal_s)
            print(line(f"philly {policy} on {PHILLY_CLUSTER}", wall_s, found, goal_s), flush=True)
    return 0 if worst <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
