"""The `coach` command. Parses arguments, reads files, prints; the work happens in coach.app.run.

Bad input never reaches the work: every option has a bounded, finite type (coach.ui.errors), every file is checked
by coach.inputs before it is used, and whatever a user's file still manages to raise on the way (an OSError, a
UnicodeDecodeError) becomes one line and exit code 2 in `main`, never a traceback.
"""

# ruff: noqa: E402 (the imports after the start-up signal handlers, on purpose)
from __future__ import annotations

import os
import signal
import sys


def _interrupted_at_start(signum, frame) -> None:  # noqa: ARG001 (a signal handler's signature)
    """Ctrl-C or SIGTERM while the command's modules load: nothing has started or been written, so leave at once,
    as `main` would (one line, exit code 130)."""
    os.write(2, b"coach: interrupted\n")
    os._exit(130)


# From here until `main` takes over, a signal ends the process with one line, not a traceback from an import (the
# window before this line is the interpreter's start-up and `import coach`: docs/commands.md, "Signals"). Only
# when this process is the `coach` command: a test importing the module keeps its own handlers.
_STANDALONE = __name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "") == "coach"
if _STANDALONE:
    for _sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(_sig) is not signal.SIG_IGN:  # an ignored signal stays ignored (nohup, `cmd &`)
            signal.signal(_sig, _interrupted_at_start)

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from coach.domain.kube import DEFAULT_IMAGE
from coach.inputs.jobs import MAX_MONEY
from coach.inputs.limits import one_line, short
from coach.policy import DEFAULT_POLICY
from coach.ui.errors import (EXIT_INTERRUPTED, EXIT_MISSING_EXTRA, BadInput, LazyChoices, Parser, fail as _fail, integer,
                             number, path_text)
from coach.ui.run_setup import check_store, inputs, results_folder, run_site, say, say_cluster, stdout_closed
from scheduler_fork import PROFILES

#: Bounds of the numeric options (docs/commands.md, "Numeric options", lists them).
MAX_PLACEMENT_TIMEOUT_S = 7 * 24 * 3600  # a week
MAX_FREE_SLOTS = 100_000 * 100_000  # the largest cluster: 100,000 nodes x 100,000 slots
MAX_BENCH_NODES = 100_000
MAX_BENCH_PODS = 1_000_000
# `coach bench kube-scheduler` creates every node and pod on a real apiserver and binds them, a few hundred pods per
# second per scheduler on 2 cores: these bounds, its defaults, finish in about a minute; twice them took over nine
# minutes on a loaded machine (the figures are in benchmarks/results.md)
MAX_KUBE_BENCH_NODES = 5_000
MAX_KUBE_BENCH_PODS = 10_000
MAX_SLOTS_PER_NODE = 100_000
MAX_SEED = 2**32 - 1
MAX_URL_CHARS = 2000  # the longest --checkpoints URL

EXIT_CODES = """\
exit codes:
  0    every job ended by target_loss, max_epochs or budget (or the command did what it was asked)
  1    a job failed (after its retries), diverged, or could not be placed; the other jobs still ran
  2    bad input: one line per problem on stderr; nothing was started or written
  3    this installation lacks an optional extra the command needs (pip install 'coach[run]')
  130  interrupted by Ctrl-C or SIGTERM
"""


def cmd_validate(args) -> int:
    specs, cluster = inputs(args.files, args.cluster)
    from coach.estimates.cost import MIN_EPOCH_S, cost_floor

    price = max(node.price_per_slot_s for node in cluster.nodes)
    for spec in specs:
        counts = f"{spec.workers} workers, {spec.servers} servers" if spec.fixed_counts else "dynamic"
        print(f"{spec.source}: ok: job '{spec.name}' ({counts}, budget {spec.budget:g})")
        first = spec.fixed_counts or (1, 1)  # a dynamic job's first calibration step runs at (1,1)
        floor = cost_floor(*first, price)
        if spec.budget < floor:
            print(f"{spec.source}: budget: warning: {spec.budget:g} is below the least one epoch at "
                  f"{first[0]}/{first[1]} can cost ({first[0] + first[1] + 1} slots x {MIN_EPOCH_S:g} s x "
                  f"{price:g} per slot-second = {floor:.3g}); the job will stop with `budget` before training",
                  file=sys.stderr)
    return 0


def _check_resume(run_dir: Path) -> dict:
    """The run's manifest, or BadInput naming the first problems of the run folder (coach.app.run)."""
    from coach.app.run import RunFolderError, check_run_folder

    try:
        return check_run_folder(run_dir)
    except RunFolderError as error:
        raise BadInput(error.lines) from None


def store_url(text: str) -> str:
    """An argparse `type=` for `--checkpoints`: a URL as given, a plain folder path as its absolute file:// URL."""
    if not text or len(text) > MAX_URL_CHARS or "\0" in text:
        raise argparse.ArgumentTypeError(f"expected s3://bucket/prefix or a folder, got {short(text)}")
    return text if "://" in text else Path(text).resolve().as_uri()


def http_url(text: str) -> str:
    """An argparse `type=` for `--dashboard`: an http(s) URL with a host."""
    from urllib.parse import urlparse

    parsed = urlparse(text) if len(text) <= MAX_URL_CHARS else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise argparse.ArgumentTypeError(f"expected http://host:port, got {short(text)}")
    return text.rstrip("/")


def dns_label(text: str) -> str:
    """An argparse `type=` for `--namespace`: a DNS-1123 label, as Kubernetes names namespaces."""
    import re

    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", text):
        raise argparse.ArgumentTypeError(f"expected a DNS-1123 label (a-z, 0-9, '-'; at most 63), got {short(text)}")
    return text


def _platforms() -> list[str]:
    from coach.app.compose import PLATFORMS

    return list(PLATFORMS)


def cmd_run(args) -> int:
    view = "quiet" if args.quiet else "plain" if args.plain or not sys.stdout.isatty() else "live"
    if args.resume:
        return _resume(args, view)
    if not args.files:
        return _fail(["coach run: give job files, or --resume RUN_DIR"])
    specs, cluster = inputs(args.files, args.cluster)
    results_folder("--results", args.results)
    from coach.app.run import run_jobs  # imported here so `coach validate` stays fast

    scheduler = args.scheduler or cluster.scheduler or "gang"
    refused = _policy_refusals(specs, args.policy)
    if refused:
        return _fail(refused)
    site = run_site(args)
    wrong = _kubernetes_name_problems(specs, site.platform)
    if wrong:
        return _fail(wrong)
    checkpoints = args.checkpoints
    if checkpoints is not None:
        check_store("--checkpoints", checkpoints)
    if not args.quiet:
        say_cluster(cluster)
    report = run_jobs(specs, cluster, Path(args.results), view=view, scheduler=scheduler,
                      placement_timeout_s=args.placement_timeout, policy=args.policy, checkpoints=checkpoints, site=site)
    say(f"results: {report.run_dir}")
    return report.exit_code


def _resume(args, view: str) -> int:
    """`coach run --resume RUN_DIR`: the run folder's manifest names the jobs, cluster, store and platform."""
    conflict = _resume_conflict(args)
    if conflict is not None:
        return _fail([conflict])
    from coach.app.run import ResumeError, resume_run
    from coach.domain.cluster import ClusterSpec

    run_dir = Path(args.resume).resolve()
    manifest = _check_resume(run_dir)
    if isinstance(manifest.get("checkpoints"), str):
        check_store(f"{run_dir / 'run.json'}: checkpoints", manifest["checkpoints"])
    if not args.quiet:
        say_cluster(ClusterSpec.from_dict(manifest["cluster"]))
    try:
        report = resume_run(run_dir, view=view)
    except ResumeError as error:
        return _fail([str(error)])
    say(f"results: {report.run_dir}")
    return report.exit_code


def _resume_conflict(args) -> str | None:
    """The problem of an option that --resume cannot take (the run's manifest decides it), or None."""
    if args.files:
        return "--resume: give the run folder only, not job files (its manifest has the jobs)"
    if args.checkpoints:
        return "--checkpoints: a resumed run uses the store its manifest names; give the run folder only"
    if args.platform != "local" or args.dashboard or args.kubeconfig:
        return "--platform: a resumed run uses the platform its manifest names; give the run folder only"
    return None


def _policy_refusals(specs, policy: str) -> list[str]:
    """One line per job the run policy cannot run (e.g. a static job under a policy that needs dynamic ones)."""
    from coach.app.run_policies import RUN_POLICIES

    return [f"{spec.source}: {problem} (--policy {policy})" for spec in specs
            if (problem := RUN_POLICIES[policy].check(spec)) is not None]


def _kubernetes_name_problems(specs, platform: str) -> list[str]:
    """On a platform other than local, one line per job whose name cannot name Kubernetes objects (a job's name is
    its pods' label value and its PodGroup's name)."""
    if platform == "local":
        return []
    import re

    return [f"{spec.source}: name: {spec.name!r} cannot name Kubernetes objects (at most 63 of a-z, 0-9, '-', "
            f"'.', starting and ending with a letter or digit) (--platform {platform})"
            for spec in specs if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?", spec.name)]


def cmd_plan(args) -> int:
    """Print, as JSON, the fit and the counts Coach would choose next for a job, from its log."""
    specs, cluster = inputs([args.job], args.cluster)
    spec = specs[0]
    from coach.inputs.runs import RunInputError, checked_records
    from coach.policy.history import history_from_records
    from coach.app.run_policies import RUN_POLICIES
    from coach.policy.run_policy import RunClusterView, RunJobView, Wait

    history_path = Path(args.history)
    try:
        records = checked_records(history_path, keep=lambda r: r.get("job") == spec.name)
    except RunInputError as error:
        return _fail([str(error)])
    speed_records = [r for r in records if r.get("phase") in ("calibration", "training")]
    if not speed_records:
        return _fail([f"{args.history}: (file): no calibration or training epochs of job '{spec.name}'"])
    spent = max((float(r.get("cumulative_cost") or 0.0) for r in records), default=0.0)
    budget_left = spec.budget - spent if args.budget_left is None else args.budget_left
    free_slots = cluster.total_slots if args.free_slots is None else args.free_slots
    price = max(node.price_per_slot_s for node in cluster.nodes)
    try:
        history = history_from_records(records)
    except (KeyError, TypeError, ValueError) as error:  # a combination of lines the record check did not foresee
        return _fail([f"{args.history}: (file): cannot rebuild the history of job '{spec.name}': "
                      f"{type(error).__name__}"])
    history = replace(history, spent=spec.budget - budget_left)  # what --budget-left says is left
    view = RunJobView(spec, history, held_slots=0, asking=True)
    decided = RUN_POLICIES["coach"].decide(RunClusterView(free_slots, price), [view], time.time())[spec.name]
    out = {"job": spec.name, "epochs_logged": len(records)}
    if isinstance(decided, Wait):
        out.update({"affordable": False, "wait": decided.reason})
    elif decided.details:
        out.update({"affordable": decided.affordable, **decided.details})
    else:  # the job file fixes the counts
        out.update({"affordable": decided.affordable, "workers": decided.workers, "servers": decided.servers,
                    "reason": "the job file fixes workers and servers"})
    from coach.storage.results import NonFiniteValue, standard_json

    try:  # standard JSON: a history of absurd numbers can make a figure infinite
        text = standard_json(out, f"{args.history}: (--history): the plan from this history was", indent=2)
    except NonFiniteValue as error:
        return _fail([str(error)])
    print(text)
    return 0


def cmd_bench_scheduler(args) -> int:
    """Pods placed per second by a scheduler_fork profile on a synthetic cluster."""
    from scheduler_fork.bench import run_bench

    result = run_bench(args.nodes, args.pods, args.scheduler, seed=args.seed, slots_per_node=args.slots_per_node)
    print(json.dumps({"scheduler": args.scheduler, "nodes": args.nodes, "pods": args.pods,
                      "pods_placed": result.pods_placed, "seconds": round(result.seconds, 4),
                      "pods_per_s": round(result.pods_per_s, 1)}))
    return 0


def cmd_scheduler(args) -> int:
    """`coach scheduler`: scheduler_fork's plugins scheduling a kube-apiserver's pods (coach.kube_scheduler)."""
    from coach.kube_scheduler.cli import run_scheduler

    return run_scheduler(args.kubeconfig, args.profile, args.namespace, args.all_namespaces, args.metrics_port,
                         args.id, args.lease_duration, args.metrics_address, args.binder)


#: The keys of coach.kube_scheduler.loop.BINDERS (named here so that parsing does not import the kubernetes
#: client; tests/contract/test_kube_scheduler_cli.py checks that they agree).
BINDER_CHOICES = ("process", "threads")


def _binder_option(parser) -> None:
    parser.add_argument("--binder", choices=BINDER_CHOICES, default="process",
                        help="send the bindings from a child process's threads or from this process's "
                             "(default: %(default)s)")


def cmd_bench_kube_scheduler(args) -> int:
    """Pods bound per second by `coach scheduler` and by kube-scheduler on one apiserver, end to end."""
    from coach.kube_scheduler.cli import run_bench_command

    if args.pods > args.nodes * args.slots_per_node:
        return _fail([f"--pods: {args.pods} pods do not fit {args.nodes} nodes x {args.slots_per_node} slots"])
    schedulers = ("coach", "default") if args.schedulers == "both" else (args.schedulers,)
    return run_bench_command(args.kubeconfig, args.nodes, args.pods, args.profile, args.slots_per_node, schedulers,
                             args.binder)


def _policies():
    from coach.app.run_policies import RUN_POLICIES

    return RUN_POLICIES


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("coach")
    except PackageNotFoundError:
        return "unknown (not installed)"


def subparser(sub, name: str, **options) -> argparse.ArgumentParser:
    """A sub-command's parser: one-line errors (coach.ui.errors.Parser), help that keeps its line breaks."""
    return sub.add_parser(name, formatter_class=argparse.RawDescriptionHelpFormatter, **options)


def _cluster_size_options(parser: argparse.ArgumentParser, nodes: int, pods: int, verb: str,
                          most: tuple[int, int] = (MAX_BENCH_NODES, MAX_BENCH_PODS)) -> None:
    """--nodes, --pods and --slots-per-node of a benchmark's synthetic cluster, with their bounds (`most`: the
    largest nodes and pods)."""
    most_nodes, most_pods = most
    parser.add_argument("--nodes", type=integer(1, most_nodes), default=nodes, metavar="N",
                        help=f"nodes, 1 <= N <= {most_nodes} (default: %(default)s)")
    parser.add_argument("--pods", type=integer(1, most_pods), default=pods, metavar="P",
                        help=f"pods to {verb}, 1 <= P <= {most_pods} (default: %(default)s)")
    parser.add_argument("--slots-per-node", type=integer(1, MAX_SLOTS_PER_NODE), default=4, metavar="N",
                        help=f"slots of every node, 1 <= N <= {MAX_SLOTS_PER_NODE} (default: %(default)s)")


def run_options(parser: argparse.ArgumentParser) -> None:
    """How a run is composed: the options `coach run` and `coach serve` share."""
    parser.add_argument("--cluster", metavar="FILE",
                        help="cluster file (default: 3 nodes x 4 slots, 0.0001 per slot-second)")
    parser.add_argument("--results", default="results", metavar="DIR",
                        help="folder for run folders (default: %(default)s)")
    parser.add_argument("--scheduler", choices=sorted(PROFILES),
                        help="scheduler_fork profile placing every function (default: the cluster file's, else gang)")
    parser.add_argument("--placement-timeout", type=number(0.0, MAX_PLACEMENT_TIMEOUT_S, low_exclusive=True),
                        default=30.0, metavar="S",
                        help="seconds a job waits for its quorum before it gives its slots back and requeues; "
                             f"0 < S <= {MAX_PLACEMENT_TIMEOUT_S} (default: %(default)g)")
    parser.add_argument("--policy", choices=LazyChoices(_policies), default=DEFAULT_POLICY, metavar="POLICY",
                        help="run-level policy deciding every job's workers and servers: %(choices)s "
                             "(default: %(default)s)")
    parser.add_argument("--checkpoints", metavar="URL", type=store_url,
                        help="checkpoint store every function reaches: s3://bucket/prefix (endpoint and credentials "
                             "from the AWS_* environment variables) or a folder (default: the run folder's "
                             "checkpoints/)")
    parser.add_argument("--platform", choices=LazyChoices(_platforms), default="local", metavar="PLATFORM",
                        help="where functions run, %(choices)s: local warm hosts, or Nuclio on Kubernetes with "
                             "their pods bound "
                             "by `coach scheduler` (default: %(default)s)")
    parser.add_argument("--dashboard", metavar="URL", type=http_url,
                        help="the Nuclio dashboard (required with --platform nuclio; no default)")
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="kubeconfig of the cluster's kube-apiserver (required with --platform nuclio; no default)")
    parser.add_argument("--namespace", metavar="NS", type=dns_label, default="default",
                        help="Kubernetes namespace of the functions and PodGroups (default: %(default)s)")
    parser.add_argument("--image", metavar="IMAGE", default=DEFAULT_IMAGE,
                        help="the function image the dashboard deploys (default: %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="coach", description="Serverless job handler for distributed DL training",
                    epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = subparser(sub, "validate", help="check job files without running anything", epilog=EXIT_CODES)
    validate.add_argument("files", nargs="+", metavar="FILE", help="job files (YAML) to check")
    validate.add_argument("--cluster", metavar="FILE",
                          help="cluster file whose prices the budget warnings use (default: the thesis cluster)")
    validate.set_defaults(func=cmd_validate)

    run = subparser(sub, "run", help="train every job concurrently on the embedded platform", epilog=EXIT_CODES)
    run.add_argument("files", nargs="*", metavar="FILE", help="job files (YAML) to train; none with --resume")
    run.add_argument("--resume", metavar="RUN_DIR",
                     help="continue the unfinished jobs of a run from their last epoch and checkpoint "
                          "(default: a new run)")
    run_options(run)
    shown = run.add_mutually_exclusive_group()
    shown.add_argument("--quiet", action="store_true",
                       help="print only the results folder (default: off)")
    shown.add_argument("--plain", action="store_true",
                       help="plain log lines instead of the live table (default: off; on when not a terminal)")
    run.set_defaults(func=cmd_run)

    planner = subparser(sub, "plan", help="print the fit and the counts Coach would choose next, as JSON",
                        epilog=EXIT_CODES)
    planner.add_argument("job", metavar="JOB", help="the job file (YAML)")
    planner.add_argument("--history", required=True, metavar="LOG", type=path_text,
                         help="the job's results log (JSON lines) (required, no default)")
    planner.add_argument("--free-slots", type=integer(0, MAX_FREE_SLOTS), metavar="N",
                         help=f"slots the decision may use, 0 <= N <= {MAX_FREE_SLOTS} (default: the whole cluster)")
    planner.add_argument("--budget-left", type=number(0.0, MAX_MONEY), metavar="X",
                         help=f"money left, 0 <= X <= {MAX_MONEY:g} (default: budget - last cumulative_cost)")
    planner.add_argument("--cluster", metavar="FILE",
                         help="cluster file for prices and size (default: the thesis cluster)")
    planner.set_defaults(func=cmd_plan)

    bench = subparser(sub, "bench", help="benchmarks").add_subparsers(dest="what", required=True, metavar="WHAT")
    bench_scheduler = subparser(bench, "scheduler", help="pods placed per second by a scheduler profile",
                                epilog=EXIT_CODES)
    _cluster_size_options(bench_scheduler, nodes=7500, pods=20000, verb="place")
    bench_scheduler.add_argument("--scheduler", choices=sorted(PROFILES), default="gang",
                                 help="scheduler_fork profile (default: %(default)s)")
    bench_scheduler.add_argument("--seed", type=integer(0, MAX_SEED), default=0, metavar="N",
                                 help=f"seed of the synthetic cluster, 0 <= N <= {MAX_SEED} (default: %(default)s)")
    bench_scheduler.set_defaults(func=cmd_bench_scheduler)
    bench_kube = subparser(bench, "kube-scheduler", epilog=EXIT_CODES,
                           help="pods bound per second by `coach scheduler` and by kube-scheduler, on one apiserver")
    bench_kube.add_argument("--kubeconfig", required=True, metavar="FILE",
                            help="kubeconfig of a test cluster whose kube-scheduler runs (required, no default)")
    _cluster_size_options(bench_kube, nodes=5000, pods=10000, verb="bind",
                          most=(MAX_KUBE_BENCH_NODES, MAX_KUBE_BENCH_PODS))
    bench_kube.add_argument("--profile", choices=sorted(PROFILES), default="gang",
                            help="Coach's scheduler_fork profile (default: %(default)s)")
    bench_kube.add_argument("--schedulers", choices=("both", "coach", "default"), default="both",
                            help="measure Coach's scheduler, kube-scheduler, or both in one run (default: %(default)s)")
    _binder_option(bench_kube)
    bench_kube.set_defaults(func=cmd_bench_kube_scheduler)

    scheduler = subparser(sub, "scheduler", epilog=EXIT_CODES,
                          help="schedule a kube-apiserver's Coach pods with scheduler_fork's plugins (until SIGTERM)")
    scheduler.add_argument("--kubeconfig", required=True, metavar="PATH",
                           help="kubeconfig of the cluster (required, no default)")
    scheduler.add_argument("--profile", choices=sorted(PROFILES), default="gang",
                           help="scheduler_fork profile (default: %(default)s)")
    where = scheduler.add_mutually_exclusive_group()
    where.add_argument("--namespace", metavar="NS", type=dns_label,
                       help="place the pods of this namespace; the Lease lives here too "
                            "(default: the kubeconfig context's namespace)")
    where.add_argument("--all-namespaces", action="store_true",
                       help="place the pods of every namespace (default: off)")
    scheduler.add_argument("--metrics-port", type=integer(0, 65535), default=10259, metavar="PORT",
                           help="port of /metrics and /healthz, 0 = any free port (default: %(default)s)")
    scheduler.add_argument("--metrics-address", default="0.0.0.0", metavar="ADDRESS",
                           help="address /metrics and /healthz listen on (default: %(default)s)")
    scheduler.add_argument("--id", metavar="NAME",
                           help="this replica's name in the Lease (default: the host name and a random suffix)")
    scheduler.add_argument("--lease-duration", type=number(1.0, 3600.0), default=15.0, metavar="S",
                           help="seconds a leader's Lease lasts without renewal, 1 <= S <= 3600 (default: %(default)g)")
    _binder_option(scheduler)
    scheduler.set_defaults(func=cmd_scheduler)

    from coach.ui.analysis_cli import add_commands
    from coach.ui.serve_cli import add_commands as add_serve
    from coach.ui.simulate_cli import add_commands as add_simulate
    from coach.ui.train_policy_cli import add_commands as add_train_policy

    add_simulate(sub, subparser, EXIT_CODES)
    add_serve(sub, subparser, EXIT_CODES, run_options)
    add_train_policy(sub, subparser, EXIT_CODES)
    add_commands(sub, subparser, EXIT_CODES)
    return parser


def _file_error(error: OSError | UnicodeDecodeError) -> str:
    """One line for an OSError or a UnicodeDecodeError that no command turned into its own message."""
    if isinstance(error, UnicodeDecodeError):
        return f"coach: (file): a file is not UTF-8 text (byte {error.start})"
    where = "coach" if error.filename is None else one_line(str(error.filename), 200)
    return f"{where}: (file): {error.strerror or error}"


def _missing_extra(command: str | None, error: ModuleNotFoundError) -> int:
    """One line saying which extra to install; a module no extra brings is a bug, so its traceback stays."""
    from coach.ui.extras import extra_providing

    extra = extra_providing(error.name)
    if extra is None:
        raise error
    where = "coach" if command is None else f"coach {command}"
    print(f"{where}: needs Coach's `{extra}` extra (no module named {error.name!r}): "
          f"pip install 'coach[{extra}]'", file=sys.stderr)
    return EXIT_MISSING_EXTRA


#: the signals `main`'s handler received: a KeyboardInterrupt raised inside an extension module's initialisation
#: (numpy's, scipy's, on a lazy import) reaches `main` as an ImportError, which this tells apart from a real one
_received: list[int] = []


def _interrupt(signum, frame) -> None:  # noqa: ARG001 (a signal handler's signature)
    _received.append(signum)
    raise KeyboardInterrupt


def main(argv=None) -> int:
    """Run one `coach` command; returns its exit code (argparse's own errors, --help and --version included).
    SIGINT and SIGTERM raise KeyboardInterrupt from the first line on (parsing and lazy imports included): one line,
    exit code 130, whatever the command was doing (its own handlers, if any, clean up first); a command that
    handled the signal itself and returns 130 gets the same line, and so does any error a signal turned into."""
    _received.clear()
    for name in ("stdout", "stderr"):  # started with one closed (`>&-`, `2>&-`): Python makes it None, and
        if getattr(sys, name) is None:  # what the command says there goes nowhere, as asked, not into a crash
            setattr(sys, name, open(os.devnull, "w"))  # for the life of the process
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)
                if signal.getsignal(sig) is not signal.SIG_IGN}  # an ignored signal stays ignored (nohup, `cmd &`)
    try:
        code = _main(argv)
        if code != EXIT_INTERRUPTED and not _received:
            return code
        raise KeyboardInterrupt  # a command that caught the signal itself (run, experiment, serve) ends the same way
    except KeyboardInterrupt:
        return _interrupted()
    except Exception:
        if not _received:
            raise
        return _interrupted()  # e.g. "ImportError: initialization failed" from a signal inside numpy's import
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # the command's exit (stdout's flush) still leaves quietly on a signal


def _interrupted() -> int:
    print("coach: interrupted", file=sys.stderr)
    if _STANDALONE:
        _leave_interrupted()
    return EXIT_INTERRUPTED


def _leave_interrupted() -> None:
    """Exit 130 now, after the atexit handlers and a flush of stdout and stderr. Not through the interpreter's own
    exit: a KeyboardInterrupt that went through C code that ran Python (MXNet's import does) leaves CPython's flag
    that makes it kill itself with SIGINT at exit (exit status -2, not 130)."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away, or a closed stream
            pass
    os._exit(EXIT_INTERRUPTED)


def _main(argv) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, --version (0) or an argparse error, already printed (2)
        return exit_.code if isinstance(exit_.code, int) else 2
    except BrokenPipeError:  # `coach --help | head -1`
        stdout_closed()
        return 1
    except ModuleNotFoundError as error:  # a registry read for an option's choices, without the extra it needs
        return _missing_extra(None, error)
    try:
        return args.func(args)
    except Exception as error:
        if _received:  # whatever a signal turned into is the interruption, not a line of its own
            raise KeyboardInterrupt from None
        return _command_failure(args.command, error)


def _command_failure(command: str, error: Exception) -> int:
    """The exit code of a command that raised `error`, after its one line; a traceback only for a bug."""
    if isinstance(error, BadInput):
        return _fail(error.lines)
    if isinstance(error, BrokenPipeError):  # the reader of stdout went away (`coach ... | head -1`): not bad input
        stdout_closed()
        return 1
    if isinstance(error, (OSError, UnicodeDecodeError)):  # a user's file that no check foresaw: one line
        return _fail([_file_error(error)])
    if isinstance(error, ModuleNotFoundError):  # an install without the extra this command needs (the scheduler image)
        return _missing_extra(command, error)
    raise error


if __name__ == "__main__":
    sys.exit(main())
