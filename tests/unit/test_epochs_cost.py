"""coach.epochs.aggregate turns the workers' replies into one epoch's numbers; coach.estimates.cost prices it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coach.domain.contracts import WorkerReply
from coach.estimates.epochs import BadReplies, EpochMetrics, aggregate
from coach.estimates.cost import cost_like_last, epoch_cost


def reply(rank: int, samples: int, loss_sum: float, correct: int, compute_s: float, **extra) -> WorkerReply:
    """One worker's typed reply, as coach_functions.training.run_worker_epoch sends it."""
    return WorkerReply(rank=rank, num_workers=2, loss_sum=loss_sum, samples=samples, correct=correct,
                       compute_s=compute_s, checkpoint_saved=None, **extra)


# rank 0: 100 samples, mean loss 0.2; rank 1: 300 samples, mean loss 0.6.
# Over all 400 samples the loss is (20 + 180) / 400 = 0.5; the mean of the two means would be 0.4.
RANK0 = reply(0, samples=100, loss_sum=20.0, correct=90, compute_s=1.5, val_loss=0.35, val_accuracy=0.9)
RANK1 = reply(1, samples=300, loss_sum=180.0, correct=150, compute_s=2.25)


def test_aggregate_weights_each_worker_by_its_samples():
    metrics = aggregate([RANK1, RANK0], num_workers=2)

    assert metrics == EpochMetrics(loss=0.5, train_accuracy=0.6, samples=400, val_loss=0.35, accuracy=0.9,
                                   compute_s=2.25)
    assert metrics.loss != (RANK0.loss_sum / RANK0.samples + RANK1.loss_sum / RANK1.samples) / 2  # not the mean of the workers' means


def test_aggregate_takes_validation_numbers_from_rank_0_whatever_the_reply_order():
    rank1_with_other_val = replace(RANK1, val_loss=9.9, val_accuracy=0.1)

    metrics = aggregate([rank1_with_other_val, RANK0], num_workers=2)

    assert (metrics.val_loss, metrics.accuracy) == (0.35, 0.9)


def test_aggregate_without_validation_data_has_no_validation_numbers():
    metrics = aggregate([reply(0, 10, 5.0, 7, 0.5)], num_workers=1)

    assert metrics == EpochMetrics(loss=0.5, train_accuracy=0.7, samples=10, val_loss=None, accuracy=None,
                                   compute_s=0.5)


def test_aggregate_compute_time_is_the_slowest_worker():
    replies = [reply(0, 10, 1.0, 1, 3.0), reply(1, 10, 1.0, 1, 7.5), reply(2, 10, 1.0, 1, 0.25)]

    assert aggregate(replies, num_workers=3).compute_s == 7.5


def test_a_missing_worker_reply_is_bad():
    with pytest.raises(BadReplies, match=r"^1 worker replies for 2 workers$"):
        aggregate([RANK0], num_workers=2)


def test_two_replies_with_the_same_rank_are_bad():
    with pytest.raises(BadReplies, match=r"^worker ranks \[0, 0\], expected 0\.\.1$"):
        aggregate([RANK0, replace(RANK1, rank=0)], num_workers=2)


def test_a_rank_outside_the_worker_count_is_bad():
    with pytest.raises(BadReplies, match=r"^worker ranks \[0, 2\], expected 0\.\.1$"):
        aggregate([RANK0, replace(RANK1, rank=2)], num_workers=2)


def test_an_epoch_without_samples_is_bad():
    with pytest.raises(BadReplies, match=r"^no samples trained$"):
        aggregate([reply(0, 0, 0.0, 0, 1.0), reply(1, 0, 0.0, 0, 1.0)], num_workers=2)


def test_bad_replies_is_a_value_error():
    assert issubclass(BadReplies, ValueError)


# --------------------------------------------------------------------------- cost


def test_epoch_cost_charges_each_function_its_duration_times_its_nodes_price():
    durations = {"job-scheduler-0": 10.0, "job-worker-0": 20.0, "job-worker-1": 30.0}
    nodes = {"job-scheduler-0": "cheap", "job-worker-0": "cheap", "job-worker-1": "dear"}
    prices = {"cheap": 0.5, "dear": 2.0}

    # 10 * 0.5 + 20 * 0.5 + 30 * 2.0
    assert epoch_cost(durations, nodes, prices) == 75.0


def test_a_function_without_a_duration_costs_nothing():
    nodes = {"job-worker-0": "cheap", "job-worker-1": "dear"}

    assert epoch_cost({"job-worker-0": 4.0}, nodes, {"cheap": 0.25, "dear": 2.0}) == 1.0


def test_an_epoch_without_functions_costs_nothing():
    assert epoch_cost({}, {}, {"cheap": 0.5}) == 0


def test_there_is_no_prediction_before_the_first_epoch():
    assert cost_like_last(None, None, (2, 1)) is None


def test_the_next_epoch_is_predicted_to_cost_what_the_last_one_did():
    assert cost_like_last(2.25, (2, 1), (2, 1)) == 2.25


def test_a_prediction_at_other_counts_scales_with_the_slots():
    assert cost_like_last(2.0, (1, 1), (2, 2)) == 2.0 * 5 / 3
