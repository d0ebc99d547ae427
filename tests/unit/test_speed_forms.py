"""coach.estimates.speed_forms: every form recovers the parameters it was generated from, and states what it does
when the data cannot identify them (one point, one level on an axis)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from coach.estimates.speed import MIN_EPOCHS_PER_S, SpeedObservation, fit_speed
from coach.estimates.speed_forms import (CHOSEN_FORM, COMM_TERMS, FORMS, OPTIMUS_TERMS, TERMS, fit_chosen, fit_comm,
                                     fit_levels, fit_optimus)

GRID = [(w, s) for w in (1, 2, 3, 4, 6) for s in (1, 2, 3)]
CALIBRATION = [(1, 1), (1, 2), (2, 1), (2, 2)]


def linear_time(terms, coefficients, w, s) -> float:
    return sum(c * TERMS[t](w, s) for t, c in zip(terms, coefficients))


def observe(time_s, points, noise=0.0, seed=0) -> list[SpeedObservation]:
    rng = np.random.RandomState(seed)
    return [SpeedObservation(w, s, 1.0 / (time_s(w, s) * (1 + noise * rng.randn()))) for w, s in points]


LINEAR = [
    (fit_optimus, OPTIMUS_TERMS, (0.4, 3.0, 0.5, 0.2)),  # t = 0.4 + 3/w + 0.5/s + 0.2 s/w
    (fit_optimus, OPTIMUS_TERMS, (5.0, 30.0, 0.0, 1.5)),  # a slow job, no 1/s part
    (fit_comm, COMM_TERMS, (0.3, 2.0, 0.15)),  # t = 0.3 + 2/w + 0.15 w/s
    (fit_comm, COMM_TERMS, (1.0, 20.0, 0.0)),  # no communication cost
]


@pytest.mark.parametrize(("fit", "terms", "truth"), LINEAR)
def test_linear_forms_recover_their_coefficients(fit, terms, truth):
    model = fit(observe(lambda w, s: linear_time(terms, truth, w, s), GRID))

    assert model.terms == terms
    assert model.coefficients == pytest.approx(truth, rel=1e-6, abs=1e-9)
    assert (model.fixed, model.notes, model.observations) == ((), (), len(GRID))
    assert model.rms_error == pytest.approx(0.0, abs=1e-9)
    for w in range(1, 13):
        for s in range(1, 7):
            assert model.epoch_time_s(w, s) == pytest.approx(linear_time(terms, truth, w, s), rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("fit", "terms", "truth"), LINEAR)
def test_linear_forms_under_two_percent_noise_predict_within_five_percent(fit, terms, truth, seed):
    model = fit(observe(lambda w, s: linear_time(terms, truth, w, s), GRID, noise=0.02, seed=seed))

    assert all(c >= 0 for c in model.coefficients)
    for w, s in GRID:
        assert model.epoch_time_s(w, s) == pytest.approx(linear_time(terms, truth, w, s), rel=0.05)


def test_optimus_interpolates_the_four_calibration_points_and_extrapolates_its_truth():
    truth = (0.4, 3.0, 0.5, 0.2)
    model = fit_optimus(observe(lambda w, s: linear_time(OPTIMUS_TERMS, truth, w, s), CALIBRATION))

    # four points, four terms, each varying over the 2 x 2 design: all identified
    assert model.coefficients == pytest.approx(truth, rel=1e-6)
    assert model.epoch_time_s(4, 3) == pytest.approx(0.4 + 3 / 4 + 0.5 / 3 + 0.2 * 3 / 4, rel=1e-6)


def test_a_negative_best_coefficient_is_held_at_zero():
    # Time rising with servers (t = 2 + 1/w + 0.3 s) has no non-negative 1/s part: c2 = 0, never negative.
    model = fit_optimus(observe(lambda w, s: 2 + 1 / w + 0.3 * s, GRID))

    assert model.coefficients[OPTIMUS_TERMS.index("1/s")] == 0.0
    assert min(model.coefficients) >= 0.0


def test_linear_forms_on_one_point_predict_its_time_everywhere():
    for fit in (fit_optimus, fit_comm):
        model = fit([SpeedObservation(workers=2, servers=1, epochs_per_s=0.25)])

        assert model.fixed == model.terms[1:]  # only the constant is identified
        assert all(note.endswith(": 0") and "not identified" in note for note in model.notes)
        assert model.epoch_time_s(5, 3) == pytest.approx(4.0, rel=1e-12)
        assert model.rms_error == pytest.approx(0.0, abs=1e-12)


def test_linear_forms_with_one_worker_level_are_flat_along_workers():
    truth = (1.0, 0.0, 2.0, 0.0)  # t = 1 + 2/s at w = 3
    model = fit_optimus(observe(lambda w, s: linear_time(OPTIMUS_TERMS, truth, w, s), [(3, 1), (3, 2), (3, 4)]))

    # at one worker level 1/w is a multiple of the constant and dropped; s/w = s/3 stays (it varies with s)
    assert model.fixed == ("1/w",)
    assert model.notes == ("term 1/w: not identified by the observed counts (a combination of 1, 1/s, s/w): 0",)
    for s in (1, 2, 4):
        assert model.epoch_time_s(3, s) == pytest.approx(1 + 2 / s, rel=1e-6)
    assert model.coefficients[OPTIMUS_TERMS.index("s/w")] == pytest.approx(0.0, abs=1e-9)
    assert model.epoch_time_s(1, 2) == pytest.approx(model.epoch_time_s(8, 2), rel=1e-9)


def test_comm_with_one_level_on_each_axis_is_a_constant():
    model = fit_comm(observe(lambda w, s: 3.0, [(2, 1), (2, 1)]))

    assert model.fixed == ("1/w", "w/s")
    assert model.epoch_time_s(7, 5) == pytest.approx(3.0, rel=1e-12)


def log_additive(w, s) -> float:
    """Epoch time with a worker effect per level and a server effect per level (multiplicative)."""
    worker = {1: 1.0, 2: 0.6, 4: 0.5}[w]
    server = {1: 1.0, 2: 0.9, 3: 1.05}[s]
    return 4.0 * worker * server


def test_levels_recovers_per_level_effects_interpolates_between_and_is_flat_beyond():
    points = [(w, s) for w in (1, 2, 4) for s in (1, 2, 3)]
    model = fit_levels(observe(log_additive, points))

    for w, s in points:
        assert model.epoch_time_s(w, s) == pytest.approx(log_additive(w, s), rel=1e-9)
    assert model.worker_effects == pytest.approx((0.0, math.log(0.6), math.log(0.5)), rel=1e-9)
    # w = 3 lies half way between the levels 2 and 4, in log time
    assert model.epoch_time_s(3, 1) == pytest.approx(4.0 * math.sqrt(0.6 * 0.5), rel=1e-9)
    # beyond the highest level nothing changes: no gain is predicted that was not measured
    assert model.epoch_time_s(9, 1) == pytest.approx(model.epoch_time_s(4, 1), rel=1e-12)
    assert model.epoch_time_s(2, 7) == pytest.approx(model.epoch_time_s(2, 3), rel=1e-12)
    assert (model.fixed, model.notes) == ((), ())


def test_levels_on_one_point_and_on_one_level_per_axis():
    one = fit_levels([SpeedObservation(2, 1, 0.25)])
    assert one.epoch_time_s(5, 3) == pytest.approx(4.0, rel=1e-12)
    assert one.notes == ("workers: 1 level (2): flat", "servers: 1 level (1): flat")

    along_servers = fit_levels(observe(lambda w, s: 2.0 + 1.0 / s, [(2, 1), (2, 2)]))
    assert along_servers.notes == ("workers: 1 level (2): flat",)
    assert along_servers.epoch_time_s(9, 2) == pytest.approx(2.5, rel=1e-9)


def test_levels_splits_what_only_w_equal_s_cannot_tell_apart():
    model = fit_levels(observe(lambda w, s: 4.0 / w, [(1, 1), (2, 2)]))

    # the minimum-norm split gives each axis half of log(1/2)
    assert model.worker_effects[1] == pytest.approx(model.server_effects[1], rel=1e-9)
    assert model.epoch_time_s(2, 2) == pytest.approx(2.0, rel=1e-9)
    assert model.epoch_time_s(2, 1) == pytest.approx(4.0 / math.sqrt(2), rel=1e-9)


@pytest.mark.parametrize("name", sorted(FORMS))
def test_every_form_fits_the_calibration_design_and_serialises(name):
    observations = observe(lambda w, s: 0.5 + 2.0 / w + 0.1 * s, CALIBRATION, noise=0.01, seed=3)

    model = FORMS[name].fit(observations)

    assert model.observations == 4
    data = json.loads(json.dumps(model.to_dict(), allow_nan=False))
    assert data["observations"] == 4 and isinstance(data["notes"], list)
    for w, s in CALIBRATION:
        assert model.epoch_time_s(w, s) == pytest.approx(0.5 + 2.0 / w + 0.1 * s, rel=0.05)
    for w in range(1, 17):
        for s in range(1, 9):
            speed = model.epochs_per_s(w, s)
            assert math.isfinite(speed) and speed >= MIN_EPOCHS_PER_S
            assert model.epoch_time_s(w, s) == pytest.approx(1 / speed, rel=1e-12)


@pytest.mark.parametrize("name", sorted(FORMS))
def test_every_form_weighs_like_repetition(name):
    observations = observe(lambda w, s: 0.5 + 2.0 / w + 0.1 * w / s, GRID, noise=0.05, seed=5)
    doubled = observations + [observations[4]]
    weighted = observations[:4] + [SpeedObservation(observations[4].workers, observations[4].servers,
                                                    observations[4].epochs_per_s, weight=2.0)] + observations[5:]

    by_weight, by_copy = FORMS[name].fit(weighted), FORMS[name].fit(doubled)

    for w, s in GRID:
        assert by_weight.epoch_time_s(w, s) == pytest.approx(by_copy.epoch_time_s(w, s), rel=1e-6)


@pytest.mark.parametrize("name", sorted(FORMS))
@pytest.mark.parametrize(("bad", "message"), [
    (SpeedObservation(1, 1, 0.0), r"^observation 1: epochs_per_s must be finite and > 0, got 0\.0$"),
    (SpeedObservation(1, 1, math.nan), r"^observation 1: epochs_per_s must be finite and > 0, got nan$"),
    (SpeedObservation(1, 1, 0.1, weight=-1.0), r"^observation 1: weight must be finite and > 0, got -1\.0$"),
    (SpeedObservation(1, 0, 0.1), r"^observation 1: workers and servers must be >= 1, got 1, 0$"),
])
def test_every_form_refuses_the_same_bad_input(name, bad, message):
    with pytest.raises(ValueError, match=message):
        FORMS[name].fit([SpeedObservation(1, 1, 0.1), bad])
    with pytest.raises(ValueError, match=r"^no speed observations to fit$"):
        FORMS[name].fit([])


def test_the_chosen_form_is_registered_and_is_what_fit_chosen_fits():
    observations = observe(lambda w, s: 0.5 + 2.0 / w + 0.1 * s, CALIBRATION)

    assert CHOSEN_FORM in FORMS
    assert fit_chosen(observations) == FORMS[CHOSEN_FORM].fit(observations)
    assert FORMS["quadratic"].fit is fit_speed
