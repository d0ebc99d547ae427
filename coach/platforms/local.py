"""The embedded platform: every placed function is a warm host process on 127.0.0.1 (coach.platforms.host).

Side effects: starts and kills processes, writes one log file per function under `<run dir>/logs/`.
Invocations go over real HTTP with `requests`, exactly as to a deployed Nuclio function.

Every host is started from one thread of the platform that lives until the platform is closed. A host asks Linux
to kill it when the thread that forked it ends (PR_SET_PDEATHSIG), so when the controller dies, even by `kill -9`,
its hosts die with it at once; started from a short-lived worker thread they would die as soon as it returned.
"""

from __future__ import annotations

import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Callable, Mapping

import requests

from coach.domain.contracts import AheadRequest, EpochRequest, WarmRequest
from coach.domain.identity import FunctionId, Role
from coach.domain.invocation import DEPLOY, REJECTED, TIMEOUT, UNREACHABLE, ERROR, Failure, FunctionRef, Reply
from coach.platforms.host import TOKEN_ENV, TOKEN_HEADER

#: Nuclio handler of each parameter-server role (`spec.handler` in functions/<role>/function.yaml).
ROLE_HANDLERS: Mapping[Role, str] = {
    Role.SCHEDULER: "functions.scheduler.main:handler",
    Role.SERVER: "functions.server.main:handler",
    Role.WORKER: "functions.worker.main:handler",
}
LOOPBACK = "127.0.0.1"  # every node of the embedded platform is this machine

READY_TIMEOUT_S = 120.0  # a cold host imports MXNet; two cores shared by many hosts can be slow
CANCEL_TIMEOUT_S = 5.0
STOP_GRACE_S = 5.0  # how long hosts get to leave after SIGTERM before SIGKILL (together, not one after another)


class Spawner:
    """One long-lived thread that starts every process: PR_SET_PDEATHSIG follows the thread that forked."""

    def __init__(self, name: str = "coach-spawner"):
        self._jobs: queue.SimpleQueue[tuple[Callable[[], object], Future] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            start, future = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(start())
                except BaseException as error:  # noqa: BLE001 - handed to the caller
                    future.set_exception(error)

    def run(self, start: Callable[[], object]) -> object:
        """`start()` on the spawner thread; its result, or its exception; None once the spawner is closed."""
        future: Future = Future()
        with self._lock:
            if self._closed:
                return None
            self._jobs.put((start, future))
        return future.result()

    def close(self) -> None:
        """End the thread once what was asked before has run (processes it started then get their signal)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._jobs.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)


def free_port(host: str = "127.0.0.1", avoid: frozenset[int] = frozenset()) -> int:
    """A port nothing listens on now, and none of `avoid` (something is about to)."""
    while True:
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in avoid:
            return port


class LocalPlatform:
    """Warm function hosts on this machine; thread-safe."""

    def __init__(self, log_dir: Path, token: str, env: Mapping[str, str] | None = None,
                 handlers: Mapping[Role, str] | None = None):
        self.log_dir = log_dir
        self.token = token
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {}), TOKEN_ENV: token}
        self.handlers = {**ROLE_HANDLERS, **(handlers or {})}
        self._procs: dict[int, subprocess.Popen] = {}  # pid -> host; a ref names its own instance by pid
        self._lock = threading.Lock()
        self._closed = False
        self._session = threading.local()
        self._spawner = Spawner()

    def deploy(self, fid: FunctionId, node: str) -> FunctionRef | Failure:
        name, handler = fid.name, self.handlers[fid.role]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(self.log_dir / f"{name}.log", "ab") as log:
            cmd = [sys.executable, "-m", "coach.platforms.host", "--handler", handler, "--name", name,
                   "--parent-pid", str(os.getpid())]

            def start() -> subprocess.Popen | None:
                with self._lock:  # on the spawner thread, so the host's PR_SET_PDEATHSIG follows the platform
                    if self._closed:
                        return None
                    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                            env=self.env)
                    self._procs[proc.pid] = proc
                    return proc

            proc = self._spawner.run(start)
            if proc is None:
                return Failure(name, DEPLOY, "platform is shutting down")
        port = self._await_ready(proc, started + READY_TIMEOUT_S)
        if port is None:
            self._kill(proc.pid)
            return Failure(name, DEPLOY, f"host did not become ready (see {self.log_dir / (name + '.log')})",
                           time.monotonic() - started)
        return FunctionRef(fid=fid, node=node, url=f"http://{LOOPBACK}:{port}/", host=LOOPBACK, instance=str(proc.pid))

    @staticmethod
    def _await_ready(proc: subprocess.Popen, deadline: float) -> int | None:
        fd = proc.stdout.fileno()
        buffer = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    return None
                buffer += chunk
                for line in buffer.decode(errors="replace").splitlines():
                    if line.startswith("READY "):
                        return int(line.split()[1])
            elif proc.poll() is not None:
                return None
        return None

    def _http(self) -> requests.Session:
        session = getattr(self._session, "value", None)
        if session is None:
            session = self._session.value = requests.Session()
            session.headers[TOKEN_HEADER] = self.token
        return session

    def invoke(self, ref: FunctionRef, request: EpochRequest | WarmRequest | AheadRequest,
               timeout_s: float) -> Reply | Failure:
        started = time.monotonic()
        try:
            response = self._http().post(ref.url, json=request.to_dict(), timeout=(5.0, timeout_s))
        except requests.Timeout:
            return Failure(ref.name, TIMEOUT, f"no reply within {timeout_s:g} s", time.monotonic() - started)
        except requests.RequestException as error:
            return Failure(ref.name, UNREACHABLE, type(error).__name__, time.monotonic() - started)
        duration_s = time.monotonic() - started
        try:
            body = response.json()
        except ValueError:
            body = {"error": response.text[:200]}
        if response.status_code != 200:
            message = str(body.get("error", f"HTTP {response.status_code}")).splitlines()[0]
            kind = {504: TIMEOUT, 400: REJECTED, 403: REJECTED, 422: REJECTED}.get(response.status_code, ERROR)
            return Failure(ref.name, kind, message, duration_s, body)
        return Reply(ref.name, body, duration_s)

    def cancel(self, ref: FunctionRef) -> None:
        try:
            self._http().post(ref.url, json={"action": "cancel"}, timeout=CANCEL_TIMEOUT_S)
        except requests.RequestException:
            pass  # a dead host has nothing left to cancel

    def joins_ahead(self, scheduler: FunctionRef) -> bool:
        return True  # one host process per function

    def rendezvous_address(self, scheduler: FunctionRef, avoid_ports: frozenset[int] = frozenset()) -> tuple[str, int]:
        return scheduler.host, free_port(scheduler.host, avoid_ports)

    def remove(self, ref: FunctionRef) -> None:
        """Kill this instance only: a fresh instance of the same function may already be starting."""
        self._kill(int(ref.instance))

    def _kill(self, pid: int) -> None:
        self._stop([pid])

    def _stop(self, pids: list[int]) -> None:
        """SIGTERM to all of them at once, then wait for all within one grace period, then SIGKILL the rest."""
        with self._lock:
            procs = [proc for pid in pids if (proc := self._procs.pop(pid, None)) is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout:
                proc.stdout.close()

    def close(self) -> None:
        """Kill every host; in-flight invocations then fail as `unreachable`."""
        with self._lock:
            self._closed = True
            pids = list(self._procs)
        self._stop(pids)
        self._spawner.close()
