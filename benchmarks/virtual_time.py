"""How fast does the virtual-time driver run a large workload? Goal: 200 static jobs x 30 epochs in <= 2 s wall.

Builds `--jobs` jobs of `--epochs` epochs each (target_loss 0 and an endless budget, so every job runs exactly
max_epochs), with workers 1-3 and servers 1-2 drawn by a seeded RNG, and runs them together on a 64-slot
cluster (16 nodes x 4 slots) through `coach.app.virtual_run.run_virtual`: the same lifecycles, run policy and
scheduler_fork placement as `coach run`, over the simulated platform, nothing written. Jobs queue for slots
as long as they must (the placement timeout is effectively off), so every job finishes.

    .venv/bin/python benchmarks/virtual_time.py                      # static 200x30, then coach 20x5
    .venv/bin/python benchmarks/virtual_time.py --policy static --repeat 5
    .venv/bin/python benchmarks/virtual_time.py --policy coach --coach-jobs 40 --coach-epochs 10

Prints, per policy, the wall seconds (best and median of --repeat), jobs/s, events/s, epochs/s, the simulated
makespan and how the jobs ended. The goal applies to the static case. The coach figure (dynamic jobs: five
calibration mini-epochs each, then a run-wide plan before every epoch) is a second figure at its own, smaller
size (--coach-jobs x --coach-epochs): the coach policy refits every planned job's curves in every round, so
200 x 30 would take hours.
"""

from __future__ import annotations

import argparse
import collections
import random
import statistics
import sys
import time
from pathlib import Path

from coach.app.virtual_run import run_virtual
from coach.domain.cluster import ClusterSpec, NodeSpec
from coach.domain.jobs import JobSpec

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "jobs" / "models" / "lenet.py"  # never loaded: the simulated platform computes its epochs
GOAL_S = 2.0  # wall seconds for the static case at the default size
CLUSTER = ClusterSpec("bench-16x4", tuple(NodeSpec(f"node-{i:02d}", 4, 0.0001) for i in range(16)))
NO_TIMEOUT_S = 1e9  # jobs wait for their quorum as long as it takes


def make_jobs(count: int, epochs: int, dynamic: bool, seed: int) -> list[JobSpec]:
    rng = random.Random(seed)
    specs = []
    for i in range(count):
        workers, servers = rng.randint(1, 3), rng.randint(1, 2)
        specs.append(JobSpec(
            name=f"job-{i:03d}", source=MODEL, model_path=MODEL, batch_size=64, optimizer="sgd",
            optimizer_params={}, learning_rate=0.05, target_loss=0.0, consecutive=3, max_epochs=epochs,
            budget=1e9, workers=None if dynamic else workers, servers=None if dynamic else servers,
            max_workers=3 if dynamic else None, max_servers=2 if dynamic else None, seed=i, epoch_timeout_s=600.0))
    return specs


def measure(policy: str, jobs: int, epochs: int, repeat: int, seed: int) -> dict:
    """Best and median wall seconds of `repeat` identical simulations, and what the last one did."""
    specs = make_jobs(jobs, epochs, dynamic=policy != "static", seed=seed)
    walls, sim = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        sim = run_virtual(specs, CLUSTER, policy=policy, scheduler="gang", placement_timeout_s=NO_TIMEOUT_S)
        walls.append(time.perf_counter() - started)
    best = min(walls)
    outcomes = sim.summary["jobs"].values()
    epochs_run = sum(o["epochs"] for o in outcomes)
    return {"policy": policy, "jobs": jobs, "epochs": epochs, "best_s": best, "median_s": statistics.median(walls),
            "events": sim.events, "epochs_run": epochs_run, "makespan_s": sim.summary["makespan_s"],
            "endings": collections.Counter(o["stop_reason"] for o in outcomes)}


def report(m: dict, goal: bool) -> None:
    best = m["best_s"]
    print(f"policy {m['policy']}: {m['jobs']} jobs x {m['epochs']} epochs on {CLUSTER.total_slots} slots")
    print(f"  wall           {best:.3f} s best, {m['median_s']:.3f} s median")
    print(f"  jobs/s         {m['jobs'] / best:,.0f}")
    print(f"  events/s       {m['events'] / best:,.0f}  ({m['events']} events)")
    print(f"  epochs/s       {m['epochs_run'] / best:,.0f}  ({m['epochs_run']} epochs trained)")
    print(f"  makespan       {m['makespan_s']:.1f} simulated s")
    print(f"  endings        {dict(m['endings'])}")
    if goal:
        verdict = "met" if best <= GOAL_S else "NOT met"
        print(f"  goal <= {GOAL_S:g} s wall: {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--policy", choices=["static", "coach", "both"], default="both",
                        help="static: the goal's case; coach: dynamic jobs; both (default): static, then coach")
    parser.add_argument("--coach-jobs", type=int, default=20, help="jobs of the coach figure")
    parser.add_argument("--coach-epochs", type=int, default=5, help="max_epochs of the coach figure's jobs")
    parser.add_argument("--repeat", type=int, default=3, help="runs per policy; the best wall time counts")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    policies = ["static", "coach"] if args.policy == "both" else [args.policy]
    default_size = (args.jobs, args.epochs) == (200, 30)
    met = True
    for policy in policies:
        jobs, epochs = (args.jobs, args.epochs) if policy == "static" else (args.coach_jobs, args.coach_epochs)
        m = measure(policy, jobs, epochs, max(args.repeat, 1), args.seed)
        report(m, goal=policy == "static" and default_size)
        if policy == "static" and default_size:
            met = m["best_s"] <= GOAL_S
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
