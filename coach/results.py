"""The per-epoch record, its append-only JSON-lines log, and the run summary.

Side effects: appends to `results/<run-id>/<job>.jsonl` (flushed and fsynced per record) and rewrites
`summary.json` atomically. Nothing else in Coach writes results.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping


def iso(timestamp_s: float) -> str:
    return datetime.fromtimestamp(timestamp_s, tz=timezone.utc).isoformat(timespec="milliseconds")


def new_run_id(now_s: float | None = None) -> str:
    """Sortable and unique: UTC time plus a short random suffix."""
    stamp = datetime.fromtimestamp(time.time() if now_s is None else now_s, tz=timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(2)}"


@dataclass(frozen=True)
class EpochRecord:
    """One line of a job's log: what one epoch (or the final stop) did and cost."""

    run_id: str  # the run this epoch belongs to
    job: str  # job name
    phase: str  # "training", or "stopped" for a closing line that is not an epoch
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


class ResultLog:
    """Append-only JSON lines for one job; every record is flushed and fsynced before `append` returns."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def append(self, record: EpochRecord) -> None:
        line = record.to_json()
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_log(path: Path) -> list[dict]:
    """Every record of a log, in order (each line parses with json.loads on its own)."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


class LogFileError(Exception):
    """A results log that cannot be read; the message is one `FILE: (line N): what is wrong` line."""


def read_log_checked(path: Path) -> list[dict]:
    """Like read_log, but every problem becomes a one-line LogFileError instead of a traceback."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise LogFileError(f"{path}: (file): {error.strerror or error}") from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise LogFileError(f"{path}: (line {number}): not JSON: {error.msg}") from None
        if not isinstance(record, dict):
            raise LogFileError(f"{path}: (line {number}): expected a JSON object")
        records.append(record)
    return records


def drop_torn_tail(path: Path) -> bool:
    """Cut a last line that a killed writer left without its newline, so appending starts on a fresh line.

    Every complete record ends in a newline (it is written and fsynced in one go); a tail without one was
    never a record. Returns True when something was cut.
    """
    with open(path, "rb+") as handle:
        data = handle.read()
        if not data or data.endswith(b"\n"):
            return False
        handle.truncate(data.rfind(b"\n") + 1)
        return True


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


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

    def to_dict(self) -> dict:
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


def summary_dict(run_id: str, started_s: float, outcomes: Mapping[str, JobOutcome], extra: Mapping) -> dict:
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
