"""The `dl2` cluster-simulator policy: a trained actor-critic network, acting greedily. Pure apart from reading its
model file once, when the policy is made.

Each round it looks at the window (cluster_round.Round) and repeatedly takes the network's most likely legal action,
one more GPU for one job or STOP, until it stops or no GPU is free. Every job given GPUs runs at the user's batch
size fitted to them (DL2 does not tune batch sizes). Greedy and numpy-only at decision time: deterministic.

`dl2(seed)` and `dl2_imitation(seed)` are the factories coach.simulator.policies registers; they read the model
file without MXNet (coach.dl2.params_file), so that a simulation under them starts as fast as under any other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import numpy as np

from coach.dl2 import CLUSTER_MODEL, CLUSTER_IMITATION_MODEL, ModelFileError
from coach.dl2.cluster_round import GPU_SHAPE, WINDOW, GoodputCache, Round, SpeedCache
from coach.simulator.grants import requested_grant
from coach.simulator.view import ClusterSnapshot, Grant

if TYPE_CHECKING:
    from coach.dl2.numpy_net import NumpyNet


def decide(net: NumpyNet, round_: Round) -> np.ndarray:
    """GPUs per window job after greedy decisions until STOP or a full cluster: the actions `net.greedy` takes on
    `round_.observe(given)` one decision after another, worked out as one job's row changes at a time.

    A decision changes one job's features and the free GPUs (a global feature), so each job's first-layer input
    without the globals is kept and only the chosen job's is computed again; the free GPUs enter through their
    own column of the weights."""
    n = len(round_.jobs)
    given = np.zeros(n, dtype=np.int64)
    free = round_.free(given)
    if n == 0 or free <= 0:
        return given
    start = round_.observe(given)
    hidden = len(net.job_b)
    globs = start.globals.astype(np.float64)
    inputs = start.jobs.astype(np.float64) @ net.job_w.T  # (n, hidden): each job's row through the first layer
    # what the globals add for every count of free GPUs: the free share as the observation holds it (float32)
    shares = (np.arange(free + 1) / max(round_.total, 1)).astype(np.float32).astype(np.float64)[:, None]
    shift = net.glob_w[:, 1:] @ globs[1:] + net.job_b + net.glob_w[:, 0] * shares
    head_shift = net.head_w[:, 2 * hidden + 1:] @ globs[1:] + net.head_b + net.head_w[:, 2 * hidden] * shares
    head_pool, score_w = net.head_w[:, :2 * hidden], net.score_w[0]
    # the scores' bias, -inf for a job at its limit (not to be chosen): b + 0.0 is b, so s + bias is (s + b) + 0.0
    bias = np.where(given >= round_.caps, -np.inf, 0.0) + net.score_b[0]
    h, pooled = np.empty_like(inputs), np.empty(2 * hidden)  # reused: this loop runs once per GPU handed out
    mean, most = pooled[:hidden], pooled[hidden:]  # views into pooled, made once
    stop_w, stop_b = net.stop_w, net.stop_b[0]
    counts, caps = given.tolist(), round_.caps.tolist()  # Python ints: read and written every decision
    while free > 0:
        np.add(inputs, shift[free], out=h)
        np.maximum(h, 0.0, out=h)
        np.add.reduce(h, axis=0, out=mean)
        mean /= n
        np.maximum.reduce(h, axis=0, out=most)
        z = head_pool @ pooled
        z += head_shift[free]
        stop = np.maximum(z, 0.0, out=z) @ stop_w + stop_b
        scores = h @ score_w
        scores += bias
        best = int(scores.argmax())
        if not scores[best] >= stop:  # STOP is the last action: it wins only when strictly more likely
            break
        counts[best] += 1
        free -= 1
        if counts[best] >= caps[best]:
            bias[best] = -np.inf
        inputs[best] = net.job_w @ round_.job_row(best, counts[best]).astype(np.float64)
    return np.array(counts, dtype=np.int64)


def grants_of(round_: Round, given: np.ndarray) -> dict[str, Grant]:
    return {job.name: requested_grant(job, int(g)) for job, g in zip(round_.jobs, given) if g > 0}


@dataclass
class Dl2ClusterPolicy:
    net: NumpyNet
    window: int = WINDOW
    elastic: bool = True
    speeds: SpeedCache = field(default_factory=dict)
    goodputs: GoodputCache = field(default_factory=dict)

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        round_ = Round(snapshot, self.speeds, self.window, self.goodputs)
        return grants_of(round_, decide(self.net, round_))


def load_policy(model: Path, window: int = WINDOW) -> Dl2ClusterPolicy:
    """The policy of the model file at `model`; ModelFileError (one line naming the file) if it is missing or
    does not fit. Reads the file without MXNet."""
    from coach.dl2.numpy_net import load_numpy_net

    return Dl2ClusterPolicy(load_numpy_net(model, GPU_SHAPE), window)


def dl2(seed: int, model: Path = CLUSTER_MODEL) -> Dl2ClusterPolicy:
    """The `dl2` policy on `model` (greedy, so `seed` is unused). ModelFileError (a ValueError whose one line names
    the file and says how to train one) when the file is missing or does not fit."""
    del seed
    model = Path(model)
    if not model.is_file():
        raise ModelFileError(f"{model}: no DL2 model file here; train one with `coach train-policy --imitate drf "
                             f"--workloads WORKLOAD.csv... --out {model}`")
    return load_policy(model)


def dl2_imitation(seed: int) -> Dl2ClusterPolicy:
    """The `dl2-imitation` policy: the shipped training's network before reinforcement learning."""
    return dl2(seed, CLUSTER_IMITATION_MODEL)


#: A factory marked learned is no teacher: imitating a network would only copy what it copied.
dl2.learned = dl2_imitation.learned = True  # type: ignore[attr-defined]
