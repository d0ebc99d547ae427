"""An existing policy's round as a sequence of DL2 decisions, and how far the network agrees with it. Pure.

A policy answers a round with GPUs per job; DL2 decides one GPU at a time. The teacher's answer becomes the
decisions that reach it, in the order the teacher itself fills GPUs:
- "fewest" (DRF's progressive filling, and the default): the job holding the fewest GPUs so far among those
  still below their target, ties to the earlier arrival;
- "gain" (Optimus): first one GPU for every job that gets any, in arrival order; then the job whose estimated
  remaining time drops most with one more GPU (ties: the earlier arrival).
After the last GPU of the target, STOP (unless the cluster is full: a round then ends by itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from coach.dl2.cluster_round import Round
from coach.dl2.observation import Observation
from coach.simulator.view import Grant

ORDERS = {"optimus": "gain"}  # a teacher not named here fills in the "fewest" order


def order_for(teacher: str) -> str:
    return ORDERS.get(teacher, "fewest")


def targets_of(round_: Round, grants: Mapping[str, Grant]) -> np.ndarray:
    """The teacher's GPUs per window job (jobs beyond the window are not the network's to decide)."""
    return np.array([min(grants[job.name].gpus, int(cap)) if job.name in grants else 0
                     for job, cap in zip(round_.jobs, round_.caps)], dtype=np.int64)


def next_action(round_: Round, given: np.ndarray, targets: np.ndarray, order: str) -> int | None:
    """The teacher's next decision: a window index, STOP (len(window)), or None when the cluster is full."""
    if round_.free(given) <= 0:
        return None
    short = np.flatnonzero(given < targets)
    if len(short) == 0:
        return len(round_.jobs)
    if order == "gain":
        empty = short[given[short] == 0]
        if len(empty):
            return int(empty[0])
        gains = [round_.gain_s(int(i), int(given[i])) for i in short]
        return int(short[int(np.argmax(gains))])  # argmax: the first of equal gains, the earlier arrival
    return int(short[np.lexsort((short, given[short]))[0]])


def expert_steps(round_: Round, targets: np.ndarray, order: str) -> list[tuple[Observation, int]]:
    """(state, teacher's action) of every decision of the round, in the teacher's order."""
    steps: list[tuple[Observation, int]] = []
    given = np.zeros(len(round_.jobs), dtype=np.int64)
    while True:
        action = next_action(round_, given, targets, order)
        if action is None:
            return steps
        steps.append((round_.observe(given), action))
        if action == len(round_.jobs):
            return steps
        given[action] += 1


@dataclass(frozen=True)
class Agreement:
    """How a network's rounds compare with the teacher's, on the same states."""

    actions: float  # share of the teacher's decisions the network takes too (teacher's states)
    gpus: float  # sum over rounds of min(network, teacher) GPUs per job / the larger of the two totals
    rounds: float  # share of rounds whose whole allocation is the teacher's
    decisions: int
    round_count: int


def allocation_overlap(given: np.ndarray, targets: np.ndarray) -> tuple[int, int]:
    """(GPUs where the two allocations agree, the larger total)."""
    return int(np.minimum(given, targets).sum()), int(max(given.sum(), targets.sum()))
