"""From a job's log records to its next decision: observations, fits, remaining epochs, counts. Pure.

The live controller and `coach plan` both call `plan()`, so what a user previews is what a run would do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from coach.domain.jobs import JobSpec
from coach.model.convergence import RemainingEpochs, remaining_epochs
from coach.model.speed import SpeedFit, SpeedObservation, fit_speed
from coach.policy.allocation import Allocation, JobDemand, allocate
from coach.policy.stopping import stop_metric

#: Calibration varies workers and servers independently (Optimus sampled only w = s, which leaves the surface
#: unidentifiable); all four points fit in the functions of (2, 2).
CALIBRATION_POINTS: tuple[tuple[int, int], ...] = ((1, 1), (1, 2), (2, 1), (2, 2))
SPEED_PHASES = frozenset({"calibration", "training"})


def full_epoch_time_s(epoch_time_s: float, compute_s: float | None, data_fraction: float) -> float:
    """A mini-epoch on a fraction q of the data, scaled to a full epoch.

    Only the training loop scales with the data; the fixed part (rendezvous, checkpoint load and save,
    validation) is paid once per epoch whatever q is, so it is not multiplied by 1/q.
    """
    if compute_s is None or compute_s > epoch_time_s:
        return epoch_time_s / data_fraction
    return (epoch_time_s - compute_s) + compute_s / data_fraction


def observations(records: Sequence[Mapping]) -> list[SpeedObservation]:
    """Speed observations from every calibration and training epoch of a log."""
    found = []
    for r in records:
        if r.get("phase") not in SPEED_PHASES or not r.get("epoch_time_s") or not r.get("workers"):
            continue
        full_s = full_epoch_time_s(float(r["epoch_time_s"]), r.get("compute_s"), float(r.get("data_fraction", 1.0)))
        found.append(SpeedObservation(int(r["workers"]), int(r["servers"]), 1.0 / full_s))
    return found


def training_metrics(records: Sequence[Mapping]) -> list[float]:
    """The stop metric of every training epoch, in order (calibration mini-epochs are not epochs)."""
    return [stop_metric(r["loss"], r.get("val_loss")) for r in records if r.get("phase") == "training"]


@dataclass(frozen=True)
class Plan:
    """What Coach would do next for one job, and why."""

    speed: SpeedFit  # the fitted surface
    remaining: RemainingEpochs  # predicted epochs left and where the number comes from
    allocation: Allocation  # the chosen counts and why growth stopped
    budget_left: float  # money the job has left
    free_slots: int  # slots the decision could use

    @property
    def affordable(self) -> bool:
        """The budget guarantee: never start an epoch whose predicted cost exceeds what is left."""
        cost = self.allocation.predicted_epoch_cost
        return self.allocation.workers > 0 and cost is not None and cost <= self.budget_left

    def to_dict(self) -> dict:
        return {
            "speed_fit": self.speed.to_dict(),
            "predicted_remaining_epochs": self.remaining.epochs,
            "remaining_source": self.remaining.source,
            "convergence_fit": self.remaining.fit.to_dict() if self.remaining.fit else None,
            "budget_left": self.budget_left,
            "free_slots": self.free_slots,
            **self.allocation.to_dict(),
        }


def plan(spec: JobSpec, records: Sequence[Mapping], free_slots: int, budget_left: float,
         price_per_slot_s: float, min_gain: float = 0.05) -> Plan:
    """Fit on every observation so far and choose (workers, servers) for the next epoch."""
    speed = fit_speed(observations(records))
    remaining = remaining_epochs(training_metrics(records), spec.target_loss, spec.consecutive, spec.max_epochs)
    # at max_epochs nothing remains; a decision is still asked of `coach plan`, so plan for one more epoch
    demand = JobDemand(job=spec.name, speed=speed, remaining_epochs=max(remaining.epochs, 1.0),
                       remaining_budget=max(budget_left, 0.0), price_per_slot_s=price_per_slot_s,
                       max_workers=spec.max_workers, max_servers=spec.max_servers)
    allocation = allocate([demand], free_slots, min_gain)[spec.name]
    return Plan(speed, remaining, allocation, budget_left, free_slots)
