"""An epoch whose deadline comes first is a partial epoch, not a lost one (issue 13, part 1).

The workers' stop vote (coach_functions/deadline.py) stops every worker after the same step whatever their clocks say;
the reply says how much it trained; the lifecycle records the partial epoch with its checkpoint and a speed
observation scaled to a full epoch; the simulated platform cuts epochs where the runtime would.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from coach.app.virtual_run import run_virtual
from coach.domain.cluster import ClusterSpec, NodeSpec
from coach.domain.contracts import ContractError, WorkerReply
from coach.domain.deadlines import STOP_RESERVE_S, stop_reserve_s, training_stop_s
from coach.domain.jobs import JobSpec
from coach.platforms.virtual import VirtualJobModel
from coach.policy.history import history_from_records
from coach_functions.deadline import StopVote
from tests.unit.test_budget_cap import MODEL


# --------------------------------------------------------------------------- the reply


def test_a_stopped_early_reply_round_trips_and_cannot_claim_more_than_its_shard():
    reply = WorkerReply(rank=0, num_workers=2, loss_sum=12.5, samples=640, correct=400, compute_s=0.4,
                        checkpoint_saved="ckpt/epoch-0001", stopped_early=True, shard_samples=2000)

    assert WorkerReply.from_dict(reply.to_dict()) == reply
    too_many = {**reply.to_dict(), "samples": 2001, "correct": 0}
    with pytest.raises(ContractError, match="samples: must be <= shard_samples \\(2000\\), got 2001"):
        WorkerReply.from_dict(too_many)


def test_the_reserve_grows_with_a_slow_set_up():
    assert stop_reserve_s(0.2) == STOP_RESERVE_S == 0.5  # quiet machine: the floor
    assert stop_reserve_s(0.8) == 1.6  # loaded: twice the set-up
    assert training_stop_s(3.0, setup_s=0.8) == pytest.approx(1.4)


# --------------------------------------------------------------------------- the vote


class FakeKv:
    """A dist_sync kvstore for one key and `workers` workers in one process: a pull is answered with the sum of a
    round's pushes once every worker has pushed in that round."""

    def __init__(self, workers: int):
        self.workers, self.pushed, self.waiting, self.rounds = workers, [], [], 0

    def init(self, key, value):
        pass

    def push(self, key, value):
        self.pushed.append(float(value.asscalar()))

    def pull(self, key, out):
        self.waiting.append(out)
        if len(self.pushed) == self.workers:
            for array in self.waiting:
                array[:] = sum(self.pushed)
            self.pushed, self.waiting, self.rounds = [], [], self.rounds + 1


class Clock:
    def __init__(self, step_s: float):
        self.now_s, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        self.now_s += self.step_s
        return self.now_s


def test_one_late_clock_stops_every_worker_after_the_same_step():
    kv = FakeKv(2)
    # worker 0's clock runs fast: it sees its stop time (1.0 s) after a few steps; worker 1's never would
    votes = [StopVote(kv, stop_at_s=1.0, clock=Clock(0.125)), StopVote(kv, stop_at_s=1.0, clock=Clock(0.001))]
    steps = [0, 0]
    for _ in range(100):
        decisions = [vote.stop() for vote in votes]  # before pushing this step's gradients
        assert decisions[0] == decisions[1]
        if decisions[0]:
            break
        for rank, vote in enumerate(votes):
            steps[rank] += 1
            vote.cast()
    # worker 0's clock says 0.125 s more at every round (before step 1, after steps 1, 4, 8, ...): 1/24 s per step
    # measured between steps 1 and 4; it votes to stop at 0.875 s, after step 20, when 5 more steps (a round and
    # the one in flight) would reach 1.0 s
    assert steps[0] == steps[1] == 20
    assert [vote.stopped for vote in votes] == [True, True]


def test_a_deadline_far_away_lets_the_loop_run_to_its_end():
    kv = FakeKv(2)
    votes = [StopVote(kv, stop_at_s=1e9, clock=Clock(0.1)) for _ in range(2)]
    for _ in range(50):
        assert [vote.stop() for vote in votes] == [False, False]
        for vote in votes:
            vote.cast()
    for vote in votes:
        vote.close()
    assert [vote.stopped for vote in votes] == [False, False] and kv.rounds == 1 + 1 + 50 // 4


# --------------------------------------------------------------------------- the lifecycle, in virtual time


def static_job(budget: float) -> JobSpec:
    return JobSpec(name="j", source=MODEL, model_path=MODEL, batch_size=64, optimizer="sgd", optimizer_params={},
                   learning_rate=0.05, target_loss=0.0, consecutive=3, max_epochs=5, budget=budget, workers=2,
                   servers=1, max_workers=None, max_servers=None, seed=0, epoch_timeout_s=600.0)


def test_a_budget_that_cuts_the_first_epoch_records_a_partial_epoch_then_stops_with_budget():
    cluster = ClusterSpec("c", (NodeSpec("n0", 4, 0.001),))
    model = VirtualJobModel(fixed_s=0.4, compute_s_one_worker=8.0, worker_efficiency=1.0)  # a full epoch: 0.4 + 4 s
    # 4 slots at 0.001: 0.01 pays 2.5 s, so the deadline is 2.5 x 0.9 - 0.5 = 1.75 s; the loop runs from 0.2 s to
    # 1.75 - 0.5 = 1.25 s: 1.05 s of 4 s, whole batches of 64 of the 2,500 samples a worker trains
    records = run_virtual([static_job(0.01)], cluster, policy="static", models={"j": model},
                          placement_timeout_s=1e9).records["j"]

    first = records[0]
    assert (first["phase"], first["epoch"], first["stopped_early"]) == ("training", 1, True)
    assert first["samples"] == 2 * 640 and first["epoch_fraction"] == first["data_fraction"] == 640 / 2500
    assert first["checkpoint"] and first["cumulative_cost"] <= 0.01
    assert records[-1]["stop_reason"] == "budget"
    assert all(r["cumulative_cost"] <= 0.01 for r in records)
    # the speed observation is that of a full epoch: the fixed part once, the loop scaled by 1 / 0.256
    speed = history_from_records(records[:1]).observations[0]
    assert 1 / speed.epochs_per_s == pytest.approx(model.epoch_s(2, 1, 1.0))


def test_an_epoch_timeout_shorter_than_an_epoch_makes_every_epoch_partial_and_the_job_still_progresses():
    cluster = ClusterSpec("c", (NodeSpec("n0", 4, 0.001),))
    model = VirtualJobModel(fixed_s=0.4, compute_s_one_worker=8.0, worker_efficiency=1.0)  # a full epoch: 4.4 s
    spec = replace(static_job(10.0), epoch_timeout_s=2.0)  # the loop runs from 0.2 s to 1.5 s of every epoch
    records = run_virtual([spec], cluster, policy="static", models={"j": model}, placement_timeout_s=1e9).records["j"]

    assert [r["phase"] for r in records] == ["training"] * 5
    assert all(r["stopped_early"] and r["epoch_fraction"] == 768 / 2500 for r in records)  # 12 batches of 64
    assert [r["checkpoint"] for r in records] == [f"mem://j/epoch-{e:04d}" for e in range(1, 6)]
    losses = [r["loss"] for r in records]
    assert losses == sorted(losses, reverse=True) and records[-1]["stop_reason"] == "max_epochs"
    speeds = history_from_records(records).observations
    assert [1 / s.epochs_per_s for s in speeds] == pytest.approx([model.epoch_s(2, 1, 1.0)] * 5)


def test_an_epoch_that_trained_nothing_before_its_money_ran_out_is_charged_and_ends_the_job_with_budget():
    cluster = ClusterSpec("c", (NodeSpec("n0", 4, 0.001),))
    # deadline 1.75 s again; the set-up takes 0.55 s and the reserve twice that, so the loop may run 0.1 s: less
    # than one batch of 64 (0.1 s per 62.5 samples)
    model = VirtualJobModel(fixed_s=1.1, compute_s_one_worker=8.0, worker_efficiency=1.0)
    records = run_virtual([static_job(0.01)], cluster, policy="static", models={"j": model},
                          placement_timeout_s=1e9).records["j"]

    assert [r["phase"] for r in records] == ["retry", "stopped"]
    assert records[0]["error"] == "j-worker: timeout: the deadline of this attempt came before its first training step"
    assert records[0]["will_retry"] is False and records[0]["cost"] == pytest.approx(4 * 1.1 * 0.001)
    assert records[-1]["stop_reason"] == "budget" and records[-1]["cumulative_cost"] <= 0.01
