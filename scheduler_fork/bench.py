"""Scheduler throughput benchmark: how many pods per second `Scheduler.schedule` places.

This is the benchmark's edge, the one module of scheduler_fork that reads a clock (time.perf_counter); the
library itself never does. Run: `python -m scheduler_fork.bench --nodes 7500 --pods 20000 --profile gang`.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from scheduler_fork.framework import ROLES, Node, Pod, PodGroup
from scheduler_fork.scheduler import Scheduler

#: One benchmark job: a PS scheduler, a server and two workers.
JOB_SHAPE = ("scheduler", "server", "worker", "worker")


@dataclass(frozen=True)
class BenchResult:
    pods_placed: int  # pods bound when schedule() had nothing left to do
    seconds: float  # wall time spent in schedule() calls
    pods_per_s: float  # pods_placed / seconds
    submit_seconds: float = 0.0  # wall time spent in submit() (not in `seconds`)


def bench_jobs(pods: int) -> list[tuple[PodGroup, list[Pod]]]:
    """Jobs of 1 scheduler + 1 server + 2 workers, in order, until `pods` pods (the last job may be cut short)."""
    jobs: list[tuple[PodGroup, list[Pod]]] = []
    seq = 0
    job_index = 0
    while seq < pods:
        job = f"job-{job_index:05d}"
        members: list[Pod] = []
        counts = dict.fromkeys(ROLES, 0)
        for role in JOB_SHAPE:
            if seq >= pods:
                break
            name = f"{job}-{role}" if role == "scheduler" else f"{job}-{role}-{counts[role]}"
            counts[role] += 1
            members.append(Pod(name=name, job=job, role=role, seq=seq, job_seq=job_index))
            seq += 1
        jobs.append((PodGroup(job), members))
        job_index += 1
    return jobs


def run_bench(nodes: int, pods: int, profile: str, seed: int = 0, slots_per_node: int = 4) -> BenchResult:
    """Submit every job, then time schedule() calls until a call places nothing more."""
    scheduler = Scheduler([Node(f"node-{i:05d}", slots_per_node) for i in range(nodes)], profile=profile, seed=seed)
    jobs = bench_jobs(pods)
    start = time.perf_counter()
    for group, members in jobs:
        scheduler.submit(members, group)
    submit_seconds = time.perf_counter() - start
    placed = 0
    now_s = 0.0
    seconds = 0.0
    while True:
        start = time.perf_counter()
        result = scheduler.schedule(now_s)
        seconds += time.perf_counter() - start
        placed += len(result.bound)
        if not result.bound and not result.waiting:
            break
        now_s += 11.0  # past the longest backoff, so every pending pod is tried again
    return BenchResult(
        pods_placed=placed,
        seconds=seconds,
        pods_per_s=placed / seconds if seconds > 0 else float("inf"),
        submit_seconds=submit_seconds,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=7500)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--profile", action="append", help="repeatable; default: every profile")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slots-per-node", type=int, default=4)
    args = parser.parse_args(argv)
    for profile in args.profile or ["gang", "gang-strict", "default"]:
        result = run_bench(args.nodes, args.pods, profile, args.seed, args.slots_per_node)
        print(f"{profile:12s} nodes={args.nodes} pods={args.pods}: placed {result.pods_placed} in "
              f"{result.seconds:.3f} s = {result.pods_per_s:,.0f} pods/s (submit {result.submit_seconds:.3f} s)")


if __name__ == "__main__":
    main()
