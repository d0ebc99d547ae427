"""coach.estimates.convergence: loss(k) = 1 / (a k + b) + c after epoch k, and the epochs still to run.

Known curves are recovered exactly and under seeded noise; epochs to a target follow the closed form
k = (1 / (target - c) - b) / a; with too few epochs or an unreachable target the prediction falls back to the
pessimistic max_epochs - done, and it is always capped there.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from coach.estimates.convergence import (
    FALLBACK,
    FIT,
    MIN_EPOCHS_TO_FIT,
    ConvergenceFit,
    RemainingEpochs,
    fit_convergence,
    remaining_epochs,
)


def curve(a: float, b: float, c: float, epochs: int) -> list[float]:
    """Losses after epochs 1..epochs."""
    return [1 / (a * k + b) + c for k in range(1, epochs + 1)]


# (a, b, c): the brief's example, a loss on a larger scale, a curve with no floor (c = 0)
KNOWN_CURVES = [(0.5, 0.4, 0.05), (0.02, 0.3, 1.5), (2.0, 1.0, 0.0)]
# The brief's example, given directly so that the closed forms below are exact.
EXAMPLE = ConvergenceFit(a=0.5, b=0.4, c=0.05, epochs=8, rms_error=0.0)


@pytest.mark.parametrize(("a", "b", "c"), KNOWN_CURVES)
def test_exact_losses_recover_the_curve(a, b, c):
    fit = fit_convergence(curve(a, b, c, 8))

    assert fit is not None
    assert (fit.a, fit.b, fit.c) == pytest.approx((a, b, c), rel=1e-6, abs=1e-9)
    for k in range(1, 31):
        assert fit.loss_at(k) == pytest.approx(1 / (a * k + b) + c, rel=1e-9, abs=1e-10)
    assert fit.epochs == 8
    assert fit.rms_error == pytest.approx(0.0, abs=1e-10)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize(("a", "b", "c"), KNOWN_CURVES)
def test_one_percent_noise_keeps_predictions_within_three_percent(a, b, c, seed):
    rng = np.random.RandomState(seed)
    noisy = [loss * (1 + 0.01 * rng.randn()) for loss in curve(a, b, c, 12)]

    fit = fit_convergence(noisy)

    assert fit is not None
    for k in range(1, 13):
        assert fit.loss_at(k) == pytest.approx(1 / (a * k + b) + c, rel=0.03)
    assert min(fit.a, fit.b, fit.c) >= 0


def test_losses_that_are_not_finite_and_positive_are_left_out_and_keep_their_epoch_numbers():
    losses = curve(0.5, 0.4, 0.05, 8)
    losses[2], losses[5] = math.nan, math.inf  # epochs 3 and 6

    fit = fit_convergence(losses)

    assert fit is not None and fit.epochs == 6
    assert (fit.a, fit.b, fit.c) == pytest.approx((0.5, 0.4, 0.05), rel=1e-6)


def test_fewer_than_three_usable_losses_give_no_fit():
    assert MIN_EPOCHS_TO_FIT == 3
    assert fit_convergence([]) is None
    assert fit_convergence([2.3, 1.1]) is None
    assert fit_convergence([2.3, math.nan, 1.1, 0.0, -1.0]) is None


def test_the_same_losses_give_the_identical_fit():
    rng = np.random.RandomState(5)
    noisy = [loss * (1 + 0.02 * rng.randn()) for loss in curve(0.5, 0.4, 0.05, 10)]

    assert fit_convergence(noisy) == fit_convergence(list(noisy))


def test_epochs_to_target_is_the_closed_form_less_the_epochs_done():
    # k = (1 / (0.2 - 0.05) - 0.4) / 0.5 = 12.5333...
    k = (1 / (0.2 - 0.05) - 0.4) / 0.5

    assert EXAMPLE.epochs_to_target(0.2, done_epochs=8) == pytest.approx(k - 8, rel=1e-12)
    assert EXAMPLE.epochs_to_target(0.2, done_epochs=0) == pytest.approx(k, rel=1e-12)
    assert EXAMPLE.loss_at(k) == pytest.approx(0.2, rel=1e-12)


def test_a_target_the_curve_has_already_reached_needs_no_more_epochs():
    assert EXAMPLE.epochs_to_target(0.2, done_epochs=13) == 0.0
    assert EXAMPLE.epochs_to_target(1.0, done_epochs=8) == 0.0


def test_a_target_at_or_below_the_floor_is_unreachable():
    assert EXAMPLE.epochs_to_target(0.05, done_epochs=8) == math.inf
    assert EXAMPLE.epochs_to_target(0.01, done_epochs=8) == math.inf


def test_a_flat_curve_above_the_target_never_reaches_it():
    flat = ConvergenceFit(a=0.0, b=2.0, c=0.1, epochs=5, rms_error=0.0)  # loss 0.6 forever

    assert flat.epochs_to_target(0.5, done_epochs=5) == math.inf
    assert flat.epochs_to_target(0.6, done_epochs=5) == 0.0


def test_to_dict_is_json():
    assert json.loads(json.dumps(EXAMPLE.to_dict())) == {"a": 0.5, "b": 0.4, "c": 0.05, "epochs": 8,
                                                         "rms_error": 0.0}


def test_remaining_epochs_counts_the_whole_epoch_at_the_target_and_the_rest_of_the_streak():
    # Target reached at k = 12.53, i.e. in epoch 13: 5 more after epoch 8, then 2 more to hold it 3 in a row.
    remaining = remaining_epochs(curve(0.5, 0.4, 0.05, 8), target_loss=0.2, consecutive=3, max_epochs=50)

    assert remaining.source == FIT
    assert remaining.epochs == 5 + 3 - 1
    assert remaining.fit is not None and remaining.fit.a == pytest.approx(0.5, rel=1e-6)


def test_remaining_epochs_are_capped_at_the_epoch_limit():
    remaining = remaining_epochs(curve(0.5, 0.4, 0.05, 8), target_loss=0.2, consecutive=3, max_epochs=10)

    assert (remaining.epochs, remaining.source) == (2.0, FIT)


def test_remaining_epochs_are_at_least_one_while_the_job_runs():
    # Already at the target and one epoch in a row is enough: the next epoch still runs.
    remaining = remaining_epochs(curve(0.5, 0.4, 0.05, 8), target_loss=1.0, consecutive=1, max_epochs=50)

    assert (remaining.epochs, remaining.source) == (1.0, FIT)


def test_an_unreachable_target_falls_back_to_the_epoch_limit():
    losses = curve(0.5, 0.4, 0.05, 8)

    remaining = remaining_epochs(losses, target_loss=0.04, consecutive=3, max_epochs=50)

    assert remaining == RemainingEpochs(epochs=42.0, source=FALLBACK, fit=fit_convergence(losses))


@pytest.mark.parametrize("losses", [[], [2.3], [2.3, 1.1], [2.3, math.nan, 1.1]])
def test_too_few_epochs_fall_back_to_the_epoch_limit(losses):
    remaining = remaining_epochs(losses, target_loss=0.2, consecutive=3, max_epochs=20)

    assert remaining == RemainingEpochs(epochs=float(20 - len(losses)), source=FALLBACK, fit=None)


def test_no_epochs_remain_at_the_epoch_limit():
    remaining = remaining_epochs(curve(0.5, 0.4, 0.05, 8), target_loss=0.2, consecutive=3, max_epochs=8)

    assert (remaining.epochs, remaining.source) == (0.0, FIT)


@pytest.mark.parametrize(("consecutive", "max_epochs", "message"), [
    (0, 10, r"^consecutive must be >= 1, got 0$"),
    (3, 0, r"^max_epochs must be >= 1, got 0$"),
])
def test_bad_limits_are_refused(consecutive, max_epochs, message):
    with pytest.raises(ValueError, match=message):
        remaining_epochs([1.0, 0.5, 0.3], target_loss=0.1, consecutive=consecutive, max_epochs=max_epochs)
