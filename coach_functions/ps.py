"""ps-lite nodes: a role's DMLC environment at a rendezvous, joining it (at once or ahead, in a thread), and the
scheduler and server roles, which serve until every worker has left.

Side effects: sets the DMLC_* environment variables, moves the thread that starts a ps-lite node into the job's
network namespace (when its host has one), connects to the PS scheduler, runs MXNet's kvstore.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
import time
from typing import Any, Callable

from coach.domain.contracts import EpochRequest, PsAddress, PsNodeReply

#: The host's file descriptor of its job's network namespace, on the embedded platform (coach/platforms/netns.py).
PS_NETNS_FD_ENV = "COACH_PS_NETNS_FD"
CLONE_NEWNET = 0x40000000  # <linux/sched.h>


def enter_job_network() -> None:
    """Move the calling thread, and every thread it starts from now on (ps-lite's and ZeroMQ's), into the job's own
    network namespace, when the host was given one: there the job's ps-lite nodes reach each other on a loopback of
    their own, and nothing outside the job reaches them (ps-lite aborts on any message it cannot parse). The rest of
    the process stays on the machine's network (the host's HTTP trigger, checkpoints in S3). A namespace the host
    was given but cannot enter fails the epoch: its peers are in it."""
    fd = os.environ.get(PS_NETNS_FD_ENV)
    if not fd:
        return
    if ctypes.CDLL(None, use_errno=True).setns(int(fd), CLONE_NEWNET) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"cannot enter the job's network namespace: {os.strerror(number)}")


def ps_environment(role: str, ps: PsAddress) -> dict[str, str]:
    """The DMLC variables of a role at a rendezvous, matching the servers and workers actually placed.

    The node's own address comes from the request alone: a default here would be wrong on any real cluster."""
    return {
        "DMLC_ROLE": role,
        "DMLC_PS_ROOT_URI": ps.root_uri,
        "DMLC_PS_ROOT_PORT": str(ps.root_port),
        "DMLC_NUM_SERVER": str(ps.num_servers),
        "DMLC_NUM_WORKER": str(ps.num_workers),
        "DMLC_NODE_HOST": ps.node_host,
        "PS_VERBOSE": "0",
    }


def await_scheduler(ps: PsAddress, timeout_s: float = 10.0) -> None:
    """Wait until the PS scheduler listens before joining: a node that connects earlier sits out ZeroMQ's
    100 ms reconnect interval, and ps-lite's 100 ms readiness poll, which doubles the rendezvous time."""
    deadline = time.monotonic() + timeout_s
    address = (ps.root_uri, ps.root_port)
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(address, timeout=0.5):
                return
        except OSError:
            time.sleep(0.005)


def join_ahead(role: str, ps: PsAddress) -> InThread:
    """Start this role's ps-lite node at `ps` now, before any request for it: a worker joins (its kvstore), a
    scheduler or server starts serving (its result: what `run_ps_node` replies, once every worker has left);
    either waits in the rendezvous until every node of it has come."""
    os.environ.update(ps_environment(role, ps))
    if role == "worker":
        return join_kvstore(ps)
    return InThread("ps-node", lambda: serve_ps_node(role, ps))


def run_ps_node(request: EpochRequest) -> dict:
    """Child side of the scheduler and server roles: serve until every worker has dropped its kvstore."""
    os.environ.update(ps_environment(request.role, request.ps))
    return serve_ps_node(request.role, request.ps)


def serve_ps_node(role: str, ps: PsAddress) -> dict:
    """Serve the role (its DMLC variables set) until the workers are gone."""
    enter_job_network()
    if role != "scheduler":
        await_scheduler(ps)
    from mxnet.kvstore import kvstore_server

    started = time.monotonic()
    try:
        kvstore_server._init_kvstore_server_module()
    except SystemExit:  # MXNet ends the role with sys.exit once the workers are gone
        pass
    return PsNodeReply(compute_s=time.monotonic() - started).to_dict()


class InThread:
    """`work()` in a daemon thread, started now: a ps-lite node joining or serving while its process does something
    else (MXNet's C calls release the GIL, so both go on at once)."""

    def __init__(self, name: str, work: Callable[[], Any]):
        self._work = work
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def result(self) -> Any:
        """What `work()` returned, handed over (no reference stays here: a kvstore's destructor, when the worker
        drops it, is what stops the servers); raises what it raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        value, self._value = self._value, None
        return value

    def _run(self) -> None:
        try:
            self._value = self._work()
        except BaseException as error:  # given to the child's own thread, which replies with it
            self._error = error


def join_kvstore(ps: PsAddress) -> InThread:
    """`mx.kv.create("dist_sync")` in a thread: ps-lite's Van::Start polls for the rendezvous every 100 ms,
    time the worker spends building its model, loading its checkpoint and running the
    shape pass instead of waiting, or a spare waiting for its request (`join_ahead`)."""

    def join():
        import mxnet as mx

        enter_job_network()
        await_scheduler(ps)
        return mx.kv.create("dist_sync")

    return InThread("kvstore-join", join)
