"""Every worker of an epoch leaves its training loop at the same step when one of them sees its deadline coming.

Why a vote: in dist_sync each step's gradients are summed over all workers, so a worker that pushes gradients the
others never push waits for ever; the workers must agree on the step to stop at, and their clocks do not. Each
worker's clock only casts a vote; the sum of the votes, which every worker reads alike, decides.

Why an extra kvstore key and not the `probe` parameter `_train` uses for divergence: a large finite marker added to
the probe's gradient shows in the probe's parameter only with an optimizer that applies gradients linearly. Adam
and RMSProp normalise it away, `clip_gradient` clips it, and where it does show it has already corrupted the
probe parameter and its optimizer state, which the checkpoint would then save. NaN survives any optimizer, which
is why divergence can use the probe; a stop must leave the parameters intact. The vote costs one push and one pull
of a single float every EVERY_STEPS steps, queued asynchronously after a step and read before the next one's push,
after its forward and backward pass (benchmarks/partial_epoch.py measures what it costs).

The protocol, the same on every worker (the step indices are the same on all): cast a vote before the first
step, after the first and after every EVERY_STEPS-th step; before pushing the next step's gradients, read the
sum of that round and stop if any worker voted to stop. A worker votes to stop when it could not otherwise stop
in time: its clock plus EVERY_STEPS + 1 of its slowest steps (a vote to go on lets the loop run until the next
round is read), plus its slice of the validation in step-times, reaches `stop_at_s`.

Side effects: kvstore traffic on STOP_KEY; reads the monotonic clock.
"""

from __future__ import annotations

import time
from typing import Callable

#: The vote's kvstore key: above any parameter index Gluon's Trainer uses (0 .. parameters - 1).
STOP_KEY = 1 << 30
#: Steps between two votes: one push, one pull and one blocking read per round. Voting after every step made a
#: LeNet step clearly slower; every 4th step, the cost is lost in the noise (benchmarks/partial_epoch.py, whose
#: figure is in benchmarks/results.md).
EVERY_STEPS = 4
#: One validation batch (max(batch, 256) samples, a forward pass only) costs at most this many training steps:
#: about one for LeNet at batch 64, more at small batches, where a step is mostly fixed cost. Every worker keeps
#: room for its slice of the validation in step-times it measured in this very epoch, which grow with the machine's
#: load.
VALIDATION_BATCH_STEPS = 2.0


class StopVote:
    """One epoch's stop votes over the kvstore `kv`; every worker must create one, at the same point."""

    def __init__(self, kv, stop_at_s: float, after_loop_steps: float = 0.0,
                 clock: Callable[[], float] = time.monotonic):
        import mxnet as mx

        self._kv, self._stop_at_s, self._clock = kv, stop_at_s, clock
        # step-times still to come after a vote to go on: up to a round's steps and the one in flight, then what
        # follows the loop on this worker
        self._steps_ahead = EVERY_STEPS + 1 + after_loop_steps
        kv.init(STOP_KEY, mx.nd.zeros((1,)))  # rank 0 initialises it; every worker waits at init's barrier
        self._mine, self._total = mx.nd.zeros((1,)), mx.nd.zeros((1,))
        self._steps = 0  # steps trained so far
        self._last_s: float | None = None  # when the last round was cast
        self._last_step = 0  # after which step
        self._step_s = 0.0  # the first round's time per step, then the slowest later round's (the first warms up)
        self._rounds = 0
        self._pending = False
        self.stopped = False  # a round said stop: the loop ended before the shard did
        self._cast()

    def cast(self) -> None:
        """Call after every step: after the first step (the first measure of a step's time, so that a short
        deadline need not wait EVERY_STEPS blind steps) and every EVERY_STEPS steps, vote (asynchronously)."""
        self._steps += 1
        if self._steps == 1 or self._steps % EVERY_STEPS == 0:
            self._cast()

    def stop(self) -> bool:
        """Call before pushing every step's gradients: whether a round read now says stop (rounds are read before
        the step after the one they were cast after; in between, False without waiting)."""
        if not self._pending:
            return False
        self._pending = False
        self.stopped = float(self._total.asscalar()) > 0
        return self.stopped

    def close(self) -> None:
        """Wait for a round nobody read (the loop ran to its end), so that no pull is in flight at teardown."""
        if self._pending:
            self._total.wait_to_read()
            self._pending = False

    def _cast(self) -> None:
        now = self._clock()
        if self._last_s is not None:
            self._rounds += 1
            step_s = (now - self._last_s) / (self._steps - self._last_step)
            self._step_s = step_s if self._rounds <= 2 else max(self._step_s, step_s)
        self._last_s, self._last_step = now, self._steps
        late = now + self._steps_ahead * self._step_s >= self._stop_at_s
        self._mine[:] = 1.0 if late else 0.0
        self._kv.push(STOP_KEY, self._mine)
        self._kv.pull(STOP_KEY, out=self._total)
        self._pending = True
