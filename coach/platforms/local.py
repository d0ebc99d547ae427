"""The embedded platform: every placed function is a warm host process on 127.0.0.1 (coach.platforms.host).

Side effects: starts and kills processes, writes one log file per function under `<run dir>/logs/`.
Invocations go over real HTTP with `requests`, exactly as to a deployed Nuclio function.

Every host is forked by this process's template (coach.platforms.template), which has imported MXNet once, so a
host is ready in well under a second instead of paying MXNet's import. The template dies with the controller, even
by `kill -9`, and the hosts die with the template (PR_SET_PDEATHSIG), so no host outlives `coach run`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import requests

from coach.domain.contracts import AheadRequest, EpochRequest, WarmRequest
from coach.domain.identity import FunctionId, Role
from coach.domain.invocation import (DEPLOY, FOREIGN, REJECTED, TIMEOUT, UNREACHABLE, ERROR, Failure, FunctionRef,
                                     Reply)
from coach.platforms import netns
from coach.platforms.host import TOKEN_ENV, TOKEN_HEADER
from coach.platforms.template import HostProcess, TemplateError, ready_line, template_for

#: Nuclio handler of each parameter-server role (`spec.handler` in coach_functions/<role>/function.yaml).
ROLE_HANDLERS: Mapping[Role, str] = {
    Role.SCHEDULER: "coach_functions.scheduler.main:handler",
    Role.SERVER: "coach_functions.server.main:handler",
    Role.WORKER: "coach_functions.worker.main:handler",
}
LOOPBACK = "127.0.0.1"  # every node of the embedded platform is this machine

READY_TIMEOUT_S = 120.0  # the template's first host waits for its imports; two cores shared by many hosts can be slow
CANCEL_TIMEOUT_S = 5.0
logger = logging.getLogger(__name__)
STOP_GRACE_S = 5.0  # how long hosts get to leave after SIGTERM before SIGKILL (together, not one after another)


def free_port(host: str = "127.0.0.1", avoid: frozenset[int] = frozenset()) -> int:
    """A port nothing listens on now, and none of `avoid` (something is about to)."""
    while True:
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in avoid:
            return port


@dataclass
class _Network:
    """A job's network namespace (coach/platforms/netns.py): the controller's descriptor, the job's live hosts, and
    how many of its hosts are being forked."""

    fd: int
    hosts: set[int] = field(default_factory=set)
    forking: int = 0


class LocalPlatform:
    """Warm function hosts on this machine; thread-safe."""

    def __init__(self, log_dir: Path, token: str, env: Mapping[str, str] | None = None,
                 handlers: Mapping[Role, str] | None = None, isolate_jobs: bool = True):
        self.log_dir = log_dir
        self.token = token
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {}), TOKEN_ENV: token}
        self.handlers = {**ROLE_HANDLERS, **(handlers or {})}
        self._procs: dict[int, HostProcess] = {}  # pid -> host; a ref names its own instance by pid
        self._lock = threading.Lock()
        self._closed = False
        self._session = threading.local()
        # job -> its network namespace: every ps-lite node of a job meets in the job's own namespace, which nothing
        # outside the job reaches (coach/platforms/netns.py); isolate_jobs=False: all on the machine's loopback
        self._isolate = isolate_jobs
        self._networks: dict[str, _Network] = {}
        self._hosts_job: dict[int, str] = {}  # host pid -> its job
        self.isolation: str | None = None  # why jobs are not isolated here (no privilege), once known
        template_for(self.env, secret_variables=(TOKEN_ENV,))  # starts importing MXNet while the job calibrates

    def deploy(self, fid: FunctionId, node: str) -> FunctionRef | Failure:
        name, handler = fid.name, self.handlers[fid.role]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with self._lock:
            if self._closed:
                return Failure(name, DEPLOY, "platform is shutting down")
        template = template_for(self.env, secret_variables=(TOKEN_ENV,))
        argv = ["--handler", handler, "--name", name, "--parent-pid", str(template.pid)]
        try:
            with open(self.log_dir / f"{name}.log", "ab") as log, self._network(fid.job) as network:
                proc = template.fork_host(argv, self.env, os.getcwd(), log.fileno(), netns_fd=network)
                self._joined(fid.job, network, proc.pid)
        except (TemplateError, OSError) as error:
            return Failure(name, DEPLOY, f"could not start the host: {error}", time.monotonic() - started)
        with self._lock:
            self._procs[proc.pid] = proc
            closed = self._closed
        if closed:  # closed while this host started: it must not outlive the platform
            self._kill(proc.pid)
            return Failure(name, DEPLOY, "platform is shutting down")
        port = self._await_ready(proc, started + READY_TIMEOUT_S)
        if port is None:
            self._kill(proc.pid)
            return Failure(name, DEPLOY, f"host did not become ready (see {self.log_dir / (name + '.log')})",
                           time.monotonic() - started)
        return FunctionRef(fid=fid, node=node, url=f"http://{LOOPBACK}:{port}/", host=LOOPBACK, instance=str(proc.pid))

    @staticmethod
    def _await_ready(proc: HostProcess, deadline: float) -> int | None:
        words = ready_line(proc, deadline)  # `READY <port>`
        return int(words[1]) if words and len(words) > 1 else None

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
            kind = {504: TIMEOUT, 400: REJECTED, 401: REJECTED, 403: REJECTED, 422: REJECTED}.get(response.status_code,
                                                                                                  ERROR)
            if kind == ERROR and body.get("foreign") is True:  # ps-lite broken from outside the job
                kind = FOREIGN
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

    @contextlib.contextmanager
    def _network(self, job: str) -> Iterator[int | None]:
        """The job's network namespace while one of its hosts is forked (made for its first host); None when jobs
        are not isolated here. The descriptor stays open at least until the block ends."""
        with self._lock:
            network = self._networks.get(job) if self._isolate and not self._closed else None
            if network is not None:
                network.forking += 1
        if network is None and self._isolate:
            network = self._new_network(job)
        try:
            yield None if network is None else network.fd
        finally:
            if network is not None:
                with self._lock:
                    network.forking -= 1
                self._left(job, None)

    def _new_network(self, job: str) -> _Network | None:
        try:
            fd = netns.create()
        except netns.NamespaceError as error:  # no privilege: every job on the shared loopback, said once
            with self._lock:
                first, self._isolate, self.isolation = self._isolate, False, str(error)
            if first:
                logger.warning("jobs share the machine's loopback for ps-lite (%s): a local process can break their "
                            "epochs, which are then retried without counting against them", error)
            return None
        with self._lock:
            network = self._networks.setdefault(job, _Network(fd))
            network.forking += 1
        if network.fd != fd:  # another host of the job made one meanwhile
            os.close(fd)
        return network

    def _joined(self, job: str, network: int | None, pid: int) -> None:
        if network is not None:
            with self._lock:
                self._networks[job].hosts.add(pid)
                self._hosts_job[pid] = job

    def _left(self, job: str | None, pid: int | None) -> None:
        """A host of `job` is gone (or was forked): when no host of it is left, close the controller's descriptor of
        the job's namespace (Linux frees it once no process runs in it either)."""
        if job is None:
            return
        with self._lock:
            network = self._networks.get(job)
            if network is None:
                return
            network.hosts.discard(pid)
            if network.hosts or network.forking:
                return
            del self._networks[job]
        os.close(network.fd)

    def _stop(self, pids: list[int]) -> None:
        """SIGTERM to all of them at once, then wait for all within one grace period, then SIGKILL the rest."""
        with self._lock:
            procs = [proc for pid in pids if (proc := self._procs.pop(pid, None)) is not None]
            jobs = [self._hosts_job.pop(proc.pid, None) for proc in procs]
        for proc in procs:
            proc.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in procs:
            if not proc.exited(deadline - time.monotonic()):
                proc.signal(signal.SIGKILL)
                proc.exited(STOP_GRACE_S)
            proc.close()
        for proc, job in zip(procs, jobs):
            self._left(job, proc.pid)

    def close(self) -> None:
        """Kill every host; in-flight invocations then fail as `unreachable`."""
        with self._lock:
            self._closed = True
            pids = list(self._procs)
        self._stop(pids)
