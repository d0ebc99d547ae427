"""What a view shows of one job at a moment. Plain data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JobStatus:
    job: str  # job name
    phase: str  # waiting, deploying, training, done, failed, interrupted
    epoch: int  # epochs completed
    loss: float | None  # last epoch's training loss
    val_loss: float | None  # last epoch's validation loss
    workers: int  # current MXNet workers
    servers: int  # current MXNet servers
    cost: float  # cumulative cost
    budget: float  # the job's budget
    message: str = ""  # why it waits, or why it stopped
