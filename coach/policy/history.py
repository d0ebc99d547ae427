"""The one reader that rebuilds what a job has done from its log lines: typed observations, not dicts. Pure.

Resume, `coach plan` and the lifecycle all read a job's past through `history_from_records`, so all three see the
same History of the same log.

Two kinds of lines that are not steps matter here:
- `phase: "interrupted"` closes a job that Ctrl-C or SIGTERM stopped; its `stop_reason` is null, because a resumed
  job goes on in the same log and only the log's last line carries a stop reason.
- `phase: "recovered"` opens what a resume appended to a log that had lost every finished step (emptied, or cut
  before its first complete record): the job went on from the newest complete checkpoint of its checkpoints
  folder, as if the step that saved it (its `epoch`) was the last one done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from coach.domain.records import JobOutcome
from coach.estimates.speed import SpeedObservation
from coach.policy.stopping import stop_metric

SPEED_PHASES = frozenset({"calibration", "training"})
INTERRUPTED = "interrupted"  # the phase of the line that closes an interrupted job, and its summary stop reason
RECOVERED = "recovered"  # the phase of the line that starts a job again from its checkpoints folder


def full_epoch_time_s(epoch_time_s: float, compute_s: float | None, data_fraction: float,
                      warmup_s: float | None = None) -> float:
    """A mini-epoch on a fraction q of the data, scaled to a full epoch.

    Only the training loop scales with the data, less `warmup_s`: its time beyond its steps at their steady rate
    (the first step's excess, cold kernels and first shapes, and the wind-down after the last step). The fixed part
    (rendezvous, checkpoint load and save, validation) and `warmup_s` are paid once per epoch whatever q is, so
    they are not multiplied by 1/q.
    """
    if compute_s is None or compute_s > epoch_time_s:
        return epoch_time_s / data_fraction
    first_s = warmup_s if warmup_s is not None and 0 <= warmup_s <= compute_s else 0.0
    return (epoch_time_s - compute_s) + first_s + (compute_s - first_s) / data_fraction


def observation(workers: int, servers: int, epoch_time_s: float, compute_s: float | None,
                data_fraction: float, warmup_s: float | None = None) -> SpeedObservation:
    """One epoch's speed, as full epochs per second."""
    return SpeedObservation(workers, servers,
                            1.0 / full_epoch_time_s(epoch_time_s, compute_s, data_fraction, warmup_s))


@dataclass(frozen=True)
class History:
    """What a job's log says it has done."""

    observations: tuple[SpeedObservation, ...] = ()  # speed of every calibration and training epoch
    metrics: tuple[float, ...] = ()  # stop metric of every training epoch, in order
    calibration_done: int = 0  # calibration mini-epochs finished
    epochs_done: int = 0  # the last training epoch's number
    steps_done: int = 0  # calibration mini-epochs and epochs finished, together
    last_counts: tuple[int, int] | None = None  # (workers, servers) of the last finished step
    last_cost: float | None = None  # cost of the last finished step
    checkpoint: str | None = None  # newest checkpoint a finished step saved
    spent: float = 0.0  # cumulative cost on the last line
    final_loss: float | None = None  # training loss of the last finished step
    final_val_loss: float | None = None
    stop_reason: str | None = None  # why the job ended: the last line's stop_reason, or `interrupted`
    last_end: str | None = None  # ISO time the last line ended
    line_counts: tuple[int, int] | None = None  # (workers, servers) on the log's last line
    recovered: bool = False  # rebuilt from a checkpoint because the log had no finished step, not from the log


def observations(records: Sequence[Mapping[str, Any]]) -> list[SpeedObservation]:
    """Speed observations from every calibration and training epoch of a log."""
    found = []
    for r in records:
        if r.get("phase") not in SPEED_PHASES or not r.get("epoch_time_s") or not r.get("workers"):
            continue
        found.append(observation(int(r["workers"]), int(r["servers"]), float(r["epoch_time_s"]), r.get("compute_s"),
                                 float(r.get("data_fraction", 1.0)), r.get("warmup_s")))
    return found


def training_metrics(records: Sequence[Mapping[str, Any]]) -> list[float]:
    """The stop metric of every training epoch, in order (calibration mini-epochs are not epochs)."""
    return [stop_metric(r["loss"], r.get("val_loss")) for r in records if r.get("phase") == "training"]


def ended_by(last: Mapping[str, Any]) -> str | None:
    """Why a job whose log ends with `last` ended; None while it has not.

    An interrupted job's closing line has `phase: "interrupted"` and a null stop_reason: the phase says it.
    """
    if last.get("phase") == INTERRUPTED:
        return INTERRUPTED
    return last.get("stop_reason")


def _counts(record: Mapping[str, Any]) -> tuple[int, int] | None:
    workers, servers = record.get("workers"), record.get("servers")
    return (int(workers), int(servers)) if isinstance(workers, int) and isinstance(servers, int) else None


def history_from_records(records: Sequence[Mapping[str, Any]]) -> History:
    """Everything the lifecycle and the policies need from a job's log lines."""
    steps = [r for r in records if r.get("phase") in SPEED_PHASES]
    last_step = steps[-1] if steps else None
    calibration_done = epochs_done = steps_done = 0
    checkpoint = None
    for r in records:  # in order: a `recovered` line is where the job started again
        phase = r.get("phase")
        if phase == RECOVERED:
            epochs_done = steps_done = int(r.get("epoch") or 0)
            calibration_done = 0  # the calibration's observations went with the lost lines
            checkpoint = r.get("checkpoint") or checkpoint
        elif phase in SPEED_PHASES:
            steps_done += 1
            if phase == "training":
                epochs_done = int(r["epoch"])
            else:
                calibration_done += 1
            checkpoint = r.get("checkpoint") or checkpoint
    last = records[-1] if records else {}
    return History(
        observations=tuple(observations(records)),
        metrics=tuple(training_metrics(records)),
        calibration_done=calibration_done,
        epochs_done=epochs_done,
        steps_done=steps_done,
        last_counts=(int(last_step["workers"]), int(last_step["servers"])) if last_step else None,
        last_cost=float(last_step["cost"]) if last_step else None,
        checkpoint=checkpoint,
        spent=float(last.get("cumulative_cost") or 0.0),
        final_loss=last_step["loss"] if last_step else None,
        final_val_loss=last_step.get("val_loss") if last_step else None,
        stop_reason=ended_by(last),
        last_end=last.get("end"),
        line_counts=_counts(last),
    )


def history_from_checkpoint(prefix: str, epoch: int, spent: float) -> History:
    """A job whose log lost every finished step, going on from the checkpoint `prefix` that step `epoch` saved.

    Nothing measured survives (no speed observations, no losses), so a job its policy calibrates calibrates
    again; `spent` is what is known to have been spent (the summary's last figure, else 0).
    """
    return History(epochs_done=epoch, steps_done=epoch, checkpoint=prefix, spent=spent, recovered=True)


def fill_outcome(outcome: JobOutcome, history: History, finished_s: float | None) -> None:
    """What the summary keeps of a job, from what its lifecycle (or its log) says it did."""
    outcome.finished_s = finished_s
    outcome.epochs = history.epochs_done
    outcome.final_loss, outcome.final_val_loss = history.final_loss, history.final_val_loss
    outcome.stop_reason = history.stop_reason
    outcome.total_cost = history.spent
    counts = history.line_counts or history.last_counts  # what the log's last line says
    if counts:
        outcome.workers, outcome.servers = counts
