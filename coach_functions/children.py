"""An epoch runs in a child forked from the warm host: the fork, the one reply it writes into a pipe, the reaping,
and the cancel.

Why a child: MXNet's ps-lite can start only once per process, but importing MXNet costs seconds. The warm
host (a Nuclio worker, or Coach's embedded host) imports MXNet once in `init_context`; every invocation runs in
a child forked from it, which takes its role for one epoch, writes one JSON reply into a pipe (one length-prefixed
frame) and leaves with `os._exit`. The host answers as soon as the reply is whole and reaps the child meanwhile.

Side effects: forks, kills and reaps processes; reads and writes pipes.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import select
import signal
import sys
import threading
import time
import traceback
from typing import Callable

from coach.domain.contracts import EpochRequest
from coach_functions.failures import EpochError, broken_from_outside, log_failure, log_size
from coach_functions.host_state import HostState


PR_SET_PDEATHSIG = 1  # prctl option: signal the child when the forking thread dies


def _die_with_parent() -> None:
    """Ask Linux to kill this child when the host dies, so no role outlives its function."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the deadline still bounds the child
        pass


def run_in_child(host: HostState, request: EpochRequest, work: Callable[[EpochRequest], dict],
                 started: float | None = None) -> tuple[int, dict]:
    """Fork, run `work(request)` in the child, and return (HTTP status, reply) within the request's deadline
    (counted from `started`, the monotonic clock; default now)."""
    started = time.monotonic() if started is None else started
    with host.fork_lock:
        log_from = log_size()
        read_fd, write_fd = os.pipe()
        parent_pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # child: never returns
            os.close(read_fd)
            forked(host, parent_pid)
            registered(host)
            run_and_reply(request, work, started, write_fd)
        os.close(write_fd)
    return await_reply(host, pid, read_fd, started, request.deadline_s, log_from)


def alive(pid: int) -> bool:
    """Whether the child still runs (it is not reaped here: its pid stays its own until then)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


def forked(host: HostState, parent_pid: int) -> None:
    """First steps of every child: set the host's objects aside from the collector, die with the host."""
    # The host's objects are this child's too: set them aside from the collector, whose full collections (the
    # kvstore's teardown, and any automatic one) would otherwise walk every one of them and copy the pages they
    # sit on: a visible share of a LeNet epoch, none of it needed.
    gc.freeze()
    host.lock = threading.Lock()  # another thread of the host may have held it at the fork: load_model takes it
    _die_with_parent()
    if os.getppid() != parent_pid:
        os._exit(3)


def registered(host: HostState) -> None:
    """An epoch child, before its work: registered where a cancel received by any worker process of the function
    finds it (coach_functions/epochs.py); its host discards the entry when it reaps it."""
    if host.epochs is not None:
        host.epochs.add(os.getpid())


def run_and_reply(request: EpochRequest, work: Callable[[EpochRequest], dict], started: float,
                   write_fd: int) -> None:
    """The child's whole life after its prologue: `work(request)`, one JSON reply into `write_fd`, exit."""
    status = 0
    try:
        reply = work(request)
    except BaseException as error:  # everything must become a JSON reply, never a hang
        status = 1
        what = f"{request.role} of job {request.job}, step {request.step}, attempt {request.attempt}"
        if isinstance(error, EpochError):  # rejected: the request cannot run on any instance
            reply = {"error": str(error), "rejected": True}
            log_failure(f"{what}: rejected: {error}", error if error.__cause__ else None)
        else:
            reply = {"error": f"{type(error).__name__}: {error}", "trace": traceback.format_exc(limit=5)}
            log_failure(f"{what} failed:", error)
    reply["wall_s"] = time.monotonic() - started
    try:
        text = json.dumps(reply, allow_nan=False)  # standard JSON: never NaN or Infinity
    except (TypeError, ValueError) as error:
        status, text = 1, json.dumps({"error": f"reply is not standard JSON: {error}"})
    write_frame(write_fd, text)
    os.close(write_fd)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def await_reply(host: HostState, pid: int, read_fd: int, started: float, deadline_s: float,
                log_from: int | None = None) -> tuple[int, dict]:
    """The host's side of a running child: its reply, or 504 at the deadline (the child killed). A child that died
    because ps-lite aborted on bytes from outside the job (its log says so, after `log_from`) is answered 500 with
    `foreign: true`: the controller retries that epoch without counting it against the job."""
    with host.lock:
        host.children.add(pid)
    timed_out = True  # until the reply is read: anything else raised here kills the child too
    try:
        raw, timed_out = read_until(read_fd, started + deadline_s)
    finally:
        os.close(read_fd)
        if timed_out:
            kill(pid)
            _reap(host, pid)
    if timed_out:
        return 504, {"error": f"deadline of {deadline_s:g} s exceeded"}
    try:
        reply = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        reply = {}
    if isinstance(reply, dict) and reply and "error" not in reply:
        # a whole reply without error: the child wrote it last and only exits now. Answer at once and reap it
        # meanwhile: unmapping a forked host's memory takes milliseconds, on every epoch's critical path
        threading.Thread(target=_reap, args=(host, pid), name=f"reap-{pid}", daemon=True).start()
        return 200, reply
    exit_code = _reap(host, pid)
    if not isinstance(reply, dict):
        reply = {}
    reply.setdefault("error", f"epoch child exited with code {exit_code}")
    if exit_code < 0 and broken_from_outside(log_from):
        reply["error"] = (f"ps-lite aborted on a message from outside the job (failed to parse string into "
                          f"protobuf); epoch child exited with code {exit_code}")
        reply["foreign"] = True
    return (422 if reply.pop("rejected", False) is True else 500), reply


def _reap(host: HostState, pid: int) -> int:
    """Wait for the child to end and forget it; its exit code."""
    entry = host.epochs.entry(pid) if host.epochs is not None else None  # while the pid is still this child's
    _, wait_status = os.waitpid(pid, 0)
    if host.epochs is not None:
        host.epochs.discard(entry)
    with host.lock:
        host.children.discard(pid)
    return os.waitstatus_to_exitcode(wait_status)


FRAME_HEADER = 8  # bytes: the length of the text that follows, big-endian


def write_frame(fd: int, text: str) -> None:
    """One message on a pipe: its length, then its UTF-8 text (the reader knows it is whole without an EOF)."""
    data = text.encode()
    data = len(data).to_bytes(FRAME_HEADER, "big") + data
    while data:
        data = data[os.write(fd, data):]


def read_until(fd: int, deadline: float) -> tuple[str, bool]:
    """Read one frame (or what came before EOF: a child that died writing) until the monotonic deadline; return
    (text, timed_out). The text is empty when nothing whole came. Never reads past the frame: a spare's pipe may
    hold its join frame and its request back to back."""
    data = bytearray()
    while True:
        size = FRAME_HEADER + int.from_bytes(data[:FRAME_HEADER], "big") if len(data) >= FRAME_HEADER else None
        if size is not None and len(data) >= size:
            return data[FRAME_HEADER:].decode(errors="replace"), False
        left = deadline - time.monotonic()
        if left <= 0:
            return "", True
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, min((size or FRAME_HEADER) - len(data), 65536))
        if not chunk:
            return "", False
        data += chunk


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def cancel_children(host: HostState) -> int:
    """Kill every running epoch child of this function (used when another role of the epoch failed): those its
    worker processes registered, when it has several, else this host's own."""
    if host.epochs is not None:
        return host.epochs.cancel_all()
    with host.lock:
        pids = list(host.children)
    for pid in pids:
        kill(pid)
    return len(pids)
