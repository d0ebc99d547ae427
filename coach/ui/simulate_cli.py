"""`coach simulate`: a workload through a scheduling policy on a simulated GPU cluster, in seconds.

Parses options, shows progress, prints the statistics; coach.simulator.session does the work.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from coach.inputs.cluster import ClusterFileError
from coach.storage.folders import CannotWrite, writable_problem
from coach.ui.errors import fail, integer, number, path_text
from coach.ui.simulate_output import progress_bar, saying_how_long, settings_of, unique_dir, write_run

MAX_SEED = 2**32 - 1
MAX_INTERVAL_S = 86_400.0
MAX_BUDGET_FACTOR = 1000.0


def cmd_simulate(args) -> int:
    from coach.simulator.session import SimulationInputError, cluster_from, simulate
    from coach.simulator.workloads import WorkloadError
    from coach.simulator.apps import AppTraceError
    from coach.dl2 import ModelFileError

    results_dir = Path(args.results)
    problem = writable_problem(results_dir)
    if problem is not None:
        return fail([f"{args.results}: (--results): {problem}"])
    try:
        cluster = cluster_from(args.cluster)
    except SimulationInputError as error:
        return fail([str(error)])
    except ClusterFileError as error:
        return fail(error.lines)
    if len(args.policy) > 1 or len(args.workload) > 1:  # a sweep: every run, then one comparison
        from coach.ui.simulate_sweep import cmd_sweep

        return cmd_sweep(args, cluster)
    profile, policy = args.scheduler, args.policy[0]
    settings = settings_of(args, cluster, Path(args.workload[0]), policy)
    progress, on_round = progress_bar(args.quiet or not sys.stderr.isatty())  # bars on a terminal only
    on_round = saying_how_long(on_round, "coach simulate", lambda line: print(line, file=sys.stderr, flush=True))
    started = time.perf_counter()
    try:
        outcome, count = simulate(settings, on_round)
    except (WorkloadError, SimulationInputError, AppTraceError, ModelFileError) as error:
        return fail([str(error)])
    finally:
        if progress is not None and progress.live.is_started:  # stopping one never started prints an empty line
            progress.stop()
    elapsed_s = time.perf_counter() - started
    run_dir = unique_dir(results_dir, settings.run_id)
    try:
        summary = write_run(run_dir, outcome, settings)
    except CannotWrite as error:  # e.g. the disk filled up; earlier runs' folders are untouched (a new one was used)
        return fail([f"{run_dir}: (--results): {error}; nothing was written"])
    if args.quiet:
        print(run_dir)
        return 0
    stats = summary["stats"]
    hours = lambda s: "-" if s is None else f"{s / 3600:.2f} h"  # noqa: E731
    print(f"{count} jobs, policy {policy}, scheduler {profile}, cluster {cluster.name} "
          f"({cluster.total_slots} GPUs): {stats['completed']} completed in {elapsed_s:.1f} s "
          f"({count / max(elapsed_s, 1e-9):.0f} jobs/s, {stats['events'] / max(elapsed_s, 1e-9):.0f} events/s)")
    unplaced = sorted(str(job["stop_reason"]) for job in summary["jobs"].values()
                      if str(job["stop_reason"]).startswith("unschedulable"))
    if unplaced:  # a result, not an error (exit 0): but one a reader of "0 completed" should not have to dig for
        print(f"{len(unplaced)} jobs could not be placed ({unplaced[0]}{'; ...' if len(set(unplaced)) > 1 else ''}); "
              f"summary.json gives each its reason")
    print(f"avg JCT {hours(stats['avg_jct_s'])}, median {hours(stats['median_jct_s'])}, "
          f"p99 {hours(stats['p99_jct_s'])}, makespan {hours(stats['makespan_s'])}, "
          f"utilization {stats['utilization'] * 100 if stats['utilization'] is not None else 0:.1f}%")
    print(f"deadlocked jobs {stats['deadlocked_jobs']}, GPU-hours held by jobs that could not run "
          f"{stats['held_gpu_hours']:.2f}, restarts {stats['restarts']} ({stats['restarts_per_job']} per job, "
          f"{stats['restart_gpu_hours']:.2f} GPU-hours in restart delays, {stats['thrash_restarts']} back to the "
          f"allocation before)")
    print(f"results: {run_dir}")
    return 0


def _policy_list(text: str) -> list[str]:
    """`a,b,c` -> the policies, each known, none twice."""
    names = [name.strip() for name in text.split(",")]
    known = _policy_names()
    for name in names:
        if name not in known:
            raise argparse.ArgumentTypeError(f"unknown policy {name!r}; known: {', '.join(known)}")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"a policy named twice in {text!r}")
    return names


def _policy_names() -> list[str]:
    from coach.simulator.policies import CLUSTER_POLICIES

    return list(CLUSTER_POLICIES)


def add_commands(sub, subparser, epilog: str) -> None:
    from scheduler_fork import PROFILES

    simulate = subparser(sub, "simulate", epilog=epilog,
                         help="simulate a workload of GPU jobs under a scheduling policy (Pollux workloads, Philly)")
    simulate.add_argument("workload", metavar="WORKLOAD", nargs="+", type=path_text,
                          help="a workload CSV (name,time,application,num_replicas,batch_size) or the Philly trace "
                               "(timestamp,duration,num_gpus,gpu_time,cluster)")
    simulate.add_argument("--cluster", default="16x4", metavar="NxG|FILE", type=path_text,
                          help="N nodes of G GPUs, or a cluster file whose slots are GPUs (default: %(default)s)")
    simulate.add_argument("--policy", required=True, type=_policy_list, metavar="POLICY[,POLICY...]",
                          help="scheduling policy, or several separated by commas (a sweep: one comparison of all "
                               "runs); an unknown name is answered with the list (required, no default)")
    simulate.add_argument("--scheduler", choices=sorted(PROFILES), default="gang-pack",
                          help="scheduler_fork profile that places the replicas; gang-pack puts a job on as few nodes "
                               "as it needs, as the Pollux artifact (default: %(default)s)")
    simulate.add_argument("--interval", type=number(1.0, MAX_INTERVAL_S), default=60.0, metavar="S",
                          help=f"seconds between scheduling rounds, 1 <= S <= {MAX_INTERVAL_S:g} (default: %(default)g)")
    simulate.add_argument("--restart-s", type=number(0.0, MAX_INTERVAL_S), default=30.0, metavar="S",
                          help="seconds a (re)started job loads its checkpoint before training (default: %(default)g, "
                               "the Pollux artifact's)")
    simulate.add_argument("--seed", type=integer(0, MAX_SEED), default=0, metavar="N",
                          help=f"seed (ties, the Philly application mapping), 0 <= N <= {MAX_SEED} (default: %(default)s)")
    simulate.add_argument("--traces", metavar="DIR", type=path_text,
                          help="folder of the applications' traces (<app>/placements.csv...) (default: the workload's "
                               "folder, or traces/ beside its folder)")
    simulate.add_argument("--budget-factor", type=number(1.0, MAX_BUDGET_FACTOR), metavar="F",
                          help=f"give every job a budget of F times its cost at its own request, 1 <= F <= "
                               f"{MAX_BUDGET_FACTOR:g}; no job spends more (default: no budget)")
    simulate.add_argument("--results", default="results", metavar="DIR", type=path_text,
                          help="folder for results; the run goes to DIR/<run id>/ (default: %(default)s)")
    simulate.add_argument("--quiet", action="store_true", help="print only the results folder (default: off)")
    simulate.set_defaults(func=cmd_simulate)
