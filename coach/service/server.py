"""Serving: the served run, the app behind its guard, uvicorn on a socket bound first (so that port 0 works and
the address is printed only once it listens). SIGINT/SIGTERM stop uvicorn, then every unfinished job is
interrupted (a restart resumes it) and the ports close. Side effects: a socket, threads, the run folder.
"""

from __future__ import annotations

import signal
import socket
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import uvicorn

from coach.service.api import create_app
from coach.service.security import Guard
from coach.service.session import ServedRun

GRACEFUL_S = 3.0  # open event streams are cut after this long when the server stops


@dataclass(frozen=True)
class Listen:
    host: str
    port: int  # 0: any free port
    token: str | None  # required from every client when set
    max_body_bytes: int


def bind(listen: Listen) -> socket.socket:
    """The listening socket (OSError when the address is taken or not this machine's)."""
    family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((listen.host.strip("[]"), listen.port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn, but a signal stops the served run's jobs at once and is not raised again once uvicorn is done
    (uvicorn's own handling re-raises it, which would end the process before the jobs record their ends)."""

    def __init__(self, config: uvicorn.Config, served: ServedRun):
        super().__init__(config)
        self.served = served
        self.signalled = False  # set by SIGINT/SIGTERM: the command then exits 130 (docs/commands.md)

    @contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _stop(self, signum, frame) -> None:
        self.force_exit = self.should_exit  # a second signal: do not wait for open connections
        self.should_exit = True
        self.signalled = True
        self.served.begin_closing()


def http_server(served: ServedRun, model_folders: Sequence[Path], listen: Listen) -> uvicorn.Server:
    """The uvicorn server of the app behind its guard; `served` has started."""
    app = Guard(create_app(served, model_folders), listen.token, listen.max_body_bytes)
    return _Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=GRACEFUL_S, lifespan="off"),
                   served)


def serve(served: ServedRun, model_folders: Sequence[Path], listen: Listen, sock: socket.socket) -> bool:
    """Serve until SIGINT or SIGTERM; `served` has started. Prints the address when it listens. True when a signal
    stopped it (the command's one stderr line and exit 130 are `coach.ui.cli.main`'s)."""
    server = http_server(served, model_folders, listen)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"coach serve: http://{shown}:{port}/ (run {served.run_id}, results {served.run_dir})", flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        print("coach serve: stopping; unfinished jobs are interrupted and resume when the server starts again",
              flush=True)
        served.close()
    return server.signalled
