"""coach.policy.stopping: a job stops when the target is held, at the epoch limit, or before it overspends.

`decide` checks, in this order: target loss held for `consecutive` epochs, `max_epochs` reached,
money already spent reaches the budget, the predicted next epoch would exceed the budget.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from coach.policy.stopping import BUDGET, MAX_EPOCHS, TARGET, StopInputs, decide, stop_metric

# Nothing is close to stopping: no epochs yet, a generous budget, nothing predicted.
BASE = StopInputs(metrics=[], target_loss=0.1, consecutive=3, max_epochs=10, cumulative_cost=0.0,
                  budget=1.0, predicted_next_cost=None)


def decide_with(**changes) -> str | None:
    return decide(replace(BASE, **changes))


def test_the_reasons_are_the_strings_the_controller_and_results_use():
    assert (TARGET, MAX_EPOCHS, BUDGET) == ("target_loss", "max_epochs", "budget")


def test_a_fresh_job_keeps_training():
    assert decide(BASE) is None


# --------------------------------------------------------------------------- target loss


def test_target_reached_when_the_last_consecutive_epochs_are_at_or_below_it():
    # 0.1 equals the target, which counts as reached
    assert decide_with(metrics=[0.9, 0.5, 0.09, 0.1, 0.05]) == TARGET


def test_no_target_stop_when_one_of_the_last_consecutive_epochs_is_above_it():
    assert decide_with(metrics=[0.09, 0.08, 0.11, 0.07, 0.06]) is None


def test_no_target_stop_before_consecutive_epochs_have_run():
    assert decide_with(metrics=[0.01, 0.01]) is None


def test_consecutive_one_stops_at_the_first_epoch_at_target():
    assert decide_with(metrics=[0.5, 0.1], consecutive=1) == TARGET


def test_earlier_epochs_above_target_do_not_matter():
    assert decide_with(metrics=[5.0, 4.0, 0.1, 0.1, 0.1]) == TARGET


# --------------------------------------------------------------------------- epoch limit


def test_max_epochs_stops_when_that_many_epochs_have_run():
    assert decide_with(metrics=[0.5] * 10) == MAX_EPOCHS


def test_one_epoch_below_max_epochs_keeps_training():
    assert decide_with(metrics=[0.5] * 9) is None


# --------------------------------------------------------------------------- budget


def test_budget_stop_when_the_predicted_next_epoch_would_exceed_the_budget():
    assert decide_with(metrics=[0.5], cumulative_cost=0.75, predicted_next_cost=0.5) == BUDGET


def test_no_budget_stop_when_the_next_epoch_would_spend_exactly_the_budget():
    assert decide_with(metrics=[0.5], cumulative_cost=0.75, predicted_next_cost=0.25) is None


def test_no_budget_stop_without_a_prediction_while_money_is_left():
    assert decide_with(metrics=[0.5], cumulative_cost=0.99, predicted_next_cost=None) is None


@pytest.mark.parametrize("spent", [1.0, 1.25])
def test_budget_stop_when_the_money_spent_reaches_the_budget(spent):
    assert decide_with(metrics=[0.5], cumulative_cost=spent, predicted_next_cost=None) == BUDGET


# --------------------------------------------------------------------------- which reason wins


def test_target_wins_over_max_epochs_and_budget():
    everything = dict(metrics=[0.05] * 10, cumulative_cost=2.0, predicted_next_cost=1.0)

    assert decide_with(**everything) == TARGET


def test_max_epochs_wins_over_budget():
    assert decide_with(metrics=[0.5] * 10, cumulative_cost=2.0, predicted_next_cost=1.0) == MAX_EPOCHS


# --------------------------------------------------------------------------- the metric


def test_stop_metric_prefers_the_validation_loss():
    assert stop_metric(loss=0.5, val_loss=0.3) == 0.3


def test_stop_metric_uses_the_training_loss_without_validation_data():
    assert stop_metric(loss=0.5, val_loss=None) == 0.5


def test_a_validation_loss_of_zero_is_still_the_validation_loss():
    assert stop_metric(loss=0.5, val_loss=0.0) == 0.0
