"""`coach train-policy`: the learned `dl2` networks, warmed up by imitating an existing policy, then trained by
reinforcement learning. `--level cluster` (default): the cluster simulator's GPU jobs, on workload files
(coach.dl2.learn_cluster); `--level run`: Coach's own jobs, workers and servers, in virtual-time runs of its
lifecycle (coach.dl2.learn_run). Parses options, shows a progress bar per phase, prints what was measured."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from coach.ui.errors import LazyChoices, fail, integer

MAX_SEED = 2**32 - 1


def _progress(quiet: bool):
    """(a rich Progress on stderr, the callback training calls), or (None, None) with --quiet."""
    if quiet:
        return None, None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[metrics]}"), console=Console(file=sys.stderr))
    tasks: dict[str, TaskID] = {}

    def on_progress(phase: str, done: int, total: int, metrics) -> None:
        if phase not in tasks:
            tasks[phase] = progress.add_task(phase, total=total, metrics="")
            progress.start()
        shown = "  ".join(f"{key} {value:.3g}" for key, value in metrics.items() if isinstance(value, (int, float)))
        progress.update(tasks[phase], completed=done, total=total, metrics=shown)

    return progress, on_progress


_CLUSTER_ONLY = ("workloads", "cluster", "traces", "horizon_rounds")
_RUN_ONLY = ("reward", "teacher_episodes", "eval_episodes")


def _train_cluster(args, out: Path, on_progress):
    from coach.dl2.learn_cluster import train

    if not args.workloads:
        raise ValueError("--workloads: required with --level cluster (workload CSVs to train on)")
    for name in _RUN_ONLY:
        if getattr(args, name) is not None:
            raise ValueError(f"--{name.replace('_', '-')}: only with --level run")
    options = {name: getattr(args, name) for name in ("imitation_epochs", "rl_episodes", "episode_jobs",
                                                      "horizon_rounds") if getattr(args, name) is not None}
    return train(args.imitate, args.workloads, out, args.seed, cluster=args.cluster or "16x4",
                 traces=Path(args.traces) if args.traces else None, resume=args.resume, on_progress=on_progress,
                 **options)


def _train_run(args, out: Path, on_progress):
    from coach.dl2.learn_run import train_counts

    given = [name for name in _CLUSTER_ONLY if getattr(args, name) is not None]
    if given:
        raise ValueError(f"--{given[0].replace('_', '-')}: only with --level cluster (run-level training makes "
                         f"its own jobs)")
    options = {name: getattr(args, name) for name in ("imitation_epochs", "rl_episodes", "episode_jobs", *_RUN_ONLY)
               if getattr(args, name) is not None}
    return train_counts(out, args.seed, imitate=args.imitate, resume=args.resume, on_progress=on_progress,
                        **options)


#: what `--level` trains: the network of the cluster simulator's GPU jobs, or of Coach's own jobs
TRAINERS = {"cluster": _train_cluster, "run": _train_run}


def cmd_train_policy(args) -> int:
    from coach.ui.outputs import output_file_problem

    out = Path(args.out)
    problem = output_file_problem(out)
    if problem is not None:  # before minutes of training, not after
        return fail([f"--out: {args.out}: {problem}"])
    progress, on_progress = _progress(args.quiet or not sys.stderr.isatty())  # bars on a terminal only
    try:
        if args.resume:  # a broken checkpoint is refused before the trainers spend seconds importing MXNet
            from coach.dl2.checkpoint import checkpoint_dir, stored_state

            stored_state(checkpoint_dir(out))
        report = TRAINERS[args.level](args, out, on_progress)
    except ValueError as error:  # workloads, traces, settings, a checkpoint of other settings: one line each
        return fail([" ".join(str(error).split())])
    except OSError as error:
        return fail([f"--out: {args.out}: {error.strerror or error}"])
    finally:
        if progress is not None and progress.live.is_started:  # stopping one never started prints an empty line
            progress.stop()
    print(json.dumps({key: value for key, value in report.as_dict().items() if key != "episode_rewards"}, indent=1))
    print(f"model: {report.out}")
    return 0


def _teacher_names() -> set[str]:
    from coach.dl2.run_policy import RUN_TEACHERS
    from coach.simulator.policies import teachers

    return set(teachers()) | set(RUN_TEACHERS)


def _reward_names() -> list[str]:
    from coach.dl2.run_policy import REWARD_NAMES

    return list(REWARD_NAMES)


def add_commands(sub, subparser, epilog: str) -> None:

    train = subparser(sub, "train-policy", epilog=epilog,
                      help="train the learned dl2 policy: imitate an existing policy, then reinforcement learning")
    train.add_argument("--level", choices=sorted(TRAINERS), default="cluster",
                       help="cluster: the simulator's GPU jobs (`coach simulate --policy dl2`); run: Coach's own "
                            "jobs, workers and servers (`coach run --policy dl2`) (default: %(default)s)")
    train.add_argument("--imitate", required=True, choices=LazyChoices(_teacher_names), metavar="POLICY",
                       help="the policy whose decisions the network learns first (%(choices)s): an elastic simulator "
                            "policy for "
                            "--level cluster, coach for --level run (required, no default)")
    train.add_argument("--workloads", nargs="+", metavar="CSV",
                       help="workload CSVs to train on (--level cluster only, and required there, no default; keep "
                            "others for evaluation)")
    train.add_argument("--out", required=True, metavar="FILE",
                       help="the model file to write (required, no default); its checkpoints go to FILE.ckpt/")
    train.add_argument("--seed", type=integer(0, MAX_SEED), default=0, metavar="N",
                       help=f"seed of everything random, 0 <= N <= {MAX_SEED} (default: %(default)s)")
    train.add_argument("--cluster", metavar="NxG|FILE",
                       help="the simulated cluster (--level cluster only; default: 16x4)")
    train.add_argument("--traces", metavar="DIR",
                       help="folder of the applications' traces (--level cluster only; default: as simulate)")
    train.add_argument("--imitation-epochs", type=integer(0, 10_000), metavar="N",
                       help="passes over the imitated decisions, 0 skips imitation (default: 20)")
    train.add_argument("--rl-episodes", type=integer(0, 1_000_000), metavar="N",
                       help="reinforcement-learning episodes, 0 skips them (default: 100)")
    train.add_argument("--episode-jobs", type=integer(1, 1_000_000), metavar="N",
                       help="jobs per episode: consecutive arrivals of one workload (--level cluster, default: 40), "
                            "at most this many jobs started together (--level run, at least 4, default: 10)")
    train.add_argument("--horizon-rounds", type=integer(1, 1_000_000), metavar="N",
                       help="scheduling rounds per episode at most (--level cluster only; default: 120)")
    train.add_argument("--reward", choices=LazyChoices(_reward_names), metavar="REWARD",
                       help="--level run only (%(choices)s): a round's reward, the jobs' epoch progress until the next round "
                            "(DL2's) or minus the job-minutes spent unfinished (default: progress)")
    train.add_argument("--teacher-episodes", type=integer(1, 1_000_000), metavar="N",
                       help="--level run only: episodes the imitated policy decides (default: 200)")
    train.add_argument("--eval-episodes", type=integer(1, 1_000_000), metavar="N",
                       help="--level run only: fixed episodes the teacher and the networks are measured on "
                            "(default: 20)")
    train.add_argument("--resume", action="store_true",
                       help="go on from FILE.ckpt/ when it holds a run of the same settings (default: start over)")
    train.add_argument("--quiet", action="store_true", help="no progress bars (default: off)")
    train.set_defaults(func=cmd_train_policy)
