"""Bare MXNet `dist_sync` training, without Coach: the baseline that `epoch_overhead.py` compares against.

The classic way to run a parameter-server job: one scheduler, S servers and W workers are started once as fresh
`python` processes with the DMLC_* variables, and the workers train all N epochs in one go. Every worker trains
with the same logic as one Coach epoch (coach_functions/training.py: same sharding, same per-epoch permutation, same
global-batch rescale, `update_on_kvstore=False`, same model file loaded by path, rank 0 validates every epoch),
but nothing is restarted, re-rendezvoused or checkpointed between epochs.

Rank 0 measures each epoch's wall time (start of the epoch-loop iteration -> after its validation) and writes
them as JSON. Run it directly:

    .venv/bin/python benchmarks/bare_dist_sync.py --workers 2 --servers 1 --epochs 8

or import `run_bare(...)`. Side effects: starts (and always reaps or kills) 1 + S + W child processes and
writes a temporary JSON file.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = REPO / "jobs" / "models" / "lenet.py"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------------------- child roles


def run_ps_node() -> None:
    """Scheduler or server: serve until every worker has dropped its kvstore (MXNet then calls sys.exit)."""
    # Importing mxnet with DMLC_ROLE=server|scheduler already starts the role (kvstore_server's module code);
    # the explicit call is what the brief names and is a no-op returning via SystemExit either way.
    from mxnet.kvstore import kvstore_server

    try:
        kvstore_server._init_kvstore_server_module()
    except SystemExit:
        pass


def _load_model(path: str):
    spec = importlib.util.spec_from_file_location("bare_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _normalise(data) -> dict:
    """Same accepted shapes and dtypes as coach_functions.data.normalise_data."""
    import numpy as np

    if isinstance(data, dict):
        parts = [data.get(k) for k in ("X_train", "y_train", "X_val", "y_val")]
    else:
        parts = list(data) + [None] * (4 - len(data))
    out = {"X_train": np.asarray(parts[0], dtype="float32"), "y_train": np.asarray(parts[1], dtype="float32")}
    if parts[2] is not None and parts[3] is not None and len(parts[2]) > 0:
        out["X_val"] = np.asarray(parts[2], dtype="float32")
        out["y_val"] = np.asarray(parts[3], dtype="float32")
    return out


def _shard(data: dict, rank: int, num_workers: int, seed: int):
    """Equal-size shard of a seeded permutation, exactly as coach_functions.shards.shard (fraction 1.0)."""
    import numpy as np

    x, y = data["X_train"], data["y_train"]
    order = np.random.RandomState(seed).permutation(len(x))
    keep = max(num_workers, int(math.ceil(len(x) * 1.0)))
    order = order[: min(keep, len(x))]
    per_worker = len(order) // num_workers
    mine = order[rank * per_worker : (rank + 1) * per_worker]
    return x[mine], y[mine]


def _validate(net, loss_fn, x_val, y_val, batch_size: int) -> dict:
    import mxnet as mx

    step = max(batch_size, 256)
    loss_sum, correct = 0.0, 0
    for start in range(0, len(x_val), step):
        xb = mx.nd.array(x_val[start : start + step])
        yb = mx.nd.array(y_val[start : start + step])
        out = net(xb)
        loss_sum += float(loss_fn(out, yb).sum().asscalar())
        correct += int((out.argmax(axis=1) == yb).sum().asscalar())
    return {"val_loss": loss_sum / len(x_val), "val_accuracy": correct / len(x_val)}


def run_worker(args: argparse.Namespace) -> None:
    """One worker: all epochs in one process; rank 0 times each epoch and writes the JSON result."""
    process_started = time.monotonic()
    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon

    seed = args.seed
    module = _load_model(args.model)
    load_started = time.monotonic()
    data = _normalise(module.load_data())
    load_data_s = time.monotonic() - load_started

    setup_started = time.monotonic()
    kv = mx.kv.create("dist_sync")
    rank, num_workers = kv.rank, kv.num_workers
    x, y = _shard(data, rank, num_workers, seed)
    mx.random.seed(seed)
    net = module.build_model()
    net.initialize(mx.init.Xavier())
    net(mx.nd.array(x[:1]))
    loss_fn = module.loss() if callable(getattr(module, "loss", None)) else gluon.loss.SoftmaxCrossEntropyLoss()
    opt_params = {"learning_rate": args.lr, "momentum": args.momentum}
    trainer = gluon.Trainer(net.collect_params(), "sgd", opt_params, kvstore=kv, update_on_kvstore=False)
    setup_s = time.monotonic() - setup_started

    epochs = []
    out = loss = xb = yb = None
    for epoch in range(1, args.epochs + 1):
        epoch_started = time.monotonic()
        order = np.random.RandomState(seed * 100003 + epoch * 101 + rank).permutation(len(x))
        loss_sum, correct, samples = 0.0, 0, 0
        for start in range(0, len(order), args.batch_size):
            idx = order[start : start + args.batch_size]
            xb, yb = mx.nd.array(x[idx]), mx.nd.array(y[idx])
            with autograd.record():
                out = net(xb)
                loss = loss_fn(out, yb)
            loss.backward()
            trainer.step(len(idx) * num_workers)  # dist_sync sums gradients: rescale by the global batch
            loss_sum += float(loss.sum().asscalar())
            correct += int((out.argmax(axis=1) == yb).sum().asscalar())
            samples += len(idx)
        compute_s = time.monotonic() - epoch_started
        record = {"epoch": epoch, "loss": loss_sum / samples, "samples": samples, "compute_s": compute_s}
        if rank == 0 and "X_val" in data:
            record.update(_validate(net, loss_fn, data["X_val"], data["y_val"], args.batch_size))
        record["epoch_time_s"] = time.monotonic() - epoch_started
        epochs.append(record)

    if rank == 0 and args.result:
        result = {"rank": rank, "num_workers": num_workers, "load_data_s": load_data_s, "setup_s": setup_s,
                  "startup_s": setup_started - process_started,
                  "epochs": epochs}
        tmp = args.result + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(result, fh)
        os.replace(tmp, args.result)
    # the kvstore's destructor tells the servers to stop: drop every reference before leaving
    del trainer, net, kv, loss_fn, out, loss, xb, yb
    gc.collect()


# --------------------------------------------------------------------------------------- parent


def _kill_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # each child leads its own session
            except (ProcessLookupError, PermissionError):
                proc.kill()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def run_bare(model: str | Path = DEFAULT_MODEL, workers: int = 2, servers: int = 1, epochs: int = 8,
             batch_size: int = 64, lr: float = 0.05, momentum: float = 0.9, seed: int = 0,
             timeout_s: float = 900.0, log_dir: Path | None = None) -> dict:
    """Launch scheduler, servers and workers; return rank 0's JSON result plus the total wall time.

    Raises RuntimeError if a child fails or the total timeout is exceeded (every child is killed first).
    """
    port = free_port()
    base_env = {**os.environ, "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(port),
                "DMLC_NUM_SERVER": str(servers), "DMLC_NUM_WORKER": str(workers),
                "DMLC_NODE_HOST": "127.0.0.1", "OMP_NUM_THREADS": "1", "PS_VERBOSE": "0",
                "PYTHONUNBUFFERED": "1"}
    own_tmp = tempfile.TemporaryDirectory(prefix="bare-dist-sync-")
    logs = Path(log_dir) if log_dir else Path(own_tmp.name)
    logs.mkdir(parents=True, exist_ok=True)
    result_path = Path(own_tmp.name) / "result.json"
    common = ["--model", str(Path(model).resolve()), "--epochs", str(epochs), "--batch-size", str(batch_size),
              "--lr", str(lr), "--momentum", str(momentum), "--seed", str(seed)]
    roles = ["scheduler"] + ["server"] * servers + ["worker"] * workers
    procs: list[subprocess.Popen] = []
    names: list[str] = []
    where = f"logs in {logs}" if log_dir else "log tails on stderr"
    started = time.monotonic()
    try:
        for i, role in enumerate(roles):
            name = f"{role}-{i}"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--role", role, *common]
            if role == "worker":
                cmd += ["--result", str(result_path)]
            with open(logs / f"{name}.log", "wb") as log:
                procs.append(subprocess.Popen(cmd, env={**base_env, "DMLC_ROLE": role}, stdin=subprocess.DEVNULL,
                                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            names.append(name)
        deadline = started + timeout_s
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"bare dist_sync exceeded {timeout_s:g} s; children killed ({where})")
            failed = [(n, p.returncode) for n, p in zip(names, procs) if p.returncode not in (None, 0)]
            if failed:
                raise RuntimeError(f"bare dist_sync child failed: {failed} ({where})")
            time.sleep(0.05)
        total_s = time.monotonic() - started
        failed = [(n, p.returncode) for n, p in zip(names, procs) if p.returncode != 0]
        if failed:
            raise RuntimeError(f"bare dist_sync child failed: {failed} ({where})")
        result = json.loads(result_path.read_text())
        result["total_wall_s"] = total_s
        return result
    except BaseException:
        if log_dir is None:  # keep the logs of a failure visible
            for name in names:
                tail = (Path(own_tmp.name) / f"{name}.log").read_text(errors="replace")[-2000:]
                if tail.strip():
                    print(f"--- {name}.log (tail) ---\n{tail}", file=sys.stderr)
        raise
    finally:
        _kill_all(procs)
        own_tmp.cleanup()


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The job every benchmark here trains, the same flags and defaults for Coach and for the bare run."""
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="model file with build_model()/load_data()")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_job_arguments(parser)
    parser.add_argument("--timeout", type=float, default=900.0, help="total seconds before every child is killed")
    parser.add_argument("--role", choices=("scheduler", "server", "worker"), help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.role in ("scheduler", "server"):
        run_ps_node()
        return 0
    if args.role == "worker":
        run_worker(args)
        return 0
    result = run_bare(args.model, args.workers, args.servers, args.epochs, args.batch_size, args.lr,
                      args.momentum, args.seed, args.timeout)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
