"""Turn one epoch's worker replies into the numbers a record needs. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from coach.domain.contracts import WorkerReply


@dataclass(frozen=True)
class EpochMetrics:
    loss: float  # sum of per-sample losses over all workers / samples
    train_accuracy: float  # correct predictions / samples, over all workers
    samples: int  # samples trained on by all workers
    val_loss: float | None  # rank 0's validation loss, if the model has validation data
    accuracy: float | None  # rank 0's validation accuracy
    compute_s: float  # slowest worker's training-loop time
    warmup_s: float | None = None  # that worker's loop beyond its steady rate: start-up and wind-down (None: not told)


class BadReplies(ValueError):
    """The workers' replies do not describe one consistent epoch."""


def aggregate(worker_replies: Sequence[WorkerReply], num_workers: int) -> EpochMetrics:
    if len(worker_replies) != num_workers:
        raise BadReplies(f"{len(worker_replies)} worker replies for {num_workers} workers")
    ranks = sorted(r.rank for r in worker_replies)
    if ranks != list(range(num_workers)):
        raise BadReplies(f"worker ranks {ranks}, expected 0..{num_workers - 1}")
    samples = sum(r.samples for r in worker_replies)
    if samples <= 0:
        raise BadReplies("no samples trained")
    losses = [r.loss_sum for r in worker_replies]
    if None in losses:  # a diverged worker's: the caller judges divergence first
        raise BadReplies("a worker reported no loss")
    rank0 = next(r for r in worker_replies if r.rank == 0)
    slowest = max(worker_replies, key=lambda r: r.compute_s)
    return EpochMetrics(
        loss=sum(loss for loss in losses if loss is not None) / samples,
        train_accuracy=sum(r.correct for r in worker_replies) / samples,
        samples=samples,
        val_loss=rank0.val_loss,
        accuracy=rank0.val_accuracy,
        compute_s=slowest.compute_s,
        warmup_s=slowest.warmup_s,
    )
