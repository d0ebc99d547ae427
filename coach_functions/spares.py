"""The host's spare child: forked ahead of its request, so that the fork is off the epoch's critical path.

The child that runs an epoch (coach_functions/children.py) is usually the host's *spare*: forked ahead, while the
previous epoch ran, and waiting for its request on a pipe (`run_epoch`); it is the warm host as it was, with nothing
of any epoch in it. When the last request announced where the next epoch will meet (`next`), the spare joins that
ps-lite rendezvous at once (`join_ahead`), so the next epoch, whose request carries the announcement's id, finds its
nodes met: ps-lite's rendezvous takes at least 0.1 s. Any other request gets a fresh child and the spare is dropped.
A function that the job's current step does not use but its next one will (a calibration point that adds a worker or
a server) is told the announcement by an `AheadRequest` instead, and its idle spare joins it (`announce`).

Side effects: forks processes (one keeper thread forks every spare), writes to the spares' pipes, kills spares.
"""

from __future__ import annotations

import functools
import json
import math
import os
import threading
import time

from coach.domain.contracts import EpochRequest, NextEpoch
from coach_functions.children import (alive, await_reply, forked, kill, read_until, registered, run_and_reply,
                                      run_in_child, write_frame)
from coach_functions.failures import broken_from_outside, log_failure, log_size
from coach_functions.host_state import HostState, Spare
from coach_functions.models import known_classes, load_model
from coach_functions.ps import InThread, join_ahead, run_ps_node
from coach_functions.training import run_worker_epoch


def run_epoch(host: HostState, request: EpochRequest) -> tuple[int, dict]:
    """`run_in_child` for the role's own work (`epoch_work`), in the spare child when there is a current one.

    Why a spare: forking a warm host (MXNet, the model's data) costs tens of milliseconds, on the critical path of every
    epoch; the spare is forked while the previous epoch runs and only reads its request when it comes. It holds
    nothing of any epoch: it is the warm host as it was, like a child forked now, and maybe a ps-lite node at this
    request's rendezvous, joined ahead.

    A spare that joined this request's rendezvous ahead but cannot run it (the model file changed since, or it
    died) is answered 500 at once: its peers may have met it already, and ps-lite lets no other node take its place
    (the epoch would hang until its deadline). The controller retries on fresh functions."""
    started = time.monotonic()
    with host.keeping, host.lock:
        spare, host.spare = host.spare, None
        joined_here = request.rendezvous_id is not None and request.rendezvous_id == host.joined_id
        current = spare is not None and spare.generation == host.generation and spare.serves(request, joined_here)
        host.ahead = None if request.next is None else (request.role, request.next)
    want_spare(host)
    if current and alive(spare.pid):
        try:
            write_frame(spare.request_fd, json.dumps({"request": request.to_dict(), "started_s": started}))
        except OSError:  # it died meanwhile (its end of the pipe is closed)
            pass
        else:
            os.close(spare.request_fd)
            return await_reply(host, spare.pid, spare.reply_fd, started, request.deadline_s, spare.log_from)
    if spare is not None:  # forked before a model was loaded, joined elsewhere, or dead: fork as usual
        _drop(spare)
    if joined_here:
        reply = {"error": "the spare child that joined this epoch's rendezvous ahead cannot run it (the model "
                          "file changed, or it died): run the epoch on fresh functions",
                 "wall_s": time.monotonic() - started}
        if spare is not None and broken_from_outside(spare.log_from):  # its ps-lite node was killed from outside
            reply.update(error=f"{reply['error']}; ps-lite aborted on a message from outside the job (failed to "
                               f"parse string into protobuf)", foreign=True)
        return 500, reply
    return run_in_child(host, request, lambda r: epoch_work(host, r), started)


def epoch_work(host: HostState, request: EpochRequest, joined: InThread | None = None) -> dict:
    """What an epoch child of the request's role does (in the child; the model comes from the host's cache), with
    the ps-lite node a spare started ahead at the request's rendezvous, if any."""
    if request.role == "worker":
        module, data = load_model(host, request.model_path)
        return run_worker_epoch(request, module, data, joined, known_classes(host, request.model_path, module))
    return joined.result() if joined is not None else run_ps_node(request)


def announce(host: HostState, role: str, ahead: NextEpoch) -> None:
    """This function's next epoch meets at `ahead` (an `AheadRequest`: the job's current step does not use it):
    have a spare join it now. An idle spare that joined nothing is told to join (a frame on its request pipe): no
    fork, no teardown, on CPUs a running epoch uses. One that joined it already is kept (the same announcement told
    twice); one that joined another rendezvous, or was forked before the model now loaded, is dropped for a fresh
    one that joins."""
    with host.keeping, host.lock:
        host.ahead = (role, ahead)
        spare = host.spare
        if spare is not None and spare.joined == ahead:
            return
        if (spare is not None and spare.joined is None and spare.generation == host.generation
                and ahead.id != host.joined_id):
            try:
                write_frame(spare.request_fd, json.dumps({"join": {"role": role, "next": ahead.to_dict()}}))
            except OSError:  # it died meanwhile: a fresh one joins
                pass
            else:
                spare.joined, host.joined_id = ahead, ahead.id
                return
        host.spare = None
    if spare is not None:
        _drop(spare)
    want_spare(host)


def want_spare(host: HostState) -> None:
    """Have a current spare child forked soon, by the host's keeper thread (started here the first time)."""
    with host.lock:
        if host.keeper is None:
            host.keeper = threading.Thread(target=_keep_spare, args=(host,), name="spare-keeper", daemon=True)
            host.keeper.start()
    host.wants_spare.set()


def _keep_spare(host: HostState) -> None:
    """The keeper: one long-lived thread forks every spare, since a child dies with the thread that forked it."""
    while True:
        host.wants_spare.wait()
        host.wants_spare.clear()
        with host.keeping:
            with host.lock:
                stale = host.spare if host.spare is not None and host.spare.generation != host.generation else None
                if stale is not None:
                    host.spare = None
                needed, generation, ahead = host.spare is None, host.generation, host.ahead
                if not needed or (ahead is not None and ahead[1].id == host.joined_id):
                    ahead = None  # joined already, by a spare now stale: its epoch will be answered 500
            if stale is not None:
                _drop(stale)
            if not needed:
                continue
            try:
                spare = _fork_spare(host, generation, ahead)
            except OSError as error:  # no pipe or no fork now: epochs fork their own, the next want tries again
                log_failure("the spare child could not be forked:", error)
                continue
            with host.lock:
                host.spare = spare  # none was stored meanwhile: only the keeper stores, epochs wait for it
                if ahead is not None:
                    host.joined_id = ahead[1].id


def _fork_spare(host: HostState, generation: int, ahead: tuple[str, NextEpoch] | None = None) -> Spare:
    with host.fork_lock:
        log_from = log_size()
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        parent_pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # the spare: never returns, not even raising into the keeper's loop
            status = 0
            try:
                os.close(request_write)
                os.close(reply_read)
                forked(host, parent_pid)
                joined = None if ahead is None else join_ahead(ahead[0], ahead[1].ps)
                while True:
                    raw, _ = read_until(request_read, math.inf)  # a frame: later children hold the write end too
                    if not raw:  # the host is gone
                        break
                    message = json.loads(raw)
                    if "join" in message:  # an announcement for this idle spare (`announce`): join it now
                        told = message["join"]
                        joined = joined or join_ahead(told["role"], NextEpoch.from_dict(told["next"]).ps)
                        continue
                    request = EpochRequest.from_dict(message["request"])
                    registered(host)
                    run_and_reply(request, functools.partial(epoch_work, host, joined=joined),
                                   float(message["started_s"]), reply_write)
                    break
            except BaseException as error:  # before its request (joining, reading it): the host sees it die
                status = 1
                log_failure("spare child failed before its epoch:", error)
            finally:
                os._exit(status)
        os.close(request_read)
        os.close(reply_write)
    return Spare(pid, request_write, reply_read, generation, None if ahead is None else ahead[1], log_from)


def _drop(spare: Spare) -> None:
    """End a spare that will get no request (not by closing its request pipe: a child forked since holds a copy of
    that end, so the spare might never see EOF). Reaped meanwhile: unmapping a forked host takes milliseconds."""
    kill(spare.pid)
    for fd in (spare.request_fd, spare.reply_fd):
        os.close(fd)
    threading.Thread(target=os.waitpid, args=(spare.pid, 0), name=f"drop-{spare.pid}", daemon=True).start()
