"""Run the fake kube-apiserver until SIGTERM or Ctrl-C:

    python -m tests.fakes.kube_apiserver --port 8001 --kubeconfig /tmp/fake.kubeconfig

It prints one line, `READY <url>`, once it serves; errors are one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from tests.fakes.kube_apiserver.server import FakeApiServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.kube_apiserver",
                                     description="A fake kube-apiserver on loopback HTTP, for tests and demos.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: any free port)")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this server to this path")
    parser.add_argument("--namespace", default="default", help="the kubeconfig context's namespace")
    parser.add_argument("--watch-history", type=int, default=10_000, help="changes kept for watches to resume")
    parser.add_argument("--bookmark-interval-s", type=float, default=1.0, help="seconds between watch BOOKMARKs")
    args = parser.parse_args(argv)
    try:
        api = FakeApiServer(args.host, args.port, args.watch_history, args.bookmark_interval_s).start()
    except (OSError, ValueError) as exc:
        print(f"error: cannot start the fake apiserver on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        if args.kubeconfig:
            api.write_kubeconfig(args.kubeconfig, args.namespace)
        print(f"READY {api.url}", flush=True)
        stop.wait()
    except OSError as exc:
        print(f"error: cannot write the kubeconfig {args.kubeconfig}: {exc}", file=sys.stderr)
        return 1
    finally:
        api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
