"""`coach train-policy`: the learned `dl2` networks, warmed up by imitating an existing policy, then trained by
reinforcement learning. `--level cluster` (default): the cluster simulator's GPU jobs, on workload files
(coach.dl2.learn_cluster); `--level run`: Coach's own jobs, workers and servers, in virtual-time runs of its
lifecycle (coach.dl2.learn_run). Parses options, shows a progress bar per phase, prints what was measured."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from coach.dl2 import RUN_MIN_JOBS
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
    if not args.workloads:
        raise ValueError("--workloads: required with --level cluster (workload CSVs to train on)")
    for name in _RUN_ONLY:
        if getattr(args, name) is not None:
            raise ValueError(f"--{name.replace('_', '-')}: only with --level run")
    from coach.dl2.learn_cluster import train  # after the checks: the import takes seconds

    options = {name: getattr(args, name) for name in ("imitation_epochs", "rl_episodes", "episode_jobs",
                                                      "horizon_rounds") if getattr(args, name) is not None}
    return train(args.imitate, args.workloads, out, args.seed, cluster=args.cluster or "16x4",
                 traces=Path(args.traces) if args.traces else None, resume=args.resume, on_progress=on_progress,
                 **options)


def _train_run(args, out: Path, on_progress):
    given = [name for name in _CLUSTER_ONLY if getattr(args, name) is not None]
    if given:
        raise ValueError(f"--{given[0].replace('_', '-')}: only with --level cluster (run-level training makes "
                         f"its own jobs)")
    if args.episode_jobs is not None and args.episode_jobs < RUN_MIN_JOBS:  # argparse's bound is --level cluster's
        raise ValueError(f"--episode-jobs: must be >= {RUN_MIN_JOBS} with --level run (an episode starts at least "
                         f"{RUN_MIN_JOBS} jobs), got {args.episode_jobs}")
    from coach.dl2.learn_run import train_counts  # after the checks: the import takes seconds

    options = {name: getattr(args, name) for name in ("imitation_epochs", "rl_episodes", "episode_jobs", *_RUN_ONLY)
               if getattr(args, name) is not None}
    return train_counts(out, args.seed, imitate=args.imitate, resume=args.resume, on_progress=on_progress,
                        **options)


#: what `--level` trains: the network of the cluster simulator's GPU jobs, or of Coach's own jobs
TRAINERS = {"cluster": _train_cluster, "run": _train_run}


def _read_by(path: Path, args) -> str | None:
    """The option naming what the training reads that `path` is (a workload, the cluster file, a trace), or None."""
    from coach.ui.outputs import same_file

    workloads = [Path(name) for name in args.workloads or ()]
    if any(same_file(path, workload) for workload in workloads):
        return "--workloads"
    if args.cluster and same_file(path, Path(args.cluster)):
        return "--cluster"
    traces = [Path(args.traces)] if args.traces else [folder for workload in workloads
                                                       for folder in (workload.parent, workload.parent.parent / "traces")]
    if (path.parent / "placements.csv").is_file() and any(same_file(path.parent.parent, t) for t in traces):
        return "--traces" if args.traces else "the applications' traces"
    return None


def _out_problem(args, out: Path) -> str | None:
    """Why the files --out names cannot be written, found before minutes of training: the model, its report and
    imitation twin (written together at the end) and its checkpoint folder. Each must be writable, and none may be a
    file the training reads or another of them. An existing set is replaced whole (retraining on purpose)."""
    from coach.dl2 import imitation_model, report_file
    from coach.dl2.checkpoint import checkpoint_dir
    from coach.ui.outputs import output_file_problem

    problem = output_file_problem(out)
    if problem is not None:
        return f"{args.out}: {problem}"
    report, twin, folder = report_file(out), imitation_model(out), checkpoint_dir(out)
    if report == out:
        return f"{args.out}: its report, {report.name}, would be written over it; name the model FILE.params"
    if os.path.lexists(folder) and not folder.is_dir():
        return f"{folder}: is not a folder, expected the checkpoint folder of --out (move it, or choose another --out)"
    for path in (out, report, twin):
        problem = output_file_problem(path)
        if problem is None and (read_by := _read_by(path, args)) is not None:
            problem = f"is read by this training ({read_by}), so it cannot be written; choose another --out"
        if problem is None and os.path.lexists(path):
            problem = _foreign(path, is_report=path == report)
        if problem is not None:
            return f"{path}: {problem}"
    return None


def _foreign(path: Path, is_report: bool) -> str | None:
    """Why an existing file where the set goes is not one a training wrote (then it is never replaced), or None:
    a model and its twin are MXNet parameter files, a report a JSON object with the training's out and settings."""
    from coach.dl2 import ModelFileError
    from coach.dl2.params_file import read_params
    from coach.inputs.limits import MAX_STATE_BYTES, FileTooLarge, NotRegularFile, read_capped

    try:
        if is_report:
            report = json.loads(read_capped(path, MAX_STATE_BYTES))
            if isinstance(report, dict) and {"out", "settings"} <= set(report):
                return None
        else:
            read_params(path)
            return None
    except (ModelFileError, FileTooLarge, NotRegularFile, OSError, ValueError, RecursionError):
        pass
    what = "the report of a training" if is_report else "a DL2 model"
    return f"exists and is not {what}, so it is not replaced; move it, or choose another --out"


def _checkpoint_problem(args, out: Path) -> str | None:
    """Why a file of the checkpoint folder cannot be written (a folder or a FIFO where a file goes, a file the
    training reads), or None."""
    from coach.dl2.checkpoint import CHECKPOINT_FILES, checkpoint_dir
    from coach.ui.outputs import output_file_problem

    folder = checkpoint_dir(out)
    for path in (folder / name for name in CHECKPOINT_FILES) if folder.is_dir() else ():
        problem = output_file_problem(path)
        if problem is None and (read_by := _read_by(path, args)) is not None:
            problem = f"is read by this training ({read_by}), so it cannot be written; choose another --out"
        if problem is not None:
            return f"{path}: {problem}"
    return None


def cmd_train_policy(args) -> int:
    out = Path(args.out)
    problem = _out_problem(args, out)
    if problem is not None:  # before minutes of training, not after
        return fail([f"--out: {problem}"])
    progress, on_progress = _progress(args.quiet or not sys.stderr.isatty())  # bars on a terminal only
    try:
        if args.resume:  # a broken checkpoint is refused before the trainers spend seconds importing MXNet
            from coach.dl2.checkpoint import checkpoint_dir, stored_state

            stored_state(checkpoint_dir(out))
        problem = _checkpoint_problem(args, out)  # after a resumed checkpoint's own checks, which name its files' kinds
        if problem is not None:
            return fail([f"--out: {problem}"])
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
                       help="the model file to write (required, no default), with STEM.json (what was measured) and "
                            "STEM-imitation.params (the network before RL) beside it, written together at the end: "
                            "an existing set is replaced whole; checkpoints go to FILE.ckpt/")
    train.add_argument("--seed", type=integer(0, MAX_SEED), default=0, metavar="N",
                       help=f"seed of everything random, 0 <= N <= {MAX_SEED} (default: %(default)s)")
    train.add_argument("--cluster", metavar="NxG|FILE",
                       help="the simulated cluster (--level cluster only; default: 16x4)")
    train.add_argument("--traces", metavar="DIR",
                       help="folder of the applications' traces (--level cluster only; default: as simulate)")
    train.add_argument("--imitation-epochs", type=integer(0, 10_000), metavar="N",
                       help="passes over the imitated decisions, 0 <= N <= 10000, 0 skips imitation (default: 20)")
    train.add_argument("--rl-episodes", type=integer(0, 1_000_000), metavar="N",
                       help="reinforcement-learning episodes, 0 <= N <= 1000000, 0 skips them (default: 100)")
    train.add_argument("--episode-jobs", type=integer(1, 1_000_000), metavar="N",
                       help="jobs per episode: consecutive arrivals of one workload (--level cluster: 1 <= N <= "
                            "1000000, default: 40), at most this many jobs started together (--level run: "
                            f"{RUN_MIN_JOBS} <= N <= 1000000, default: 10)")
    train.add_argument("--horizon-rounds", type=integer(1, 1_000_000), metavar="N",
                       help="scheduling rounds per episode at most, 1 <= N <= 1000000 (--level cluster only; "
                            "default: 120)")
    train.add_argument("--reward", choices=LazyChoices(_reward_names), metavar="REWARD",
                       help="--level run only (%(choices)s): a round's reward, the jobs' epoch progress until the next round "
                            "(DL2's) or minus the job-minutes spent unfinished (default: progress)")
    train.add_argument("--teacher-episodes", type=integer(1, 1_000_000), metavar="N",
                       help="--level run only: episodes the imitated policy decides, 1 <= N <= 1000000 (default: "
                            "200)")
    train.add_argument("--eval-episodes", type=integer(1, 1_000_000), metavar="N",
                       help="--level run only: fixed episodes the teacher and the networks are measured on, "
                            "1 <= N <= 1000000 (default: 20)")
    train.add_argument("--resume", action="store_true",
                       help="go on from FILE.ckpt/ when it holds a run of the same settings (default: start over)")
    train.add_argument("--quiet", action="store_true", help="no progress bars (default: off)")
    train.set_defaults(func=cmd_train_policy)
