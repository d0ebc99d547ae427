"""A worker host warms MXNet up, at the job's warm request and before any epoch, for the batch shapes the job's
epochs run at 1 to WARM_WORKERS workers (the most used first, within WARM_UP_LIMIT_S), so that every child forked
after that starts warm.

Why: a stateless epoch runs in a freshly forked child, and the first steps of a training loop in a fresh process
pay for what the process has not done yet: the oneDNN primitives of each layer at each batch shape (generated
code, kept in a process-wide cache), first allocations, first calls. A child inherits the host's cache through
fork and only reads it, so the host pays once per model file and shape, and no epoch pays again. Children forked
alternately from a cold and a warmed host (one process, no kvstore) show it: LeNet's loop is shorter from a warmed
host, shorter still with its last, shorter batch warmed too, and so are ResNet-18's first steps. The loss is the
same bit for bit.

When: only at the warm request, never while an epoch runs. A warm-up beside a running epoch takes the two shared
CPUs from it: ResNet-18's calibration mini-epoch at (2,1) then takes far longer, most of the excess in its first
step, and the speed predictions made from such mini-epochs go far off.

What the warm-up leaves in the host: nothing an epoch reads, and not the memory it used (`release_memory`). Its
model is built from the host's module in a name scope of its own (an epoch's parameter names are unchanged),
initialised, run on zeros and dropped; every epoch seeds MXNet's generator before building its own model. The
forward passes outside training use the inference kernels the validation uses; the layout they give the
throw-away parameters is dropped with them.

Side effects: runs the model file's build_model() and forward passes in the calling process.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from coach_functions.shards import shard_samples
from coach_functions.validation import batch_size_for_validation, slice_bounds

#: At most this many batch shapes are warmed per loaded model module (a job's are about a dozen).
MAX_SHAPES = 32

#: The worker counts whose shapes a warm request warms; an epoch at more workers runs its other shapes cold.
WARM_WORKERS = 4

#: A host stops warming once it has spent this long (after the shape it is on): the job waits for it before its
#: first epoch. Per worker host, one thread: LeNet's dozen shapes take a fraction of this; ResNet-18's (56x56,
#: batch 128) take several times it, most of this per training batch, while warm kernels save it only a small part
#: of an epoch, so it warms its training batches (in the order of `job_shapes`: those every step uses first) and no
#: more.
WARM_UP_LIMIT_S = 2.0

TRAINING, VALIDATION = "training", "validation"


def batch_rows(samples: int, batch_size: int) -> set[int]:
    """The batch sizes a pass over `samples` in batches of `batch_size` sees: a full batch and a shorter last one."""
    if samples <= 0:
        return set()
    rows = {min(batch_size, samples)}
    if samples > batch_size and samples % batch_size:
        rows.add(samples % batch_size)
    return rows


def job_shapes(batch_size: int, train_samples: int, val_samples: int,
               max_workers: int = WARM_WORKERS) -> list[tuple[str, int]]:
    """(pass, rows) of every batch a job's epochs run at 1..max_workers workers, each once, the most used first: a
    full training batch (nearly every step), one a sample short (the last batch of a calibration mini-epoch,
    coach/policy/planning.py), the last batch of a full epoch's shard, then the validation batches of every rank's
    slice (contiguous slices in larger batches, coach_functions/validation.py)."""
    training = [rows for rows in (batch_size, batch_size - 1) if rows > 0]
    validation = []
    step = batch_size_for_validation(batch_size)
    for workers in range(1, max_workers + 1):
        training += sorted(batch_rows(shard_samples(train_samples, workers), batch_size), reverse=True)
        for rank in range(workers):
            start, end = slice_bounds(val_samples, rank, workers)
            validation += sorted(batch_rows(end - start, step), reverse=True)
    shapes = [(TRAINING, rows) for rows in training] + [(VALIDATION, rows) for rows in validation]
    return list(dict.fromkeys(shapes))


def warm_up(module, sample, shapes: list[tuple[str, int]], limit_s: float = WARM_UP_LIMIT_S) -> list[tuple[str, int]]:
    """Run a throw-away model of `module` once per shape, in order, on zeros shaped like `sample` (one input row):
    with autograd for training batches (forward and backward), without for validation batches; stop after the shape
    that takes the time spent to `limit_s`; release the memory it used. Returns the shapes run. Raises what the
    model file raised."""
    try:
        return _run_once(module, sample, shapes, limit_s)  # its arrays are dropped with its frame
    finally:
        release_memory()


def _run_once(module, sample, shapes: list[tuple[str, int]], limit_s: float) -> list[tuple[str, int]]:
    import mxnet as mx
    from mxnet import autograd

    started = time.monotonic()
    with mx.name.NameManager():  # its own name counter: the next epoch's model gets the names it would have had
        net = module.build_model()
    net.initialize(mx.init.Xavier())
    done = []
    for kind, rows in shapes:
        inputs = mx.nd.zeros((rows,) + tuple(sample.shape), dtype=sample.dtype)
        if kind == TRAINING:
            with autograd.record():
                out = net(inputs)
            out.backward()
        else:
            net(inputs)
        mx.nd.waitall()  # MXNet runs asynchronously: the time spent is known once the pass has run
        done.append((kind, rows))
        if time.monotonic() - started >= limit_s:
            break
    return done


def release_memory() -> None:
    """Give the memory the warm-up used back to the system: MXNet's pool of freed arrays, then glibc's free heap.

    Why: a child forked later would otherwise reuse those pages, which it shares with the host, and every first
    write to one copies it (copy-on-write), where a page it gets fresh only has to be zeroed. With LeNet, children
    forked alternately from a host that released it and one that did not ran their loop a little faster, with less
    system time, from the first."""
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
    """The shapes a worker host has warmed, per model file, for the module loaded from it (a reloaded file is
    warmed again). Warm requests of several jobs may arrive at once: the lock keeps the record whole."""

    warmed: dict[str, tuple[object, set]] = field(default_factory=dict)  # model path -> (module, shapes warmed)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def unwarmed(self, path: str, module, shapes: list) -> list:
        """Those of `shapes` (in their order) not warmed or tried yet for `module`, as many as MAX_SHAPES still
        allows."""
        with self.lock:
            known, done = self.warmed.get(path, (None, set()))
            done = done if known is module else set()
            return [shape for shape in shapes if shape not in done][:max(0, MAX_SHAPES - len(done))]

    def done(self, path: str, module, shapes) -> None:
        """Record `shapes` as tried for `module`: warmed, or left out by the time limit, or part of a warm-up that
        failed; none is tried again."""
        with self.lock:
            known, done = self.warmed.get(path, (None, set()))
            self.warmed[path] = (module, (done if known is module else set()) | set(shapes))
