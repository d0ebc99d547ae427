"""coach.estimates.speed: the speed surface f(w, s) = -b1 (w - b2)^2 - b3 (s - b4)^2 + b5, in full epochs per second.

Known surfaces are sampled on grids and recovered, exactly and under seeded noise. Per axis, the number of
distinct levels decides what the data identify: 1 level is flat, 2 levels (the calibration design) fix the
vertex by a documented rule, 3 or more fit it freely.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coach.estimates.speed import MIN_EPOCHS_PER_S, SpeedFit, SpeedObservation, fit_speed


def surface(coefficients: tuple[float, float, float, float, float], workers: float, servers: float) -> float:
    b1, b2, b3, b4, b5 = coefficients
    return -b1 * (workers - b2) ** 2 - b3 * (servers - b4) ** 2 + b5


def observe(coefficients, workers_levels, servers_levels) -> list[SpeedObservation]:
    return [SpeedObservation(w, s, surface(coefficients, w, s)) for w in workers_levels for s in servers_levels]


def coefficients_of(fit: SpeedFit) -> tuple[float, float, float, float, float]:
    return (fit.b1, fit.b2, fit.b3, fit.b4, fit.b5)


# (coefficients, worker levels, server levels): every axis has at least 3 levels.
KNOWN_SURFACES = [
    # the vertex inside the grid on both axes
    ((0.01, 6.0, 0.03, 3.0, 1.0), (1, 2, 4, 8), (1, 2, 3, 4)),
    # slow job (0.02 epochs/s at best): the fit does not depend on the scale of the speeds
    ((0.0004, 3.5, 0.001, 2.0, 0.02), (1, 2, 3, 4, 5, 6), (1, 2, 3)),
    # still speeding up at the highest worker count; the server vertex between observed levels
    ((0.002, 10.0, 0.02, 2.5, 0.5), (1, 2, 4), (1, 2, 3, 4)),
]


@pytest.mark.parametrize(("truth", "workers_levels", "servers_levels"), KNOWN_SURFACES)
def test_exact_observations_recover_the_surface(truth, workers_levels, servers_levels):
    fit = fit_speed(observe(truth, workers_levels, servers_levels))

    assert coefficients_of(fit) == pytest.approx(truth, rel=1e-3)
    for w in range(1, 13):
        for s in range(1, 7):
            assert fit.epochs_per_s(w, s) == pytest.approx(max(surface(truth, w, s), MIN_EPOCHS_PER_S), rel=1e-6)
    assert fit.rms_error == pytest.approx(0.0, abs=1e-9 * truth[4])
    assert fit.observations == len(workers_levels) * len(servers_levels)
    assert (fit.fixed, fit.notes) == ((), ())


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize(("truth", "workers_levels", "servers_levels"), KNOWN_SURFACES)
def test_two_percent_noise_keeps_predictions_within_five_percent(truth, workers_levels, servers_levels, seed):
    rng = np.random.RandomState(seed)
    noisy = [SpeedObservation(o.workers, o.servers, o.epochs_per_s * (1 + 0.02 * rng.randn()))
             for o in observe(truth, workers_levels, servers_levels)]

    fit = fit_speed(noisy)

    for w in workers_levels:
        for s in servers_levels:
            assert fit.epochs_per_s(w, s) == pytest.approx(surface(truth, w, s), rel=0.05)
    assert fit.b1 >= 0 and fit.b3 >= 0


def test_convex_data_give_zero_curvature_never_a_negative_one():
    # Speed grows faster than linearly in workers (convex) and is flat in servers: the concave model can only
    # flatten the convex axis, so b1 sits at its bound 0 and says so.
    observations = [SpeedObservation(w, s, 0.1 + 0.01 * (w - 3) ** 2) for w in (1, 2, 3, 4, 5) for s in (1, 2, 3)]

    fit = fit_speed(observations)

    assert fit.b1 == 0.0
    assert fit.b3 >= 0.0
    assert fit.fixed == ()
    assert any(note.startswith("workers: b1 = 0 at its bound") for note in fit.notes)
    # the best flat fit is the mean speed, 0.1 + 0.01 * mean((w - 3)^2) = 0.12
    assert fit.epochs_per_s(3, 2) == pytest.approx(0.12, rel=1e-6)


def test_speed_still_rising_at_the_highest_level_puts_the_vertex_at_its_upper_bound():
    # Linear in workers over 1..4: the closest concave quadratic has its vertex as far out as allowed, 4 + 8.
    observations = [SpeedObservation(w, s, 0.1 * w) for w in (1, 2, 3, 4) for s in (1, 2, 3)]

    fit = fit_speed(observations)

    assert fit.b2 == pytest.approx(12.0, rel=1e-12)
    assert fit.b1 > 0
    assert "workers: b2 at its upper bound 12 (speed still rises at the highest level)" in fit.notes
    assert fit.epochs_per_s(5, 1) > fit.epochs_per_s(4, 1)


# The calibration design: workers and servers varied independently over {1, 2}.
CALIBRATION = {(1, 1): 0.10, (1, 2): 0.12, (2, 1): 0.18, (2, 2): 0.19}


def calibration_observations(speeds: dict[tuple[int, int], float]) -> list[SpeedObservation]:
    return [SpeedObservation(w, s, speed) for (w, s), speed in speeds.items()]


def test_calibration_on_two_levels_puts_each_vertex_one_step_beyond_when_more_helps():
    # Additive least squares over the 2x2 design: the worker effect is the mean of (0.18 - 0.10) and
    # (0.19 - 0.12) = +0.075, the server effect the mean of (0.12 - 0.10) and (0.19 - 0.18) = +0.015. Both help,
    # so b2 = b4 = 2 + 1 = 3; then f(2, .) - f(1, .) = b1 ((1 - 3)^2 - (2 - 3)^2) = 3 b1 = 0.075, likewise
    # 3 b3 = 0.015, and f(1, 1) = -4 b1 - 4 b3 + b5 = the least-squares 0.1025.
    fit = fit_speed(calibration_observations(CALIBRATION))

    assert (fit.b2, fit.b4) == (3.0, 3.0)
    assert fit.b1 == pytest.approx(0.025, rel=1e-9)
    assert fit.b3 == pytest.approx(0.005, rel=1e-9)
    assert fit.b5 == pytest.approx(0.2225, rel=1e-9)
    # 4 points, 3 free parameters: the least-squares predictions, each 0.0025 off the observation
    predictions = {(w, s): 0.1475 + 0.0375 * (2 * w - 3) + 0.0075 * (2 * s - 3) for w, s in CALIBRATION}
    assert predictions == pytest.approx({(1, 1): 0.1025, (1, 2): 0.1175, (2, 1): 0.1775, (2, 2): 0.1925})
    for (w, s), expected in predictions.items():
        assert fit.epochs_per_s(w, s) == pytest.approx(expected, rel=1e-9)
    assert fit.rms_error == pytest.approx(0.0025, rel=1e-9)
    assert fit.fixed == ("b2", "b4")
    assert fit.notes == (
        "workers: 2 levels (1, 2), fitted difference +0.075 epochs/s: more helps, b2 = highest + 1 = 3; "
        "b1 fitted; a third level would identify b2",
        "servers: 2 levels (1, 2), fitted difference +0.015 epochs/s: more helps, b4 = highest + 1 = 3; "
        "b3 fitted; a third level would identify b4",
    )
    # beyond the calibration the surface is optimistic by one step, then diminishing
    assert fit.epochs_per_s(3, 1) > fit.epochs_per_s(2, 1) > fit.epochs_per_s(5, 1)


def test_calibration_puts_the_vertex_at_the_lower_level_when_more_does_not_help():
    # Exactly additive: workers +0.08, servers -0.01. Servers: b4 = 1 and b3 (2 - 1)^2 = 0.01.
    # Workers: b2 = 3 and 3 b1 = 0.08. f(1, 1) = -4 b1 + b5 = 0.10.
    speeds = {(1, 1): 0.10, (1, 2): 0.09, (2, 1): 0.18, (2, 2): 0.17}

    fit = fit_speed(calibration_observations(speeds))

    assert (fit.b2, fit.b4) == (3.0, 1.0)
    assert coefficients_of(fit) == pytest.approx((0.08 / 3, 3.0, 0.01, 1.0, 0.10 + 0.32 / 3), rel=1e-9)
    for (w, s), speed in speeds.items():
        assert fit.epochs_per_s(w, s) == pytest.approx(speed, rel=1e-9)
    assert fit.fixed == ("b2", "b4")
    assert "servers: 2 levels (1, 2), fitted difference -0.01 epochs/s: more does not help, b4 = lowest = 1" \
        in fit.notes[1]


def test_equal_speeds_on_two_levels_count_as_not_helping():
    speeds = {(1, 1): 0.1, (1, 2): 0.1, (2, 1): 0.1, (2, 2): 0.1}

    fit = fit_speed(calibration_observations(speeds))

    assert (fit.b2, fit.b4) == (1.0, 1.0)
    assert (fit.b1, fit.b3, fit.b5) == pytest.approx((0.0, 0.0, 0.1), rel=1e-12, abs=1e-15)


def test_workers_and_servers_varied_together_split_the_difference_between_the_axes():
    # Optimus' design (w = s only) cannot tell workers from servers: the additive fit gives each half of the
    # +0.1 epochs/s, so 3 b1 = 3 b3 = 0.05 with both vertices at 2 + 1 = 3.
    fit = fit_speed([SpeedObservation(1, 1, 0.1), SpeedObservation(2, 2, 0.2)])

    assert (fit.b2, fit.b4) == (3.0, 3.0)
    assert (fit.b1, fit.b3) == pytest.approx((0.05 / 3, 0.05 / 3), rel=1e-9)
    assert (fit.epochs_per_s(1, 1), fit.epochs_per_s(2, 2)) == pytest.approx((0.1, 0.2), rel=1e-9)
    assert fit.notes[0].startswith("workers: 2 levels (1, 2), fitted difference +0.05 epochs/s: more helps")


def test_a_third_level_from_real_epochs_makes_the_axis_identifiable():
    truth = (0.01, 3.0, 0.02, 2.0, 0.3)
    calibration = observe(truth, (1, 2), (1, 2))
    assert fit_speed(calibration).fixed == ("b2", "b4")

    fit = fit_speed(calibration + observe(truth, (4,), (1, 2)))  # epochs at a new worker count

    assert fit.fixed == ("b4",)
    assert (fit.b1, fit.b2) == pytest.approx((0.01, 3.0), rel=1e-6)


def test_one_level_on_an_axis_makes_it_flat():
    truth = (0.01, 3.0, 0.0, 0.0, 0.3)
    observations = observe(truth, (1, 2, 4), (2,))

    fit = fit_speed(observations)

    assert (fit.b3, fit.b4) == (0.0, 2.0)
    assert (fit.b1, fit.b2, fit.b5) == pytest.approx((0.01, 3.0, 0.3), rel=1e-6)
    assert fit.fixed == ("b3", "b4")
    assert fit.notes == ("servers: 1 level (2): flat, b3 = 0 and b4 = 2",)
    assert fit.epochs_per_s(3, 7) == pytest.approx(0.3, rel=1e-6)  # servers change nothing


def test_a_single_observation_predicts_its_own_speed_everywhere():
    fit = fit_speed([SpeedObservation(workers=2, servers=1, epochs_per_s=0.25)])

    assert coefficients_of(fit) == (0.0, 2.0, 0.0, 1.0, 0.25)
    assert fit.fixed == ("b1", "b2", "b3", "b4")
    assert (fit.epochs_per_s(5, 3), fit.epoch_time_s(5, 3), fit.rms_error) == (0.25, 4.0, 0.0)


def test_weight_two_counts_like_the_observation_twice():
    observations = [SpeedObservation(w, s, 0.1 + 0.01 * w + 0.002 * w * s) for w in (1, 2, 3) for s in (1, 2, 3)]
    doubled = observations + [observations[4]]
    weighted = observations[:4] + [SpeedObservation(2, 2, observations[4].epochs_per_s, weight=2.0)] + observations[5:]

    by_weight, by_copy = fit_speed(weighted), fit_speed(doubled)

    assert coefficients_of(by_weight) == pytest.approx(coefficients_of(by_copy), rel=1e-6, abs=1e-9)


def test_predictions_far_from_the_data_are_floored_positive():
    fit = fit_speed(observe((0.01, 6.0, 0.03, 3.0, 1.0), (1, 2, 4, 8), (1, 2, 3, 4)))

    assert surface(coefficients_of(fit), 100, 50) < 0
    assert fit.epochs_per_s(100, 50) == MIN_EPOCHS_PER_S
    assert fit.epoch_time_s(100, 50) == 1 / MIN_EPOCHS_PER_S


def test_to_dict_is_json_and_complete():
    fit = fit_speed(calibration_observations(CALIBRATION))

    data = json.loads(json.dumps(fit.to_dict()))

    assert data == {"form": "quadratic", "b1": fit.b1, "b2": 3.0, "b3": fit.b3, "b4": 3.0, "b5": fit.b5, "observations": 4,
                    "rms_error": fit.rms_error, "fixed": ["b2", "b4"], "notes": list(fit.notes)}


@pytest.mark.parametrize(("bad", "message"), [
    (SpeedObservation(1, 1, -0.1), r"^observation 1: epochs_per_s must be finite and > 0, got -0\.1$"),
    (SpeedObservation(1, 1, 0.0), r"^observation 1: epochs_per_s must be finite and > 0, got 0\.0$"),
    (SpeedObservation(1, 1, math.nan), r"^observation 1: epochs_per_s must be finite and > 0, got nan$"),
    (SpeedObservation(1, 1, math.inf), r"^observation 1: epochs_per_s must be finite and > 0, got inf$"),
    (SpeedObservation(1, 1, 0.1, weight=0.0), r"^observation 1: weight must be finite and > 0, got 0\.0$"),
    (SpeedObservation(0, 1, 0.1), r"^observation 1: workers and servers must be >= 1, got 0, 1$"),
])
def test_bad_observations_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        fit_speed([SpeedObservation(1, 1, 0.1), bad])


def test_no_observations_are_refused():
    with pytest.raises(ValueError, match=r"^no speed observations to fit$"):
        fit_speed([])


def test_the_same_observations_give_the_identical_fit():
    rng = np.random.RandomState(7)
    observations = [SpeedObservation(o.workers, o.servers, o.epochs_per_s * (1 + 0.05 * rng.randn()))
                    for o in observe((0.01, 6.0, 0.03, 3.0, 1.0), (1, 2, 4, 8), (1, 2, 3, 4))]

    assert fit_speed(observations) == fit_speed(list(observations))


observation_lists = st.lists(
    st.builds(SpeedObservation,
              workers=st.integers(1, 12),
              servers=st.integers(1, 6),
              epochs_per_s=st.floats(1e-4, 100.0, allow_nan=False, allow_infinity=False),
              weight=st.sampled_from([0.5, 1.0, 3.0])),
    min_size=1, max_size=12,
)


@settings(derandomize=True, max_examples=50, deadline=None)
@given(observation_lists)
def test_any_positive_observations_give_positive_finite_predictions_and_concave_curvatures(observations):
    fit = fit_speed(observations)

    assert fit.b1 >= 0 and fit.b3 >= 0
    assert math.isfinite(fit.rms_error)
    for w in range(1, 17):
        for s in range(1, 9):
            speed = fit.epochs_per_s(w, s)
            assert math.isfinite(speed) and speed > 0
            assert math.isfinite(fit.epoch_time_s(w, s))
