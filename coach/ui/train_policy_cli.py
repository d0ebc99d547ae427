"""`coach train-policy`: the learned `dl2` policy, warmed up by imitating a simulator policy, then trained by
reinforcement learning in the simulator. Parses options, shows a progress bar per phase, prints what was
measured; coach.simulator.learn_dl2 does the work."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from coach.ui.errors import fail, integer

MAX_SEED = 2**32 - 1


def _progress(quiet: bool):
    """(a rich Progress on stderr, the callback training calls), or (None, None) with --quiet."""
    if quiet:
        return None, None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[metrics]}"), console=Console(file=sys.stderr))
    tasks: dict[str, int] = {}

    def on_progress(phase: str, done: int, total: int, metrics) -> None:
        if phase not in tasks:
            tasks[phase] = progress.add_task(phase, total=total, metrics="")
            progress.start()
        shown = "  ".join(f"{key} {value:.3g}" for key, value in metrics.items() if isinstance(value, (int, float)))
        progress.update(tasks[phase], completed=done, total=total, metrics=shown)

    return progress, on_progress


def cmd_train_policy(args) -> int:
    from coach.simulator.learn_dl2 import train

    out = Path(args.out)
    if out.is_dir():
        return fail([f"--out: {args.out}: is a folder, expected the model file to write"])
    if not out.parent.is_dir():
        return fail([f"--out: {out.parent}: no such folder"])
    options = {name: getattr(args, name) for name in ("imitation_epochs", "rl_episodes", "episode_jobs",
                                                      "horizon_rounds") if getattr(args, name) is not None}
    progress, on_progress = _progress(args.quiet)
    try:
        report = train(args.imitate, args.workloads, out, args.seed, cluster=args.cluster,
                       traces=Path(args.traces) if args.traces else None, resume=args.resume,
                       on_progress=on_progress, **options)
    except ValueError as error:  # workloads, traces, settings, a checkpoint of other settings: one line each
        return fail([" ".join(str(error).split())])
    except OSError as error:
        return fail([f"--out: {args.out}: {error.strerror or error}"])
    finally:
        if progress is not None:
            progress.stop()
    print(json.dumps({key: value for key, value in report.as_dict().items() if key != "episode_rewards"}, indent=1))
    print(f"model: {report.out}")
    return 0


def add_commands(sub, subparser, epilog: str) -> None:
    from coach.simulator.policies import teachers

    train = subparser(sub, "train-policy", epilog=epilog,
                      help="train the learned dl2 policy: imitate a simulator policy, then reinforcement learning")
    train.add_argument("--imitate", required=True, choices=teachers(),
                       help="the elastic simulator policy whose decisions the network learns first (required, no "
                            "default)")
    train.add_argument("--workloads", required=True, nargs="+", metavar="CSV",
                       help="workload CSVs to train on (required, no default; keep others for evaluation)")
    train.add_argument("--out", required=True, metavar="FILE",
                       help="the model file to write (required, no default); its checkpoints go to FILE.ckpt/")
    train.add_argument("--seed", type=integer(0, MAX_SEED), default=0, metavar="N",
                       help=f"seed of everything random, 0 <= N <= {MAX_SEED} (default: %(default)s)")
    train.add_argument("--cluster", default="16x4", metavar="NxG|FILE",
                       help="the simulated cluster (default: %(default)s)")
    train.add_argument("--traces", metavar="DIR", help="folder of the applications' traces (default: as simulate)")
    train.add_argument("--imitation-epochs", type=integer(0, 10_000), metavar="N",
                       help="passes over the imitated decisions, 0 skips imitation (default: 20)")
    train.add_argument("--rl-episodes", type=integer(0, 1_000_000), metavar="N",
                       help="reinforcement-learning episodes, 0 skips them (default: 100)")
    train.add_argument("--episode-jobs", type=integer(1, 1_000_000), metavar="N",
                       help="consecutive arrivals of one training workload per episode (default: 40)")
    train.add_argument("--horizon-rounds", type=integer(1, 1_000_000), metavar="N",
                       help="scheduling rounds per episode at most (default: 120)")
    train.add_argument("--resume", action="store_true",
                       help="go on from FILE.ckpt/ when it holds a run of the same settings (default: start over)")
    train.add_argument("--quiet", action="store_true", help="no progress bars (default: off)")
    train.set_defaults(func=cmd_train_policy)
