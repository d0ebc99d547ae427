"""`coach serve` (a web page and an HTTP API on one long-running run) and its clients: `coach status`,
`coach submit`, `coach stop`, `coach logs`. Parses options and prints; coach.service does the work."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from coach.ui.errors import EXIT_INTERRUPTED, fail, http_url, integer

DEFAULT_SERVER = "http://127.0.0.1:8765"
MAX_BODY_BYTES = 64 * 1024  # a job file is at most a few hundred bytes; room for comments
TOKEN_ENV = "COACH_TOKEN"


def cmd_serve(args) -> int:
    from coach.app.run import RunConfig
    from coach.service.server import Listen, serve
    from coach.service.session import ServedRun, Unservable
    from coach.ui.run_setup import check_store, inputs, results_folder, run_site, say_cluster

    token = args.token or os.environ.get(TOKEN_ENV) or None
    refused = _refused_listening(args, token)
    if refused is not None:
        return fail([refused])
    folders = [Path(folder).resolve() for folder in (args.models or ["jobs/models"])]
    missing = [f"--models: {folder}: not a folder" for folder in folders if not folder.is_dir()]
    if missing:
        return fail(missing)
    _, cluster = inputs([], args.cluster)
    results_folder("--results", args.results)
    site = run_site(args)
    if args.checkpoints is not None:
        check_store("--checkpoints", args.checkpoints)
    config = RunConfig(scheduler=args.scheduler or cluster.scheduler or "gang", policy=args.policy,
                       placement_timeout_s=args.placement_timeout, platform=site.platform,
                       placement=_placement_of(site.platform), checkpoints=args.checkpoints, site=site)
    listen = Listen(args.host, args.port, token, args.max_body)
    sock, problem = _bound(listen)
    if sock is None:
        return fail([problem])
    served = ServedRun(Path(args.results), cluster, config, notifier=_notifier(args.notify))
    try:
        served.start()
    except Unservable as error:
        sock.close()
        return fail(error.lines)
    if served.resumed:
        print(f"coach serve: resuming run {served.run_id} (its cluster and configuration are the manifest's)")
    say_cluster(served.cluster)
    return EXIT_INTERRUPTED if serve(served, folders, listen, sock) else 0


def _refused_listening(args, token: str | None) -> str | None:
    """Why `coach serve` may not listen as asked: off loopback without a token, or a --notify that is not an HTTP
    URL; None when it may."""
    from coach.domain.addresses import is_loopback

    if not is_loopback(args.host) and not token:
        return (f"--host: {args.host} is not a loopback address: give --token (or set {TOKEN_ENV}); clients "
                "then send `Authorization: Bearer TOKEN`")
    if args.notify is not None and not args.notify.startswith(("http://", "https://")):
        return f"--notify: {args.notify[:100]!r} is not an http:// or https:// URL"
    return None


def _bound(listen):
    """(the listening socket, None), or (None, the problem naming --port or --host) when it cannot be bound."""
    import errno

    from coach.service.server import bind

    try:
        return bind(listen), None
    except OSError as error:
        option = "--port" if error.errno in (errno.EADDRINUSE, errno.EACCES) else "--host"
        return None, f"{option}: cannot listen on {listen.host}:{listen.port} ({error.strerror or error})"


def _notifier(url: str | None):
    """The webhook notifier --notify asks for, or None."""
    if not url:
        return None
    from coach.service.notify import Notifier

    return Notifier(url)


def _placement_of(platform: str) -> str:
    from coach.app.compose import PLACEMENT_OF

    return PLACEMENT_OF[platform]


def _client(args):
    from coach.service.client import Client

    return Client(args.server, args.token or os.environ.get(TOKEN_ENV) or None)


def _client_failed(error) -> int:
    return fail(str(error).splitlines()) if error.bad_input else _unreachable(error)


def _unreachable(error) -> int:
    print(f"coach: {error}", file=sys.stderr)
    return 1


def _status_table(answer: dict, server: str):
    from dataclasses import fields

    from coach.domain.status import JobStatus
    from coach.views.terminal import status_table

    names = {f.name for f in fields(JobStatus)}  # a row carries more than the status (money, ending, waiting)

    def status(job: dict) -> JobStatus:
        shown = {k: v for k, v in job.items() if k in names}
        waiting = job.get("waiting")
        if waiting:  # the page's plain words, not the scheduler's reasons
            shown["message"] = "waiting for slots: " + "; ".join([waiting["needs"], *waiting.get("why", [])])
        return JobStatus(**shown)

    statuses = {job["job"]: status(job) for job in answer["jobs"]}
    return status_table(statuses, f"run {answer.get('run_id')} at {server}")


def cmd_status(args) -> int:
    import json

    from coach.service.client import ClientError
    from coach.views.terminal import _console

    if args.watch is not None:
        return _watch(args)
    try:
        answer = _client(args).jobs()
        shown = json.dumps(answer) if args.json else _status_table(answer, args.server)
    except ClientError as error:
        return _client_failed(error)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        return _unreachable(f"{args.server}/api/jobs: not a Coach server's answer ({type(error).__name__})")
    if args.json:
        print(shown)
    else:
        _console().print(shown)
    return 0


def _watch(args) -> int:
    """`coach status --watch S`: the table (or one JSON line) every S seconds until Ctrl-C; a server that does not
    answer is said so, with the time of the last answer, and watched on."""
    import json
    import time

    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from coach.service.client import ClientError
    from coach.views.terminal import _console

    client, last = _client(args), None
    live = None if args.json else Live(console=_console(), auto_refresh=False)
    try:
        if live is not None:
            live.start()
        while True:
            try:
                answer = client.jobs()
                last, problem = answer, None
            except ClientError as error:
                if error.bad_input:
                    return _client_failed(error)
                problem = str(error)
            stamp = time.strftime("%H:%M:%S")
            if args.json:
                print(json.dumps({"at": stamp, "error": problem, **(answer if problem is None else {})}), flush=True)
            else:
                note = Text(f"updated {stamp}" if problem is None else f"offline since {stamp}: {problem}",
                            style="dim" if problem is None else "bold red")
                live.update(Group(_status_table(last, args.server), note) if last else note, refresh=True)
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED  # Ctrl-C is how a watch ends: the same one line and 130 as every command
    finally:
        if live is not None:
            live.stop()


def cmd_logs(args) -> int:
    """`coach logs JOB`: the tail of the job's function logs, each line after its function's name; `--follow`
    prints new lines as they come until Ctrl-C or the server stops."""
    from coach.service.client import ClientError

    client = _client(args)
    try:
        if not args.follow:
            functions = client.logs(args.job, args.lines).get("functions", {})
            for function, lines in functions.items():
                for line in lines:
                    print(f"{function} | {line}")
            if not functions:
                print(f"coach logs: {args.job} has no function logs on this server (yet)", file=sys.stderr)
            return 0
        for function, lines in client.follow_logs(args.job, args.lines):
            for line in lines:
                print(f"{function} | {line}", flush=True)
    except ClientError as error:
        return _client_failed(error)
    except KeyboardInterrupt:
        return 0
    return 0


def cmd_submit(args) -> int:
    import yaml

    from coach.inputs.limits import FileTooLarge, NotRegularFile, read_capped
    from coach.service.client import ClientError

    path = Path(args.file)
    try:
        text = read_capped(path, MAX_BODY_BYTES).decode("utf-8-sig")
    except (FileTooLarge, NotRegularFile) as error:
        return fail([f"{args.file}: (file): {error}"])
    except UnicodeDecodeError as error:
        return fail([f"{args.file}: (file): not UTF-8 text (byte {error.start})"])
    except OSError as error:
        return fail([f"{args.file}: (file): {error.strerror or error}"])
    try:  # a relative model path is relative to the job file, as for `coach run`: it is sent absolute
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None  # the server says what is wrong, with the line
    model = data.get("model") if isinstance(data, dict) else None
    if isinstance(model, str) and not Path(model).is_absolute() and (path.parent / model).is_file():
        data["model"] = str((path.parent / model).resolve())  # else the server looks in its model folders
        text = yaml.safe_dump(data, sort_keys=False)
    try:
        answer = _client(args).submit(text)
    except ClientError as error:
        lines = [line.replace("request: ", f"{args.file}: ", 1) for line in str(error).splitlines()]
        return fail(lines) if error.bad_input else _unreachable(error)
    print(f"submitted {answer.get('job')} to run {answer.get('run_id')}")
    return 0


def cmd_stop(args) -> int:
    from coach.service.client import ClientError

    try:
        _client(args).stop(args.job)
    except ClientError as error:
        return _client_failed(error)
    print(f"stopping {args.job}: its epoch in flight ends first; its log is kept")
    return 0


def add_commands(sub, subparser, epilog: str, run_options) -> None:
    serve = subparser(sub, "serve", epilog=epilog,
                      help="a web page and an HTTP API to submit, follow and stop jobs (until Ctrl-C or SIGTERM)")
    serve.add_argument("--host", default="127.0.0.1", metavar="ADDRESS",
                       help="address to listen on; other than loopback needs --token (default: %(default)s)")
    serve.add_argument("--port", type=integer(0, 65535), default=8765, metavar="PORT",
                       help="port, 0 = any free port (default: %(default)s)")
    serve.add_argument("--models", action="append", metavar="DIR",
                       help="folder whose model files submitted jobs may name; repeat for more "
                            "(default: jobs/models)")
    serve.add_argument("--token", metavar="TOKEN",
                       help=f"bearer token every client must send (default: ${TOKEN_ENV}; none on loopback)")
    serve.add_argument("--notify", metavar="URL",
                       help="POST a JSON message to URL whenever a job ends (reached its target, ran out of budget or "
                            "epochs, failed, was stopped), with retries (default: none)")
    serve.add_argument("--max-body", type=integer(1024, 16 * 1024 * 1024), default=MAX_BODY_BYTES, metavar="BYTES",
                       help="largest request body accepted (default: %(default)s)")
    run_options(serve)
    serve.set_defaults(func=cmd_serve)
    for name, what in (("status", "print the jobs of a `coach serve` as a table"),
                       ("submit", "submit a job file to a `coach serve`"),
                       ("stop", "stop a job of a `coach serve` for good (its log is kept)"),
                       ("logs", "print the tail of a job's function logs from a `coach serve`")):
        client = subparser(sub, name, epilog=epilog, help=what)
        if name == "submit":
            client.add_argument("file", metavar="FILE", help="the job file (YAML)")
        if name in ("stop", "logs"):
            client.add_argument("job", metavar="JOB", help="the job's name")
        if name == "status":
            client.add_argument("--watch", type=float, nargs="?", const=2.0, metavar="SECONDS",
                                help="show the table again every SECONDS until Ctrl-C (default: off; SECONDS 2 when not given)")
            client.add_argument("--json", action="store_true", help="print the server's answer as JSON (one line "
                                                                     "per refresh with --watch) (default: off)")
        if name == "logs":
            client.add_argument("--follow", "-f", action="store_true", help="print new lines as they come, until Ctrl-C (default: off)")
            client.add_argument("--lines", "-n", type=integer(0, 1000), default=100, metavar="N",
                                help="lines of each function's log to start with (default: %(default)s)")
        client.add_argument("--server", type=http_url, default=DEFAULT_SERVER, metavar="URL",
                            help="the server (default: %(default)s)")
        client.add_argument("--token", metavar="TOKEN", help=f"its bearer token (default: ${TOKEN_ENV})")
        client.set_defaults(func={"status": cmd_status, "submit": cmd_submit, "stop": cmd_stop,
                                  "logs": cmd_logs}[name])
