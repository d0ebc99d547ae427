"""The gradient noise scale, measured by a worker from gradients it already has (adaptive batch size).

Why here: the controller never sees a gradient. On a sampled step a worker has two of them for free: its own
gradient over its local batch b (before `trainer.step`) and, after the step, the gradient summed over all W
workers (dist_sync with update_on_kvstore=False push-pulls the summed gradient back into the same arrays), a batch
of W x b. McCandlish et al. (2018, appendix A) give unbiased estimates of |G|^2 and tr(Sigma) from the squared
norms of the mean gradients at two batch sizes; their ratio is the noise scale B = tr(Sigma) / |G|^2.
The squared norms are queued on MXNet's engine and read once, at the end of the epoch: no step waits for them.

Side effects: none at import; `NoiseProbe` reads the trainer's gradient arrays (imports mxnet when used).
"""

from __future__ import annotations

import math

#: A worker measures every this many steps (full local batches only): the norms cost two reductions per array.
EVERY_STEPS = 4


def noise_estimates(small_sqr: float, big_sqr: float, small_batch: int, big_batch: int) -> tuple[float, float]:
    """(tr(Sigma), |G|^2) from |g_b|^2 and |g_B|^2, the squared norms of mean gradients over b < B samples.

    E|g_b|^2 = |G|^2 + tr(Sigma) / b, so two batch sizes separate the two terms (unbiased; either may be negative
    on one sample)."""
    if not 0 < small_batch < big_batch:
        raise ValueError(f"need 0 < small_batch < big_batch, got {small_batch}, {big_batch}")
    grad_sqr = (big_batch * big_sqr - small_batch * small_sqr) / (big_batch - small_batch)
    grad_var = (small_sqr - big_sqr) / (1 / small_batch - 1 / big_batch)
    return grad_var, grad_sqr


class NoiseProbe:
    """Collects the squared gradient norms of sampled steps; `reply_fields()` turns them into WorkerReply fields."""

    def __init__(self, params, num_workers: int, batch_size: int, every: int = EVERY_STEPS):
        self.grads = [g for p in params if p.grad_req != "null" for g in p.list_grad()]
        self.num_workers, self.batch_size, self.every = num_workers, batch_size, every
        self.steps = 0
        self.pending: list = []  # (local squared norm, summed squared norm) as NDArrays, read at the end
        self._local = None

    @property
    def active(self) -> bool:
        return self.num_workers > 1 and bool(self.grads)

    def _squared_norm(self):
        import mxnet as mx

        return mx.nd.add_n(*[mx.nd.sum(mx.nd.square(g)) for g in self.grads])

    def before_step(self, local_batch: int) -> None:
        """Queue the local gradient's squared norm on a sampled full step."""
        self._local = None
        if self.active and local_batch == self.batch_size and self.steps % self.every == 0:
            self._local = self._squared_norm()
        self.steps += 1

    def after_step(self) -> None:
        """Queue the summed gradient's squared norm (the same arrays, after the push-pull)."""
        if self._local is not None:
            self.pending.append((self._local, self._squared_norm()))
            self._local = None

    def reply_fields(self) -> dict:
        """grad_var, grad_sqr (means over the sampled steps) and noise_steps; {} when nothing finite was measured."""
        small, big = self.batch_size, self.batch_size * self.num_workers
        estimates = []
        for local, summed in self.pending:
            local_sqr = float(local.asscalar()) / small ** 2  # the gradients are sums over samples: make them means
            summed_sqr = float(summed.asscalar()) / big ** 2
            var, sqr = noise_estimates(local_sqr, summed_sqr, small, big)
            if math.isfinite(var) and math.isfinite(sqr):
                estimates.append((var, sqr))
        if not estimates:
            return {}
        return {"grad_var": sum(v for v, _ in estimates) / len(estimates),
                "grad_sqr": sum(s for _, s in estimates) / len(estimates), "noise_steps": len(estimates)}
