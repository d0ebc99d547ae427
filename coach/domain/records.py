"""What results hold: the per-epoch record, a job's outcome and the run summary. Plain data, no I/O."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from datetime import datetime, UTC
from typing import Any, Mapping


#: Version of run.json's layout. A resume reads only its own version: nothing has been released, so there is no
#: older layout to read.
MANIFEST_SCHEMA = 2


def iso(timestamp_s: float) -> str:
    return datetime.fromtimestamp(timestamp_s, tz=UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class EpochRecord:
    """One line of a job's log: what one epoch (or the final stop) did and cost."""

    run_id: str  # the run this epoch belongs to
    job: str  # job name
    phase: str  # "training", "calibration"; not a finished step: "retry", "requeued", "stopped", "interrupted", "recovered"
    epoch: int  # 1-based epoch number (the last trained epoch on a "stopped" line)
    workers: int  # MXNet workers of this epoch
    servers: int  # MXNet servers of this epoch
    placement: Mapping[str, str]  # function name -> node
    loss: float | None  # mean training loss over every sample of the epoch, all workers
    val_loss: float | None  # validation loss after the epoch (rank 0), None without validation data
    accuracy: float | None  # validation accuracy, None without validation data
    train_accuracy: float | None  # training accuracy over the epoch
    samples: int  # training samples seen by all workers
    epoch_time_s: float  # wall time from the first invocation sent to the last reply received
    compute_s: float | None  # slowest worker's time in its training loop
    start: str  # ISO-8601 UTC time the epoch started
    end: str  # ISO-8601 UTC time the epoch ended
    cost: float  # price x slot-seconds of every function of this epoch
    cumulative_cost: float  # cost of all epochs of the job so far
    budget: float  # the job's budget
    stop_reason: str | None = None  # set on the job's last line only
    attempt: int = 1  # which try of this epoch succeeded (or failed, on a "retry" line)
    checkpoint: str | None = None  # prefix of the checkpoint this epoch saved (`coach run --resume` starts there)
    extra: Mapping[str, Any] = field(default_factory=dict)  # decision details added by later phases

    def to_json(self) -> str:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        data["placement"] = dict(self.placement)
        clash = set(self.extra) & set(data)
        if clash:
            raise ValueError(f"extra fields would overwrite record fields: {sorted(clash)}")
        data.update(self.extra)
        return json.dumps(data, sort_keys=False)


@dataclass
class JobOutcome:
    """What the summary keeps of one job."""

    submitted_s: float  # epoch seconds when the run accepted the job
    finished_s: float | None = None  # epoch seconds when its last function was released
    epochs: int = 0  # epochs trained
    final_loss: float | None = None  # training loss of the last epoch
    final_val_loss: float | None = None  # validation loss of the last epoch, if any
    stop_reason: str | None = None  # why it stopped
    total_cost: float = 0.0  # cumulative cost
    budget: float = 0.0  # the job's budget
    workers: int = 0  # counts of the last epoch
    servers: int = 0

    def to_dict(self) -> dict[str, Any]:
        jct = None if self.finished_s is None else round(self.finished_s - self.submitted_s, 3)
        return {
            "submitted": iso(self.submitted_s),
            "finished": None if self.finished_s is None else iso(self.finished_s),
            "jct_s": jct,
            "epochs": self.epochs,
            "final_loss": self.final_loss,
            "final_val_loss": self.final_val_loss,
            "stop_reason": self.stop_reason,
            "total_cost": self.total_cost,
            "budget": self.budget,
            "workers": self.workers,
            "servers": self.servers,
        }


def summary_dict(run_id: str, started_s: float, outcomes: Mapping[str, JobOutcome],
                 extra: Mapping[str, Any]) -> dict[str, Any]:
    """summary.json: per-job times, JCT, epochs, final loss, stop reason and cost, plus the run's makespan."""
    finished = [o.finished_s for o in outcomes.values() if o.finished_s is not None]
    all_done = len(finished) == len(outcomes)
    return {
        "run_id": run_id,
        "started": iso(started_s),
        "ended": iso(max(finished)) if finished and all_done else None,
        "makespan_s": round(max(finished) - started_s, 3) if finished and all_done else None,
        **extra,
        "jobs": {name: outcome.to_dict() for name, outcome in outcomes.items()},
    }
