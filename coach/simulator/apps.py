"""The six applications of the Pollux traces as AppModels: throughput and statistical efficiency from measurements.

Each application is read once and kept as
- step times: the measurements of placements.csv and scalability.csv, averaged per (nodes, replicas, per-GPU batch)
  and interpolated the way Pollux's simulator takes them as truth; beyond them, Pollux's step-time model (compute
  time linear in the per-GPU batch; network time a constant plus a term growing with replicas, inter-node or
  intra-node; the two combined as a gamma-norm for their overlap) fitted to the same measurements;
- gradient statistics (grad_sqr, grad_var) per validated batch size and per epoch of progress, from which Pollux's
  statistical efficiency E(M) = (var + sqr) / (var + sqr * M / M0) follows at any batch M (gradient noise scale
  B = M0 * var / sqr; E = (B + M0) / (B + M)).
Policies ask for goodput at allocations nobody measured thousands of times per simulated hour: everything is
vectorised with numpy and the best batch is cached per (GPUs, nodes, epoch of progress).

Progress is counted in M0-samples: the validation traces' `progress` column (in M0-steps, one row per epoch of
progress) times M0. A job ends after the app's last traced epoch of progress, as in Pollux's simulator.
Reading the traces is the only side effect (load_app/load_apps); everything else is pure and deterministic.
"""

from __future__ import annotations

import bisect
import csv
import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from coach.simulator.grants import fit_batch
from coach.simulator.reading import read_input
from coach.simulator.view import packed_nodes
from coach.simulator.workloads import SimJob

if TYPE_CHECKING:  # scipy is imported when first needed: a short simulation may never need it
    from scipy.interpolate import LinearNDInterpolator

#: Constants Pollux's simulator sets by hand (artifact simulator/applications.py and simulator.py); everything else
#: comes from the traces: M0 = smallest validated batch, max batch = largest, local batch bounds = placements range.
_OVERRIDES: dict[str, dict[str, int]] = {
    "yolov3": {"max_local_batch": 8},  # measured up to 16 per GPU, but Pollux caps the per-GPU batch at 8
    "ncf": {"max_gpus": 1},  # Pollux's simulator never gives ncf more than one replica
}
APP_NAMES = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
_EPS = 1e-8
_GRID_POINTS = 48  # per-GPU batches at which an unmeasured (nodes, replicas) shape is interpolated once
_MAX_NODES_MEASURED = 16  # scalability.csv goes up to 16 nodes; more nodes are taken as 16 (as Pollux)
_BEST_BATCH_CANDIDATES = 64  # per-GPU batch sizes tried, geometrically spaced (Pollux tries 50 total batch sizes)
#: Bounds on trace values, far beyond the published traces (largest file 82 KB, step times under 4 s, per-GPU batches
#: up to 32768, progress up to 5.8e5 M0-steps, gradient statistics up to 7.4e15): past them a job would never end,
#: a fit would overflow, or a file would fill memory.
MAX_TRACE_BYTES = 16 << 20
MAX_STEP_S = 86_400.0
MAX_LOCAL_BATCH = 10**6
MAX_MEASURED_GPUS = 10**6  # nodes and replicas of one measurement
MAX_PROGRESS = 1e8  # M0-steps of one validation trace
MAX_GRAD = 1e30
MAX_VALIDATED_BATCH = 10**9


class AppTraceError(ValueError):
    """A trace file that cannot be used; one line, `FILE:LINE:COLUMN: what is wrong`."""


# ---------------------------------------------------------------------------------------------------------------
# Throughput: Pollux's step-time model


@dataclass(frozen=True)
class PerfParams:
    """Step time = (compute^gamma + network^gamma)^(1/gamma); compute = alpha_c + beta_c * local batch."""

    alpha_c: float  # s, constant compute time per step
    beta_c: float  # s per sample, compute time per sample of the per-GPU batch
    alpha_n: float  # s, network time when replicas span nodes
    beta_n: float  # s per replica beyond 2, inter-node retrogression
    alpha_r: float  # s, network time when replicas share one node
    beta_r: float  # s per replica beyond 2, intra-node retrogression
    gamma: float  # overlap of compute and network, in [1, 10]: 1 none (sum), 10 almost full (max)


def compute_time_s(params: PerfParams, local_batch: np.ndarray) -> np.ndarray:
    """Forward and backward time of one micro-batch on one GPU."""
    return params.alpha_c + params.beta_c * np.asarray(local_batch, dtype=float)


def network_time_s(params: PerfParams, nodes: np.ndarray, replicas: np.ndarray) -> np.ndarray:
    """All-reduce time: the slowest link's constant plus a retrogression per replica beyond two; 0 for one GPU."""
    nodes = np.asarray(nodes, dtype=float)
    replicas = np.asarray(replicas, dtype=float)
    extra = np.maximum(replicas - 2, 0.0)
    inter = params.alpha_n + params.beta_n * extra
    intra = params.alpha_r + params.beta_r * extra
    return np.where(nodes > 1, inter, np.where(replicas > 1, intra, 0.0))


def step_time_s(params: PerfParams, nodes: np.ndarray, replicas: np.ndarray, local_batch: np.ndarray) -> np.ndarray:
    """Time of one synchronised step (no accumulation)."""
    compute = compute_time_s(params, local_batch)
    network = network_time_s(params, nodes, replicas)
    gamma = params.gamma
    return (compute**gamma + network**gamma) ** (1.0 / gamma)


def fit_perf_params(nodes: np.ndarray, replicas: np.ndarray, local_batch: np.ndarray, compute_s: np.ndarray,
                    step_s: np.ndarray) -> PerfParams:
    """Least squares on log times (Pollux fits RMSLE of compute and step time), all parameters kept positive.

    Degenerate data: with no multi-node rows the inter-node terms copy the intra-node ones, with no multi-replica
    rows both network terms are 0 (they cannot be seen); with one local batch the compute constant is half the time.
    """
    nodes, replicas, local_batch, compute_s, step_s = (np.asarray(a, dtype=float)
                                                       for a in (nodes, replicas, local_batch, compute_s, step_s))
    if len(step_s) == 0:
        raise ValueError("fit_perf_params: no measurements")
    multi_node = bool((nodes > 1).any())
    multi_replica = bool((replicas > 1).any())
    one_batch = len(np.unique(local_batch)) == 1
    tiny = math.log(_EPS)

    def unpack(x: np.ndarray) -> PerfParams:
        alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r = np.exp(x[:6])
        if one_batch:
            alpha_c = float(np.mean(compute_s)) / 2
            beta_c = alpha_c / float(local_batch[0])
        if not multi_replica:
            alpha_r = beta_r = alpha_n = beta_n = 0.0
        elif not multi_node:
            alpha_n, beta_n = alpha_r, beta_r
        return PerfParams(float(alpha_c), float(beta_c), float(alpha_n), float(beta_n), float(alpha_r),
                          float(beta_r), float(x[6]))

    def residuals(x: np.ndarray) -> np.ndarray:
        params = unpack(x)
        return np.concatenate([np.log(compute_time_s(params, local_batch) / compute_s),
                               np.log(step_time_s(params, nodes, replicas, local_batch) / step_s)])

    from scipy.optimize import least_squares

    scale = float(np.median(step_s))
    start = np.array([math.log(scale / 2), math.log(scale / 2 / max(float(np.median(local_batch)), 1.0)),
                      math.log(scale / 4), math.log(scale / 100), math.log(scale / 8), math.log(scale / 100), 2.0])
    lower = np.array([tiny] * 6 + [1.0])
    upper = np.array([math.log(1e4)] * 6 + [10.0])
    result = least_squares(residuals, np.clip(start, lower + 1e-9, upper - 1e-9), bounds=(lower, upper),
                           x_scale="jac", tr_solver="lsmr",
                           max_nfev=2000)
    return unpack(result.x)


# ---------------------------------------------------------------------------------------------------------------
# The application


@dataclass(frozen=True, eq=False)
class StepTimes:
    """Step and sync time at any (nodes, replicas, per-GPU batch), the way Pollux's simulator takes them as truth:
    1-D interpolation over the per-GPU batch of the measurements with exactly these nodes and replicas (averaged
    over placements of that shape), else linear interpolation in (nodes, replicas, per-GPU batch) over all of them,
    else (outside the measured hull, e.g. a per-GPU batch below the smallest measured) the fitted model.

    The scattered interpolation and the fitted model are built on first use: many runs never leave the measured
    shapes, and the fit takes a good part of a short simulation's start. A fit that fails is an AppTraceError
    naming `source` then, not at reading."""

    lines: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]  # (nodes, replicas) -> batch, step, sync
    points: np.ndarray  # (nodes, replicas, per-GPU batch) of every averaged measurement, shape (n, 3)
    values: np.ndarray  # (step s, sync s) at those points, shape (n, 2)
    measured: tuple[np.ndarray, ...]  # (nodes, replicas, per-GPU batch, step s) of every measurement
    source: str = ""  # the file the measurements came from, for the fit's error
    sampled: set = field(default_factory=set)  # (nodes, replicas) shapes whose line was sampled from `scattered`

    @functools.cached_property
    def scattered(self) -> LinearNDInterpolator | None:
        """Linear interpolation over points -> values (NaN outside their hull); None if the points are flat."""
        from scipy.interpolate import LinearNDInterpolator
        from scipy.spatial import QhullError

        try:
            return LinearNDInterpolator(self.points, self.values)
        except (QhullError, ValueError):  # all measurements in one plane (e.g. one node count): no volume to fill
            return None

    @functools.cached_property
    def perf(self) -> PerfParams:
        """The model fitted to the averages (a third of the rows, the same information), for what was not
        measured."""
        mean_compute_s = self.values[:, 0] - self.values[:, 1]
        usable = mean_compute_s > 0
        points = self.points[usable]
        try:
            return fit_perf_params(points[:, 0], points[:, 1], points[:, 2], mean_compute_s[usable],
                                   self.values[usable, 0])
        except (ValueError, FloatingPointError) as exc:  # values within bounds that still defeat the fit
            raise AppTraceError(f"{self.source}:0:0: cannot fit the step-time model ({exc})") from None

    @functools.cached_property
    def fit_error(self) -> float:
        """Median relative error of the fitted model's step time over all measurements."""
        nodes, replicas, local_batch, step_s = self.measured
        return float(np.median(np.abs(step_time_s(self.perf, nodes, replicas, local_batch) / step_s - 1.0)))

    @functools.cached_property
    def interpolation_error(self) -> float:
        """The same for the interpolated table: every measurement lies on its own (nodes, replicas) line, so this
        is the spread of placements of one shape."""
        nodes, replicas, local_batch, step_s = self.measured
        table_step = np.empty(len(step_s))
        for (n, r), line in self.lines.items():
            if (n, r) in self.sampled:  # a line queries added (or None where the hull has none): no measurement
                continue
            batches, steps, _ = line
            rows = (nodes == n) & (replicas == r)
            table_step[rows] = np.interp(local_batch[rows], batches, steps)
        return float(np.median(np.abs(table_step / step_s - 1.0)))

    def step_and_sync_s(self, nodes: int, replicas: int, local_batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        local_batch = np.asarray(local_batch, dtype=float)
        step = np.full(local_batch.shape, np.nan)
        sync = np.full(local_batch.shape, np.nan)
        shape = (nodes, replicas)
        if shape not in self.lines and self.scattered is not None:
            self.lines[shape] = self._scattered_line(nodes, replicas)
            self.sampled.add(shape)
        line = self.lines.get(shape)
        if line is not None:
            batches, steps, syncs = line
            inside = (local_batch >= batches[0]) & (local_batch <= batches[-1])
            step = np.where(inside, np.interp(local_batch, batches, steps), np.nan)
            sync = np.where(inside, np.interp(local_batch, batches, syncs), np.nan)
        missing = np.isnan(step)
        if missing.any() and self.scattered is not None and shape not in self.sampled:
            query = np.column_stack([np.full(int(missing.sum()), float(min(nodes, _MAX_NODES_MEASURED))),
                                     np.full(int(missing.sum()), float(replicas)), local_batch[missing]])
            found = self.scattered(query)
            step[missing], sync[missing] = found[:, 0], found[:, 1]
            missing = np.isnan(step)
        if missing.any():
            model_step = step_time_s(self.perf, nodes, replicas, local_batch[missing])
            step[missing] = model_step
            sync[missing] = model_step - compute_time_s(self.perf, local_batch[missing])
        return step, sync


    def _scattered_line(self, nodes: int, replicas: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """An unmeasured (nodes, replicas): the scattered interpolation sampled once on a grid of per-GPU batches
        (the measured range, geometric), kept as a line. One triangulation query per shape instead of one per
        call (each costs milliseconds); in between, linear in the per-GPU batch as measured shapes are."""
        batches = np.unique(np.round(np.geomspace(self.points[:, 2].min(), self.points[:, 2].max(), _GRID_POINTS)))
        query = np.column_stack([np.full(len(batches), float(min(nodes, _MAX_NODES_MEASURED))),
                                 np.full(len(batches), float(replicas)), batches])
        found = self.scattered(query)
        inside = ~np.isnan(found[:, 0])
        if inside.sum() < 2:
            return None
        return batches[inside], found[inside, 0], found[inside, 1]


def build_step_times(nodes: np.ndarray, replicas: np.ndarray, local_batch: np.ndarray, step_s: np.ndarray,
                     sync_s: np.ndarray, source: str = "") -> StepTimes:
    """Average the measurements per (nodes, replicas, per-GPU batch); the model is fitted to them when first asked
    for (StepTimes.perf)."""
    table = np.column_stack([nodes, replicas, local_batch])
    points, inverse = np.unique(table, axis=0, return_inverse=True)  # sorted by nodes, replicas, batch
    inverse = inverse.reshape(-1)
    counts = np.bincount(inverse)
    values = np.column_stack([np.bincount(inverse, step_s) / counts, np.bincount(inverse, sync_s) / counts])
    shapes, starts = np.unique(points[:, :2], axis=0, return_index=True)
    ends = np.append(starts[1:], len(points))
    lines = {(int(n), int(r)): (points[a:b, 2], values[a:b, 0], values[a:b, 1])
             for (n, r), a, b in zip(shapes, starts, ends)}
    return StepTimes(lines=lines, points=points, values=values, measured=(nodes, replicas, local_batch, step_s),
                     source=source)


@dataclass(frozen=True, eq=False)
class GradStats:
    """Gradient statistics per validated batch size (rows) and epoch of progress (columns)."""

    batch_sizes: np.ndarray  # validated total batch sizes, ascending
    epoch_starts: np.ndarray  # M0-samples at which each epoch of progress starts (first is 0)
    sqr: np.ndarray  # |E g|^2 estimates, shape (batch sizes, epochs)
    var: np.ndarray  # Var g estimates (per M0 batch), same shape


class App:
    """One application: an AppModel backed by measured step times and traced gradient statistics."""

    def __init__(self, name: str, *, init_batch: int, max_batch: int, min_local_batch: int, max_local_batch: int,
                 max_gpus: int, steps: StepTimes, grads: GradStats, max_progress: float) -> None:
        self.name = name
        self.init_batch = init_batch  # M0
        self.max_batch = max_batch
        self.min_local_batch = min_local_batch  # smallest measured per-GPU batch
        self.max_local_batch = max_local_batch  # largest per-GPU batch; beyond it the GPU accumulates gradients
        self.max_gpus = max_gpus  # the most GPUs it can use: max_batch / min_local_batch (ncf: 1, as Pollux)
        self.steps = steps  # measured step times, interpolated, with the fitted model beyond them
        self.grads = grads
        self.max_progress = max_progress  # M0-samples to finish (the last traced epoch of progress)
        self._best: dict[tuple[int, int, int], tuple[int, float]] = {}
        self._candidates: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}  # (GPUs, nodes) -> batches, speeds
        self._speeds: dict[tuple[int, int, int], float] = {}  # (gpus, nodes, batch) -> samples/s
        self._efficiencies: dict[tuple[int, int], float] = {}  # (batch, epoch) -> efficiency
        self._epoch_starts = [float(x) for x in grads.epoch_starts]

    def __repr__(self) -> str:
        return (f"App({self.name!r}, init_batch={self.init_batch}, max_batch={self.max_batch}, "
                f"local_batch={self.min_local_batch}..{self.max_local_batch}, max_gpus={self.max_gpus})")

    # -- throughput --------------------------------------------------------------------------------------------

    def throughput(self, gpus: int, nodes: int, batch: int) -> float:
        """Samples/s. A per-GPU batch above max_local_batch is split into accumulation steps, and one GPU past M0
        always accumulates at least once (AdaptDL estimates the gradient noise from two micro-batches)."""
        key = (gpus, nodes, batch)
        found = self._speeds.get(key)
        if found is None:  # pure: each point is computed once (policies ask the same points every round)
            _check_allocation(gpus, nodes, batch)
            found = 0.0 if gpus == 0 else float(self._throughput(gpus, nodes, np.array([float(batch)]))[0])
            self._speeds[key] = found
        return found

    def _throughput(self, gpus: int, nodes: int, batch: np.ndarray) -> np.ndarray:
        local = batch / gpus
        accum_steps = np.maximum(np.ceil(local / self.max_local_batch - _EPS) - 1, 0.0)
        if gpus == 1:
            accum_steps = np.where(local > self.init_batch + _EPS, np.maximum(accum_steps, 1.0), accum_steps)
        micro = local / (accum_steps + 1)
        step_s, sync_s = self.steps.step_and_sync_s(nodes, gpus, micro)
        return batch / (step_s + accum_steps * (step_s - sync_s))

    # -- statistical efficiency --------------------------------------------------------------------------------

    def epoch(self, progress: float) -> int:
        """The epoch of progress whose gradient statistics apply (the last one past the end)."""
        index = bisect.bisect_right(self._epoch_starts, progress) - 1  # a list: bisect beats numpy on one value
        return min(max(index, 0), len(self._epoch_starts) - 1)

    def efficiency(self, batch: int, progress: float) -> float:
        """E(M) vs M0 in (0, 1]; 1 at or below M0 (Pollux never runs below M0)."""
        if batch <= 0:
            raise ValueError(f"{self.name}: batch must be >= 1, got {batch}")
        key = (batch, self.epoch(progress))
        found = self._efficiencies.get(key)
        if found is None:  # pure: computed once per (batch, epoch of progress)
            found = self._efficiencies[key] = float(self._efficiency(np.asarray(float(batch)), key[1]))
        return found

    def _efficiency(self, batch: np.ndarray, epoch: int) -> np.ndarray:
        # Linear in batch size between the two validated batch sizes around it (as Pollux), clamped at the ends.
        sqr = np.interp(batch, self.grads.batch_sizes, self.grads.sqr[:, epoch])
        var = np.interp(batch, self.grads.batch_sizes, self.grads.var[:, epoch])
        scale = np.maximum(batch / self.init_batch, 1.0)
        denom = var + sqr * scale
        return np.where(denom > 0, (var + sqr) / np.where(denom > 0, denom, 1.0), 1.0)

    def goodput(self, gpus: int, nodes: int, batch: int, progress: float) -> float:
        """M0-samples of progress per second."""
        return self.throughput(gpus, nodes, batch) * self.efficiency(batch, progress) if gpus else 0.0

    # -- the best batch ----------------------------------------------------------------------------------------

    def best_batch(self, gpus: int, nodes: int, progress: float) -> tuple[int, float]:
        """(total batch, goodput) maximising goodput on this allocation, among multiples of `gpus` with a per-GPU
        batch of at least min_local_batch, a total of at least M0 and at most max_batch (accumulating gradients
        past max_local_batch, as Pollux does). Past max_gpus no batch fits: every GPU then takes
        max_batch // gpus (at least 1). Cached per (gpus, nodes, epoch): efficiency changes only between epochs."""
        _check_allocation(gpus, nodes, gpus)
        if gpus == 0:
            return 0, 0.0
        key = (gpus, nodes, self.epoch(progress))
        cached = self._best.get(key)
        if cached is None:
            cached = self._best[key] = self._search_best(*key)
        return cached

    def _search_best(self, gpus: int, nodes: int, epoch: int) -> tuple[int, float]:
        candidates = self._candidates.get((gpus, nodes))
        if candidates is None:  # the batches and their throughputs do not depend on the epoch: once per allocation
            low_local = max(self.min_local_batch, math.ceil(self.init_batch / gpus))
            high_local = self.max_batch // gpus
            if low_local > high_local:
                locals_ = np.array([max(high_local, 1)], dtype=float)
            else:
                locals_ = np.unique(np.round(np.geomspace(low_local, high_local, _BEST_BATCH_CANDIDATES)))
            batches = locals_ * gpus
            candidates = self._candidates[(gpus, nodes)] = (batches, self._throughput(gpus, nodes, batches))
        batches, throughputs = candidates
        goodputs = throughputs * self._efficiency(batches, epoch)
        best = int(np.argmax(goodputs))
        return int(batches[best]), float(goodputs[best])

    def seconds_to_train(self, throughput: float, batch: int, progress: float, total: float) -> float:
        """Seconds from `progress` to `total` M0-samples at `throughput` and `batch`: exact, epoch by epoch of
        progress (statistical efficiency is constant within one)."""
        if total <= progress:
            return 0.0
        if throughput <= 0:
            return math.inf
        starts, seconds = self._epoch_starts, 0.0
        for k in range(self.epoch(progress), len(starts)):
            end = min(starts[k + 1] if k + 1 < len(starts) else math.inf, total)
            rate = throughput * self.efficiency(batch, max(starts[k], progress))
            if rate <= 0:
                return math.inf
            seconds += (end - max(starts[k], progress)) / rate
            if end >= total:
                break
        return seconds

    def total_progress(self, batch: int | None = None) -> float:
        """M0-samples to finish; the same for every batch (Pollux ends a job at its last epoch of progress)."""
        del batch
        return self.max_progress


def total_progress(app: App, batch: int) -> float:
    """M0-samples a job of `app` makes before it ends, whatever its batch (see App.total_progress)."""
    return app.total_progress(batch)


def job_total_progress(job: SimJob, app: App, gpus_per_node: int = 4) -> float:
    """A workload job's M0-samples to finish: the app's for Pollux workloads; for a trace job with a duration, the
    progress it makes training for duration_s at its requested GPUs (packed `gpus_per_node` a node, capped at the
    app's max_gpus) and batch (fitted to them), so that it trains for duration_s when given what it asked.

    The goodput changes as the job trains (statistical efficiency per epoch of progress), so the work is the
    progress at which the time trained reaches duration_s, walked epoch by epoch (efficiency is constant within
    one). Setting it from the first epoch's goodput alone made ImageNet-mapped jobs, whose efficiency grows as they
    train, finish in a median 0.61x their trace duration (issue 35)."""
    if job.duration_s is None:
        return app.total_progress(job.batch)
    gpus = max(1, min(job.gpus, app.max_gpus))
    batch = fit_batch(app, gpus, job.batch)  # what the engine runs it at (alone_s, fifo)
    throughput = app.throughput(gpus, packed_nodes(gpus, gpus_per_node), batch)
    return progress_after(app, throughput, batch, job.duration_s)


def progress_after(app: App, throughput: float, batch: int, seconds: float) -> float:
    """M0-samples a job of `app` makes from the start in `seconds` of training at `throughput` samples per second
    and `batch`: epoch by epoch of progress, at that epoch's statistical efficiency (the last one's past the end)."""
    if throughput <= 0 or seconds <= 0:
        return 0.0
    starts = app._epoch_starts
    left = seconds
    for k, start in enumerate(starts):
        rate = throughput * app.efficiency(batch, start)
        end = starts[k + 1] if k + 1 < len(starts) else math.inf
        if rate <= 0:
            return start
        if (end - start) / rate >= left:
            return start + left * rate
        left -= (end - start) / rate
    return starts[-1]  # unreachable: the last epoch never ends


def _check_allocation(gpus: int, nodes: int, batch: int) -> None:
    if gpus < 0 or nodes < 0:
        raise ValueError(f"gpus and nodes must be >= 0, got gpus={gpus} nodes={nodes}")
    if gpus and not 1 <= nodes <= gpus:
        raise ValueError(f"nodes must be within 1..gpus, got gpus={gpus} nodes={nodes}")
    if gpus and batch < gpus:
        raise ValueError(f"batch must be >= gpus, got batch={batch} gpus={gpus}")


# ---------------------------------------------------------------------------------------------------------------
# Loading


def load_apps(traces_dir: Path) -> dict[str, App]:
    """Every application under traces_dir (one folder each, holding placements.csv), by name."""
    traces_dir = Path(traces_dir)
    names = sorted(p.parent.name for p in traces_dir.glob("*/placements.csv"))
    if not names:
        raise AppTraceError(f"{traces_dir}:0:0: no application folders (*/placements.csv)")
    return {name: load_app(traces_dir, name) for name in names}


def load_app(traces_dir: Path, name: str) -> App:
    """One application, read and fitted once per (folder, name) and process: apps are immutable to callers."""
    return _load_app(str(Path(traces_dir).resolve()), name)


@functools.cache
def _load_app(traces_dir: str, name: str) -> App:
    folder = Path(traces_dir) / name
    if not folder.is_dir():
        raise AppTraceError(f"{folder}:0:0: no such application folder")
    overrides = _OVERRIDES.get(name, {})
    steps = build_step_times(*_read_step_times(folder), source=str(folder / "placements.csv"))
    grads, end_steps = _read_validation(folder)
    init_batch = int(grads.batch_sizes[0])
    max_batch = int(grads.batch_sizes[-1])
    min_local = int(steps.points[:, 2].min())
    max_local = overrides.get("max_local_batch", int(steps.points[:, 2].max()))
    max_gpus = overrides.get("max_gpus", max(1, max_batch // min_local))
    grads = GradStats(batch_sizes=grads.batch_sizes, epoch_starts=grads.epoch_starts * init_batch,
                      sqr=grads.sqr, var=grads.var)
    return App(name, init_batch=init_batch, max_batch=max_batch, min_local_batch=min_local,
               max_local_batch=max_local, max_gpus=max_gpus, steps=steps, grads=grads,
               max_progress=end_steps * init_batch)


def _read_table(path: Path, header: tuple[str, ...]) -> list[tuple[int, list[str]]]:
    data = read_input(path, MAX_TRACE_BYTES, AppTraceError)
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark, as spreadsheets save CSV, is not part of the header
    except UnicodeDecodeError as exc:
        raise AppTraceError(f"{path}:1:1: not UTF-8 ({exc.reason})") from None
    reader = csv.reader(text.splitlines())
    try:
        rows = [(reader.line_num, fields) for fields in reader if fields]
    except csv.Error as exc:
        raise AppTraceError(f"{path}:{reader.line_num}:1: bad CSV ({exc})") from None
    if not rows or tuple(f.strip() for f in rows[0][1]) != header:
        raise AppTraceError(f"{path}:1:1: expected header {','.join(header)}")
    for line, fields in rows[1:]:
        if len(fields) != len(header):
            raise AppTraceError(f"{path}:{line}:{min(len(fields), len(header)) + 1}: expected {len(header)} "
                                f"fields, got {len(fields)}")
    if len(rows) == 1:
        raise AppTraceError(f"{path}:2:1: no measurements")
    return rows[1:]


def _numbers(path: Path, rows: list[tuple[int, list[str]]], column: int, name: str, maximum: float,
             *, minimum: float = 0.0, whole: bool = False) -> np.ndarray:
    """One column: finite numbers in [minimum, maximum] (whole numbers when `whole`)."""
    values = np.empty(len(rows))
    for i, (line, fields) in enumerate(rows):
        where, text = f"{path}:{line}:{column + 1}: {name}", fields[column][:40]
        try:
            values[i] = float(fields[column])
        except ValueError:
            raise AppTraceError(f"{where} is not a number: {text!r}") from None
        if not math.isfinite(values[i]) or values[i] < 0:
            raise AppTraceError(f"{where} must be finite and >= 0: {text!r}")
        if not minimum <= values[i] <= maximum:
            raise AppTraceError(f"{where} must be within {minimum:g}..{maximum:g}: {text!r}")
        if whole and values[i] != int(values[i]):
            raise AppTraceError(f"{where} must be a whole number: {text!r}")
    return values


def _check_measurements(path: Path, rows: list[tuple[int, list[str]]], nodes: np.ndarray, replicas: np.ndarray,
                        step_s: np.ndarray, sync_s: np.ndarray, columns: tuple[int, int]) -> None:
    """Per row: nodes <= replicas, and a sync time within the step time (the step includes it)."""
    for i, (line, _) in enumerate(rows):
        if replicas[i] < nodes[i]:
            raise AppTraceError(f"{path}:{line}:{columns[0]}: fewer replicas ({replicas[i]:g}) than nodes "
                                f"({nodes[i]:g})")
        if sync_s[i] > step_s[i]:
            raise AppTraceError(f"{path}:{line}:{columns[1]}: sync_time {sync_s[i]:g} is longer than step_time "
                                f"{step_s[i]:g}")


def _read_step_times(folder: Path) -> tuple[np.ndarray, ...]:
    """(nodes, replicas, local batch, step s, sync s) of every measurement in placements.csv and scalability.csv."""
    path = folder / "placements.csv"
    rows = _read_table(path, ("placement", "local_bsz", "step_time", "sync_time"))
    nodes, replicas = [], []
    for line, fields in rows:
        placement = fields[0].strip()
        if not re.fullmatch(r"[1-9]{1,1000}", placement):
            raise AppTraceError(f"{path}:{line}:1: placement must be digits 1-9 (replicas per node): "
                                f"{placement[:40]!r}" + (" (at most 1000 nodes)" if len(placement) > 1000 else ""))
        nodes.append(len(placement))
        replicas.append(sum(int(d) for d in placement))
    columns = [np.array(nodes, dtype=float), np.array(replicas, dtype=float), *_timings(path, rows, 1)]
    _check_measurements(path, rows, columns[0], columns[1], columns[3], columns[4], (1, 4))
    path = folder / "scalability.csv"
    rows = _read_table(path, ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"))
    extra = [_numbers(path, rows, i, name, MAX_MEASURED_GPUS, minimum=1, whole=True)
             for i, name in enumerate(("num_nodes", "num_replicas"))] + _timings(path, rows, 2)
    _check_measurements(path, rows, extra[0], extra[1], extra[3], extra[4], (2, 5))
    return tuple(np.concatenate([a, b]) for a, b in zip(columns, extra))


def _timings(path: Path, rows: list[tuple[int, list[str]]], first: int) -> list[np.ndarray]:
    """local_bsz (>= 1), step_time (> 0) and sync_time of every row, from column `first` (0-based) on."""
    step_s = _numbers(path, rows, first + 1, "step_time", MAX_STEP_S)
    for i, (line, _) in enumerate(rows):
        if step_s[i] <= 0:
            raise AppTraceError(f"{path}:{line}:{first + 2}: step_time must be > 0: {rows[i][1][first + 1][:40]!r}")
    return [_numbers(path, rows, first, "local_bsz", MAX_LOCAL_BATCH, minimum=1), step_s,
            _numbers(path, rows, first + 2, "sync_time", MAX_STEP_S)]


_VALIDATION = re.compile(r"validation-([0-9]+)\.csv")
_VALIDATION_HEADER = ("progress", "iteration", "metric", "grad_sqr", "grad_var")


def _validation_files(folder: Path) -> list[tuple[int, Path]]:
    found = sorted((int(m.group(1)[:12]) if len(m.group(1)) <= 12 else MAX_VALIDATED_BATCH + 1, p)
                   for p in folder.iterdir() if (m := _VALIDATION.fullmatch(p.name)))
    if not found:
        raise AppTraceError(f"{folder}:0:0: no validation-<batch size>.csv files")
    for (batch_size, path), (previous, _) in zip(found, [(None, None)] + found[:-1]):
        if not 1 <= batch_size <= MAX_VALIDATED_BATCH:
            raise AppTraceError(f"{path}:0:0: the batch size in the file name must be within 1..{MAX_VALIDATED_BATCH}")
        if batch_size == previous:
            raise AppTraceError(f"{path}:0:0: a second validation file for batch size {batch_size}")
    return found


def _read_validation(folder: Path) -> tuple[GradStats, float]:
    """Gradient statistics on a common epoch grid (the shortest trace's), epoch starts in M0-steps; and the M0-steps
    at the end of the last common epoch (Pollux: the least progress over the traces at max_epochs - 1)."""
    tables = []
    for batch_size, path in _validation_files(folder):
        rows = _read_table(path, _VALIDATION_HEADER)
        progress = _numbers(path, rows, 0, "progress", MAX_PROGRESS)
        for i, (line, _) in enumerate(rows):
            if progress[i] <= (progress[i - 1] if i else 0.0):
                raise AppTraceError(f"{path}:{line}:1: progress must be > 0 and grow row by row, got "
                                    f"{progress[i]:g} after {progress[i - 1] if i else 0.0:g}")
        tables.append((batch_size, progress, *(_numbers(path, rows, i, n, MAX_GRAD)
                                               for i, n in ((3, "grad_sqr"), (4, "grad_var")))))
    epochs = min(len(t[1]) for t in tables)
    batch_sizes = np.array([t[0] for t in tables], dtype=float)
    ends = np.min([t[1][:epochs] for t in tables], axis=0)  # epoch k ends when every trace has reached row k
    starts = np.concatenate([[0.0], ends[:-1]])
    sqr = np.array([t[2][:epochs] for t in tables])
    var = np.array([t[3][:epochs] for t in tables])
    return GradStats(batch_sizes=batch_sizes, epoch_starts=starts, sqr=sqr, var=var), float(ends[-1])
