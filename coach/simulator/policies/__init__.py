"""The scheduling policies of the cluster simulator, by name: `CLUSTER_POLICIES[name](seed) -> ClusterPolicy`.

Each module holds one policy (or a family); all are pure decisions over a ClusterSnapshot (coach.simulator.view)
and keep at most small deterministic state between rounds. None draws random numbers, so the seed is accepted
for the common signature and ignored. `dl2` is a trained network (coach.dl2.cluster_policy on
coach/dl2/dl2_model.params), loaded when asked for; `dl2-imitation` the same training's network before its
reinforcement learning.
"""

from __future__ import annotations

from coach.simulator.policies.coach_policy import coach
from coach.dl2.cluster_policy import dl2 as learned_dl2
from coach.dl2.cluster_policy import dl2_imitation as learned_dl2_imitation
from coach.simulator.policies.drf import drf
from coach.simulator.policies.elastic_batch_dp import elastic_batch_dp
from coach.simulator.policies.fifo import elastic_fifo, fifo
from coach.simulator.policies.optimus import optimus
from coach.simulator.policies.pollux import pollux
from coach.simulator.policies.round_robin import round_robin
from coach.simulator.policies.tiresias import tiresias
from coach.simulator.view import ClusterPolicyFactory

CLUSTER_POLICIES: dict[str, ClusterPolicyFactory] = {
    "fifo": fifo,
    "round-robin": round_robin,
    "elastic-fifo": elastic_fifo,
    "drf": drf,
    "tiresias": tiresias,
    "optimus": optimus,
    "pollux": pollux,
    "elastic-batch-dp": elastic_batch_dp,
    "coach": coach,
    "dl2": learned_dl2,
    "dl2-imitation": learned_dl2_imitation,
}


def teachers() -> list[str]:
    """The policies a learned one may imitate: elastic (asked every round about every job, so a round is a whole
    allocation to learn from) and not learned themselves."""
    return sorted(name for name, factory in CLUSTER_POLICIES.items()
                  if not getattr(factory, "learned", False) and factory(0).elastic)


__all__ = ["CLUSTER_POLICIES", "teachers"]
