"""Measured beats predicted: the speed a job's policy uses where the job has run full epochs. Pure.

Why it exists: the fit extrapolates from a few calibration mini-epochs and can be well off (on two cores it can
predict a third LeNet worker faster than two when it is slower). A job that has run full epochs at some
(workers, servers) knows better than any fit how fast those counts are, so `MeasuredOrFitted` answers with the
job's own measurement there and asks the fit only about counts it has not run.

A point's measured speed is 1 / the median epoch time of the job's full training epochs at those counts: from
three epochs on, one slow first (warm-up) epoch there cannot move it. Calibration mini-epochs are not
measurements of a point: they are scaled from a slice of the data, so they only feed the fit.

How the job uses them is rule 4 of coach.policy.allocation (settling): counts it has measured are never explored
again, it moves between measured counts only for a clear difference, and it probes a neighbour the fit predicts
slower by less than the fit's own error on this job (`probe_margin`), once.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from coach.estimates.speed import SpeedObservation
from coach.policy.history import History


def full_epochs(history: History) -> tuple[SpeedObservation, ...]:
    """The speed observations of the job's full training epochs, in order.

    A log's training lines come after its calibration lines, and every finished training line gives exactly one
    observation and one stop metric, so the training epochs are the last len(metrics) observations.
    """
    count = min(len(history.metrics), len(history.observations))
    return history.observations[len(history.observations) - count:] if count else ()


@dataclass(frozen=True)
class MeasuredPoint:
    """What a job's full epochs at one (workers, servers) say about its speed there."""

    workers: int
    servers: int
    epoch_time_s: float  # median full-epoch time there
    epochs: int  # full epochs run there

    def to_dict(self) -> dict[str, Any]:
        return {"workers": self.workers, "servers": self.servers, "epoch_time_s": round(self.epoch_time_s, 4),
                "epochs": self.epochs}


def measured_points(epochs: Sequence[SpeedObservation]) -> tuple[MeasuredPoint, ...]:
    """One point per (workers, servers) the epochs ran at, in the order first run."""
    times: dict[tuple[int, int], list[float]] = {}
    for o in epochs:
        if o.epochs_per_s > 0:
            times.setdefault((o.workers, o.servers), []).append(1.0 / o.epochs_per_s)
    points = []
    for (workers, servers), seen in times.items():
        points.append(MeasuredPoint(workers, servers, statistics.median(seen), len(seen)))
    return tuple(points)


class FittedSpeed(Protocol):
    """What is asked of the fit: its prediction and its parameters for the decision's record."""

    def epochs_per_s(self, workers: int, servers: int) -> float: ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class MeasuredOrFitted:
    """A speed model: the job's measurement at counts it has run full epochs at, the fit everywhere else."""

    fit: FittedSpeed  # e.g. the chosen form of coach.estimates.speed_forms
    points: tuple[MeasuredPoint, ...] = ()
    #: the largest relative error of the fit's epoch time at a measured point, as predicted *before* the job first
    #: ran there (0: nothing measured yet): how far the fit has been off for this job about counts it had not run
    fit_error: float = 0.0

    @property
    def observations(self) -> int:
        """Observations behind the fit (the speed-model interface reports it)."""
        return getattr(self.fit, "observations", 0)

    @property
    def measured(self) -> frozenset[tuple[int, int]]:
        """The (workers, servers) whose speed comes from measurement."""
        return frozenset((p.workers, p.servers) for p in self.points)

    def point(self, workers: int, servers: int) -> MeasuredPoint | None:
        for p in self.points:
            if (p.workers, p.servers) == (workers, servers):
                return p
        return None

    def epochs_per_s(self, workers: int, servers: int) -> float:
        found = self.point(workers, servers)
        return 1.0 / found.epoch_time_s if found else float(self.fit.epochs_per_s(workers, servers))

    def epoch_time_s(self, workers: int, servers: int) -> float:
        speed = self.epochs_per_s(workers, servers)
        return 1.0 / speed if speed > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        """The fit's own dict, plus the measured points that override it and the fit's error at them."""
        return {**self.fit.to_dict(), "measured": [p.to_dict() for p in self.points],
                "fit_error": round(self.fit_error, 4)}


def measured_or_fitted(fit: FittedSpeed, history: History,
                       fit_on: Callable[[tuple[SpeedObservation, ...]], FittedSpeed] | None = None
                       ) -> MeasuredOrFitted:
    """The speed model a job's policy uses: `fit` corrected by the job's own full epochs.

    With `fit_on` (the fit as a function of observations) it also tells the fit's error at every measured point
    as the fit predicted it from the observations made before the job first ran there.
    """
    points = measured_points(full_epochs(history))
    error = prior_fit_error(history, points, fit_on) if fit_on is not None else 0.0
    return MeasuredOrFitted(fit, points, error)


def prior_fit_error(history: History, points: Sequence[MeasuredPoint],
                    fit_on: Callable[[tuple[SpeedObservation, ...]], FittedSpeed]) -> float:
    """The largest |predicted / measured epoch time - 1| over the measured points, each predicted by the fit on
    the observations before the job's first full epoch there (0 when none can be told)."""
    observations = history.observations
    first = len(observations) - len(full_epochs(history))  # index of the first full epoch
    errors = []
    for p in points:
        at = next(i for i in range(first, len(observations))
                  if (observations[i].workers, observations[i].servers) == (p.workers, p.servers))
        if at == 0:
            continue  # nothing was known before it
        predicted = float(fit_on(observations[:at]).epochs_per_s(p.workers, p.servers))
        if predicted > 0:
            errors.append(abs(1.0 / (predicted * p.epoch_time_s) - 1))
    return max(errors, default=0.0)


def current_counts(history: History) -> tuple[int, int] | None:
    """The counts of the job's last full epoch (None before its first): where a settling job stays."""
    epochs = full_epochs(history)
    return (epochs[-1].workers, epochs[-1].servers) if epochs else None


#: The probe margin's floor and ceiling. Calibration mini-epochs overestimate full epochs even at the counts they
#: sample (the noise floor of benchmarks/fit_accuracy.py), so a fit from them alone can predict a faster neighbour
#: as much as a fifth slower; with a much lower floor, many jobs of benchmarks/choice_regret.py never tried such a
#: neighbour and settled on slower counts.
MIN_PROBE_MARGIN = 0.2
MAX_PROBE_MARGIN = 0.3


def probe_margin(speed: MeasuredOrFitted) -> float:
    """How much slower than the current counts the fit may predict a neighbour that is still worth one probing
    epoch: the fit's own error on this job's measurements, within [MIN_PROBE_MARGIN, MAX_PROBE_MARGIN]."""
    return min(max(speed.fit_error, MIN_PROBE_MARGIN), MAX_PROBE_MARGIN)
