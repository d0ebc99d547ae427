"""The scheduling policies of the cluster simulator, by name: `POLICIES[name](seed) -> Policy`.

Each module holds one policy (or a family); all are pure decisions over a ClusterSnapshot (coach.simulator.view)
and keep at most small deterministic state between rounds. None draws random numbers, so the seed is accepted
for the common signature and ignored.
"""

from __future__ import annotations

from coach.simulator.policies.coach_policy import coach
from coach.simulator.policies.drf import drf
from coach.simulator.policies.elastic_batch_dp import elastic_batch_dp
from coach.simulator.policies.fifo import elastic_fifo, fifo
from coach.simulator.policies.optimus import optimus
from coach.simulator.policies.pollux import pollux
from coach.simulator.policies.round_robin import round_robin
from coach.simulator.policies.tiresias import tiresias
from coach.simulator.view import PolicyFactory

POLICIES: dict[str, PolicyFactory] = {
    "fifo": fifo,
    "round-robin": round_robin,
    "elastic-fifo": elastic_fifo,
    "drf": drf,
    "tiresias": tiresias,
    "optimus": optimus,
    "pollux": pollux,
    "elastic-batch-dp": elastic_batch_dp,
    "coach": coach,
}

__all__ = ["POLICIES"]
