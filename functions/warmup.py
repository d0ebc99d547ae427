"""A worker host warms MXNet up for the batch shapes of its epochs, once, so that every child forked after that
starts warm.

Why: a stateless epoch runs in a freshly forked child, and the first steps of a training loop in a fresh process
pay for what the process has not done yet: the oneDNN primitives of each layer at each batch shape (generated
code, kept in a process-wide cache), first allocations, first calls. Measured for LeNet (one process, no kvstore,
12 alternating pairs of children forked from two hosts, one warmed as here): the first step took 0.111 s from a
cold host and 0.070 s from a warm one, the first five 0.241 and 0.197 s, the whole 32-step loop 0.986 and 0.943 s
(11 of the 12 pairs faster), the later steps alike and the loss bit for bit the same. A child inherits the
host's cache through fork and only reads it, so the warm-up costs nothing per epoch: the host pays once per model
file and shape. Warming in each spare child instead moved the same work onto the two shared CPUs during the
previous epoch, and measured no better (benchmarks/README.md).

What the warm-up leaves in the host: nothing an epoch reads, and not the memory it used (`release_memory`). Its model is built from the host's module in a
name scope of its own (an epoch's parameter names are unchanged), initialised, run on zeros and dropped; every
epoch seeds MXNet's generator before building its own model. The forward passes outside training use the
inference kernels the validation uses; the layout they give the throw-away parameters is dropped with them.

Side effects: runs the model file's build_model() and forward passes in the calling process.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from functions.validation import batch_size_for_validation, slice_bounds

#: At most this many batch shapes are warmed per loaded model module: calibration changes the shard, not without end.
MAX_SHAPES = 32

TRAINING, VALIDATION = "training", "validation"


def batch_rows(samples: int, batch_size: int) -> set[int]:
    """The batch sizes a pass over `samples` in batches of `batch_size` sees: a full batch and a shorter last one."""
    if samples <= 0:
        return set()
    rows = {min(batch_size, samples)}
    if samples > batch_size and samples % batch_size:
        rows.add(samples % batch_size)
    return rows


def epoch_shapes(shard_samples: int, val_samples: int, num_workers: int, batch_size: int) -> set[tuple[str, int]]:
    """(pass, rows) of every batch a worker epoch runs: training batches of its shard, validation batches of every
    rank's slice (functions/validation.py: contiguous slices, larger batches)."""
    shapes = {(TRAINING, rows) for rows in batch_rows(shard_samples, batch_size)}
    step = batch_size_for_validation(batch_size)
    for rank in range(num_workers):
        start, end = slice_bounds(val_samples, rank, num_workers)
        shapes |= {(VALIDATION, rows) for rows in batch_rows(end - start, step)}
    return shapes


#: The worker counts whose validation slices a job's warm request warms (other counts: at their first full epoch).
WARM_WORKERS = 4


def job_shapes(batch_size: int, val_samples: int, max_workers: int = WARM_WORKERS) -> set[tuple[str, int]]:
    """The shapes a job's warm request warms, before any epoch: a full training batch and one a sample short (the
    last batch of a calibration mini-epoch, coach/policy/planning.py), and the validation batches of every rank's
    slice at 1..max_workers workers. The last batch of a full epoch's shard is warmed at its first full epoch."""
    shapes = {(TRAINING, rows) for rows in {batch_size, batch_size - 1} if rows > 0}
    step = batch_size_for_validation(batch_size)
    for workers in range(1, max_workers + 1):
        for rank in range(workers):
            start, end = slice_bounds(val_samples, rank, workers)
            shapes |= {(VALIDATION, rows) for rows in batch_rows(end - start, step)}
    return shapes


def warm_up(module, sample, shapes: set[tuple[str, int]]) -> None:
    """Run a throw-away model of `module` once per shape, on zeros shaped like `sample` (one input row): with
    autograd for training batches (forward and backward), without for validation batches; then release the
    memory it used. Raises what the model file raised."""
    try:
        _run_once(module, sample, shapes)  # its arrays are dropped with its frame
    finally:
        release_memory()


def _run_once(module, sample, shapes: set[tuple[str, int]]) -> None:
    import mxnet as mx
    from mxnet import autograd

    with mx.name.NameManager():  # its own name counter: the next epoch's model gets the names it would have had
        net = module.build_model()
    net.initialize(mx.init.Xavier())
    for kind, rows in sorted(shapes):
        inputs = mx.nd.zeros((rows,) + tuple(sample.shape), dtype=sample.dtype)
        if kind == TRAINING:
            with autograd.record():
                out = net(inputs)
            out.backward()
        else:
            net(inputs)
    mx.nd.waitall()


def release_memory() -> None:
    """Give the memory the warm-up used back to the system: MXNet's pool of freed arrays, then glibc's free heap.

    Why: a child forked later would otherwise reuse those pages, which it shares with the host, and every first
    write to one copies it (copy-on-write), where a page it gets fresh only has to be zeroed. Measured (LeNet, one
    process, 12 alternating pairs of children, twice): the loop took 0.913 and 0.840 s from a host that released it,
    0.950 and 0.864 s from one that did not; the child's system time 0.086 and 0.079 s against 0.104 and 0.101 s."""
    import ctypes
    import gc

    import mxnet as mx

    gc.collect()  # a Gluon block's reference cycles hold its arrays
    mx.nd.waitall()
    mx.cpu().empty_cache()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its heap stays as it is
        pass


@dataclass
class Warmth:
    """What a worker host has warmed, and the last worker request it was asked to warm for.

    `want` is called by the thread that takes a request, `take` and `done` by the one that warms (the spare keeper,
    before it forks)."""

    wanted: Any = None  # the last worker request (an EpochRequest) not yet looked at
    warmed: dict[str, tuple[Any, set]] = field(default_factory=dict)  # model path -> (module, shapes warmed for it)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def want(self, request) -> None:
        """Warm up for `request` next, if it trains on all the data: a calibration mini-epoch (a fraction of it) is
        a measurement, which a warm-up on the same two CPUs beside it would slow down by a varying amount."""
        if request.data_fraction < 1.0:
            return
        with self.lock:
            self.wanted = request

    def take(self, models: dict, shard_size: Callable[[int, Any], int]) -> tuple[Any, Any, set, str] | None:
        """(module, one input row, shapes not warmed yet, model path) for the wanted request, if its model is loaded
        and some of its shapes are new; `models` is the host's cache (path -> (mtime, module, data)), `shard_size`
        gives a worker's shard from the training set's size and the request."""
        with self.lock:
            request, self.wanted = self.wanted, None
            if request is None:
                return None
            path = str(Path(request.model_path).resolve())
            loaded = models.get(path)
            if loaded is None:
                return None
            _, module, data = loaded
            x_train = data["X_train"]
            shapes = epoch_shapes(shard_size(len(x_train), request), len(data.get("X_val", ())),
                                  request.ps.num_workers, request.hyper.batch_size)
            new = self._unwarmed(path, module, shapes)
            return (module, x_train[0], new, path) if new else None

    def unwarmed(self, path: str, module, shapes: set) -> set:
        """Those of `shapes` not warmed yet for `module`, as many as MAX_SHAPES still allows."""
        with self.lock:
            return self._unwarmed(path, module, shapes)

    def _unwarmed(self, path: str, module, shapes: set) -> set:
        known, done = self.warmed.get(path, (None, set()))
        done = done if known is module else set()
        return set(sorted(shapes - done)[:max(0, MAX_SHAPES - len(done))])

    def done(self, path: str, module, shapes: set) -> None:
        """Record `shapes` as warmed for `module` (also after a warm-up that failed: it is not tried again)."""
        with self.lock:
            known, done = self.warmed.get(path, (None, set()))
            self.warmed[path] = (module, (done if known is module else set()) | shapes)
