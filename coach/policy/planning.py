"""From what a job has done to its next counts: fits, remaining epochs, and the greedy allocation. Pure.

The `coach` policy plans every dynamic job of a run at once through `plan_jobs`; `coach plan` asks the same
policy about one job, so what a user previews is what a run would do.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

from coach.domain.identity import slots_for
from coach.domain.jobs import JobSpec
from coach.estimates.convergence import RemainingEpochs, remaining_epochs
from coach.estimates.speed import SpeedObservation
from coach.estimates.speed_forms import SpeedModel, fit_chosen
from coach.policy.allocation import Allocation, JobDemand, allocate
from coach.policy.history import History
from coach.policy.measured import current_counts, measured_or_fitted, probe_margin

#: Calibration varies workers and servers independently (Optimus sampled only w = s, which leaves the surface
#: unidentifiable), then samples a third worker at (3, 1): `levels` holds every effect flat beyond the counts it saw,
#: and on a node with fewer cores than workers a third worker is slower, not faster (ResNet-18 on two cores runs
#: slower at three workers than at two). The points need the functions of (3, 2); `calibration_within` keeps the
#: first ones that fit a job's limits and the cluster.
CALIBRATION_POINTS: tuple[tuple[int, int], ...] = ((1, 1), (1, 2), (2, 1), (2, 2), (3, 1))


#: A calibration mini-epoch trains at least this many batches on every worker (or all the data): with one batch
#: its time is the cold first step's alone and no warm-up can be told apart. ResNet-18 on 1,000 digits at batch
#: 128 would train one step per worker at (2, *) on a quarter of the data, and a fit from such mini-epochs is far off.
CALIBRATION_MIN_STEPS = 4


def calibration_fraction(fraction: float, workers: int, batch_per_worker: int, data_samples: int | None) -> float:
    """The share of the data a calibration mini-epoch at `workers` trains: whole batches on every worker, as many
    as the job's `calibration_fraction` comes nearest to and at least CALIBRATION_MIN_STEPS, up to all of it; the
    job's share while the data's size is unknown (the warmed workers tell it at deploy; every mini-epoch's reply too).

    Whole batches, because a step costs nearly the same however full its batch is (every parameter is pushed and
    pulled), while a mini-epoch is scaled to a full epoch by its share of the data: LeNet at (3, 1) on a quarter
    trained 5.2 batches' worth in 6 steps, 13% more steps than its share of the data counts. One sample short of
    them on every worker (batches of more than one sample), so that neither the worker's rounding up nor a data
    size estimated a few samples off adds a step of a few samples. Not rounded: a share rounded to a few decimals
    can lose a step on large data, or come out 0."""
    if not data_samples or fraction >= 1.0:
        return fraction
    per_step = batch_per_worker * workers
    steps = max(CALIBRATION_MIN_STEPS, round(fraction * data_samples / per_step))
    if steps * per_step >= data_samples:
        return 1.0
    short = workers if batch_per_worker > 1 else 0
    return (steps * per_step - short) / data_samples


def calibration_within(points: Sequence[tuple[int, int]], max_workers: int | None = None,
                       max_servers: int | None = None, total_slots: int | None = None) -> tuple[tuple[int, int], ...]:
    """The calibration points a job may run: within its limits, and as many of the first ones as fit, all
    together, in the cluster's slots (a calibration holds the functions of its largest counts throughout)."""
    kept = [(w, s) for w, s in points if (max_workers is None or w <= max_workers)
            and (max_servers is None or s <= max_servers)]
    while total_slots is not None and kept and slots_for(max(w for w, _ in kept), max(s for _, s in kept)) > \
            total_slots:
        kept.pop()
    return tuple(kept)


@dataclass(frozen=True)
class Plan:
    """What Coach would do next for one job, and why."""

    speed: SpeedModel  # the fitted speed model (the chosen form of coach.estimates.speed_forms)
    remaining: RemainingEpochs  # predicted epochs left and where the number comes from
    allocation: Allocation  # the chosen counts and why growth stopped
    budget_left: float  # money the job has left
    free_slots: int  # slots the decision could use

    @property
    def affordable(self) -> bool:
        """The budget guarantee: never start an epoch whose predicted cost exceeds what is left."""
        cost = self.allocation.predicted_epoch_cost
        return self.allocation.workers > 0 and cost is not None and cost <= self.budget_left

    def to_dict(self) -> dict[str, Any]:
        return {
            "speed_fit": self.speed.to_dict(),
            "predicted_remaining_epochs": self.remaining.epochs,
            "remaining_source": self.remaining.source,
            "convergence_fit": self.remaining.fit.to_dict() if self.remaining.fit else None,
            "budget_left": self.budget_left,
            "free_slots": self.free_slots,
            **self.allocation.to_dict(),
        }


@lru_cache(maxsize=4096)
def _speed(observations: tuple[SpeedObservation, ...]) -> SpeedModel:
    """The fit is a pure function of the observations: a run re-plans a job many times between new epochs."""
    return fit_chosen(list(observations))


@lru_cache(maxsize=4096)
def _remaining(metrics: tuple[float, ...], target_loss: float, consecutive: int, max_epochs: int) -> RemainingEpochs:
    return remaining_epochs(list(metrics), target_loss, consecutive, max_epochs)


@dataclass(frozen=True)
class PlanInput:
    """One dynamic job as the planner sees it."""

    spec: JobSpec  # targets and limits
    history: History  # what it has measured
    budget_left: float  # money it has left


def plan_jobs(jobs: Sequence[PlanInput], free_slots: int, price_per_slot_s: float,
              min_gain: float = 0.05, measured: bool = True) -> dict[str, Plan]:
    """Fit every job on its observations so far, then one greedy allocation across all of them.

    With `measured` (the default) a job's own full epochs override the fit where it has run them and it may
    settle at its current counts (coach.policy.measured, rule 4 of coach.policy.allocation); without, the fit
    alone decides, as before issue 13 (benchmarks/choice_regret.py compares the two).
    """
    fits = {}
    demands = []
    for job in jobs:
        speed = _speed(tuple(job.history.observations))
        current, current_epochs, margin = None, 0, 0.0
        known: frozenset[tuple[int, int]] = frozenset()
        if measured:
            speed = measured_or_fitted(speed, job.history, _speed)
            current, known, margin = current_counts(job.history), speed.measured, probe_margin(speed)
            if current:
                point = speed.point(*current)
                assert point is not None, "the current counts are those of a full epoch, so they are measured"
                current_epochs = point.epochs
        remaining = _remaining(tuple(job.history.metrics), job.spec.target_loss, job.spec.consecutive,
                               job.spec.max_epochs)
        fits[job.spec.name] = (speed, remaining)
        # at max_epochs nothing remains; a decision is still asked of `coach plan`, so plan for one more epoch
        demands.append(JobDemand(job=job.spec.name, speed=speed, remaining_epochs=max(remaining.epochs, 1.0),
                                 remaining_budget=max(job.budget_left, 0.0), price_per_slot_s=price_per_slot_s,
                                 max_workers=job.spec.max_workers, max_servers=job.spec.max_servers,
                                 current=current, current_epochs=current_epochs, measured=known,
                                 probe_margin=margin))
    allocations = allocate(demands, free_slots, min_gain)
    return {job.spec.name: Plan(*fits[job.spec.name], allocations[job.spec.name], job.budget_left, free_slots)
            for job in jobs}


def plan(spec: JobSpec, history: History, free_slots: int, budget_left: float, price_per_slot_s: float) -> Plan:
    """One job alone: fit on every observation so far and choose (workers, servers) for the next epoch."""
    return plan_jobs([PlanInput(spec, history, budget_left)], free_slots, price_per_slot_s)[spec.name]
