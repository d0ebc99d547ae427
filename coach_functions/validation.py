"""The epoch's validation, shared by its workers: each validates a slice, the kvstore sums the slices.

Why: validation used to run on rank 0 alone after the training loop, while every other worker (and the servers)
waited for it at the kvstore's teardown barrier; with LeNet that was the largest part of an epoch's fixed cost
after the ps-lite rendezvous (benchmarks/coach_epoch_profile.py shows where an epoch's time goes). Split W ways it
costs about 1/W of that on every worker at once.

The protocol, the same on every worker and at the same points: `SharedValidation(kv, net, ...)` before the
training loop (its kvstore keys are initialised behind init's barrier then, not after the loop), then `run(...)`
after it by every worker or by none (they agree: they stop at the same step and share the parameters, hence
divergence).
Each worker sums the loss and the correct answers of its contiguous slice on the engine (one read at the end,
not two per batch), pushes (loss sum, correct, samples) and pulls the sum of every worker's push. Every worker
then knows the whole set's figures; rank 0 decides on them before it saves, exactly as when it validated alone.
The sums are float32 on the server: a relative error of about 1e-7 on the loss.

The figures must describe the model rank 0 saves. The trained parameters are the same on every worker after the
last step (dist_sync), but state that no gradient updates is not: BatchNorm's running mean and variance follow
each worker's own shard. So before validating, every worker takes rank 0's copy of that state (rank 0 pushes
it, the others push zeros, every worker pulls the sum into its own arrays) on keys initialised with the rest.

Side effects: kvstore traffic on VALIDATION_KEY.
"""

from __future__ import annotations

import math

from coach_functions.deadline import STOP_KEY

#: The kvstore key of the sums: beside the stop vote's, above any parameter index Gluon's Trainer uses.
VALIDATION_KEY = STOP_KEY + 1


def batch_size_for_validation(batch_size: int) -> int:
    """Validation batches: a forward pass only, so larger than training's."""
    return max(batch_size, 256)


def slice_bounds(num_samples: int, rank: int, num_workers: int) -> tuple[int, int]:
    """[start, end) of rank's contiguous slice: every sample in exactly one slice, sizes within one."""
    return num_samples * rank // num_workers, num_samples * (rank + 1) // num_workers


class SharedValidation:
    """One epoch's shared validation over the kvstore `kv`; every worker must create one, at the same point."""

    def __init__(self, kv, net, num_samples: int, batch_size: int):
        import mxnet as mx

        self._kv = kv
        self._start, self._end = slice_bounds(num_samples, kv.rank, kv.num_workers)  # this worker's slice
        self._step = batch_size_for_validation(batch_size)
        # rank 0's running statistics and other state no gradient updates (shapes are known: after the shape pass
        # or the checkpoint load)
        self._state = [array for param in net.collect_params().values() if param.grad_req == "null"
                       for array in param.list_data()]
        keys = [VALIDATION_KEY] + [VALIDATION_KEY + 1 + i for i in range(len(self._state))]
        # rank 0 initialises them; every worker waits at init's barrier
        kv.init(keys, [mx.nd.zeros((3,))] + [mx.nd.zeros(a.shape, dtype=a.dtype) for a in self._state])
        self._state_keys = keys[1:]
        self._total = mx.nd.zeros((3,))

    @property
    def batches(self) -> int:
        """Forward passes this worker's slice takes (what the deadline keeps room for)."""
        return math.ceil((self._end - self._start) / self._step)

    def run(self, net, loss_fn, x_val, y_val) -> dict:
        """The whole validation set's loss and accuracy (WorkerReply's val_* keyword arguments), from this
        worker's slice and every other's."""
        import mxnet as mx

        if self._state:  # rank 0's copy for everyone: the pulls land in the arrays the forward passes read
            mine = self._state if self._kv.rank == 0 else [mx.nd.zeros(a.shape, dtype=a.dtype) for a in self._state]
            self._kv.push(self._state_keys, mine)
            self._kv.pull(self._state_keys, out=self._state)
        start, end, step = self._start, self._end, self._step
        loss_sum, correct = mx.nd.zeros((1,)), mx.nd.zeros((1,))
        for first in range(start, end, step):
            last = min(first + step, end)
            xb, yb = mx.nd.array(x_val[first:last]), mx.nd.array(y_val[first:last])
            out = net(xb)
            loss_sum += loss_fn(out, yb).sum()
            correct += (out.argmax(axis=1) == yb).sum()
        mine = mx.nd.concat(loss_sum, correct, mx.nd.array([end - start]), dim=0)
        self._kv.push(VALIDATION_KEY, mine)
        self._kv.pull(VALIDATION_KEY, out=self._total)
        total_loss, total_correct, total_samples = (float(v) for v in self._total.asnumpy())
        samples = int(round(total_samples))
        if samples != len(x_val):  # a slice went missing: a ps-lite fault, never a silently wrong loss
            raise RuntimeError(f"shared validation summed {samples} samples, the set has {len(x_val)}")
        return {"val_loss": total_loss / samples if math.isfinite(total_loss) else math.nan,
                "val_accuracy": int(round(total_correct)) / samples, "val_samples": samples}
