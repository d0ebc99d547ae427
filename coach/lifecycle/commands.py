"""What a job's lifecycle asks its driver to do. Plain data; a driver carries each out against the ports."""

from __future__ import annotations

from dataclasses import dataclass

from coach.domain.contracts import EpochRequest, Hyper, NextEpoch, PsAddress
from coach.domain.identity import FunctionId
from coach.domain.records import EpochRecord


@dataclass(frozen=True)
class AskPolicy:
    """Ask the run's policy for the next epoch's counts; the answer comes back as Decided."""


@dataclass(frozen=True)
class Submit:
    """New pending pods for these functions, in this order."""

    ids: tuple[FunctionId, ...]


@dataclass(frozen=True)
class WatchPlacement:
    """Deliver Bindings now and whenever placement changes, while the job waits for its quorum."""

    deadline_s: float  # past it, a Bindings without quorum requeues the job


@dataclass(frozen=True)
class Release:
    """Give these functions' slots back (bound or pending)."""

    ids: tuple[FunctionId, ...]


@dataclass(frozen=True)
class Deploy:
    """Start these bound functions on their nodes, warm the new workers; answer with Deployed."""

    placements: tuple[tuple[FunctionId, str], ...]  # function and its node
    model_path: str  # what the workers load while warming
    batch_size: int | None = None  # the job's per-worker batch: the shapes the workers warm up for


@dataclass(frozen=True)
class Remove:
    """Delete these deployed functions."""

    ids: tuple[FunctionId, ...]


@dataclass(frozen=True)
class InvokeEpoch:
    """Run one epoch on these functions together; answer with EpochDone or EpochFailed."""

    functions: tuple[tuple[FunctionId, str], ...]  # function and its node, scheduler first
    workers: int  # MXNet workers of this epoch
    servers: int  # MXNet servers of this epoch
    epoch: int  # 1-based training epoch, 0 for calibration
    step: int  # calibration and training epochs counted together
    attempt: int  # 1 for the first try
    data_fraction: float  # share of the training data
    save_tag: str  # the checkpoint store names the save prefix from it
    checkpoint_load: str | None  # prefix to start from
    model_path: str  # the model file
    hyper: Hyper  # training hyper-parameters
    deadline_s: float  # the functions' own deadline
    timeout_s: float  # the driver's HTTP timeout: a little more, so the function's own 504 arrives first
    # the functions the job's next step most likely runs on (this step's, or the next calibration point's): the
    # driver announces that step's rendezvous ahead (coach/drivers/rendezvous.py); empty: none is announced
    following: tuple[FunctionId, ...] = ()

    def request(self, fid: FunctionId, ps: PsAddress, checkpoint_save: str, rendezvous_id: str | None = None,
                following: NextEpoch | None = None) -> EpochRequest:
        """The typed request one function of this epoch gets (where it meets is the driver's: coach/drivers)."""
        return EpochRequest(job=fid.job, epoch=self.epoch, step=self.step, attempt=self.attempt,
                            role=fid.role.value, ps=ps, model_path=self.model_path,
                            data_fraction=self.data_fraction, hyper=self.hyper,
                            checkpoint_load=self.checkpoint_load, checkpoint_save=checkpoint_save,
                            deadline_s=self.deadline_s, rendezvous_id=rendezvous_id, next=following)


@dataclass(frozen=True)
class WriteRecord:
    """Append one line to the job's log."""

    record: EpochRecord


@dataclass(frozen=True)
class PruneCheckpoints:
    """Delete the job's checkpoints other than this one."""

    keep: str


@dataclass(frozen=True)
class WaitUntil:
    """Deliver TimerFired at this time (a backoff; nothing is slept inside the lifecycle)."""

    at_s: float


@dataclass(frozen=True)
class Finish:
    """The job is over; its functions are removed and its slots released by the commands before this one."""

    reason: str


Command = (AskPolicy | Submit | WatchPlacement | Release | Deploy | Remove | InvokeEpoch | WriteRecord
           | PruneCheckpoints | WaitUntil | Finish)
