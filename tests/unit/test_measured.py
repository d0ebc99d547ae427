"""coach.policy.measured: a job's own full epochs override the fit where it has run them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from coach.estimates.speed import SpeedObservation
from coach.policy.history import History, history_from_records
from coach.policy.measured import (
    MAX_PROBE_MARGIN,
    MIN_PROBE_MARGIN,
    MeasuredOrFitted,
    MeasuredPoint,
    current_counts,
    full_epochs,
    measured_or_fitted,
    measured_points,
    prior_fit_error,
    probe_margin,
)


@dataclass(frozen=True)
class Flat:
    """A fit that predicts the same epoch time everywhere."""

    epoch_time_s: float = 1.5

    def epochs_per_s(self, workers: int, servers: int) -> float:
        return 1.0 / self.epoch_time_s

    def to_dict(self) -> dict:
        return {"form": "flat", "epoch_time_s": self.epoch_time_s}


def line(phase: str, epoch: int, workers: int, servers: int, epoch_time_s: float, fraction: float = 1.0) -> dict:
    record = {"phase": phase, "epoch": epoch, "workers": workers, "servers": servers, "epoch_time_s": epoch_time_s,
              "compute_s": None, "loss": 1.0, "val_loss": None, "cost": 0.001, "cumulative_cost": 0.001}
    if phase == "calibration":
        record["data_fraction"] = fraction
    return record


def lenet_log() -> list[dict]:
    """Calibration, then the stubborn run of issue 13: (3,1) at 1.60 s, then (2,1) at 1.37 s."""
    calibration = [line("calibration", 0, w, s, 0.5, fraction=0.25) for w, s in ((1, 1), (1, 2), (2, 1), (2, 2))]
    training = [line("training", 1, 3, 1, 1.61), line("training", 2, 3, 1, 1.60), line("training", 3, 2, 1, 1.37)]
    return calibration + training


def test_full_epochs_are_the_training_observations_not_the_calibration():
    history = history_from_records(lenet_log())
    epochs = full_epochs(history)
    assert [(o.workers, o.servers) for o in epochs] == [(3, 1), (3, 1), (2, 1)]
    assert [1 / o.epochs_per_s for o in epochs] == pytest.approx([1.61, 1.60, 1.37])
    assert full_epochs(History()) == ()
    assert current_counts(history) == (2, 1)
    assert current_counts(History(observations=(SpeedObservation(1, 1, 1.0),), calibration_done=1)) is None


def test_a_point_is_the_median_of_its_full_epochs_in_the_order_first_run():
    times = [1.9, 1.5, 1.6, 1.4, 1.45]  # (3,1) four times, one slow warm-up first; then (2,1) once
    epochs = [SpeedObservation(3, 1, 1 / t) for t in times[:4]] + [SpeedObservation(2, 1, 1 / times[4])]
    assert measured_points(epochs) == (MeasuredPoint(3, 1, pytest.approx(1.55), 4),
                                       MeasuredPoint(2, 1, pytest.approx(1.45), 1))
    # from three epochs on, one slow first epoch does not move the median
    three = [SpeedObservation(2, 2, 1 / t) for t in (9.0, 1.5, 1.6)]
    assert measured_points(three)[0].epoch_time_s == pytest.approx(1.6)


def test_measured_counts_answer_with_the_measurement_the_others_with_the_fit():
    speed = measured_or_fitted(Flat(1.444), history_from_records(lenet_log()))

    assert speed.measured == {(3, 1), (2, 1)}
    assert speed.epoch_time_s(3, 1) == pytest.approx(1.605)
    assert speed.epoch_time_s(2, 1) == pytest.approx(1.37)
    assert speed.epoch_time_s(2, 2) == pytest.approx(1.444)  # never run at full epochs: the fit
    assert speed.epoch_time_s(1, 1) == pytest.approx(1.444)  # calibrated only: still the fit
    assert speed.to_dict() == {"form": "flat", "epoch_time_s": 1.444, "fit_error": 0.0, "measured": [
        {"workers": 3, "servers": 1, "epoch_time_s": 1.605, "epochs": 2},
        {"workers": 2, "servers": 1, "epoch_time_s": 1.37, "epochs": 1}]}


def test_the_prior_fit_error_predicts_each_point_from_what_came_before_it():
    history = history_from_records(lenet_log())
    seen = []

    def fit_on(observations):
        seen.append(len(observations))
        return Flat(1.444 if len(observations) == 4 else 1.5)

    points = measured_points(full_epochs(history))
    error = prior_fit_error(history, points, fit_on)
    # (3,1) was predicted from the 4 calibration observations, (2,1) from those and the two (3,1) epochs
    assert seen == [4, 6]
    assert error == pytest.approx(max(abs(1.444 / 1.605 - 1), abs(1.5 / 1.37 - 1)))
    assert measured_or_fitted(Flat(), history, fit_on).fit_error == pytest.approx(error)


def test_the_probe_margin_is_the_fit_error_between_its_floor_and_its_cap():
    assert probe_margin(MeasuredOrFitted(Flat(), (), 0.0)) == MIN_PROBE_MARGIN == 0.2
    assert probe_margin(MeasuredOrFitted(Flat(), (), 0.25)) == 0.25
    assert probe_margin(MeasuredOrFitted(Flat(), (), 0.9)) == MAX_PROBE_MARGIN
