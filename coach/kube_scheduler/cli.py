"""`coach scheduler` and `coach bench kube-scheduler`: what the command line asks, turned into a running scheduler.

coach.ui.cli parses the arguments and calls these functions lazily (kubernetes is imported only here). Bad input
(a kubeconfig that is missing or unreadable) is one line on stderr and exit code 2; an apiserver that cannot be
reached or a metrics port that is taken is one line and exit code 1; Ctrl-C or SIGTERM stops the scheduler
cleanly (bindings in flight finish, the Lease is released) and exits with 130, like every coach command.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def _say(line: str) -> None:
    print(f"coach scheduler: {line}", flush=True)


def _fail(line: str, code: int) -> int:
    print(f"coach scheduler: {line}"[:1000].replace("\n", " "), file=sys.stderr, flush=True)
    return code


def run_scheduler(kubeconfig: str, profile: str, namespace: str | None, all_namespaces: bool, metrics_port: int,
                  identity: str | None, lease_duration_s: float, metrics_host: str = "0.0.0.0",
                  binder: str = "process") -> int:
    """`coach scheduler`: schedule until Ctrl-C or SIGTERM; the exit code."""
    from coach.domain.kube import LEASE_NAME
    from coach.placement.kube_connect import connect, reachable
    from coach.kube_scheduler.loop import Config, KubeScheduler, default_identity

    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retries are ours to report, in one line
    api, context_namespace = connect(kubeconfig)
    if api is None:
        return _fail(context_namespace, EXIT_BAD_INPUT)
    try:
        problem = reachable(api)
        if problem is not None:
            return _fail(problem, EXIT_FAILED)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                            stream=sys.stderr)
        watched = None if all_namespaces else (namespace or context_namespace)
        config = Config(profile=profile, namespace=watched, lease_namespace=namespace or context_namespace,
                        identity=identity or default_identity(), lease_duration_s=lease_duration_s,
                        metrics_host=metrics_host, metrics_port=metrics_port, binder=binder)
        try:
            scheduler = KubeScheduler(api, config)
        except OSError as error:
            return _fail(f"--metrics-port: cannot listen on {metrics_host}:{metrics_port}: {error.strerror or error}",
                         EXIT_FAILED)
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            scheduler.start()
            where = "all namespaces" if watched is None else f"namespace {watched}"
            _say(f"profile {profile}, {where}, id {config.identity}, Lease {config.lease_namespace}/{LEASE_NAME}")
            _say(f"serving /metrics and /healthz on port {scheduler.metrics_port}")
            while not stop.wait(1.0):
                pass
            _say("stopping: finishing bindings in flight, releasing the Lease")
        finally:
            scheduler.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        _say(f"stopped after binding {scheduler.bound_total} pods")
        return EXIT_INTERRUPTED
    finally:
        api.close()


def _one_line(error: Exception) -> str:
    """An exception as one line; an apiserver's refusal with its status and message."""
    from kubernetes.client.rest import ApiException

    if isinstance(error, ApiException):
        try:
            message = json.loads(error.body or "{}").get("message") or ""
        except (ValueError, AttributeError):
            message = ""
        return f"the apiserver answered {error.status} {error.reason}" + (f": {message}" if message else "")[:500]
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text[:500]


def run_bench_command(kubeconfig: str, nodes: int, pods: int, profile: str, slots_per_node: int,
                      schedulers: tuple[str, ...], binder: str = "process") -> int:
    """`coach bench kube-scheduler`: progress on stderr, the result as one JSON line on stdout."""
    import tempfile

    from coach.kube_scheduler.bench import Bench
    from coach.placement.kube_connect import connect, reachable

    def say(line: str) -> None:
        print(f"coach bench kube-scheduler: {line}", file=sys.stderr, flush=True)

    logging.getLogger("urllib3").setLevel(logging.ERROR)
    api, problem = connect(kubeconfig)
    if api is None:
        print(f"coach bench kube-scheduler: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        problem = reachable(api)
        if problem is not None:
            print(f"coach bench kube-scheduler: {problem}", file=sys.stderr)
            return EXIT_FAILED
        bench = Bench(api, kubeconfig, nodes, pods, profile, slots_per_node, binder, schedulers, say)
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM cleans up as Ctrl-C does
        try:
            with tempfile.TemporaryDirectory(prefix="coach-bench-") as folder:
                result = bench.run(Path(folder) / "coach-scheduler.log")
        finally:
            signal.signal(signal.SIGTERM, previous)
    except KeyboardInterrupt:  # Bench.run has removed what it created; `coach: interrupted` is main's last line
        say("its nodes, pods and namespace are removed")
        return EXIT_INTERRUPTED
    except ValueError as error:
        print(f"coach bench kube-scheduler: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as error:  # the apiserver refused or broke off: one line, the clean-up has run
        print(f"coach bench kube-scheduler: {_one_line(error)}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        api.close()
    print(json.dumps(result.as_json(), allow_nan=False), flush=True)
    return EXIT_OK if result.complete else EXIT_FAILED
