"""One worker epoch, in the epoch child: build the model, load the checkpoint, train on the worker's shard,
validate, and (rank 0) save the checkpoint.

A worker whose training loss or parameters stop being finite ends its training loop with every other worker at the
same step, tears down as usual and replies `diverged: true`, with no checkpoint. A worker whose deadline comes before
the end of its shard does the same, a reserve before it (coach/domain/deadlines.py, coach_functions/deadline.py), and
replies `stopped_early: true` with the samples it trained and, from rank 0, the checkpoint of them: a partial epoch,
not a 504.

Side effects: runs MXNet, reads and writes the checkpoint files named in the request.
"""

from __future__ import annotations

import gc
import math
import os
import time
from typing import Any

from coach.domain.contracts import EpochRequest, WorkerReply
from coach.domain.deadlines import training_stop_s
from coach_functions import checkpoints
from coach_functions.data import check_labels
from coach_functions.deadline import VALIDATION_BATCH_STEPS, StopVote
from coach_functions.failures import EpochError, user_code
from coach_functions.models import CLASSES_FIELD, UNKNOWN
from coach_functions.noise_scale import NoiseProbe
from coach_functions.ps import InThread, join_kvstore, ps_environment
from coach_functions.shards import shard, shard_size
from coach_functions.validation import SharedValidation


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
    rendezvous (coach_functions/ps.py's `join_ahead`), if any. `classes_known`: what an earlier epoch's shape pass
    found for this module (`known_classes`); an epoch from a checkpoint then skips its own."""
    entered_s = time.monotonic()  # a few ms after the host's clock for the deadline started: the fork
    os.environ.update(ps_environment(request.role, request.ps))
    from mxnet import gluon

    hyper = request.hyper
    if shard_size(len(data["X_train"]), request) == 0:
        raise EpochError(f"model file {request.model_path}: {len(data['X_train'])} training samples, fewer than the "
                         f"{request.ps.num_workers} workers")
    # ps-lite's rendezvous waits at least 0.1 s (its readiness poll): joined ahead by the spare, or join first and
    # prepare meanwhile. A broken model file is found during it; the first failure of an epoch makes the controller
    # cancel the joined peers.
    joining = joining or join_kvstore(request.ps)
    net, loss_fn, classes = _build_model(request, module, data, classes_known)
    kv = joining.result()
    rank, num_workers = kv.rank, kv.num_workers
    if num_workers != request.ps.num_workers:  # DMLC_NUM_WORKER came from the request: this is a ps-lite bug
        raise RuntimeError(f"kvstore has {num_workers} workers, the request {request.ps.num_workers}")
    x, y = shard(data, request, rank)
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
        validation, saved, diverged = _validate_and_save(request, data, net, trainer, loss_fn, shared_validation, rank)
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


def _build_model(request: EpochRequest, module, data: dict, classes_known: Any) -> tuple[Any, Any, int | None]:
    """The model file's network, initialised (from the checkpoint when the request names one), its loss, and the
    model's classes (known already, or from a shape pass), the labels checked against them: what a worker prepares
    while the ps-lite rendezvous goes on. A broken model file or labels that are not its classes: EpochError."""
    import mxnet as mx
    from mxnet import gluon

    mx.random.seed(request.hyper.seed)  # every worker initialises alike; rank 0's values are broadcast anyway
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
    return net, loss_fn, classes


def _validate_and_save(request: EpochRequest, data: dict, net, trainer, loss_fn,
                       shared_validation: SharedValidation | None, rank: int) -> tuple[dict, str | None, bool]:
    """After a training loop that trained and did not diverge: every worker validates its slice, then rank 0 keeps
    the whole set's figures and saves the checkpoint. (validation fields, checkpoint saved, diverged): a validation
    loss that is not finite is a divergence, with no checkpoint and no NaN in the reply."""
    validation, diverged = {}, False
    if shared_validation is not None:
        validation = shared_validation.run(net, loss_fn, data["X_val"], data["y_val"])
        diverged = not math.isfinite(validation["val_loss"])
    if diverged or rank != 0:  # rank 0 replies the validation
        return {}, None, diverged
    _save_checkpoint(net, trainer, request.checkpoint_save)
    return validation, request.checkpoint_save, diverged


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
