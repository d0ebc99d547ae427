"""What every DL2 network reads and answers, whichever round it decides: the shape of a network, one decision's
input, and the padded batches training feeds it. Pure.

Two round types share it: the cluster simulator's GPU jobs (coach.dl2.cluster_round: one action kind per job, one
more GPU) and Coach's own jobs (coach.dl2.run_round: three, one more worker, one more server, or both).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Shape:
    """What a network reads and answers: per-job and global feature widths, action kinds per job."""

    job_features: int
    global_features: int
    kinds: int  # action kinds per job


@dataclass(frozen=True)
class Observation:
    """One decision's input, for `n` window jobs (no padding: batches pad, see `pad`)."""

    jobs: np.ndarray  # (n, job features) float32
    globals: np.ndarray  # (global features,) float32
    mask: np.ndarray  # (n * kinds + 1,) float32: 1 legal, 0 not; job i's kind k at i * kinds + k, STOP last (1)
    kinds: int = 1  # actions per job: 1 for the simulator's GPU jobs (one more GPU); 3 for Coach's own jobs

    @property
    def stop(self) -> int:
        return len(self.jobs) * self.kinds


def pad(observations: list[Observation]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A batch for the network: jobs (B, W, F), globals (B, G), present (B, W), mask (B, W * kinds + 1), W the
    largest window in the batch (at least 1); one round type per batch (the same widths and kinds). A padded job
    is absent and illegal; STOP moves to the last column."""
    first = observations[0]
    kinds = first.kinds
    width = max([len(o.jobs) for o in observations] + [1])
    count = len(observations)
    jobs = np.zeros((count, width, first.jobs.shape[1]), dtype=np.float32)
    globals_ = np.zeros((count, len(first.globals)), dtype=np.float32)
    present = np.zeros((count, width), dtype=np.float32)
    mask = np.zeros((count, width * kinds + 1), dtype=np.float32)
    for b, o in enumerate(observations):
        n = len(o.jobs)
        jobs[b, :n] = o.jobs
        globals_[b] = o.globals
        present[b, :n] = 1.0
        mask[b, :n * kinds] = o.mask[:n * kinds]
        mask[b, width * kinds] = o.mask[n * kinds]
    return jobs, globals_, present, mask


def padded_action(action: int, observation: Observation, width: int) -> int:
    """An action of `observation` as a column of a batch padded to `width` jobs (STOP moves)."""
    return width * observation.kinds if action == observation.stop else action
