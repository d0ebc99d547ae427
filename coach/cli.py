"""The `coach` command. Parses arguments, reads files, prints; the work happens in coach.run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coach.cluster import ClusterFileError, load_cluster
from coach.jobs import JobFileError, load_jobs
from coach.placement import PLACERS
from coach.progress import VIEWS

EXIT_BAD_INPUT = 2


def _fail(lines: list[str]) -> int:
    for line in lines:
        print(line, file=sys.stderr)
    return EXIT_BAD_INPUT


def cmd_validate(args) -> int:
    try:
        specs = load_jobs(args.files)
    except JobFileError as error:
        return _fail(error.lines)
    for spec in specs:
        counts = f"{spec.workers} workers, {spec.servers} servers" if spec.is_static else "dynamic"
        print(f"{spec.source}: ok: job '{spec.name}' ({counts}, budget {spec.budget:g})")
    return 0


def cmd_run(args) -> int:
    try:
        specs = load_jobs(args.files)
    except JobFileError as error:
        return _fail(error.lines)
    dynamic = [f"{s.source}: workers: required for now (dynamic selection of workers and servers is not "
               "available yet); set workers and servers" for s in specs if not s.is_static]
    if dynamic:
        return _fail(dynamic)
    try:
        cluster = load_cluster(args.cluster)
    except ClusterFileError as error:
        return _fail(error.lines)
    view = "quiet" if args.quiet else "plain" if args.plain or not sys.stdout.isatty() else "live"
    from coach.run import run_jobs  # imported here so `coach validate` stays fast

    report = run_jobs(specs, cluster, Path(args.results), view=view, placer=args.placer)
    print(f"results: {report.run_dir}")
    return report.exit_code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="coach", description="Serverless job handler for distributed DL training")
    sub = parser.add_subparsers(dest="command", required=True)

    validate = sub.add_parser("validate", help="check job files without running anything")
    validate.add_argument("files", nargs="+")
    validate.set_defaults(func=cmd_validate)

    run = sub.add_parser("run", help="train every job concurrently on the embedded platform")
    run.add_argument("files", nargs="+")
    run.add_argument("--cluster", help="cluster file (default: 3 nodes x 4 slots, 0.0001 per slot-second)")
    run.add_argument("--results", default="results", help="folder for run folders (default: results)")
    run.add_argument("--placer", default="first-fit", choices=sorted(PLACERS))
    shown = run.add_mutually_exclusive_group()
    shown.add_argument("--quiet", action="store_true", help="print only the results folder")
    shown.add_argument("--plain", action="store_true", help="plain log lines instead of the live table")
    run.set_defaults(func=cmd_run)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
