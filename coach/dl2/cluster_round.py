"""What the DL2 network sees of the cluster simulator's GPU jobs: one round's state as numbers, and which actions
are legal. Pure.

A round is a sequence of decisions over a *window*: the first WINDOW active jobs in arrival order (jobs beyond it
get nothing this round). Every decision picks one action, `i` (one more GPU for window job i) or STOP (index
`len(window)`; the network's last output), until the policy stops or the cluster is full.

The state of one decision is
- one row of JOB_FEATURES numbers per window job: its application (one-hot), time waited, remaining progress
  and estimated remaining hours at its request, attained service, dominant share (GPUs held now / cluster),
  request and limit, the GPUs given so far this round, and what one more GPU would gain (Optimus's measure: the
  drop of its estimated remaining time);
- GLOBAL_FEATURES numbers about the cluster: free GPUs left this round, its size, how many jobs wait, how busy
  it was.
An action is legal when the job exists, stays within its GPU limit and a GPU is free; STOP is always legal.

Every number is a deterministic function of the snapshot and the GPUs given so far; throughput asked of an
application is memoised in a cache the caller keeps (throughput does not change with progress).
"""

from __future__ import annotations

import functools
import math
from typing import MutableMapping

import numpy as np

from coach.dl2.observation import Observation, Shape
from coach.simulator.grants import fit_batch, gpu_cap, requested_gpus, stage
from coach.simulator.view import AppModel, ClusterSnapshot, ClusterJobView, packed_nodes

APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")  # any other application: a seventh slot
WINDOW = 64  # jobs a round looks at (the default cluster has 64 GPUs: enough for one GPU each)
STATIC_FEATURES = len(APPS) + 1 + 9
DYNAMIC_FEATURES = 9
JOB_FEATURES = STATIC_FEATURES + DYNAMIC_FEATURES
GLOBAL_FEATURES = 5
_HOUR_S = 3600.0
_CAP = 10.0  # every feature is clipped to [-_CAP, _CAP] (an infinite remaining time is "very long")

#: (id(app), gpus, nodes, batch) -> (app, samples/s); the app is held so that its id stays unique
SpeedCache = MutableMapping[tuple[int, int, int, int], tuple[AppModel, float]]


#: (id(app), requested batch, stage of training, gpus, GPUs per node) -> (app, M0-samples/s at the batch fitted to
#: those GPUs): what a job's remaining time divides by, the same for every job of that application at that stage
GoodputCache = MutableMapping[tuple[int, int, float, int, int], tuple[AppModel, float]]


#: the simulator's GPU jobs (Round): one action kind per job, one more GPU
GPU_SHAPE = Shape(JOB_FEATURES, GLOBAL_FEATURES, 1)


def _clip(value: float) -> float:
    if math.isnan(value):
        return 0.0
    return max(-_CAP, min(_CAP, value))


def _gain(before_s: float, after_s: float) -> float:
    """The remaining time one more GPU saves: inf from no GPUs to some, -inf if it would stop the job."""
    if math.isinf(before_s):
        return math.inf if math.isfinite(after_s) else 0.0
    return before_s - after_s if math.isfinite(after_s) else -math.inf


@functools.cache
def _log1p_quarter(gpus: int) -> float:
    """log1p(gpus) / 4 as numpy works it out (the batch observation's own expression), once per count."""
    return float(np.log1p(np.float64(gpus)) / 4)


class Round:
    """One scheduling round's window and everything about it that the GPUs given so far do not change."""

    def __init__(self, snapshot: ClusterSnapshot, speeds: SpeedCache | None = None, window: int = WINDOW,
                 goodputs: GoodputCache | None = None):
        self.snapshot = snapshot
        self.window = window
        self.jobs: tuple[ClusterJobView, ...] = snapshot.jobs[:window]
        self.total = snapshot.total_gpus
        self.per_node = snapshot.gpus_per_node
        self.speeds: SpeedCache = {} if speeds is None else speeds
        self.goodputs: GoodputCache = {} if goodputs is None else goodputs
        self._stages = [(id(job.app), job.requested_batch, stage(job)) for job in self.jobs]
        self._remaining: dict[tuple[int, int], float] = {}
        n = len(self.jobs)
        total = max(self.total, 1)
        self.caps = np.array([gpu_cap(job, self.total) for job in self.jobs], dtype=np.int64)
        self.requested = np.array([requested_gpus(job, self.total) for job in self.jobs], dtype=np.int64)
        self.current = np.array([max(job.gpus, 0) for job in self.jobs], dtype=np.int64)
        # as Python ints, for the one-job rows a round's decisions ask for (numpy scalars cost more to read)
        self._caps = self.caps.tolist()
        self._requested = [max(r, 1) for r in self.requested.tolist()]
        self._current = self.current.tolist()
        static = np.zeros((n, STATIC_FEATURES), dtype=np.float32)
        for i, job in enumerate(self.jobs):
            app = job.app.name if job.app.name in APPS else None
            static[i, APPS.index(app) if app is not None else len(APPS)] = 1.0
            k = len(APPS) + 1
            waited_h = max(snapshot.now_s - job.arrival_s, 0.0) / _HOUR_S
            remaining_share = job.remaining_progress / job.total_progress if job.total_progress > 0 else 0.0
            remaining_h = self.remaining_s(i, int(self.requested[i])) / _HOUR_S
            static[i, k:] = [
                _clip(math.log1p(waited_h)),
                _clip(remaining_share),
                _clip(math.log1p(remaining_h) if math.isfinite(remaining_h) else _CAP),
                _clip(math.log1p(max(job.attained_gpu_s, 0.0) / _HOUR_S) / 4),
                self.current[i] / total,  # dominant share: GPUs are the only resource modelled
                self.requested[i] / total,
                self.caps[i] / total,
                math.log1p(self.requested[i]) / 4,
                i / window,
            ]
        self.static = static
        # the gain columns of the last `given` observed: a round's decisions change one job at a time
        self._gains_given = np.zeros(n, dtype=np.int64)
        self._gains = np.array([self._gain_features(i, 0) for i in range(n)], dtype=np.float32).reshape(n, 2)
        self.globals_base = (math.log1p(self.total) / 6, n / window, min(len(snapshot.jobs) / window, 4.0) / 4,
                             float(self.current.sum()) / total)

    # -- what one more GPU gains ---------------------------------------------------------------------------------

    def remaining_s(self, i: int, gpus: int) -> float:
        """Job i's remaining progress over its goodput on `gpus` GPUs at its own batch (inf for 0 GPUs)."""
        if gpus <= 0:
            return math.inf
        remaining = self._remaining.get((i, gpus))
        if remaining is None:
            job = self.jobs[i]
            key = (*self._stages[i], gpus, self.per_node)
            found = self.goodputs.get(key)
            if found is None:  # efficiency depends on the progress only through its stage (grants.stage)
                batch = fit_batch(job.app, gpus, job.requested_batch)
                efficiency = float(job.app.efficiency(batch, job.progress))
                speed = self._throughput(job.app, gpus, packed_nodes(gpus, self.per_node), batch) * efficiency
                found = self.goodputs[key] = (job.app, speed)
            speed = found[1]
            remaining = self._remaining[i, gpus] = job.remaining_progress / speed if speed > 0 else math.inf
        return remaining

    def _throughput(self, app: AppModel, gpus: int, nodes: int, batch: int) -> float:
        key = (id(app), gpus, nodes, batch)
        if key not in self.speeds:
            self.speeds[key] = (app, float(app.throughput(gpus, nodes, batch)))
        return self.speeds[key][1]

    def gain_s(self, i: int, gpus: int) -> float:
        """Seconds of estimated remaining time one more GPU saves job i holding `gpus` (inf from 0 GPUs)."""
        return _gain(self.remaining_s(i, gpus), self.remaining_s(i, gpus + 1))

    def _gain_features(self, i: int, gpus: int) -> tuple[float, float]:
        if gpus >= self._caps[i]:
            return 0.0, 0.0
        before = self.remaining_s(i, gpus)
        gain = _gain(before, self.remaining_s(i, gpus + 1))
        if math.isinf(gain):
            return (_CAP, 1.0) if gain > 0 else (-_CAP, -1.0)
        relative = gain / before if before > 0 else 0.0
        return _clip(math.copysign(math.log1p(abs(gain) / 60.0), gain) / 4), _clip(relative)

    # -- one decision ----------------------------------------------------------------------------------------------

    def observe(self, given: np.ndarray) -> Observation:
        """The state after `given[i]` GPUs went to window job i this round (an int array of the window's length)."""
        n = len(self.jobs)
        total = max(self.total, 1)
        given = np.asarray(given, dtype=np.int64)
        free = self.total - int(given.sum())
        requested = np.maximum(self.requested, 1)
        dynamic = np.zeros((n, DYNAMIC_FEATURES), dtype=np.float32)
        dynamic[:, 0] = given / total
        dynamic[:, 1] = np.log1p(given) / 4
        dynamic[:, 2] = np.minimum(given / requested, 2.0) / 2
        dynamic[:, 3] = given >= requested
        dynamic[:, 4] = given == 0
        dynamic[:, 5] = given == self.current
        dynamic[:, 6] = given < self.current
        for i in np.flatnonzero(given != self._gains_given).tolist():
            self._gains[i] = self._gain_features(i, int(given[i]))
        self._gains_given = given.copy()
        dynamic[:, 7:9] = self._gains
        jobs = np.concatenate([self.static, dynamic], axis=1)
        globals_ = np.array((free / total, *self.globals_base), dtype=np.float32)
        return Observation(jobs, globals_, self.mask(given))

    def job_row(self, i: int, gpus: int) -> np.ndarray:
        """Window job i's row of `observe` once it has been given `gpus` GPUs this round (its other rows do not
        depend on job i's GPUs): for a policy that follows one job's change at a time."""
        requested, current = self._requested[i], self._current[i]
        static = self.static[i]
        row = np.empty(len(static) + DYNAMIC_FEATURES, dtype=np.float32)
        row[:len(static)] = static
        row[len(static):] = (gpus / max(self.total, 1), _log1p_quarter(gpus), min(gpus / requested, 2.0) / 2,
                             gpus >= requested, gpus == 0, gpus == current, gpus < current,
                             *self._gain_features(i, gpus))
        return row

    def mask(self, given: np.ndarray) -> np.ndarray:
        """1 for every legal action (STOP last, always legal): a job below its limit while a GPU is free."""
        given = np.asarray(given, dtype=np.int64)
        free = self.total - int(given.sum())
        mask = np.ones(len(self.jobs) + 1, dtype=np.float32)
        mask[:-1] = (given < self.caps) & (free > 0)
        return mask

    def free(self, given: np.ndarray) -> int:
        return self.total - int(np.asarray(given).sum())
