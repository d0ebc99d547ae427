"""What the three Nuclio functions share: run one epoch of one parameter-server role in a forked child.

Why a child: MXNet's ps-lite can start only once per process, but importing MXNet costs seconds. The warm
host (a Nuclio worker, or Coach's embedded host) imports MXNet once in `init_context`; every invocation forks,
the child takes its role for one epoch, writes one JSON reply into a pipe and leaves with `os._exit`.

The event body is the typed contract of coach/domain/contracts.py: an `EpochRequest`, a `WarmRequest` or
`{"action": "cancel"}`. A body that does not match it is answered 400 with one line naming the field, before
anything is forked or loaded.

Side effects: forks processes, reads the model file, reads and writes checkpoint files named in the event.
"""

from __future__ import annotations

import ctypes
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
    ContractError,
    EpochRequest,
    PsAddress,
    PsNodeReply,
    WarmRequest,
    WorkerReply,
)

PR_SET_PDEATHSIG = 1  # prctl option: signal the child when the forking thread dies


class EpochError(Exception):
    """A payload or model problem that the controller should see as a failure value, not a crash."""


@dataclass
class HostState:
    """Per-host memory shared by invocations: loaded models and their data, and the running children."""

    models: dict[str, tuple[float, Any, Any]] = field(default_factory=dict)  # path -> (mtime, module, data)
    children: set[int] = field(default_factory=set)  # pids of running epoch children
    lock: threading.Lock = field(default_factory=threading.Lock)


def init_host(context) -> None:
    """Import MXNet once in the warm host so that every forked epoch child starts without that cost."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import mxnet  # noqa: F401  (the point is to have it imported before fork)

    context.user_data.host = HostState()


def load_model(host: HostState, model_path: str):
    """Import a model file and call its `load_data()` once per host (cached until the file changes)."""
    path = str(Path(model_path).resolve())
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
        spec.loader.exec_module(module)
        for name in ("build_model", "load_data"):
            if not callable(getattr(module, name, None)):
                raise EpochError(f"model file {model_path}: no function {name}()")
        data = normalise_data(module.load_data())
        host.models[path] = (mtime, module, data)
        return module, data


def normalise_data(data) -> dict:
    """Accept `(X, y)`, `(X, y, X_val, y_val)` or a dict with those keys; return float32/label arrays."""
    import numpy as np

    if isinstance(data, dict):
        parts = [data.get(k) for k in ("X_train", "y_train", "X_val", "y_val")]
    elif isinstance(data, (tuple, list)) and len(data) in (2, 4):
        parts = list(data) + [None] * (4 - len(data))
    else:
        raise EpochError("load_data() must return (X, y), (X, y, X_val, y_val) or a dict of them")
    x_train, y_train, x_val, y_val = parts
    if x_train is None or y_train is None or len(x_train) != len(y_train) or len(x_train) == 0:
        raise EpochError("load_data(): training inputs and labels must be non-empty and of equal length")
    out = {"X_train": np.asarray(x_train, dtype="float32"), "y_train": np.asarray(y_train, dtype="float32")}
    if (x_val is None) != (y_val is None) or (x_val is not None and len(x_val) != len(y_val)):
        raise EpochError("load_data(): validation inputs and labels must both be given, of equal length")
    if x_val is not None and len(x_val) > 0:
        out["X_val"] = np.asarray(x_val, dtype="float32")
        out["y_val"] = np.asarray(y_val, dtype="float32")
    return out


def ps_environment(request: EpochRequest) -> dict[str, str]:
    """The DMLC variables of the request's role, matching the servers and workers actually placed.

    The node's own address comes from the request alone: a default here would be wrong on any real cluster."""
    ps = request.ps
    return {
        "DMLC_ROLE": request.role,
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


def run_in_child(host: HostState, request: EpochRequest, work: Callable[[EpochRequest], dict]) -> tuple[int, dict]:
    """Fork, run `work(request)` in the child, and return (HTTP status, reply) within the request's deadline."""
    deadline_s = request.deadline_s
    read_fd, write_fd = os.pipe()
    parent_pid = os.getpid()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # child: never returns
        os.close(read_fd)
        _die_with_parent()
        if os.getppid() != parent_pid:
            os._exit(3)
        status = 0
        try:
            reply = work(request)
        except BaseException as error:  # everything must become a JSON reply, never a hang
            status = 1
            reply = {"error": f"{type(error).__name__}: {error}", "trace": traceback.format_exc(limit=5)}
        reply["wall_s"] = time.monotonic() - started
        with os.fdopen(write_fd, "w") as pipe:
            pipe.write(json.dumps(reply))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    os.close(write_fd)
    with host.lock:
        host.children.add(pid)
    try:
        raw, timed_out = _read_until(read_fd, started + deadline_s)
    finally:
        os.close(read_fd)
        if timed_out:
            _kill(pid)
        _, wait_status = os.waitpid(pid, 0)
        with host.lock:
            host.children.discard(pid)
    if timed_out:
        return 504, {"error": f"deadline of {deadline_s:g} s exceeded"}
    exit_code = os.waitstatus_to_exitcode(wait_status)
    try:
        reply = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        reply = {}
    if exit_code != 0 or not reply or "error" in reply:
        reply.setdefault("error", f"epoch child exited with code {exit_code}")
        return 500, reply
    return 200, reply


def _read_until(fd: int, deadline: float) -> tuple[str, bool]:
    """Read the child's reply until EOF or the monotonic deadline; return (text, timed_out)."""
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "".join(chunks), True
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return "".join(chunks), False
        chunks.append(chunk.decode())


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def cancel_children(host: HostState) -> int:
    """Kill every running epoch child of this host (used when another role of the epoch failed)."""
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
    if isinstance(request, WarmRequest):  # load the model file and its data before the first timed epoch
        if role == "worker":
            try:
                load_model(host, request.model_path)
            except Exception as error:  # EpochError or the user's own load_data() failing
                return _respond(context, 422, {"error": f"model file: {type(error).__name__}: {error}", "role": role})
        return _respond(context, 200, {"warm": True, "role": role})
    if role == "worker":
        try:
            module, data = load_model(host, request.model_path)
        except EpochError as error:
            return _respond(context, 422, {"error": str(error), "role": role})
        except Exception as error:  # the user's model file raised while loading
            return _respond(context, 422, {"error": f"model file: {type(error).__name__}: {error}", "role": role})
        status, reply = run_in_child(host, request, lambda r: run_worker_epoch(r, module, data))
    else:
        status, reply = run_in_child(host, request, run_ps_node)
    reply["role"] = role
    return _respond(context, status, reply)


def _parse(body: Any, action: Any, role: str) -> EpochRequest | WarmRequest:
    """The typed request in `body`, or ContractError; an epoch request must be for this function's own role."""
    if action == "warm":
        return WarmRequest.from_dict(body)
    if action is not None:
        raise ContractError("action", f"unknown action {str(action)[:40]!r}, expected 'warm' or 'cancel'")
    request = EpochRequest.from_dict(body)
    if request.role != role:
        raise ContractError("role", f"this is the {role} function, got a request for the {request.role} role")
    return request


def _respond(context, status: int, reply: dict):
    return context.Response(body=json.dumps(reply), content_type="application/json", status_code=status)


def run_ps_node(request: EpochRequest) -> dict:
    """Child side of the scheduler and server roles: serve until every worker has dropped its kvstore."""
    os.environ.update(ps_environment(request))
    if request.role != "scheduler":
        await_scheduler(request.ps)
    from mxnet.kvstore import kvstore_server

    started = time.monotonic()
    try:
        kvstore_server._init_kvstore_server_module()
    except SystemExit:  # MXNet ends the role with sys.exit once the workers are gone
        pass
    return PsNodeReply(compute_s=time.monotonic() - started).to_dict()


def _shard(data: dict, request: EpochRequest, rank: int) -> tuple[Any, Any]:
    """This worker's equal-sized slice of a seeded permutation of the (optionally reduced) training set.

    Every worker draws the same permutation (the job's seed) and keeps its own block of it, so the shards
    are disjoint without the workers talking to each other."""
    import numpy as np

    num_workers = request.ps.num_workers
    x, y = data["X_train"], data["y_train"]
    order = np.random.RandomState(request.hyper.seed).permutation(len(x))
    keep = max(num_workers, int(math.ceil(len(x) * request.data_fraction)))
    order = order[: min(keep, len(x))]
    per_worker = len(order) // num_workers
    mine = order[rank * per_worker : (rank + 1) * per_worker]
    return x[mine], y[mine]


def run_worker_epoch(request: EpochRequest, module, data: dict) -> dict:
    """Child side of a worker: load the checkpoint, train one epoch on its shard, rank 0 saves and validates."""
    os.environ.update(ps_environment(request))
    await_scheduler(request.ps)
    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon

    hyper = request.hyper
    seed, step, batch_size = hyper.seed, request.step, hyper.batch_size
    kv = mx.kv.create("dist_sync")
    rank, num_workers = kv.rank, kv.num_workers
    if num_workers != request.ps.num_workers:  # DMLC_NUM_WORKER came from the request: this is a ps-lite bug
        raise EpochError(f"kvstore has {num_workers} workers, the request {request.ps.num_workers}")
    x, y = _shard(data, request, rank)
    if len(x) == 0:
        raise EpochError("empty data shard: fewer samples than workers")

    mx.random.seed(seed)
    net = module.build_model()
    if request.checkpoint_load:  # the checkpoint gives every shape: no throw-away initialisation
        net.load_parameters(request.checkpoint_load + ".params")
    else:
        net.initialize(mx.init.Xavier())
        net(mx.nd.array(x[:1]))  # materialise deferred shapes before the kvstore broadcasts them
        _plain_layout(net)
    loss_fn = module.loss() if callable(getattr(module, "loss", None)) else gluon.loss.SoftmaxCrossEntropyLoss()
    opt_params = {**hyper.optimizer_params, "learning_rate": hyper.learning_rate}
    trainer = gluon.Trainer(net.collect_params(), hyper.optimizer, opt_params, kvstore=kv, update_on_kvstore=False)
    if request.checkpoint_load:
        trainer.load_states(request.checkpoint_load + ".states")

    started = time.monotonic()
    order = np.random.RandomState(seed * 100003 + step * 101 + rank).permutation(len(x))
    loss_sum, correct, samples = 0.0, 0, 0
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        xb, yb = mx.nd.array(x[idx]), mx.nd.array(y[idx])
        with autograd.record():
            out = net(xb)
            loss = loss_fn(out, yb)
        loss.backward()
        # dist_sync sums the workers' gradients: rescale by the global batch, not the local one
        trainer.step(len(idx) * num_workers)
        loss_sum += float(loss.sum().asscalar())
        correct += int((out.argmax(axis=1) == yb).sum().asscalar())
        samples += len(idx)
    compute_s = time.monotonic() - started

    validation, saved = {}, None
    if rank == 0:
        if "X_val" in data:
            validation = _validate(net, loss_fn, data["X_val"], data["y_val"], batch_size)
        _save_checkpoint(net, trainer, request.checkpoint_save)
        saved = request.checkpoint_save
    reply = WorkerReply(rank=rank, num_workers=num_workers, loss_sum=loss_sum, samples=samples, correct=correct,
                        compute_s=compute_s, checkpoint_saved=saved, **validation)
    # the kvstore's destructor tells the servers to stop: drop every reference before leaving
    del trainer, net, kv, loss_fn, out, loss, xb, yb
    gc.collect()
    return reply.to_dict()


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


def _validate(net, loss_fn, x_val, y_val, batch_size: int) -> dict:
    """Rank 0's validation loss and accuracy, as WorkerReply's val_* keyword arguments."""
    import mxnet as mx

    loss_sum, correct = 0.0, 0
    for start in range(0, len(x_val), max(batch_size, 256)):
        xb = mx.nd.array(x_val[start : start + max(batch_size, 256)])
        yb = mx.nd.array(y_val[start : start + max(batch_size, 256)])
        out = net(xb)
        loss_sum += float(loss_fn(out, yb).sum().asscalar())
        correct += int((out.argmax(axis=1) == yb).sum().asscalar())
    return {"val_loss": loss_sum / len(x_val), "val_accuracy": correct / len(x_val), "val_samples": len(x_val)}


def _save_checkpoint(net, trainer, prefix: str) -> None:
    """Write parameters and optimizer state, each atomically (temp file, then rename)."""
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    for suffix, save in ((".params", net.save_parameters), (".states", trainer.save_states)):
        tmp = f"{prefix}{suffix}.tmp"
        save(tmp)
        os.replace(tmp, prefix + suffix)
