"""What happens to a job: the events a driver delivers to its lifecycle. Plain data; time arrives inside each."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from coach.domain.contracts import WorkerReply
from coach.domain.identity import FunctionId
from coach.domain.invocation import Failure
from coach.policy.history import History
from coach.policy.run_policy import Decision


@dataclass(frozen=True)
class Start:
    """A new job enters the run."""

    now_s: float


@dataclass(frozen=True)
class Resume:
    """A job continues from the log an earlier controller wrote."""

    now_s: float
    history: History  # what its log says it has done


@dataclass(frozen=True)
class Decided:
    """The run's policy answered the job's AskPolicy."""

    now_s: float
    decision: Decision


@dataclass(frozen=True)
class Bindings:
    """What the placement has bound of the job's functions, now."""

    now_s: float
    bound: Mapping[FunctionId, str]  # function -> node, every bound function of the job
    why_pending: str = ""  # the scheduler's reason for the others


@dataclass(frozen=True)
class Deployed:
    """A Deploy command finished: these functions are ready, or the first failure."""

    now_s: float
    ready: tuple[FunctionId, ...]  # deployed (and warmed) functions
    failure: Failure | None = None
    train_samples: int | None = None  # samples of a full epoch, as the warmed workers told (None: not told)


@dataclass(frozen=True)
class EpochDone:
    """Every function of the epoch answered."""

    now_s: float  # when the last reply arrived
    started_s: float  # when the first request went out
    wall_s: float  # the epoch's wall time, as measured
    replies: Mapping[FunctionId, WorkerReply]  # the workers' typed replies
    durations_s: Mapping[FunctionId, float]  # how long each function held its slot
    checkpoint: str | None  # the prefix rank 0 says it saved (the driver checked it is complete)


@dataclass(frozen=True)
class EpochFailed:
    """A function of the epoch failed; the others were cancelled."""

    now_s: float
    failure: Failure
    durations_s: Mapping[FunctionId, float] = field(default_factory=dict)  # slot time used before the failure


@dataclass(frozen=True)
class TimerFired:
    """A WaitUntil the job asked for has come."""

    now_s: float


@dataclass(frozen=True)
class StopRequested:
    """Ctrl-C or SIGTERM (the whole run: `interrupted`, resumable), or a user's stop of one job (final)."""

    now_s: float
    reason: str = "interrupted"  # coach.policy.history.INTERRUPTED, or coach.lifecycle.job.USER_STOP


Event = Start | Resume | Decided | Bindings | Deployed | EpochDone | EpochFailed | TimerFired | StopRequested
