"""The `coach` command. Parses arguments, reads files, prints; the work happens in coach.app.run."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from coach.files.cluster import ClusterFileError, load_cluster
from coach.files.jobs import JobFileError, load_jobs
from coach.ui.errors import BadInput, fail as _fail
from scheduler_fork import PROFILES


def cmd_validate(args) -> int:
    try:
        specs = load_jobs(args.files)
    except JobFileError as error:
        return _fail(error.lines)
    for spec in specs:
        counts = f"{spec.workers} workers, {spec.servers} servers" if spec.fixed_counts else "dynamic"
        print(f"{spec.source}: ok: job '{spec.name}' ({counts}, budget {spec.budget:g})")
    return 0


def _inputs(job_files, cluster_file):
    """Validated job specs and cluster, or BadInput naming every problem (job files first)."""
    try:
        specs = load_jobs(job_files)
    except JobFileError as error:
        raise BadInput(error.lines) from None
    try:
        return specs, load_cluster(cluster_file)
    except ClusterFileError as error:
        raise BadInput(error.lines) from None


def cmd_run(args) -> int:
    view = "quiet" if args.quiet else "plain" if args.plain or not sys.stdout.isatty() else "live"
    if args.resume:
        if args.files:
            return _fail(["--resume: give the run folder only, not job files (its manifest has the jobs)"])
        from coach.app.run import ResumeError, resume_run

        try:
            report = resume_run(Path(args.resume), view=view)
        except ResumeError as error:
            return _fail([str(error)])
        print(f"results: {report.run_dir}")
        return report.exit_code
    if not args.files:
        return _fail(["coach run: give job files, or --resume RUN_DIR"])
    specs, cluster = _inputs(args.files, args.cluster)
    view = "quiet" if args.quiet else "plain" if args.plain or not sys.stdout.isatty() else "live"
    from coach.app.run import run_jobs  # imported here so `coach validate` stays fast

    if args.placement_timeout <= 0:
        return _fail([f"--placement-timeout: must be > 0, got {args.placement_timeout:g}"])
    scheduler = args.scheduler or cluster.scheduler or "gang"
    from coach.policy.run_policy import POLICIES

    refused = [f"{spec.source}: {problem}" for spec in specs
               if (problem := POLICIES[args.policy].check(spec)) is not None]
    if refused:
        return _fail([f"{line} (--policy {args.policy})" for line in refused])
    report = run_jobs(specs, cluster, Path(args.results), view=view, scheduler=scheduler,
                      placement_timeout_s=args.placement_timeout, policy=args.policy)
    print(f"results: {report.run_dir}")
    return report.exit_code


def cmd_plan(args) -> int:
    """Print, as JSON, the fit and the counts Coach would choose next for a job, from its log."""
    specs, cluster = _inputs([args.job], args.cluster)
    spec = specs[0]
    from coach.policy.history import history_from_records
    from coach.policy.run_policy import POLICIES, ClusterView, JobView, Wait
    from coach.storage.results import LogFileError, read_log_checked

    try:
        records = [r for r in read_log_checked(Path(args.history)) if r.get("job") == spec.name]
    except LogFileError as error:
        return _fail([str(error)])
    speed_records = [r for r in records if r.get("phase") in ("calibration", "training")]
    if not speed_records:
        return _fail([f"{args.history}: (file): no calibration or training epochs of job '{spec.name}'"])
    spent = max((float(r.get("cumulative_cost") or 0.0) for r in records), default=0.0)
    budget_left = spec.budget - spent if args.budget_left is None else args.budget_left
    free_slots = cluster.total_slots if args.free_slots is None else args.free_slots
    if free_slots < 0:
        return _fail([f"--free-slots: must be >= 0, got {free_slots}"])
    price = max(node.price_per_slot_s for node in cluster.nodes)
    history = history_from_records(records)
    history = replace(history, spent=spec.budget - budget_left)  # what --budget-left says is left
    view = JobView(spec, history, held_slots=0, asking=True)
    decided = POLICIES["coach"].decide(ClusterView(free_slots, price), [view], time.time())[spec.name]
    out = {"job": spec.name, "epochs_logged": len(records)}
    if isinstance(decided, Wait):
        out.update({"affordable": False, "wait": decided.reason})
    elif decided.details:
        out.update({"affordable": decided.affordable, **decided.details})
    else:  # the job file fixes the counts
        out.update({"affordable": decided.affordable, "workers": decided.workers, "servers": decided.servers,
                    "reason": "the job file fixes workers and servers"})
    print(json.dumps(out, indent=2))
    return 0


def cmd_bench_scheduler(args) -> int:
    """Pods placed per second by a scheduler_fork profile on a synthetic cluster."""
    from scheduler_fork.bench import run_bench

    if args.nodes < 1 or args.pods < 1:
        return _fail(["--nodes and --pods: must be >= 1"])
    result = run_bench(args.nodes, args.pods, args.scheduler, seed=args.seed, slots_per_node=args.slots_per_node)
    print(json.dumps({"scheduler": args.scheduler, "nodes": args.nodes, "pods": args.pods,
                      "pods_placed": result.pods_placed, "seconds": round(result.seconds, 4),
                      "pods_per_s": round(result.pods_per_s, 1)}))
    return 0


def _policies():
    from coach.policy.run_policy import POLICIES

    return POLICIES


def _default_policy() -> str:
    from coach.policy.run_policy import DEFAULT_POLICY

    return DEFAULT_POLICY


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="coach", description="Serverless job handler for distributed DL training")
    sub = parser.add_subparsers(dest="command", required=True)

    validate = sub.add_parser("validate", help="check job files without running anything")
    validate.add_argument("files", nargs="+")
    validate.set_defaults(func=cmd_validate)

    run = sub.add_parser("run", help="train every job concurrently on the embedded platform")
    run.add_argument("files", nargs="*")
    run.add_argument("--resume", metavar="RUN_DIR",
                     help="continue the unfinished jobs of a run from their last epoch and checkpoint")
    run.add_argument("--cluster", help="cluster file (default: 3 nodes x 4 slots, 0.0001 per slot-second)")
    run.add_argument("--results", default="results", help="folder for run folders (default: results)")
    run.add_argument("--scheduler", choices=sorted(PROFILES),
                     help="scheduler_fork profile placing every function (default: the cluster file's, else gang)")
    run.add_argument("--placement-timeout", type=float, default=30.0, metavar="S",
                     help="seconds a job waits for its quorum before it gives its slots back and requeues")
    run.add_argument("--policy", choices=sorted(_policies()), default=_default_policy(),
                     help="run-level policy deciding every job's workers and servers (default: %(default)s)")
    shown = run.add_mutually_exclusive_group()
    shown.add_argument("--quiet", action="store_true", help="print only the results folder")
    shown.add_argument("--plain", action="store_true", help="plain log lines instead of the live table")
    run.set_defaults(func=cmd_run)

    planner = sub.add_parser("plan", help="print the fit and the counts Coach would choose next, as JSON")
    planner.add_argument("job")
    planner.add_argument("--history", required=True, help="the job's results log (JSON lines)")
    planner.add_argument("--free-slots", type=int, help="slots the decision may use (default: the whole cluster)")
    planner.add_argument("--budget-left", type=float, help="money left (default: budget - last cumulative_cost)")
    planner.add_argument("--cluster", help="cluster file for prices and size (default: the thesis cluster)")
    planner.set_defaults(func=cmd_plan)

    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="what", required=True)
    bench_scheduler = bench.add_parser("scheduler", help="pods placed per second by a scheduler profile")
    bench_scheduler.add_argument("--nodes", type=int, default=7500)
    bench_scheduler.add_argument("--pods", type=int, default=20000)
    bench_scheduler.add_argument("--slots-per-node", type=int, default=4)
    bench_scheduler.add_argument("--scheduler", choices=sorted(PROFILES), default="gang")
    bench_scheduler.add_argument("--seed", type=int, default=0)
    bench_scheduler.set_defaults(func=cmd_bench_scheduler)

    from coach.ui.analysis_cli import add_commands

    add_commands(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BadInput as error:
        return _fail(error.lines)


if __name__ == "__main__":
    sys.exit(main())
