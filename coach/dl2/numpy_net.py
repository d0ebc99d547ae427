"""The DL2 actor-critic's forward pass in numpy (coach.dl2.network has the formulas and the Gluon network that
training uses). Acting makes up to one decision per GPU a round, and a small Gluon call costs far more than numpy's;
reading a model file for acting needs no MXNet either (coach.dl2.params_file). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from coach.dl2 import ModelFileError
from coach.dl2.observation import Observation, Shape
from coach.dl2.params_file import read_params

MASKED = 1e9  # subtracted from an illegal action's logit


def expected_shapes(hidden: int, shape: Shape) -> dict[str, tuple[int, ...]]:
    """Every parameter of the network of `hidden` units for rounds of `shape`, by the name Gluon saves it under."""
    return {
        "job_dense.weight": (hidden, shape.job_features), "job_dense.bias": (hidden,),
        "glob_dense.weight": (hidden, shape.global_features),
        "score.weight": (shape.kinds, hidden), "score.bias": (shape.kinds,),
        "head.weight": (hidden, 2 * hidden + shape.global_features), "head.bias": (hidden,),
        "stop.weight": (1, hidden), "stop.bias": (1,),
        "value.weight": (1, hidden), "value.bias": (1,),
    }


def checked_parameters(arrays: Mapping[str, np.ndarray], shape: Shape, source: str) -> dict[str, np.ndarray]:
    """`arrays` as float64, when they are exactly a DL2 network's for rounds of `shape`; else ModelFileError, one
    line naming `source` (the file) and what is wrong."""
    weight = arrays.get("job_dense.weight")
    if weight is None or weight.ndim != 2:
        raise ModelFileError(f"{source}: not a DL2 model (no job_dense.weight)")
    hidden, features = weight.shape
    score = arrays.get("score.weight")
    kinds = score.shape[0] if score is not None and score.ndim == 2 else None
    if (features, kinds) != (shape.job_features, shape.kinds):
        raise ModelFileError(f"{source}: the model reads {features} job features and scores {kinds} action kinds per "
                             f"job, these rounds have {shape.job_features} and {shape.kinds}: train it again")
    expected = expected_shapes(hidden, shape)
    for name in sorted(set(arrays) ^ set(expected)):
        why = "not a parameter of the DL2 network" if name in arrays else "missing"
        raise ModelFileError(f"{source}: does not fit the DL2 network ({name}: {why})")
    for name, dims in expected.items():
        if arrays[name].shape != dims:
            raise ModelFileError(f"{source}: does not fit the DL2 network ({name} has shape {arrays[name].shape}, "
                                 f"the network's is {dims})")
        if not np.isfinite(arrays[name]).all():
            raise ModelFileError(f"{source}: {name} holds numbers that are not finite")
    return {name: np.asarray(arrays[name], dtype=np.float64) for name in expected}


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
    def of_arrays(cls, arrays: Mapping[str, np.ndarray], shape: Shape, source: str) -> NumpyNet:
        """The network whose parameters are `arrays` (named as Gluon saves them); ModelFileError naming `source`."""
        p = checked_parameters(arrays, shape, source)
        return cls(p["job_dense.weight"], p["job_dense.bias"], p["glob_dense.weight"], p["score.weight"],
                   p["score.bias"], p["head.weight"], p["head.bias"], p["stop.weight"][0], p["stop.bias"],
                   p["value.weight"][0], p["value.bias"])

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
        logits = np.append(scores, stop) - (1.0 - observation.mask) * MASKED
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


def load_numpy_net(path: Path, shape: Shape) -> NumpyNet:
    """The network saved at `path` (Gluon's save_parameters) for rounds of `shape`, read without MXNet; its hidden
    size is the file's. ModelFileError (one line naming the file) when it is missing or does not fit."""
    return NumpyNet.of_arrays(read_params(path), shape, str(path))
