"""What the three Nuclio functions share: run one epoch of one parameter-server role in a forked child.

Why a child: MXNet's ps-lite can start only once per process, but importing MXNet costs seconds. The warm
host (a Nuclio worker, or Coach's embedded host) imports MXNet once in `init_context`; every invocation runs in
a child forked from it, which takes its role for one epoch, writes one JSON reply into a pipe (one length-prefixed
frame) and leaves with `os._exit`. The host answers as soon as the reply is whole and reaps the child meanwhile.
The child is usually the host's *spare*: forked ahead, while the previous epoch ran, and waiting for its request
on a pipe (`run_epoch`), so the fork is off the epoch's critical path; it is the warm host as it was, with nothing
of any epoch in it. When the last request announced where the next epoch will meet (`next`), the spare joins that
ps-lite rendezvous at once (`join_ahead`), so the next epoch, whose request carries the announcement's id, finds its
nodes met: ps-lite's rendezvous takes at least 0.1 s. Any other request gets a fresh child and the spare is dropped.
A function that the job's current step does not use but its next one will (a calibration point that adds a worker or
a server) is told the announcement by an `AheadRequest` instead, and its idle spare joins it (`announce`).

The event body is the typed contract of coach/domain/contracts.py: an `EpochRequest`, a `WarmRequest`, an
`AheadRequest` or `{"action": "cancel"}`. A body that does not match it is answered 400 with one line naming the field, before
anything is forked or loaded. A broken model file (it does not import, `build_model()`, `load_data()` or `loss()`
raises, or its data are not what the contract says) is answered 422, `model file PATH: ...`: it would fail the
same way on any instance, so the controller does not retry it. The traceback of anything the model file raised
goes to stderr, which is the function's log.

Replies are standard JSON (never NaN or Infinity). A worker whose training loss or parameters stop being finite
ends its training loop with every other worker at the same step, tears down as usual and replies
`diverged: true`, with no checkpoint. A worker whose deadline comes before the end of its shard does the same,
a reserve before it (coach/domain/deadlines.py, coach_functions/deadline.py), and replies `stopped_early: true` with
the samples it trained and, from rank 0, the checkpoint of them: a partial epoch, not a 504.

A host keeps only what the model file gives: its module, its data, and the classes the first worker epoch's shape
pass found for it (a field of the child's reply that the host takes out); an epoch from a checkpoint, whose file
gives every shape, then runs no shape pass. At the job's warm request, before any epoch, a worker host also warms
MXNet up for every batch shape the job's epochs use at 1-4 workers, on a throw-away model (coach_functions/warmup.py):
every child forked after it starts warm, and no number an epoch computes changes. Nothing is warmed while an epoch
runs: on two shared CPUs that would slow the epoch (and a calibration mini-epoch, which is a measurement).

Side effects: forks processes, reads the model file, reads and writes checkpoint files named in the event.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import importlib.util
import json
import math
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from coach.domain.contracts import (
    AheadRequest,
    ContractError,
    EpochRequest,
    NextEpoch,
    PsAddress,
    PsNodeReply,
    WarmReply,
    WarmRequest,
    WorkerReply,
)
from coach.domain.deadlines import training_stop_s
from coach_functions import checkpoints
from coach_functions.deadline import VALIDATION_BATCH_STEPS, StopVote
from coach_functions.epochs import EpochRegistry, registry_from_env
from coach_functions.noise_scale import NoiseProbe
from coach_functions.shards import shard_samples
from coach_functions.validation import SharedValidation
from coach_functions.warmup import Warmth, job_shapes, warm_up

PR_SET_PDEATHSIG = 1  # prctl option: signal the child when the forking thread dies


class EpochError(Exception):
    """A request that fails the same way on any instance: a broken model file or broken data. Answered 422
    (`rejected`, never retried), also when raised in the epoch child; the message names the model file."""


def log_failure(header: str, error: BaseException | None = None) -> None:
    """Write `header` and the traceback of `error` (the one being handled) to stderr, the function's log, now.

    Straight to file descriptor 2: a forked epoch child must not leave it in a buffer it never flushes, nor
    flush a copy of its parent's."""
    text = header.rstrip("\n") + "\n"
    if error is not None:
        text += "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    data = text.encode(errors="replace")
    while data:
        try:
            data = data[os.write(2, data):]
        except OSError:  # no stderr: nothing more to do
            return


@dataclass
class Spare:
    """A child forked ahead of its request, blocked reading it from `request_fd`; it replies on `reply_fd`."""

    pid: int
    request_fd: int  # the host's end: one frame, the request (a stale spare is killed, never told)
    reply_fd: int  # the host's end of the reply pipe
    generation: int  # HostState.generation when it was forked: it knows the models loaded until then
    joined: NextEpoch | None = None  # the announced rendezvous it joined: it runs only that epoch

    def serves(self, request: EpochRequest, joined_here: bool) -> bool:
        """Whether it may run `request`; `joined_here`: a child of this host joined the request's rendezvous, which
        then only that child may run (ps-lite takes one node per function)."""
        if self.joined is None:
            return not joined_here
        return self.joined.id == request.rendezvous_id and self.joined.ps == request.ps


@dataclass
class HostState:
    """Per-host memory shared by invocations: loaded models and their data, the running children, the spare."""

    models: dict[str, tuple[float, Any, Any]] = field(default_factory=dict)  # path -> (mtime, module, data)
    # path -> (module, classes): what a worker epoch's shape pass found for the module loaded now (None: a loss
    # whose labels are not class indices); epochs from a checkpoint then skip the shape pass
    classes: dict[str, tuple[Any, int | None]] = field(default_factory=dict)
    children: set[int] = field(default_factory=set)  # pids of running epoch children
    # where the children are registered for a cancel that another worker process of the function receives
    # (coach_functions/epochs.py); None: this process is the function's only one, its `children` are all there is
    epochs: EpochRegistry | None = field(default_factory=registry_from_env)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # held from making a child's pipes until the host has closed the child's ends: no other child may inherit
    # them (a reply pipe whose write end another process holds never reaches EOF)
    fork_lock: threading.Lock = field(default_factory=threading.Lock)
    # held by the keeper from choosing a spare until it is stored, and by an epoch taking it: an epoch never forks
    # a child of its own while the keeper's spare joins the same rendezvous
    keeping: threading.Lock = field(default_factory=threading.Lock)
    generation: int = 0  # counts the changes of `models`
    spare: Spare | None = None
    ahead: tuple[str, NextEpoch] | None = None  # (role, announcement) the next spare joins: the last request's
    joined_id: str | None = None  # the last announcement a child of this host joined: no other child may join it
    wants_spare: threading.Event = field(default_factory=threading.Event)
    keeper: threading.Thread | None = None
    warmth: Warmth = field(default_factory=Warmth)  # the batch shapes warmed in this host (coach_functions/warmup.py)


def init_host(context) -> None:
    """Import MXNet once in the warm host so that every forked epoch child starts without that cost."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import mxnet  # noqa: F401  (the point is to have it imported before fork)

    context.user_data.host = HostState()
    want_spare(context.user_data.host)


def _model_key(model_path: str) -> str:
    """The key of a model file in a host's caches (`models`, `classes`): its resolved path."""
    return str(Path(model_path).resolve())


def load_model(host: HostState, model_path: str):
    """Import a model file and call its `load_data()` once per host (cached until the file changes).

    Every problem is an EpochError naming the model file; what the model file itself raised is logged with its
    traceback."""
    path = _model_key(model_path)
    try:
        mtime = os.stat(path).st_mtime
    except OSError as error:
        raise EpochError(f"model file {model_path}: {error.strerror}") from None
    with host.lock:
        cached = host.models.get(path)
        if cached and cached[0] == mtime:
            return cached[1], cached[2]
        spec = importlib.util.spec_from_file_location(f"coach_model_{abs(hash(path))}", path)
        module = importlib.util.module_from_spec(spec)
        user_code(model_path, "importing it", lambda: spec.loader.exec_module(module))
        for name in ("build_model", "load_data"):
            if not callable(getattr(module, name, None)):
                raise EpochError(f"model file {model_path}: no function {name}()")
        raw = user_code(model_path, "load_data()", module.load_data)
        try:
            data = normalise_data(raw)
        except EpochError as error:
            raise EpochError(f"model file {model_path}: {error}") from None
        host.models[path] = (mtime, module, data)
        host.classes.pop(path, None)  # learnt for the module replaced now
        host.generation += 1
        return module, data


def user_code(model_path: str, what: str, call: Callable[[], Any]) -> Any:
    """`call()`, code of the model file: whatever it raises is logged with its traceback and becomes an EpochError
    (`model file PATH: load_data() raised ValueError: ...`). A model file that calls sys.exit() is no exception."""
    try:
        return call()
    except (Exception, SystemExit) as error:
        message = f"model file {model_path}: {what} raised {type(error).__name__}: {error}"
        log_failure(f"{message.splitlines()[0]}; its traceback:", error)
        raise EpochError(message) from None


def normalise_data(data) -> dict:
    """Accept `(X, y)`, `(X, y, X_val, y_val)` or a dict with those keys; return float32 arrays, checked.

    Rejected (EpochError): another shape of result, inputs or labels that are not numeric arrays, empty training
    data, inputs and labels of different lengths, NaN or infinity anywhere, and validation samples (or labels) of
    another shape than the training ones. Labels are checked against the model's classes later, in the epoch,
    where the model's output size is known (`check_labels`)."""
    import numpy as np

    if isinstance(data, dict):
        parts = [data.get(k) for k in ("X_train", "y_train", "X_val", "y_val")]
    elif isinstance(data, (tuple, list)) and len(data) in (2, 4):
        parts = list(data) + [None] * (4 - len(data))
    else:
        raise EpochError("load_data() must return (X, y), (X, y, X_val, y_val) or a dict of them")
    x_train, y_train, x_val, y_val = parts
    if x_train is None or y_train is None or _length(x_train) != _length(y_train) or _length(x_train) == 0:
        raise EpochError("load_data(): training inputs and labels must be non-empty and of equal length")
    if (x_val is None) != (y_val is None) or (x_val is not None and _length(x_val) != _length(y_val)):
        raise EpochError("load_data(): validation inputs and labels must both be given, of equal length")
    names = ("X_train", "y_train") + (("X_val", "y_val") if x_val is not None and _length(x_val) > 0 else ())
    out = {}
    for name, value in zip(names, (x_train, y_train, x_val, y_val)):
        try:
            array = np.asarray(value, dtype="float32")
        except (TypeError, ValueError) as error:
            raise EpochError(f"load_data(): {name} is not a numeric array ({error})") from None
        if array.ndim == 0:
            raise EpochError(f"load_data(): {name} is a single number, not one value per sample")
        if array.ndim == 2 and array.shape[1] == 1 and name.startswith("y"):
            array = array.reshape(-1)  # one label per row, as a column
        finite = np.isfinite(array)
        if not finite.all():
            where = np.unravel_index(int(np.argmin(finite)), array.shape)
            raise EpochError(f"load_data(): {name} holds NaN or infinity (first at sample {where[0]}: "
                             f"{array[where]})")
        out[name] = array
    for inputs, labels in (("X_val", "X_train"), ("y_val", "y_train")):
        if inputs in out and out[inputs].shape[1:] != out[labels].shape[1:]:
            raise EpochError(f"load_data(): {inputs} samples have shape {out[inputs].shape[1:]}, {labels} samples "
                             f"{out[labels].shape[1:]}")
    return out


def _length(value) -> int | None:
    try:
        return len(value)
    except TypeError:  # a number, or something else without a length
        return None


def check_labels(data: dict, classes: int | None, model_path: str) -> None:
    """Labels must be class indices 0..classes-1 of the model's output (`classes` from the shape pass; None when
    the model's loss is not a softmax over sparse labels, and then labels are the loss's business)."""
    import numpy as np

    if classes is None:
        return
    for name in ("y_train", "y_val"):
        labels = data.get(name)
        if labels is None:
            continue
        if labels.ndim != 1:
            raise EpochError(f"model file {model_path}: {name} must hold one class index per sample, it has shape "
                             f"{labels.shape}")
        bad = (labels < 0) | (labels >= classes) | (labels != np.floor(labels))
        if bad.any():
            first = int(np.argmax(bad))
            raise EpochError(f"model file {model_path}: {name}[{first}] is {labels[first]:g}, not a class index of "
                             f"the model's {classes} outputs (0..{classes - 1}); {int(bad.sum())} such labels")


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
        read_fd, write_fd = os.pipe()
        parent_pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # child: never returns
            os.close(read_fd)
            _forked(host, parent_pid)
            _registered(host)
            _run_and_reply(request, work, started, write_fd)
        os.close(write_fd)
    return _await_reply(host, pid, read_fd, started, request.deadline_s)


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
    if current and _alive(spare.pid):
        try:
            _write_frame(spare.request_fd, json.dumps({"request": request.to_dict(), "started_s": started}))
        except OSError:  # it died meanwhile (its end of the pipe is closed)
            pass
        else:
            os.close(spare.request_fd)
            return _await_reply(host, spare.pid, spare.reply_fd, started, request.deadline_s)
    if spare is not None:  # forked before a model was loaded, joined elsewhere, or dead: fork as usual
        _drop(spare)
    if joined_here:
        return 500, {"error": "the spare child that joined this epoch's rendezvous ahead cannot run it (the model "
                              "file changed, or it died): run the epoch on fresh functions",
                     "wall_s": time.monotonic() - started}
    return run_in_child(host, request, lambda r: epoch_work(host, r), started)


def _alive(pid: int) -> bool:
    """Whether the child still runs (it is not reaped here: its pid stays its own until then)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


def epoch_work(host: HostState, request: EpochRequest, joined: InThread | None = None) -> dict:
    """What an epoch child of the request's role does (in the child; the model comes from the host's cache), with
    the ps-lite node a spare started ahead at the request's rendezvous, if any."""
    if request.role == "worker":
        module, data = load_model(host, request.model_path)
        return run_worker_epoch(request, module, data, joined, known_classes(host, request.model_path, module))
    return joined.result() if joined is not None else run_ps_node(request)


#: The field of a worker child's reply that tells its host the model's classes; the host takes it out
#: (`learn_classes`) before answering, so it never reaches the controller.
CLASSES_FIELD = "host_classes"
UNKNOWN = object()  # no epoch of the loaded module has told its classes yet


def known_classes(host: HostState, model_path: str, module) -> Any:
    """The classes a shape pass found for `module` (int or None), or UNKNOWN."""
    found = host.classes.get(_model_key(model_path))
    return found[1] if found is not None and found[0] is module else UNKNOWN


def learn_classes(host: HostState, model_path: str, module, reply: dict) -> None:
    """Take the classes out of a worker child's reply and keep them for `module`, the one its epoch ran (host side),
    while it is still the one loaded: a model file loaded again meanwhile has not told its classes yet."""
    if CLASSES_FIELD not in reply:
        return
    classes = reply.pop(CLASSES_FIELD)
    path = _model_key(model_path)
    with host.lock:
        loaded = host.models.get(path)
        if loaded is not None and loaded[1] is module and (classes is None or isinstance(classes, int)):
            host.classes[path] = (module, classes)


def join_ahead(role: str, ps: PsAddress) -> InThread:
    """Start this role's ps-lite node at `ps` now, before any request for it: a worker joins (its kvstore), a
    scheduler or server starts serving (its result: what `run_ps_node` replies, once every worker has left);
    either waits in the rendezvous until every node of it has come."""
    os.environ.update(ps_environment(role, ps))
    if role == "worker":
        return join_kvstore(ps)
    return InThread("ps-node", lambda: serve_ps_node(role, ps))


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
                _write_frame(spare.request_fd, json.dumps({"join": {"role": role, "next": ahead.to_dict()}}))
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


def warm_host(host: HostState, model_path: str, module, data: dict, batch_size: int) -> None:
    """Warm MXNet in this worker host for the batch shapes of a job's epochs at 1-4 workers (coach_functions/warmup.py),
    those not tried yet for `module`, the most used first, within WARM_UP_LIMIT_S: every child forked after it starts
    warm. Holds the fork lock meanwhile, so that no child is forked while the host's MXNet engine runs; a warm-up
    that fails is logged and not tried again (the epochs start cold, and show the model file's own faults)."""
    path = _model_key(model_path)
    shapes = host.warmth.unwarmed(path, module, job_shapes(batch_size, len(data["X_train"]),
                                                           len(data.get("X_val", ()))))
    if not shapes:
        return
    try:
        with host.fork_lock:
            warm_up(module, data["X_train"][0], shapes)
    except Exception as error:  # noqa: BLE001 - the model file's code: anything it raises
        log_failure(f"warming up for model file {model_path} failed; its epochs start cold:", error)
    finally:
        host.warmth.done(path, module, shapes)  # also those the time limit left out: a host warms a job once


def _fork_spare(host: HostState, generation: int, ahead: tuple[str, NextEpoch] | None = None) -> Spare:
    with host.fork_lock:
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        parent_pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # the spare: never returns, not even raising into the keeper's loop
            status = 0
            try:
                os.close(request_write)
                os.close(reply_read)
                _forked(host, parent_pid)
                joined = None if ahead is None else join_ahead(ahead[0], ahead[1].ps)
                while True:
                    raw, _ = _read_until(request_read, math.inf)  # a frame: later children hold the write end too
                    if not raw:  # the host is gone
                        break
                    message = json.loads(raw)
                    if "join" in message:  # an announcement for this idle spare (`announce`): join it now
                        told = message["join"]
                        joined = joined or join_ahead(told["role"], NextEpoch.from_dict(told["next"]).ps)
                        continue
                    request = EpochRequest.from_dict(message["request"])
                    _registered(host)
                    _run_and_reply(request, functools.partial(epoch_work, host, joined=joined),
                                   float(message["started_s"]), reply_write)
                    break
            except BaseException as error:  # before its request (joining, reading it): the host sees it die
                status = 1
                log_failure("spare child failed before its epoch:", error)
            finally:
                os._exit(status)
        os.close(request_read)
        os.close(reply_write)
    return Spare(pid, request_write, reply_read, generation, None if ahead is None else ahead[1])


def _drop(spare: Spare) -> None:
    """End a spare that will get no request (not by closing its request pipe: a child forked since holds a copy of
    that end, so the spare might never see EOF). Reaped meanwhile: unmapping a forked host takes milliseconds."""
    _kill(spare.pid)
    for fd in (spare.request_fd, spare.reply_fd):
        os.close(fd)
    threading.Thread(target=os.waitpid, args=(spare.pid, 0), name=f"drop-{spare.pid}", daemon=True).start()


def _forked(host: HostState, parent_pid: int) -> None:
    """First steps of every child: set the host's objects aside from the collector, die with the host."""
    # The host's objects are this child's too: set them aside from the collector, whose full collections (the
    # kvstore's teardown, and any automatic one) would otherwise walk every one of them and copy the pages they
    # sit on: a visible share of a LeNet epoch, none of it needed.
    gc.freeze()
    host.lock = threading.Lock()  # another thread of the host may have held it at the fork: load_model takes it
    _die_with_parent()
    if os.getppid() != parent_pid:
        os._exit(3)


def _registered(host: HostState) -> None:
    """An epoch child, before its work: registered where a cancel received by any worker process of the function
    finds it (coach_functions/epochs.py); its host discards the entry when it reaps it."""
    if host.epochs is not None:
        host.epochs.add(os.getpid())


def _run_and_reply(request: EpochRequest, work: Callable[[EpochRequest], dict], started: float,
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
    _write_frame(write_fd, text)
    os.close(write_fd)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _await_reply(host: HostState, pid: int, read_fd: int, started: float, deadline_s: float) -> tuple[int, dict]:
    """The host's side of a running child: its reply, or 504 at the deadline (the child killed)."""
    with host.lock:
        host.children.add(pid)
    timed_out = True  # until the reply is read: anything else raised here kills the child too
    try:
        raw, timed_out = _read_until(read_fd, started + deadline_s)
    finally:
        os.close(read_fd)
        if timed_out:
            _kill(pid)
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


def _write_frame(fd: int, text: str) -> None:
    """One message on a pipe: its length, then its UTF-8 text (the reader knows it is whole without an EOF)."""
    data = text.encode()
    data = len(data).to_bytes(FRAME_HEADER, "big") + data
    while data:
        data = data[os.write(fd, data):]


def _read_until(fd: int, deadline: float) -> tuple[str, bool]:
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


def _kill(pid: int) -> None:
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
        _kill(pid)
    return len(pids)


def handle_event(context, event, role: str) -> Any:
    """The body of every role's Nuclio handler: an epoch, a warm-up, a cancel, or a bad request, answered as JSON."""
    host: HostState = context.user_data.host
    body = event.body
    if isinstance(body, (bytes, str)):
        try:
            body = json.loads(body or "{}")
        except ValueError:  # JSONDecodeError, or bytes that are not UTF-8
            return _respond(context, 400, {"error": "body: not valid JSON", "field": "body", "role": role})
    action = body.get("action") if isinstance(body, dict) else None
    if action == "cancel":
        return _respond(context, 200, {"cancelled": cancel_children(host)})
    try:
        request = _parse(body, action, role)
    except ContractError as error:  # before any fork: the controller sent something this side cannot run
        return _respond(context, 400, {"error": str(error), "field": error.field, "role": role})
    if isinstance(request, AheadRequest):
        announce(host, request.role, request.next)
        return _respond(context, 200, {"ahead": True, "role": role})
    if isinstance(request, WarmRequest):  # load the model file and its data before the first timed epoch
        warmed = WarmReply()
        if role == "worker":
            try:
                module, data = load_model(host, request.model_path)
            except EpochError as error:  # the model file, its load_data() or its data: logged, rejected
                return _respond(context, 422, {"error": str(error), "role": role})
            if request.batch_size is not None:  # before any epoch: calibration then measures warm children too
                warm_host(host, request.model_path, module, data, request.batch_size)
            want_spare(host)  # one that holds the model now
            warmed = WarmReply(train_samples=len(data["X_train"]))
        return _respond(context, 200, {**warmed.to_dict(), "role": role})
    if role == "worker":
        try:
            module, _ = load_model(host, request.model_path)  # rejected here, before any fork; cached for the child
        except EpochError as error:
            return _respond(context, 422, {"error": str(error), "role": role})
    status, reply = run_epoch(host, request)
    if role == "worker":
        learn_classes(host, request.model_path, module, reply)
    reply["role"] = role
    return _respond(context, status, reply)


def _parse(body: Any, action: Any, role: str) -> EpochRequest | WarmRequest | AheadRequest:
    """The typed request in `body`, or ContractError; an epoch or ahead request must be for this function's own
    role."""
    if action == "warm":
        return WarmRequest.from_dict(body)
    if action == "ahead":
        request = AheadRequest.from_dict(body)
    elif action is not None:
        raise ContractError("action", f"unknown action {str(action)[:40]!r}, expected 'warm', 'ahead' or 'cancel'")
    else:
        request = EpochRequest.from_dict(body)
    if request.role != role:
        raise ContractError("role", f"this is the {role} function, got a request for the {request.role} role")
    return request


def _respond(context, status: int, reply: dict):
    """The reply as standard JSON; one with NaN or Infinity in it is a bug here, answered 500 saying so."""
    try:
        body = json.dumps(reply, allow_nan=False)
    except (TypeError, ValueError) as error:
        status, body = 500, json.dumps({"error": f"reply is not standard JSON: {error}", "role": reply.get("role")})
    return context.Response(body=body, content_type="application/json", status_code=status)


def run_ps_node(request: EpochRequest) -> dict:
    """Child side of the scheduler and server roles: serve until every worker has dropped its kvstore."""
    os.environ.update(ps_environment(request.role, request.ps))
    return serve_ps_node(request.role, request.ps)


def serve_ps_node(role: str, ps: PsAddress) -> dict:
    """Serve the role (its DMLC variables set) until the workers are gone."""
    if role != "scheduler":
        await_scheduler(ps)
    from mxnet.kvstore import kvstore_server

    started = time.monotonic()
    try:
        kvstore_server._init_kvstore_server_module()
    except SystemExit:  # MXNet ends the role with sys.exit once the workers are gone
        pass
    return PsNodeReply(compute_s=time.monotonic() - started).to_dict()


def _shard_size(num_samples: int, request: EpochRequest) -> int:
    """How many samples each worker trains on (the same for every rank)."""
    return shard_samples(num_samples, request.ps.num_workers, request.data_fraction)


def _shard(data: dict, request: EpochRequest, rank: int) -> tuple[Any, Any]:
    """This worker's equal-sized slice of a seeded permutation of the (optionally reduced) training set.

    Every worker draws the same permutation (the job's seed) and keeps its own block of it, so the shards
    are disjoint without the workers talking to each other."""
    import numpy as np

    x, y = data["X_train"], data["y_train"]
    order = np.random.RandomState(request.hyper.seed).permutation(len(x))
    per_worker = _shard_size(len(x), request)
    mine = order[rank * per_worker : (rank + 1) * per_worker]
    return x[mine], y[mine]


def run_worker_epoch(request: EpochRequest, module, data: dict, joining: InThread | None = None,
                     classes_known: Any = UNKNOWN) -> dict:
    """Child side of a worker: build the model, load the checkpoint, train one epoch on its shard, validate its
    slice of the validation set (coach_functions/validation.py); rank 0 replies the whole set's figures and saves.

    The whole preparation (building the model, loading the checkpoint, the shape pass) overlaps the ps-lite
    rendezvous (`join_kvstore`), when a spare has not joined it ahead already; a broken model file found meanwhile is
    rejected (EpochError) and the controller cancels the peers that joined. A training loss or parameters
    that stop being finite end the training loop of every worker at the same step (see `_train`); such an epoch
    replies `diverged` and saves nothing. The deadline does too, a reserve before it (coach/domain/deadlines.py,
    coach_functions/deadline.py): the epoch replies `stopped_early` with what it trained, validated and saved as usual
    (nothing saved if it trained nothing). `joining` is the kvstore a spare joined ahead at the request's
    rendezvous (coach_functions/runtime.py's `join_ahead`), if any. `classes_known`: what an earlier epoch's shape pass
    found for this module (`known_classes`); an epoch from a checkpoint then skips its own."""
    entered_s = time.monotonic()  # a few ms after the host's clock for the deadline started: the fork
    os.environ.update(ps_environment(request.role, request.ps))
    import mxnet as mx
    from mxnet import gluon

    hyper = request.hyper
    if _shard_size(len(data["X_train"]), request) == 0:
        raise EpochError(f"model file {request.model_path}: {len(data['X_train'])} training samples, fewer than the "
                         f"{request.ps.num_workers} workers")
    # ps-lite's rendezvous waits at least 0.1 s (its readiness poll): joined ahead by the spare, or join first and
    # prepare meanwhile. A broken model file is found during it; the first failure of an epoch makes the controller
    # cancel the joined peers.
    joining = joining or join_kvstore(request.ps)
    mx.random.seed(hyper.seed)  # every worker initialises alike; rank 0's values are broadcast anyway
    net = user_code(request.model_path, "build_model()", module.build_model)
    if not isinstance(net, gluon.Block):
        raise EpochError(f"model file {request.model_path}: build_model() returned {type(net).__name__}, not a "
                         f"Gluon block")
    if callable(getattr(module, "loss", None)):
        loss_fn = user_code(request.model_path, "loss()", module.loss)
    else:
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    if request.checkpoint_load:  # the checkpoint gives every shape: no throw-away initialisation
        checkpoints.load_parameters(net, request.checkpoint_load)
    else:
        net.initialize(mx.init.Xavier())
    if request.checkpoint_load and classes_known is not UNKNOWN:
        # the checkpoint gave every shape and the classes are known: no shape pass (an inference-mode forward,
        # on every epoch's critical path), hence no layout to restore either
        classes = classes_known
    else:
        # shape pass: materialises deferred shapes before the kvstore broadcasts them, and tells the model's classes
        classes = _classes(net(mx.nd.array(data["X_train"][:1])), loss_fn)
        _plain_layout(net)
    check_labels(data, classes, request.model_path)  # rejected now: the controller cancels the joined peers
    kv = joining.result()
    rank, num_workers = kv.rank, kv.num_workers
    if num_workers != request.ps.num_workers:  # DMLC_NUM_WORKER came from the request: this is a ps-lite bug
        raise RuntimeError(f"kvstore has {num_workers} workers, the request {request.ps.num_workers}")
    x, y = _shard(data, request, rank)
    opt_params = {**hyper.optimizer_params, "learning_rate": hyper.learning_rate}
    trainer = gluon.Trainer(net.collect_params(), hyper.optimizer, opt_params, kvstore=kv, update_on_kvstore=False)
    if request.checkpoint_load:
        checkpoints.load_states(trainer, request.checkpoint_load)
    _await_broadcast(trainer, net.collect_params().values())
    validation_steps = 0.0  # every worker validates its slice after the loop: room for it, in step-times
    shared_validation = None
    if "X_val" in data:
        shared_validation = SharedValidation(kv, net, len(data["X_val"]), hyper.batch_size)
        validation_steps = shared_validation.batches * VALIDATION_BATCH_STEPS
    vote = StopVote(kv, entered_s + training_stop_s(request.deadline_s, setup_s=time.monotonic() - entered_s),
                    validation_steps)

    started = time.monotonic()
    order_seed = hyper.seed * 100003 + request.step * 101 + rank
    noise = NoiseProbe(trainer._params, num_workers, hyper.batch_size) if hyper.measure_noise else None
    loss_sum, correct, samples, diverged, marks = _train(net, trainer, loss_fn, x, y, order_seed, hyper.batch_size,
                                                         num_workers, noise, vote=vote)
    vote.close()
    compute_s = time.monotonic() - started
    warmup_s = _warmup_s(marks, compute_s, math.ceil(samples / hyper.batch_size))
    diverged = diverged or not math.isfinite(loss_sum) or not _finite_parameters(net)

    validation, saved = {}, None
    if not diverged and samples:  # every worker or none (they agree); stopped before its first step: nothing new
        if shared_validation is not None:
            validation = shared_validation.run(net, loss_fn, data["X_val"], data["y_val"])
            diverged = not math.isfinite(validation["val_loss"])
        if diverged or rank != 0:  # rank 0 replies the validation; not finite: no checkpoint, and no NaN in the reply
            validation = {}
        else:
            _save_checkpoint(net, trainer, request.checkpoint_save)
            saved = request.checkpoint_save
    reply = WorkerReply(rank=rank, num_workers=num_workers, samples=samples, correct=correct, compute_s=compute_s,
                        loss_sum=loss_sum if math.isfinite(loss_sum) else None, checkpoint_saved=saved,
                        diverged=diverged, stopped_early=vote.stopped, shard_samples=len(x),
                        warmup_s=warmup_s,
                        **validation, **(noise.reply_fields() if noise and not diverged else {}))
    # the kvstore's destructor tells the servers to stop: drop every reference before leaving (a Parameter holds
    # its Trainer, which holds the kvstore)
    del trainer, net, kv, loss_fn, vote, shared_validation
    gc.collect()
    return {**reply.to_dict(), CLASSES_FIELD: classes}


def _warmup_s(marks: dict[int, float], compute_s: float, steps: int) -> float | None:
    """The training loop's time that does not grow with its steps (None with fewer than two): `compute_s` less
    `steps` steps at the loop's steady rate, the rate between the second step's end and the last's (between the
    first's and the last's in a loop of two steps). That is the start-up of the first two steps (cold kernels, first
    shapes, and the first vote and probe reads, which wait for the step before's update) and the wind-down after
    the last (its update and the final reads of the loss and the probe). A mini-epoch pays it once, like a full
    epoch, so coach/policy/history.py does not scale it with the data. `marks` maps step counts (1, 2 and the last)
    to when that many steps were done (monotonic clock).

    Why the second step counts: for LeNet on 2 cores the second step of a full epoch's loop runs well beyond the
    steady rate (more so with more workers), the third only a little; a rate taken from the first step's end put
    that excess into the rate, scaled by 1/q, and put the (3, 1) mini-epochs' estimates of full epochs far higher
    than a rate from the second step's end does. Why the wind-down counts: it is about as long in a mini-epoch of 5
    steps as in a full epoch of 21."""
    if steps < 2 or 1 not in marks:
        return None
    last = max(marks)
    if last < 2:
        return None
    first = 2 if last >= 3 and 2 in marks else 1
    rate_s = max(marks[last] - marks[first], 0.0) / (last - first)
    return min(max(compute_s - rate_s * steps, 0.0), compute_s)


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

        await_scheduler(ps)
        return mx.kv.create("dist_sync")

    return InThread("kvstore-join", join)


def _classes(out, loss_fn) -> int | None:
    """The number of classes the labels index: the output size along the softmax axis of a loss on sparse labels
    (the default loss); None for any other loss, whose labels are not class indices as far as Coach knows."""
    from mxnet import gluon

    if not isinstance(loss_fn, gluon.loss.SoftmaxCrossEntropyLoss) or not loss_fn._sparse_label or out.ndim < 2:
        return None
    return int(out.shape[loss_fn._axis])


def _await_broadcast(trainer, params) -> None:
    """Set up the kvstore, broadcast rank 0's parameters and wait until every worker holds them.

    Why: Gluon's Trainer does this broadcast lazily, inside the first `step()` (or in `load_states()`): per key a
    kvstore.init by rank 0, then an asynchronous pull of the parameters, on the same keys that the step then
    push-pulls the gradients on (update_on_kvstore=False). The pull writes the parameter arrays and the push-pull
    the gradient arrays, so MXNet's engine does not order the two. With LeNet, 2 workers, 1 server, seed 0, an
    epoch that starts without a checkpoint (benchmarks/reproducibility.py --variant diagnose shows it), a worker's
    parameters were in some runs wrong after step 1, mostly on the last key broadcast; it had started that step
    from the *summed gradients* G instead of rank 0's parameters (its parameters after step 1 were exactly
    G * (1 - lr / global batch) where logged), i.e. its pull was answered after both workers' gradients of that key
    had reached the server, and the epoch's loss was not the seeded run's. From a checkpoint the broadcast happens
    in load_states(), long before the first push, and the race is rare. Waiting here, once per epoch and before the
    first push, removes it: no step needs any synchronisation (a `waitall()` after every step, which is not
    between these two, left runs wrong).
    """
    if not trainer._kv_initialized:
        trainer._init_kvstore()
    if trainer._params_to_init:
        trainer._init_params()
    for param in params:
        for array in param.list_data():
            array.wait_to_read()


#: Steps between two reads of the divergence probe (after the first two): each read blocks the training loop until
#: the previous step's update has come back. Read before every step, LeNet's loop (2 workers, 1 server) ran
#: clearly longer than the bare dist_sync script's (benchmarks/epoch_overhead.py); without the probe, shorter.
#: A diverged epoch trains at most this many steps more before every worker stops.
PROBE_EVERY_STEPS = 4


def _train(net, trainer, loss_fn, x, y, order_seed: int, batch_size: int, num_workers: int,
           noise: NoiseProbe | None = None, vote: StopVote | None = None):
    """One pass over this worker's shard: (loss_sum, correct, samples, diverged, marks): marks maps 1, 2 and the
    last step count to when that many steps were done (the monotonic clock): the loop's steady rate, and its time
    beyond that rate, its start-up and wind-down (`_warmup_s`).

    Divergence stops every worker at the same step, or the others would wait forever for its gradients:
    - a worker whose batch loss is not finite adds `loss_sum * 0` (NaN) to one gradient (the `probe`
      parameter's, the same on every worker), so the summed gradient, and the probe parameter after the
      update, are NaN on every worker;
    - before pushing its next gradients, every worker reads the probe parameter's sum (queued after the
      previous update, which the next forward pass needed anyway) and stops if it is not finite: after the
      first two steps and every PROBE_EVERY_STEPS-th, the same steps on every worker (a NaN stays in the probe
      parameter, so a later read sees it on all of them);
    - after the last step the same check decides.
    The parameters are the same on every worker after every step, so they all decide alike.
    The deadline stops every worker at the same step through `vote` (coach_functions/deadline.py says why not through
    the probe): read before pushing a step's gradients, cast after it; `vote.stopped` tells."""
    import mxnet as mx
    import numpy as np
    from mxnet import autograd

    trained = [p for p in trainer._params if p.grad_req != "null"]
    probe = min(trained, key=lambda p: int(np.prod(p.shape)))  # the smallest: the cheapest to poison and read
    probe_grad, probe_data = probe.list_grad()[0], probe.list_data()[0]
    order = np.random.RandomState(order_seed).permutation(len(x))
    loss_sum, correct, samples, check, marks = 0.0, 0, 0, None, {}
    latest = None  # (steps, time) of the last step done so far
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        xb, yb = mx.nd.array(x[idx]), mx.nd.array(y[idx])
        with autograd.record():
            out = net(xb)
            loss = loss_fn(out, yb)
        loss.backward()
        batch_loss = loss.sum()
        if check is not None and not math.isfinite(check.asscalar()):  # an earlier step diverged, somewhere
            return loss_sum, correct, samples, True, marks
        check = None
        if vote is not None and vote.stop():  # some worker's deadline is near: all leave before this step
            break
        probe_grad += batch_loss * 0  # NaN when the loss is not finite; adding 0 changes nothing otherwise
        # dist_sync sums the workers' gradients: rescale by the global batch, not the local one
        if noise is not None:  # the local gradient's norm, before the push-pull overwrites it with the sum
            noise.before_step(len(idx))
        trainer.step(len(idx) * num_workers)
        if noise is not None:
            noise.after_step()
        if vote is not None:
            vote.cast()
        loss_sum += float(batch_loss.asscalar())
        correct += int((out.argmax(axis=1) == yb).sum().asscalar())
        samples += len(idx)
        steps = -(-samples // batch_size)
        if steps <= 2 or steps % PROBE_EVERY_STEPS == 0:
            check = probe_data.sum()  # read before the next step's push
        latest = (steps, time.monotonic())
        if steps <= 2:
            marks[steps] = latest[1]
    if latest is not None:
        marks[latest[0]] = latest[1]
    final = check if check is not None else probe_data.sum()  # created after the last step already, or now
    return loss_sum, correct, samples, samples > 0 and not math.isfinite(final.asscalar()), marks


def _finite_parameters(net) -> bool:
    """Whether every parameter (running statistics included) is finite, after the epoch."""
    import mxnet as mx

    arrays = [array for param in net.collect_params().values() for array in param.list_data()]
    if not arrays:
        return True
    total = mx.nd.add_n(*[array.abs().sum() for array in arrays])  # NaN or infinity anywhere makes it so
    return math.isfinite(float(total.asscalar()))


def _plain_layout(net) -> None:
    """Write every parameter back in MXNet's default layout after an inference-mode call.

    With oneDNN (MXNet 1.9.1), a forward pass outside training rewrites convolution weights in place into a
    blocked layout that the distributed kvstore cannot push: the first broadcast is silently dropped and the
    server aborts with "init N first". Negating twice is exact and has no oneDNN kernel, so the output lands
    in the default layout with the same values.
    """
    import mxnet as mx

    for param in net.collect_params().values():
        data = param.data()
        mx.nd.negative(mx.nd.negative(data), out=data)


def _save_checkpoint(net, trainer, prefix: str) -> None:
    """Write parameters and optimizer state to a path (each file atomically) or an s3:// URL (marker last)."""
    checkpoints.save_checkpoint(net, trainer, prefix)
