"""The DL2 actor-critic network on MXNet Gluon, and the same forward pass in numpy for acting fast.

Two dense layers per path, shared by every job of the window (so the window may be any size, and a job's score
does not depend on where it sits apart from its position feature):

    h_i    = relu(W_job x_i + W_glob g + b)        one hidden vector per job (x_i its row, g the globals)
    s_ik   = w_score_k . h_i + c_k                   the score of action kind k for job i
    z      = relu(W_head [mean_i h_i, max_i h_i, g] + b')
    stop   = w_stop . z + c',   value = w_value . z + c''

The policy is a softmax over the legal actions (the mask sets the others to -1e9), job-major (job i's kind k is
column i * kinds + k), STOP last; the value is the critic's estimate of the discounted reward to come. `kinds` is
1 for the simulator's GPU jobs (one more GPU) and 3 for Coach's own jobs (one more worker, one more server, or
both; coach.dl2.run_round); the feature widths are those of the round the network reads.
`NumpyNet` computes the same numbers from the Gluon parameters (a round makes up to one decision per GPU, and a
small Gluon call costs far more than numpy's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import gluon
from mxnet.gluon import nn

from coach.dl2 import ModelFileError
from coach.dl2.cluster_round import GPU_SHAPE
from coach.dl2.observation import Observation, Shape

HIDDEN = 32
_MASKED = 1e9
#: Largest DL2 model file (MXNet .params) read, in bytes (a network of HIDDEN units is a few KiB).
MAX_MODEL_BYTES = 256 << 20


class ActorCritic(gluon.HybridBlock):
    def __init__(self, hidden: int = HIDDEN, shape: Shape = GPU_SHAPE, **kwargs):
        super().__init__(**kwargs)
        self.hidden = hidden
        self.shape = shape
        with self.name_scope():
            self.job_dense = nn.Dense(hidden, flatten=False, in_units=shape.job_features)
            self.glob_dense = nn.Dense(hidden, use_bias=False, in_units=shape.global_features)
            self.score = nn.Dense(shape.kinds, flatten=False, in_units=hidden)
            self.head = nn.Dense(hidden, activation="relu", in_units=2 * hidden + shape.global_features)
            self.stop = nn.Dense(1, in_units=hidden)
            self.value = nn.Dense(1, in_units=hidden)

    def hybrid_forward(self, F, jobs, globs, present, mask):
        """jobs (B, W, job features), globs (B, global features), present (B, W), mask (B, W * kinds + 1) ->
        masked logits (B, W * kinds + 1) and values (B,)."""
        h = F.relu(F.broadcast_add(self.job_dense(jobs), F.expand_dims(self.glob_dense(globs), axis=1)))
        here = F.expand_dims(present, axis=2)
        h = F.broadcast_mul(h, here)  # padded jobs: zero (relu makes every real entry >= 0, so max is unharmed)
        scores = F.reshape(self.score(h), shape=(0, -1))
        mean = F.broadcast_div(F.sum(h, axis=1), F.maximum(F.sum(here, axis=1), 1.0))
        z = self.head(F.concat(mean, F.max(h, axis=1), globs, dim=1))
        logits = F.concat(scores, self.stop(z), dim=1)
        logits = logits - (1.0 - mask) * _MASKED
        return logits, F.reshape(self.value(z), shape=(-1,))


def new_network(seed: int, hidden: int = HIDDEN, shape: Shape = GPU_SHAPE) -> ActorCritic:
    """A freshly initialised network (Xavier weights, zero biases), reproducible from `seed`."""
    mx.random.seed(seed)
    net = ActorCritic(hidden, shape)
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    return net


def load_network(path: Path, shape: Shape = GPU_SHAPE) -> ActorCritic:
    """The network saved at `path` (save_parameters) for rounds of `shape`; its hidden size is read from the file."""
    path = Path(path)
    if not path.exists():
        raise ModelFileError(f"{path}: no DL2 model file here")
    if not path.is_file():  # a FIFO would block mx.nd.load, a device would never end
        raise ModelFileError(f"{path}: not a regular file")
    if path.stat().st_size > MAX_MODEL_BYTES:
        raise ModelFileError(f"{path}: file is larger than {MAX_MODEL_BYTES} bytes (the limit)")
    try:
        arrays = mx.nd.load(str(path))
    except mx.base.MXNetError as exc:
        raise ModelFileError(f"{path}: not an MXNet parameter file ({str(exc).splitlines()[0][:200]})") from None
    weight = arrays.get("job_dense.weight") if isinstance(arrays, dict) else None
    if weight is None or weight.ndim != 2:
        raise ModelFileError(f"{path}: not a DL2 model (no job_dense.weight)")
    hidden, features = weight.shape
    score = arrays.get("score.weight")
    kinds = score.shape[0] if score is not None and score.ndim == 2 else None
    if (features, kinds) != (shape.job_features, shape.kinds):
        raise ModelFileError(f"{path}: the model reads {features} job features and scores {kinds} action kinds per "
                             f"job, these rounds have {shape.job_features} and {shape.kinds}: train it again")
    net = ActorCritic(hidden, shape)
    try:
        net.load_parameters(str(path), ctx=mx.cpu())
    except (AssertionError, mx.base.MXNetError) as exc:
        raise ModelFileError(f"{path}: does not fit the DL2 network ({str(exc).splitlines()[0][:200]})") from None
    return net


def _weights(dense: nn.Dense) -> tuple[np.ndarray, np.ndarray | None]:
    weight = dense.weight.data().asnumpy().astype(np.float64)
    bias = dense.bias.data().asnumpy().astype(np.float64) if dense.bias is not None else None
    return weight, bias


@dataclass(frozen=True)
class NumpyNet:
    """ActorCritic's forward pass for one observation, on a copy of its parameters."""

    job_w: np.ndarray
    job_b: np.ndarray
    glob_w: np.ndarray
    score_w: np.ndarray
    score_b: np.ndarray
    head_w: np.ndarray
    head_b: np.ndarray
    stop_w: np.ndarray
    stop_b: np.ndarray
    value_w: np.ndarray
    value_b: np.ndarray

    @classmethod
    def of(cls, net: ActorCritic) -> NumpyNet:
        job_w, job_b = _weights(net.job_dense)
        glob_w, _ = _weights(net.glob_dense)
        score_w, score_b = _weights(net.score)
        head_w, head_b = _weights(net.head)
        stop_w, stop_b = _weights(net.stop)
        value_w, value_b = _weights(net.value)
        return cls(job_w, job_b, glob_w, score_w, score_b, head_w, head_b, stop_w[0], stop_b, value_w[0], value_b)

    def forward(self, observation: Observation) -> tuple[np.ndarray, float]:
        """(masked logits (n * kinds + 1,), value) of one unpadded observation."""
        jobs = observation.jobs.astype(np.float64)
        globs = observation.globals.astype(np.float64)
        base = self.glob_w @ globs + self.job_b
        h = np.maximum(jobs @ self.job_w.T + base, 0.0)
        scores = (h @ self.score_w.T + self.score_b).ravel()  # job-major: job i's kind k at i * kinds + k
        n = len(jobs)
        mean = h.sum(axis=0) / max(n, 1)
        top = h.max(axis=0) if n else np.zeros_like(base)
        z = np.maximum(self.head_w @ np.concatenate([mean, top, globs]) + self.head_b, 0.0)
        stop = z @ self.stop_w + self.stop_b[0]
        logits = np.append(scores, stop) - (1.0 - observation.mask) * _MASKED
        return logits, float(z @ self.value_w + self.value_b[0])

    def greedy(self, observation: Observation) -> int:
        """The most likely legal action (ties: the lowest index)."""
        logits, _ = self.forward(observation)
        return int(np.argmax(logits))

    def sample(self, observation: Observation, rng: np.random.Generator) -> int:
        """An action drawn from the policy's softmax over the legal actions (training)."""
        logits, _ = self.forward(observation)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        return int(rng.choice(len(p), p=p))
