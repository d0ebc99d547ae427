"""The `dl2` cluster-simulator policy: a trained actor-critic network, acting greedily. Pure apart from reading its
model file once, when the policy is made.

Each round it looks at the window (cluster_round.Round) and repeatedly takes the network's most likely legal action,
one more GPU for one job or STOP, until it stops or no GPU is free. Every job given GPUs runs at the user's batch
size fitted to them (DL2 does not tune batch sizes). Greedy and numpy-only at decision time: deterministic.

`dl2(seed)` and `dl2_imitation(seed)` are the factories coach.simulator.policies registers; they import MXNet only
when called, so that listing the policies stays cheap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import numpy as np

from coach.dl2 import CLUSTER_MODEL, CLUSTER_IMITATION_MODEL, ModelFileError
from coach.dl2.cluster_round import WINDOW, Round, SpeedCache
from coach.simulator.grants import requested_grant
from coach.simulator.view import ClusterSnapshot, Grant

if TYPE_CHECKING:
    from coach.dl2.network import NumpyNet


def decide(net: NumpyNet, round_: Round) -> np.ndarray:
    """GPUs per window job after greedy decisions until STOP or a full cluster."""
    given = np.zeros(len(round_.jobs), dtype=np.int64)
    while round_.free(given) > 0:
        observation = round_.observe(given)
        action = net.greedy(observation)
        if action == observation.stop:
            break
        given[action] += 1
    return given


def grants_of(round_: Round, given: np.ndarray) -> dict[str, Grant]:
    return {job.name: requested_grant(job, int(g)) for job, g in zip(round_.jobs, given) if g > 0}


@dataclass
class Dl2ClusterPolicy:
    net: NumpyNet
    window: int = WINDOW
    elastic: bool = True
    speeds: SpeedCache = field(default_factory=dict)

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        round_ = Round(snapshot, self.speeds, self.window)
        return grants_of(round_, decide(self.net, round_))


def load_policy(model: Path, window: int = WINDOW) -> Dl2ClusterPolicy:
    """The policy of the model file at `model`; ModelFileError (one line naming the file) if it is missing or
    does not fit."""
    from coach.dl2.network import NumpyNet, load_network

    return Dl2ClusterPolicy(NumpyNet.of(load_network(model)), window)


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
