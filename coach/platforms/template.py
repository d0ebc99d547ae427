"""Function hosts forked from a template process that has imported MXNet once, so a host starts in milliseconds.

Why: every host imports MXNet in `init_context`, which costs seconds of CPU; a job of four functions on two
cores waited seconds for its hosts before the first calibration step (benchmarks/host_start.py measures a fresh
host against a forked one). The template (`python -m
coach.platforms.template`) imports MXNet, the Nuclio SDK and the role handlers once, then forks one child per host
on request; the child becomes `coach.platforms.host` with the request's argv, environment and working directory,
exactly as a freshly started host would. A request may name another entry module instead (its `main(argv)` runs the
same way): the loopback Nuclio test stack forks its function pods so, as warm as Coach's own hosts.

The protocol: the controller sends one JSON request per host over a Unix socket, with the host's stdout and stderr
as file descriptors (SCM_RIGHTS); the template answers `{"pid": N}` with a pidfd for the child, so the controller
can signal and await a host that is not its own child without racing pid reuse.

Lifetimes: the template is started from one thread that lives as long as the controller process, and asks Linux
to SIGKILL it when that thread ends (PR_SET_PDEATHSIG), so it dies with the controller, even by `kill -9`; each
host asks the same of the template (coach.platforms.host), so the hosts die with it. One template serves every
platform of the controller process whose environment agrees on what MXNet reads when it is imported
(`IMPORT_VARIABLE_PREFIXES`).
"""

from __future__ import annotations

import atexit
import importlib
import json
import math
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import Future
from typing import Callable, Mapping, Sequence, TypeVar

PRELOAD = ("mxnet", "nuclio_sdk", "coach.platforms.host", "coach_functions.handler")  # what every host imports first
#: Environment read when those modules are imported: platforms that differ here get their own template.
IMPORT_VARIABLE_PREFIXES = ("MXNET_", "OMP_", "KMP_", "OPENBLAS_", "MKL_", "LD_", "PYTHON")
MAX_REQUEST_BYTES = 256 * 1024  # a request is an argv and an environment: a few kilobytes (a socket buffer holds 208 KiB)
PARENT_POLL_S = 0.5  # how often the template checks that its controller is alive and reaps its children
_T = TypeVar("_T")  # what a job of the spawner thread returns
REPLY_TIMEOUT_S = 120.0  # the first request waits for the template's imports, on two cores shared by many hosts
PR_SET_NAME = 15  # prctl option: the name `top` and `ps -o comm` show (15 bytes)
HOST_MODULE = "coach.platforms.host"  # what a forked child runs unless its request names another entry module
PS_NETNS_FD_ENV = "COACH_PS_NETNS_FD"  # the host's descriptor of its job's network namespace (coach_functions/ps.py)


class TemplateError(Exception):
    """The template process could not fork a host; the message says why."""


class Spawner:
    """One long-lived thread that starts every process: PR_SET_PDEATHSIG follows the thread that forked."""

    def __init__(self, name: str = "coach-spawner"):
        self._jobs: queue.SimpleQueue[tuple[Callable[[], object], Future]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            start, future = self._jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(start())
                except BaseException as error:  # noqa: BLE001 - handed to the caller
                    future.set_exception(error)

    def run(self, start: Callable[[], _T]) -> _T:
        """`start()` on the spawner thread: its result, or its exception."""
        future: Future[_T] = Future()
        self._jobs.put((start, future))
        return future.result()


def readable(fd: int, timeout_s: float) -> bool:
    """Whether `fd` has something to read (or its end), waiting at most `timeout_s`."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(timeout_s, 0.0) * 1000))


class HostProcess:
    """A host forked by the template: not this process's child, so it is watched and signalled through a pidfd."""

    def __init__(self, pid: int, pidfd: int, stdout_fd: int):
        self.pid = pid
        self.pidfd = pidfd
        self.stdout_fd = stdout_fd  # the read end of the host's stdout, where it prints `READY <port>`

    def exited(self, timeout_s: float = 0.0) -> bool:
        """Whether the host has ended, waiting at most `timeout_s` for it (poll, not select: no limit on fd numbers)."""
        return readable(self.pidfd, timeout_s)

    def signal(self, signum: int) -> None:
        try:
            signal.pidfd_send_signal(self.pidfd, signum)
        except ProcessLookupError:  # already ended
            pass

    def close(self) -> None:
        for fd in (self.pidfd, self.stdout_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def ready_line(process: HostProcess, deadline: float, gone: Callable[[], bool] = lambda: False) -> list[str] | None:
    """The words of the first `READY ...` line a started host (or a Nuclio processor) writes on its stdout; None
    when it exits first, the deadline (time.monotonic) passes or `gone()` says nobody waits for it any more."""
    buffer = b""
    while time.monotonic() < deadline and not gone():
        if readable(process.stdout_fd, 0.2):
            chunk = os.read(process.stdout_fd, 4096)
            if not chunk:
                return None
            buffer += chunk
            for line in buffer.decode(errors="replace").splitlines():
                words = line.split()
                if words and words[0] == "READY":
                    return words
        elif process.exited():
            return None
    return None


class Template:
    """The controller's end of one template process; thread-safe."""

    def __init__(self, env: Mapping[str, str], spawner: Spawner):
        self._lock = threading.Lock()
        self._broken = False  # it did not answer in time: an answer may still come, so it forks no more hosts
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._socket = ours
        try:
            self._process = spawner.run(lambda: subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno()), str(os.getpid())], pass_fds=[theirs.fileno()],
                env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        finally:
            theirs.close()

    @property
    def pid(self) -> int:
        return self._process.pid

    def alive(self) -> bool:
        return self._process.poll() is None

    def usable(self) -> bool:
        return not self._broken and self.alive()

    def close(self, grace_s: float = 5.0) -> None:
        """End the template (it leaves when its socket closes, and its hosts with it) and collect its exit status."""
        self._socket.close()
        try:
            self._process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def fork_host(self, argv: Sequence[str], env: Mapping[str, str], cwd: str, stderr_fd: int,
                  module: str = HOST_MODULE, netns_fd: int | None = None) -> HostProcess:
        """A new host running `module`'s `main(argv)` (Coach's function host by default); its stderr goes to
        `stderr_fd`. `netns_fd`: the job's network namespace for its ps-lite nodes (coach/platforms/netns.py), which
        the host keeps open and names in `COACH_PS_NETNS_FD`."""
        read_fd, write_fd = os.pipe()
        request = json.dumps({"argv": list(argv), "env": dict(env), "cwd": cwd, "module": module,
                              "deadline_unix_s": time.time() + REPLY_TIMEOUT_S}).encode()
        try:
            with self._lock:
                socket.send_fds(self._socket, [request], [write_fd, stderr_fd, *(
                    [] if netns_fd is None else [netns_fd])])
                reply, fds = self._receive()
        except BaseException:
            self._broken = True
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        if "pid" not in reply or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            os.close(read_fd)
            raise TemplateError(str(reply.get("error", "no pid in the template's reply")))
        return HostProcess(int(reply["pid"]), fds[0], read_fd)

    def _receive(self) -> tuple[dict, list[int]]:
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while time.monotonic() < deadline:
            if readable(self._socket.fileno(), 0.5):
                message, fds, _, _ = socket.recv_fds(self._socket, MAX_REQUEST_BYTES, 1)
                if not message:
                    raise TemplateError(f"template process {self.pid} closed its socket")
                return json.loads(message), fds
            if not self.alive():
                raise TemplateError(f"template process {self.pid} ended with code {self._process.returncode}")
        raise TemplateError(f"template process {self.pid} did not answer within {REPLY_TIMEOUT_S:g} s")


_SPAWNER: Spawner | None = None
_TEMPLATES: dict[tuple[tuple[str, str], ...], Template] = {}
_RETIRED: list[Template] = []  # broken but alive: kept, since their hosts die when they do (and they, on EOF)
_TEMPLATES_LOCK = threading.Lock()


@atexit.register
def _close_templates() -> None:
    """At a normal exit, end every template now rather than leave it to the death signal (the hosts are gone by then:
    their platforms were closed)."""
    with _TEMPLATES_LOCK:
        templates = [*_TEMPLATES.values(), *_RETIRED]
        _TEMPLATES.clear()
        _RETIRED.clear()
    for template in templates:
        template.close()


def import_key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of an environment that MXNet and Python read at import: hosts that agree on it share a template."""
    return tuple(sorted((name, value) for name, value in env.items() if name.startswith(IMPORT_VARIABLE_PREFIXES)))


def template_for(env: Mapping[str, str], secret_variables: Sequence[str] = ()) -> Template:
    """This process's template for `env`, started on first use or after it died (without `secret_variables`)."""
    global _SPAWNER
    key = import_key(env)
    with _TEMPLATES_LOCK:
        template = _TEMPLATES.get(key)
        if template is None or not template.usable():
            if template is not None and template.alive():
                _RETIRED.append(template)
            elif template is not None:
                template.close()
            if _SPAWNER is None:
                _SPAWNER = Spawner("coach-template-spawner")
            template = _TEMPLATES[key] = Template(
                {name: value for name, value in env.items() if name not in secret_variables}, _SPAWNER)
        return template


# --- the template process -------------------------------------------------------------------------------------


def _preload() -> None:
    """Import what every host needs; a module that fails here is left for the host to fail on and log."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the host reports it in its own log
            pass


def _become_host(sock: socket.socket, request: dict, stdout_fd: int, stderr_fd: int,
                 netns_fd: int | None = None) -> None:
    """In the forked child: take the request's stdio, environment and directory (and the job's network namespace
    for its ps-lite nodes, kept open), then run the host; never returns."""
    code = 1
    try:
        sock.close()
        devnull = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((devnull, 0), (stdout_fd, 1), (stderr_fd, 2)):
            os.dup2(fd, target)
            os.close(fd)
        for signum in (signal.SIGINT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(request["env"])
        if netns_fd is not None:
            os.environ[PS_NETNS_FD_ENV] = str(netns_fd)
        os.chdir(request["cwd"])
        sys.path[0] = request["cwd"]  # as `python -m` would have it
        sys.argv = [sys.argv[0], *request["argv"]]
        _name_process(request["argv"])
        entry = importlib.import_module(request.get("module") or HOST_MODULE)

        code = entry.main(request["argv"])
    except SystemExit as leaving:
        code = leaving.code if isinstance(leaving.code, int) else 2
    except BaseException:  # noqa: BLE001 - the host's log gets it
        traceback.print_exc()
    finally:
        flush_and_exit(code)


def flush_and_exit(code: int) -> None:
    """Leave a forked child at once with `code`, what it printed flushed first (os._exit skips Python's exit, which
    in a fork would run the parent's atexit handlers and finalizers)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _name_process(argv: Sequence[str]) -> None:
    """Show the function's name in `top` (the command line is the template's, as after any fork)."""
    import ctypes

    name = argv[argv.index("--name") + 1] if "--name" in argv[:-1] else "coach-host"
    try:
        ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _serve_one(sock: socket.socket) -> bool:
    """Fork a host for one request; False once the controller has closed its end."""
    try:
        message, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST_BYTES, 3)
    except OSError:
        return False
    if not message:
        return False
    try:
        request = json.loads(message)
        if len(fds) not in (2, 3) or not isinstance(request.get("argv"), list) or \
                not isinstance(request.get("env"), dict):
            raise ValueError("a request has an argv, an env and two file descriptors (three with a namespace)")
        if time.time() > request.get("deadline_unix_s", math.inf):  # its controller gave up: no host nobody tracks
            raise TimeoutError("the request's deadline passed before the template read it")
        pid = os.fork()
        if pid == 0:
            _become_host(sock, request, fds[0], fds[1], fds[2] if len(fds) == 3 else None)
        pidfd = os.pidfd_open(pid)
        try:
            socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [pidfd])
        finally:
            os.close(pidfd)
    except Exception as error:  # noqa: BLE001 - answered, not fatal: the template keeps serving
        sock.send(json.dumps({"error": f"{type(error).__name__}: {error}"}).encode())
    finally:
        for fd in fds:
            os.close(fd)
    return True


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    sock = socket.socket(fileno=int(args[0]))
    parent_pid = int(args[1])
    from coach.platforms.host import die_with_parent

    die_with_parent(parent_pid)  # the host's own: SIGKILL when the controller's spawner thread ends, or leave now
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the controller and the hosts; we leave with it
    _preload()
    while os.getppid() == parent_pid:
        if readable(sock.fileno(), PARENT_POLL_S) and not _serve_one(sock):
            break
        _reap()
    return 0


if __name__ == "__main__":
    sys.exit(main())
