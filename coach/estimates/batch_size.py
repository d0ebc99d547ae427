"""A job's batch size and learning rate for each epoch: `fixed`, `linear` or `adaptive` scaling. Pure.

Why: with more workers the global batch grows (per-worker batch x workers). `fixed` keeps the job's learning rate
anyway; `linear` scales it with the global batch (the linear-scaling rule); `adaptive` picks the global batch
that maximises goodput = throughput x statistical efficiency, from the gradient noise scale the workers measure
(Pollux; McCandlish et al., "An empirical model of large-batch training"), and scales the learning rate by
AdaScale's gain.

Definitions (M = global batch, M0 = REFERENCE = the per-worker batch of the job file x 1 worker):
- gradient noise scale B = tr(Sigma) / |G|^2, Sigma the per-sample gradient covariance, G the true gradient;
- statistical efficiency E(M) = (B + M0) / (B + M): the progress per sample at M relative to M0;
- AdaScale gain r(M) = (M / M0) x E(M) = (B / M0 + 1) / (B / M + 1), between 1 and M / M0;
- throughput(M) = M / step_time(M / workers), step_time(m) = overhead_s + per_sample_s x m, fitted from the
  job's own epochs (compute seconds per step at each per-worker batch it ran).
Side effects: none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

#: How far adaptive may grow the global batch: at most this many times per_worker x workers ...
MAX_GROWTH = 8
#: ... and never beyond this many samples (a documented cap: larger batches left LeNet-sized models few steps).
MAX_GLOBAL_BATCH = 4096
#: Weight of the newest epoch's measurement in the smoothed gradient statistics (an exponential moving average).
SMOOTHING = 0.5


@dataclass(frozen=True)
class NoiseStats:
    """Unbiased estimates of the two terms of the gradient noise scale (per-sample units)."""

    grad_var: float  # tr(Sigma): variance of one sample's gradient, summed over parameters
    grad_sqr: float  # |G|^2: squared norm of the true gradient

    @property
    def noise_scale(self) -> float:
        """B = tr(Sigma) / |G|^2; infinite when the gradient is lost in the noise (|G|^2 <= 0)."""
        if self.grad_sqr <= 0:
            return math.inf
        return max(self.grad_var, 0.0) / self.grad_sqr


def smooth(previous: NoiseStats | None, measured: NoiseStats, weight: float = SMOOTHING) -> NoiseStats:
    """Both terms averaged across epochs separately (as Pollux does): their ratio is far noisier than either."""
    if previous is None:
        return measured
    return NoiseStats(previous.grad_var + weight * (measured.grad_var - previous.grad_var),
                      previous.grad_sqr + weight * (measured.grad_sqr - previous.grad_sqr))


@dataclass(frozen=True)
class WorkerNoise:
    """What one worker measured: its estimates and how many steps they average."""

    grad_var: float
    grad_sqr: float
    steps: int


def combine(measured: Sequence[WorkerNoise]) -> NoiseStats | None:
    """The epoch's estimate: the workers' estimates weighted by their steps; None when none measured any."""
    steps = sum(m.steps for m in measured if m.steps > 0)
    if steps == 0:
        return None
    return NoiseStats(sum(m.grad_var * m.steps for m in measured if m.steps > 0) / steps,
                      sum(m.grad_sqr * m.steps for m in measured if m.steps > 0) / steps)


@dataclass(frozen=True)
class StepTime:
    """Compute seconds of one training step as a function of the per-worker batch m."""

    overhead_s: float  # per step whatever the batch (push/pull of the gradients, Python, the optimizer)
    per_sample_s: float  # per sample of the per-worker batch

    def step_s(self, per_worker: int) -> float:
        return self.overhead_s + self.per_sample_s * per_worker


def fit_step_time(points: Sequence[tuple[int, float]]) -> StepTime | None:
    """Least squares of step seconds on per-worker batch, from (per-worker batch, step seconds) points.

    Degenerate cases: no point -> None; one distinct batch -> half overhead, half per-sample (a prior, until an
    epoch at another batch measures the split); a negative coefficient is clamped to 0 (the other refitted)."""
    points = [(m, t) for m, t in points if m > 0 and math.isfinite(t) and t > 0]
    if not points:
        return None
    n = len(points)
    mean_m = sum(m for m, _ in points) / n
    mean_t = sum(t for _, t in points) / n
    spread = sum((m - mean_m) ** 2 for m, _ in points)
    if spread == 0:
        return StepTime(mean_t / 2, mean_t / (2 * mean_m))
    slope = sum((m - mean_m) * (t - mean_t) for m, t in points) / spread
    intercept = mean_t - slope * mean_m
    if slope <= 0:
        return StepTime(mean_t, 0.0)
    if intercept < 0:
        return StepTime(0.0, sum(m * t for m, t in points) / sum(m * m for m, _ in points))
    return StepTime(intercept, slope)


def efficiency(noise_scale: float, global_batch: int, reference: int) -> float:
    """E(M) = (B + M0) / (B + M); 1 for an infinite noise scale (every sample counts fully)."""
    if math.isinf(noise_scale):
        return 1.0
    return (noise_scale + reference) / (noise_scale + global_batch)


def adascale_gain(noise_scale: float, global_batch: int, reference: int) -> float:
    """AdaScale's learning-rate gain r = (M / M0) x E(M), in [1, M / M0] for M >= M0."""
    return global_batch / reference * efficiency(noise_scale, global_batch, reference)


def goodput(noise_scale: float, global_batch: int, workers: int, reference: int, step: StepTime) -> float:
    """Useful samples per second: throughput x statistical efficiency (per-worker batch = M / workers)."""
    return global_batch / step.step_s(global_batch // workers) * efficiency(noise_scale, global_batch, reference)


@dataclass(frozen=True)
class BatchInputs:
    """What a scaling rule decides from, for one epoch."""

    per_worker: int  # the job file's per-worker batch (M0 = per_worker x 1 worker)
    learning_rate: float  # the job file's learning rate (tuned for M0, or for the fixed global batch)
    workers: int  # workers of this epoch
    noise: NoiseStats | None = None  # smoothed measurements so far; None before the first
    step_times: Sequence[tuple[int, int, float]] = ()  # (workers, per-worker batch, step seconds) measured
    samples: int | None = None  # training samples of a full epoch, when known (caps the per-worker batch)


@dataclass(frozen=True)
class BatchChoice:
    """One epoch's batch and learning rate, as recorded on its line."""

    batch_size: int  # per-worker mini-batch
    global_batch: int  # batch_size x workers
    learning_rate: float
    batch_scaling: str
    grad_noise_scale: float | None = None  # the smoothed B the choice used (adaptive only)

    def record(self) -> dict[str, Any]:
        """The fields of an epoch line (grad_noise_scale only when known; JSON has no infinity)."""
        out = {"batch_size": self.batch_size, "global_batch": self.global_batch,
               "learning_rate": self.learning_rate, "batch_scaling": self.batch_scaling}
        if self.grad_noise_scale is not None and math.isfinite(self.grad_noise_scale):
            out["grad_noise_scale"] = self.grad_noise_scale
        return out


def _fixed(inputs: BatchInputs) -> BatchChoice:
    return BatchChoice(inputs.per_worker, inputs.per_worker * inputs.workers, inputs.learning_rate, "fixed")


def _linear(inputs: BatchInputs) -> BatchChoice:
    """The linear-scaling rule: learning rate x global batch / M0 (M0 = per_worker x 1 worker)."""
    global_batch = inputs.per_worker * inputs.workers
    return BatchChoice(inputs.per_worker, global_batch, inputs.learning_rate * inputs.workers, "linear")


def batch_bounds(inputs: BatchInputs) -> tuple[int, int]:
    """(smallest, largest) per-worker batch adaptive may choose: global M0 .. MAX_GROWTH x per_worker x workers,
    at most MAX_GLOBAL_BATCH and at most a worker's shard."""
    workers = inputs.workers
    low = max(1, math.ceil(inputs.per_worker / workers))
    high = min(MAX_GROWTH * inputs.per_worker, MAX_GLOBAL_BATCH // workers)
    if inputs.samples is not None:
        high = min(high, inputs.samples // workers)
    return low, max(low, high)


def choose_global_batch(noise_scale: float, workers: int, reference: int, step: StepTime,
                        bounds: tuple[int, int]) -> int:
    """The per-worker batch in `bounds` of the highest goodput (the smaller on a tie)."""
    low, high = bounds
    return max(range(low, high + 1), key=lambda m: (goodput(noise_scale, m * workers, workers, reference, step), -m))


def _adaptive(inputs: BatchInputs) -> BatchChoice:
    """Before the first measurement, or without a step-time model: exactly `fixed` (gain 1)."""
    reference, workers = inputs.per_worker, inputs.workers
    same = [(m, t) for w, m, t in inputs.step_times if w == workers]
    step = fit_step_time(same or [(m, t) for _, m, t in inputs.step_times])
    if inputs.noise is None or step is None:
        return replace_scaling(_fixed(inputs), "adaptive")
    noise_scale = inputs.noise.noise_scale
    per_worker = choose_global_batch(noise_scale, workers, reference, step, batch_bounds(inputs))
    global_batch = per_worker * workers
    rate = inputs.learning_rate * adascale_gain(noise_scale, global_batch, reference)
    return BatchChoice(per_worker, global_batch, rate, "adaptive", noise_scale)


def replace_scaling(choice: BatchChoice, scaling: str) -> BatchChoice:
    return BatchChoice(choice.batch_size, choice.global_batch, choice.learning_rate, scaling, choice.grad_noise_scale)


@dataclass(frozen=True)
class Scaling:
    """One way of scaling the batch: its rule, and whether it needs the workers to measure the noise scale."""

    choose: Callable[[BatchInputs], BatchChoice]
    measures_noise: bool = False


#: Scaling name -> rule. The job file's `batch_size.scaling` is one of these keys.
SCALINGS: Mapping[str, Scaling] = {
    "fixed": Scaling(_fixed),
    "linear": Scaling(_linear),
    "adaptive": Scaling(_adaptive, measures_noise=True),
}


def choose_batch(scaling: str, inputs: BatchInputs) -> BatchChoice:
    return SCALINGS[scaling].choose(inputs)
