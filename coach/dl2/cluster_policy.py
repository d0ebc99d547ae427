"""The `dl2` simulator policy: a trained actor-critic network, acting greedily. Pure apart from reading its model.

Each round it looks at the window (features.Round) and repeatedly takes the network's most likely legal action,
one more GPU for one job or STOP, until it stops or no GPU is free. Every job given GPUs runs at the user's batch
size fitted to them (DL2 does not tune batch sizes). Greedy and numpy-only at decision time: deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from coach.simulator.policies.common import requested_grant
from coach.dl2.cluster_round import WINDOW, Round, SpeedCache
from coach.dl2.network import NumpyNet, load_network
from coach.simulator.view import ClusterSnapshot, Grant


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
class Dl2:
    net: NumpyNet
    window: int = WINDOW
    elastic: bool = True
    speeds: SpeedCache = field(default_factory=dict)

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        round_ = Round(snapshot, self.speeds, self.window)
        return grants_of(round_, decide(self.net, round_))


def load_policy(model: Path, window: int = WINDOW) -> Dl2:
    """The policy of the model file at `model`; ModelFileError (one line naming the file) if it is missing or
    does not fit."""
    return Dl2(NumpyNet.of(load_network(model)), window)
