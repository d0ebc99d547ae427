"""First-in first-out, rigid and elastic: the baselines every other policy is measured against. Pure.

`fifo` is what Coach does live (and Kubernetes does with any job): every job asks for exactly its requested GPUs
as it arrives, its replicas go to the scheduler, and the scheduler's queue decides who runs. With scheduler_fork's
gang profiles that is a strict FIFO with head-of-line blocking (the first job that does not fit holds the ones
behind it, and the GPUs it has already got); with the default profile replicas bind one by one in arrival order,
so jobs can be partly placed and deadlock. It never preempts or resizes: the engine asks it about new jobs only.

`elastic-fifo` (schedulearn's elastic FIFO) keeps the arrival order but lets a job start with whatever is free
(down to 1 GPU) instead of waiting for its full request, and grows it back to the request as GPUs free up; earlier
jobs are served first every round, so growth of an early job may take GPUs back from a later one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from coach.simulator.grants import requested_grant, requested_gpus
from coach.simulator.view import ClusterSnapshot, Grant


@dataclass
class Fifo:
    """Rigid and non-preemptive: every job its request, in arrival order; the scheduler's queue does the rest."""

    elastic: bool = False

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        total = snapshot.total_gpus
        grants: dict[str, Grant] = {}
        for job in snapshot.jobs:
            if job.gpus > 0:  # a running job keeps what it holds
                grants[job.name] = Grant(job.gpus, job.batch)
            else:
                grants[job.name] = requested_grant(job, requested_gpus(job, total))
        return grants


@dataclass
class ElasticFifo:
    """FIFO order; a job takes what is free (>= 1 GPU) up to its request, and grows back when GPUs free up."""

    elastic: bool = True

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        total = snapshot.total_gpus
        free = total
        grants: dict[str, Grant] = {}
        for job in snapshot.jobs:
            if free < 1:
                break
            gpus = min(requested_gpus(job, total), free)
            grants[job.name] = requested_grant(job, gpus)
            free -= gpus
        return grants


def fifo(seed: int) -> Fifo:
    return Fifo()


def elastic_fifo(seed: int) -> ElasticFifo:
    return ElasticFifo()
