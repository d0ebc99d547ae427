"""coach.lifecycle.job: one job's lifecycle driven by scripted events, exact commands and records out.

The tests play the driver: they answer WatchPlacement with Bindings, Deploy with Deployed, InvokeEpoch with
EpochDone (from WorkerReply objects) or EpochFailed, WaitUntil with TimerFired and AskPolicy with Decided, at
times they choose. Prices and durations are binary fractions, so every cost compares exactly.
"""

from __future__ import annotations

import math

from dataclasses import replace
from pathlib import Path
from typing import Mapping

import pytest

from coach.estimates.cost import MIN_EPOCH_S
from coach.policy.planning import CALIBRATION_MIN_STEPS, calibration_fraction
from coach.domain.cluster import DEFAULT_CLUSTER, ClusterSpec, NodeSpec
from coach.domain.contracts import Hyper, WorkerReply
from coach.domain.identity import FunctionId, Role, functions_for
from coach.domain.invocation import Failure
from coach.domain.jobs import JobSpec
from coach.domain.records import EpochRecord, iso
from coach.lifecycle.commands import (AskPolicy, Deploy, Finish, InvokeEpoch, PruneCheckpoints, Release, Remove,
                                      Submit, WaitUntil, WatchPlacement, WriteRecord)
from coach.lifecycle.events import (Bindings, Decided, Deployed, EpochDone, EpochFailed, Resume, Start,
                                    StopRequested, TimerFired)
from coach.lifecycle.job import (BUDGET_MARGIN, REPLY_RESERVE_S, MAX_FOREIGN_RETRIES, MAX_REQUEUES, MAX_RETRY_BACKOFF_S, POLICY_WAIT_S, Awaiting, JobLifecycle,
                                 USER_STOP, requeue_backoff_s, retry_backoff_s)
from coach.policy.history import history_from_records
from coach.policy.run_policy import Counts, Wait

RUN = "run-7"
T0 = 1_700_000_000.0
MODEL = "/models/lenet.py"
HYPER = Hyper(32, "sgd", 0.05, {"momentum": 0.9}, 7)
# node-a holds the scheduler and servers at 0.5 per slot-second, node-b the workers at 0.25
BUDGET = 100_000.0  # so much that no epoch's deadline comes from money (those tests set their own budget)
CLUSTER = ClusterSpec("two-nodes", (NodeSpec("node-a", 4, 0.5), NodeSpec("node-b", 4, 0.25)))
NODE = {Role.SCHEDULER: "node-a", Role.SERVER: "node-a", Role.WORKER: "node-b"}
CALIBRATION = ((1, 1), (1, 2), (2, 1), (2, 2))
WHY = "0/2 nodes are available: 2 Insufficient slots"

F21 = functions_for("lenet", 2, 1)  # scheduler, server 0, worker 0, worker 1
F22 = functions_for("lenet", 2, 2)
SCHED, S0, S1, W0, W1 = F22
# 10 s of every slot: scheduler 5, server 5, worker 2.5
COST_21, COST_11, COST_12, COST_22 = 15.0, 12.5, 17.5, 20.0


def job_spec(**changes) -> JobSpec:
    spec = JobSpec(name="lenet", source=Path("/jobs/lenet.yaml"), model_path=Path(MODEL), batch_size=32,
                   optimizer="sgd", optimizer_params={"momentum": 0.9}, learning_rate=0.05, target_loss=0.5,
                   consecutive=3, max_epochs=10, budget=BUDGET, workers=2, servers=1, max_workers=None,
                   max_servers=None, seed=7, epoch_timeout_s=600.0, calibration_fraction=0.25, max_retries=3)
    return replace(spec, **changes)


def dynamic_spec(**changes) -> JobSpec:
    return job_spec(workers=None, servers=None, **changes)


def placed(ids) -> tuple[tuple[FunctionId, str], ...]:
    return tuple((fid, NODE[fid.role]) for fid in ids)


def names(ids) -> dict[str, str]:
    return {fid.name: NODE[fid.role] for fid in ids}


def ckpt(tag: str) -> str:
    return f"/ckpt/lenet/{tag}"


def invoke(ids, *, epoch: int, step: int, tag: str, load: str | None, attempt: int = 1,
           fraction: float = 1.0, deadline: float = 600.0, following=None) -> InvokeEpoch:
    """The call of a step on `ids`, expecting the next step on `following` (default: the same functions)."""
    counts = {role: sum(1 for fid in ids if fid.role is role) for role in Role}
    return InvokeEpoch(functions=placed(ids), workers=counts[Role.WORKER], servers=counts[Role.SERVER],
                       epoch=epoch, step=step, attempt=attempt, data_fraction=fraction, save_tag=tag,
                       checkpoint_load=load, model_path=MODEL, hyper=HYPER, deadline_s=deadline,
                       timeout_s=deadline + 15.0, following=tuple(ids if following is None else following))


def epoch_done(call: InvokeEpoch, now: float, loss: float, *, wall: float = 10.0, hold: float = 10.0,
               checkpoint: str | None = "saved", samples: int = 256) -> EpochDone:
    """Every worker trains `samples` at `loss`; rank 0 saves `/ckpt/lenet/<save_tag>`; every slot held `hold` s."""
    workers = [fid for fid, _ in call.functions if fid.role is Role.WORKER]
    saved = ckpt(call.save_tag) if checkpoint == "saved" else checkpoint
    replies = {fid: WorkerReply(rank=i, num_workers=len(workers), loss_sum=loss * samples, samples=samples,
                                correct=samples // 2, shard_samples=samples,
                                compute_s=8.0 if i == 0 else 7.5, checkpoint_saved=saved if i == 0 else None)
               for i, fid in enumerate(workers)}
    return EpochDone(now_s=now, started_s=now - wall, wall_s=wall, replies=replies,
                     durations_s={fid: hold for fid, _ in call.functions}, checkpoint=saved)


def trained(ids, *, epoch: int, loss: float, cost: float, cumulative: float, end: float, tag: str,
            phase: str = "training", stop: str | None = None, attempt: int = 1, budget: float = BUDGET,
            extra: Mapping = {}, samples: int = 256) -> EpochRecord:
    """The record of a finished step run by `ids` with the replies `epoch_done` builds."""
    workers = sum(1 for fid in ids if fid.role is Role.WORKER)
    servers = sum(1 for fid in ids if fid.role is Role.SERVER)
    return EpochRecord(run_id=RUN, job="lenet", phase=phase, epoch=epoch, workers=workers, servers=servers,
                       placement=names(ids), loss=loss, val_loss=None, accuracy=None,
                       train_accuracy=(samples // 2) / samples,
                       samples=samples * workers, epoch_time_s=10.0, compute_s=8.0, start=iso(end - 10.0),
                       end=iso(end), cost=cost, cumulative_cost=cumulative, budget=budget, stop_reason=stop,
                       attempt=attempt, checkpoint=ckpt(tag),
                       extra={**extra, "batch_size": 32, "global_batch": 32 * workers, "learning_rate": 0.05,
                              "batch_scaling": "fixed"})


def line(phase: str, *, epoch: int, at: float, cost: float, cumulative: float, workers: int = 2, servers: int = 1,
         placement: Mapping = {}, stop: str | None = None, attempt: int = 1, budget: float = BUDGET,
         extra: Mapping = {}, charged: float = 0.0, checkpoint: str | None = None) -> EpochRecord:
    """A line that is not a finished step: retry, requeued, stopped, interrupted or recovered.

    Every such line ends with `charged_s`, the slot-seconds behind its `cost`.
    """
    return EpochRecord(run_id=RUN, job="lenet", phase=phase, epoch=epoch, workers=workers, servers=servers,
                       placement=dict(placement), loss=None, val_loss=None, accuracy=None, train_accuracy=None,
                       samples=0, epoch_time_s=0.0, compute_s=None, start=iso(at), end=iso(at), cost=cost,
                       cumulative_cost=cumulative, budget=budget, stop_reason=stop, attempt=attempt,
                       checkpoint=checkpoint, extra={**extra, "charged_s": charged})


class Driver:
    """Plays the driver for one lifecycle: sends events, answers the usual commands the usual way."""

    def __init__(self, spec: JobSpec | None = None, calibration=(), cluster: ClusterSpec = CLUSTER,
                 timeout_s: float = 30.0):
        self.spec = spec or job_spec()
        self.lc = JobLifecycle(self.spec, RUN, cluster, calibration, placement_timeout_s=timeout_s)

    def send(self, event) -> list:
        return self.lc.handle(event)

    def bind_all(self, now: float) -> list:
        """Bindings with every function the job holds bound on its usual node."""
        return self.send(Bindings(now, dict(placed(self.lc.submitted))))

    def deployed(self, deploy: Deploy, now: float) -> list:
        return self.send(Deployed(now, tuple(fid for fid, _ in deploy.placements)))

    def start_static(self, now: float = T0) -> InvokeEpoch:
        """Start a (2, 1) job and run it up to its first InvokeEpoch, checking every command on the way."""
        assert self.send(Start(now)) == [AskPolicy()]
        assert self.send(Decided(now, Counts(2, 1, affordable=True))) == [Submit(F21), WatchPlacement(now + 30)]
        assert self.bind_all(now + 1) == [Deploy(placed(F21), MODEL, 32)]
        out = self.send(Deployed(now + 2, F21))
        # the deadline is epoch_timeout_s, or where the money ends first (F21 costs 1.5 per second)
        deadline = min(600.0, self.spec.budget / 1.5 * BUDGET_MARGIN - REPLY_RESERVE_S)
        assert out == [invoke(F21, epoch=1, step=1, tag="epoch-0001", load=None, deadline=deadline)]
        return out[0]

    def train(self, now: float, decision: Counts, loss: float) -> tuple[InvokeEpoch, list]:
        """Decided -> placement -> (Deploy) -> InvokeEpoch -> EpochDone at now + 10; the last event's commands."""
        out = self.send(Decided(now, decision))
        assert out[-1] == WatchPlacement(now + 30)
        out = self.bind_all(now)
        if isinstance(out[-1], Deploy):
            out = self.deployed(out[-1], now)
        call = out[-1]
        assert isinstance(call, InvokeEpoch)
        return call, self.send(epoch_done(call, now + 10, loss))


STATIC = Counts(2, 1, affordable=True)


# --------------------------------------------------------------------------- the backoff helpers


def test_the_retry_backoff_doubles_from_half_a_second_up_to_eight():
    assert [retry_backoff_s(a) for a in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert MAX_RETRY_BACKOFF_S == 8.0


def test_the_requeue_backoff_doubles_from_one_second_up_to_thirty():
    assert [requeue_backoff_s(r) for r in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert MAX_REQUEUES == 5
    assert POLICY_WAIT_S == 1.0


# --------------------------------------------------------------------------- 1. static job to target loss


def test_static_job_trains_until_the_target_holds_for_three_epochs_then_gives_everything_back():
    d = Driver()
    assert d.lc.awaiting == Awaiting.NOTHING
    call = d.start_static(T0)
    assert d.lc.awaiting == Awaiting.EPOCH and d.lc.status().phase == "training"
    # epoch 1 at the target, epoch 2 above it, then 3, 4, 5 at or below it: it stops on epoch 5
    losses = {1: 0.5, 2: 0.625, 3: 0.5, 4: 0.375, 5: 0.25}
    out = d.send(epoch_done(call, T0 + 12, losses[1]))
    assert out == [WriteRecord(trained(F21, epoch=1, loss=0.5, cost=COST_21, cumulative=15.0, end=T0 + 12,
                                       tag="epoch-0001")),
                   PruneCheckpoints(ckpt("epoch-0001")), AskPolicy()]
    assert out[0].record.start == "2023-11-14T22:13:22.000+00:00"  # the first request, T0 + 2
    for epoch in (2, 3, 4, 5):
        now = T0 + 100 * epoch
        # the functions stay placed and deployed: no Submit, no Deploy
        assert d.send(Decided(now, STATIC)) == [WatchPlacement(now + 30)]
        out = d.bind_all(now + 1)
        call = invoke(F21, epoch=epoch, step=epoch, tag=f"epoch-{epoch:04d}", load=ckpt(f"epoch-{epoch - 1:04d}"))
        assert out == [call]
        out = d.send(epoch_done(call, now + 11, losses[epoch]))
        record = trained(F21, epoch=epoch, loss=losses[epoch], cost=COST_21, cumulative=15.0 * epoch,
                         end=now + 11, tag=f"epoch-{epoch:04d}", stop="target_loss" if epoch == 5 else None)
        if epoch < 5:
            assert out == [WriteRecord(record), PruneCheckpoints(ckpt(f"epoch-{epoch:04d}")), AskPolicy()]
    assert out == [WriteRecord(record), PruneCheckpoints(ckpt("epoch-0005")), Remove(F21), Release(F21),
                   Finish("target_loss")]
    assert record.stop_reason == "target_loss" and record.epoch == 5 and record.cumulative_cost == 75.0
    assert d.lc.done and d.lc.reason == "target_loss" and d.lc.held_slots == 0
    assert d.lc.history.stop_reason == "target_loss" and d.lc.history.epochs_done == 5
    status = d.lc.status()
    assert (status.phase, status.message, status.epoch, status.cost, status.loss) == (
        "done", "target_loss", 5, 75.0, 0.25)


def test_a_static_job_stops_at_max_epochs_on_the_last_epochs_record():
    d = Driver(job_spec(max_epochs=2, target_loss=0.01))
    call = d.start_static(T0)
    assert d.send(epoch_done(call, T0 + 12, 0.75))[-1] == AskPolicy()
    _, out = d.train(T0 + 100, STATIC, 0.5)
    assert out == [WriteRecord(trained(F21, epoch=2, loss=0.5, cost=COST_21, cumulative=30.0, end=T0 + 110,
                                       tag="epoch-0002", stop="max_epochs")),
                   PruneCheckpoints(ckpt("epoch-0002")), Remove(F21), Release(F21), Finish("max_epochs")]


def test_stopping_uses_the_validation_loss_when_rank_0_reports_one():
    d = Driver(job_spec(consecutive=1))
    call = d.start_static(T0)
    done = epoch_done(call, T0 + 12, 0.25)  # training loss under the target, validation loss above it
    replies = dict(done.replies)
    replies[W0] = replace(replies[W0], val_loss=0.75, val_accuracy=0.875)
    out = d.send(replace(done, replies=replies))
    record = out[0].record
    assert (record.loss, record.val_loss, record.accuracy, record.stop_reason) == (0.25, 0.75, 0.875, None)
    assert out[1:] == [PruneCheckpoints(ckpt("epoch-0001")), AskPolicy()]


# --------------------------------------------------------------------------- 2. dynamic job's calibration


def test_dynamic_job_calibrates_at_four_points_on_one_placement_then_asks_and_trains_at_the_decided_counts():
    spec = dynamic_spec(calibration_fraction=0.125)
    d = Driver(spec, calibration=CALIBRATION)
    # the largest point's functions are submitted once; every point runs on a subset of them
    assert d.send(Start(T0)) == [Submit(F22), WatchPlacement(T0 + 30)]
    assert d.lc.status().phase == "calibration"
    assert d.bind_all(T0 + 1) == [Deploy(placed(F22), MODEL, 32)]
    out = d.deployed(Deploy(placed(F22), MODEL, 32), T0 + 2)
    used = {1: (SCHED, S0, W0), 2: (SCHED, S0, S1, W0), 3: (SCHED, S0, W0, W1), 4: F22}
    costs = {1: COST_11, 2: COST_12, 3: COST_21, 4: COST_22}
    # each step predicted before it starts: the floor first, then the last step's cost scaled by slots
    predicted = {1: 3 * MIN_EPOCH_S * 0.5, 2: COST_11 * 4 / 3, 3: COST_12 * 4 / 4, 4: COST_21 * 5 / 4}
    # 2,048 samples at batch 32, as the first reply tells: then whole batches, one sample short, on every worker
    fractions = {1: 0.125, 2: 255 / 2048, 3: 254 / 2048, 4: 254 / 2048}  # 8 batches of 32 (1 short), 4 of 2 x 32
    shards = {1: 256, 2: 255, 3: 127, 4: 127}
    cumulative = 0.0
    for step in (1, 2, 3, 4):
        # each step expects the next point's functions; the last one, its own
        call = invoke(used[step], epoch=0, step=step, tag=f"calibration-{step}",
                      load=None if step == 1 else ckpt(f"calibration-{step - 1}"), fraction=fractions[step],
                      following=used[min(step + 1, 4)])
        assert out[-1] == call
        now = T0 + 100 * step
        out = d.send(epoch_done(call, now, 4.0 - step, samples=shards[step]))
        cumulative += costs[step]
        record = trained(used[step], epoch=0, loss=4.0 - step, cost=costs[step], cumulative=cumulative, end=now,
                         tag=f"calibration-{step}", phase="calibration", samples=shards[step],
                         extra={"calibration_step": step, "data_fraction": fractions[step],
                                "predicted_cost": predicted[step]})
        assert out[:2] == [WriteRecord(record), PruneCheckpoints(ckpt(f"calibration-{step}"))]
        assert len(out) == 3
    assert out[-1] == AskPolicy()
    assert d.lc.awaiting == Awaiting.DECISION
    assert (d.lc.history.calibration_done, d.lc.history.steps_done, d.lc.history.epochs_done) == (4, 4, 0)
    assert d.lc.history.metrics == ()  # calibration mini-epochs are not epochs
    assert cumulative == 65.0

    details = {"workers": 2, "servers": 1, "predicted_cost": 15.0}
    out = d.send(Decided(T0 + 500, Counts(2, 1, affordable=True, details=details)))
    assert out == [Remove((S1,)), Release((S1,)), WatchPlacement(T0 + 530)]
    assert d.lc.held_slots == 4
    out = d.send(Bindings(T0 + 501, dict(placed(F21))))
    call = invoke(F21, epoch=1, step=5, tag="epoch-0001", load=ckpt("calibration-4"))
    assert out == [call]
    out = d.send(epoch_done(call, T0 + 511, 0.75))
    assert out == [WriteRecord(trained(F21, epoch=1, loss=0.75, cost=COST_21, cumulative=80.0, end=T0 + 511,
                                       tag="epoch-0001", extra={"decision": details})),
                   PruneCheckpoints(ckpt("epoch-0001")), AskPolicy()]
    # growing again submits only what is new
    out = d.send(Decided(T0 + 600, Counts(3, 2, affordable=True)))
    w2 = FunctionId("lenet", Role.WORKER, 2)
    assert out == [Submit((S1, w2)), WatchPlacement(T0 + 630)]
    assert d.bind_all(T0 + 601) == [Deploy(placed((S1, w2)), MODEL, 32)]


def test_a_calibration_mini_epoch_trains_at_least_the_floor_of_batches_on_every_worker():
    """512 samples at batch 32: an eighth of the data gives a worker 2 batches at w = 1 and 1 at w = 2, so the
    points train 4 whole batches per worker (one sample short): a quarter and a half of the data; the first point
    asks before the data's size is known (these workers did not tell it at deploy)."""
    spec = dynamic_spec(calibration_fraction=0.125)
    d = Driver(spec, calibration=CALIBRATION)
    d.send(Start(T0))
    d.bind_all(T0 + 1)
    out = d.deployed(Deploy(placed(F22), MODEL, 32), T0 + 2)
    used = {1: (SCHED, S0, W0), 2: (SCHED, S0, S1, W0), 3: (SCHED, S0, W0, W1), 4: F22}
    fractions = {1: 0.125, 2: 127 / 512, 3: 254 / 512, 4: 254 / 512}  # (4 * 32 * w - w) / 512
    # the last step's cost scaled by slots, and by the data when a step trains more of it than the last one
    predicted = {1: 3 * MIN_EPOCH_S * 0.5, 2: COST_11 * 4 / 3 * (127 / 512) / 0.125,
                 3: COST_12 * 4 / 4 * (254 / 512) / (127 / 512), 4: COST_21 * 5 / 4}
    for step in (1, 2, 3, 4):
        call = out[-1]
        assert isinstance(call, InvokeEpoch)
        assert (call.data_fraction, call.save_tag) == (fractions[step], f"calibration-{step}")
        assert call.functions == placed(used[step])
        per_worker = math.ceil(512 * fractions[step]) // call.workers  # the worker's rounding
        assert math.ceil(per_worker / 32) == CALIBRATION_MIN_STEPS or fractions[step] == spec.calibration_fraction
        assert per_worker % 32 == 31 or step == 1  # whole batches, one sample short: no step of a few samples
        out = d.send(epoch_done(call, T0 + 100 * step, 1.0, samples=per_worker))
        record = out[0].record
        assert record.extra["data_fraction"] == fractions[step]
        assert record.extra["predicted_cost"] == pytest.approx(predicted[step])
    assert out[-1] == AskPolicy()
    # the speed model scales each mini-epoch by the share it trained
    assert [o.workers for o in d.lc.history.observations] == [1, 1, 2, 2]


def test_the_calibration_floor_counts_the_batch_an_adaptive_job_will_train_at():
    """The noise the first mini-epoch measured grows the batch of the next ones: the floor is in those batches."""
    d = Driver(dynamic_spec(calibration_fraction=0.125, batch_scaling="adaptive"), calibration=CALIBRATION)
    d.send(Start(T0))
    d.bind_all(T0 + 1)
    out = d.deployed(Deploy(placed(F22), MODEL, 32), T0 + 2)
    batches = []
    for step in (1, 2, 3, 4):
        call = out[-1]
        batch, per_worker = call.hyper.batch_size, math.ceil(4096 * call.data_fraction) // call.workers
        batches.append(batch)
        assert call.data_fraction == 0.125 if step == 1 else \
            math.ceil(per_worker / batch) >= CALIBRATION_MIN_STEPS or call.data_fraction == 1.0
        done = epoch_done(call, T0 + 100 * step, 1.0, samples=per_worker)
        out = d.send(replace(done, replies={fid: replace(r, grad_var=6400.0, grad_sqr=1.0, noise_steps=2)
                                            for fid, r in done.replies.items()}))
    assert max(batches) > 32  # the batch did grow


def test_the_size_the_warmed_workers_told_makes_the_first_calibration_step_whole_batches():
    """Without it the first step trains the job's share of data of unknown size: an eighth of 512 samples is two
    batches of 32 at (1, 1), below the floor of four, so its loop has no steady steps to take a rate from."""
    d = Driver(dynamic_spec(calibration_fraction=0.125), calibration=CALIBRATION)
    d.send(Start(T0))
    d.bind_all(T0 + 1)
    call = d.send(Deployed(T0 + 2, F22, None, train_samples=512))[-1]
    assert (call.step, call.workers, call.servers) == (1, 1, 1)
    assert call.data_fraction == 127 / 512  # 4 batches of 32, one sample short
    assert d.lc._data_samples == 512


def test_a_mini_epoch_cut_at_its_deadline_still_tells_the_datas_size():
    d = Driver(dynamic_spec(calibration_fraction=0.125), calibration=CALIBRATION)
    d.send(Start(T0))
    d.bind_all(T0 + 1)
    call = d.deployed(Deploy(placed(F22), MODEL, 32), T0 + 2)[-1]
    done = epoch_done(call, T0 + 100, 1.0, samples=40)  # 40 of its 64: stopped early
    d.send(replace(done, replies={fid: replace(r, shard_samples=64, stopped_early=True)
                                  for fid, r in done.replies.items()}))

    assert d.lc._data_samples == 512 and d.lc._trained_share == pytest.approx(0.125 * 40 / 64)


def test_a_mini_epoch_after_one_cut_short_is_predicted_at_most_its_timeouts_worth():
    d = Driver(dynamic_spec(calibration_fraction=0.125, epoch_timeout_s=20.0), calibration=CALIBRATION)
    d.send(Start(T0))
    d.bind_all(T0 + 1)
    call = d.deployed(Deploy(placed(F22), MODEL, 32), T0 + 2)[-1]
    done = epoch_done(call, T0 + 100, 1.0, samples=1)  # 1 of its 64 samples: a 128th of the data
    out = d.send(replace(done, replies={fid: replace(r, shard_samples=64, stopped_early=True)
                                        for fid, r in done.replies.items()}))

    # scaled from the share trained it would be 12.5 x 4/3 x 0.248 / (0.125 / 64) = 2117: but 4 slots at 0.5 for
    # its 20 s timeout cost 40 at most
    assert out[-1].data_fraction == 127 / 512 and out[-1].step == 2  # 4 batches of 32 of 512, one sample short
    assert d.lc.step.extra["predicted_cost"] == 40.0


def test_a_calibration_share_is_whole_batches_on_every_worker_at_least_the_floor_up_to_all_the_data():
    assert calibration_fraction(0.25, 2, 128, None) == 0.25  # size not known yet
    assert calibration_fraction(0.25, 2, 128, 4000) == 1022 / 4000  # the floor: 4 batches of 2 x 128, 2 short
    assert calibration_fraction(0.25, 1, 128, 4000) == 1023 / 4000  # 7.8 batches: 8, one sample short
    assert calibration_fraction(0.25, 3, 64, 4000) == 957 / 4000  # 5.2 batches: 5, not a 6th of 13 samples
    assert calibration_fraction(0.25, 2, 128, 1000) == 1.0  # the floor is all the data
    assert calibration_fraction(0.25, 3, 100, 30_000) == 7497 / 30_000
    assert calibration_fraction(0.1, 3, 100, 10_001) == 1197 / 10_001  # never below the floor
    assert calibration_fraction(1.0, 1, 64, 10_000) == 1.0  # all the data means all of it, last batch partial
    assert calibration_fraction(0.25, 1, 1, 4000) == 0.25  # batches of one sample: nothing to be short of
    assert calibration_fraction(1e-7, 1, 32, 200_000_000) == 127 / 200_000_000  # tiny, but never 0


@pytest.mark.parametrize("data_samples", [1000, 4000, 4001, 10_001, 59_999, 60_000, 123_457, 2_000_003])
@pytest.mark.parametrize("workers", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("batch", [2, 32, 64, 100, 128])
def test_a_calibration_share_gives_each_worker_whole_batches_after_the_workers_rounding(data_samples, workers,
                                                                                        batch):
    """coach_functions/shards.py's `shard_size`: ceil(size * share) samples, split evenly; no step is left over."""
    fraction = calibration_fraction(0.25, workers, batch, data_samples)
    per_worker = min(max(workers, math.ceil(data_samples * fraction)), data_samples) // workers
    steps = max(CALIBRATION_MIN_STEPS, round(0.25 * data_samples / (batch * workers)))
    if steps * batch * workers >= data_samples:
        assert fraction == 1.0
    else:
        assert 0 < fraction < 1
        assert -per_worker % batch <= 1  # whole batches, the last one at most a sample short
        assert math.ceil(per_worker / batch) == steps


def test_calibration_keeps_to_the_points_that_fit_the_cluster_together():
    small = ClusterSpec("tiny", (NodeSpec("node-a", 4, 0.5),))  # (2,2) needs 5 slots; (1,2) fits in 4
    d = Driver(dynamic_spec(), calibration=CALIBRATION, cluster=small)
    assert d.lc.calibration == ((1, 1), (1, 2))
    functions = functions_for("lenet", 1, 2)
    assert d.send(Start(T0)) == [Submit(functions), WatchPlacement(T0 + 30)]


def test_a_cluster_too_small_for_any_calibration_point_stops_the_job_before_submitting():
    tiny = ClusterSpec("tiny", (NodeSpec("node-a", 2, 0.5),))
    d = Driver(dynamic_spec(), calibration=CALIBRATION, cluster=tiny)
    reason = "unschedulable: needs 3 slots, the cluster has 2"
    assert d.send(Start(T0)) == [WriteRecord(line("stopped", epoch=0, at=T0, cost=0.0, cumulative=0.0,
                                                  workers=0, servers=0, stop=reason)),
                                 Finish(reason)]


def test_a_first_calibration_step_the_budget_cannot_cover_stops_before_anything_is_submitted():
    """Nothing measured yet: the least a (1,1) step can cost is 3 slots x MIN_EPOCH_S x the highest price."""
    floor = 3 * MIN_EPOCH_S * 0.5
    d = Driver(dynamic_spec(budget=floor * 0.99), calibration=CALIBRATION)
    assert d.send(Start(T0)) == [WriteRecord(line("stopped", epoch=0, at=T0, cost=0.0, cumulative=0.0,
                                                  workers=0, servers=0, stop="budget", budget=floor * 0.99)),
                                 Finish("budget")]


# --------------------------------------------------------------------------- Wait decisions


def test_a_wait_decision_gives_the_slots_back_and_asks_again_after_the_policy_wait():
    d = Driver(dynamic_spec(), calibration=((1, 1), (2, 2)))
    assert d.send(Start(T0)) == [Submit(F22), WatchPlacement(T0 + 30)]
    out = d.deployed(d.bind_all(T0 + 1)[0], T0 + 2)
    out = d.send(epoch_done(out[0], T0 + 12, 2.0))
    out = d.send(epoch_done(out[-1], T0 + 22, 1.5))
    assert out[-1] == AskPolicy()
    assert d.send(Decided(T0 + 22, Wait("3 jobs ahead"))) == [Remove(F22), Release(F22),
                                                                 WaitUntil(T0 + 22 + POLICY_WAIT_S)]
    assert d.lc.held_slots == 0 and d.lc.awaiting == Awaiting.TIMER
    assert (d.lc.status().phase, d.lc.status().message) == ("waiting", "3 jobs ahead")
    assert d.send(TimerFired(T0 + 22.5)) == []  # not yet
    assert d.send(TimerFired(T0 + 23)) == [AskPolicy()]
    # a second Wait holds nothing, so it gives nothing back
    assert d.send(Decided(T0 + 23, Wait("3 jobs ahead"))) == [WaitUntil(T0 + 24)]
    assert d.send(TimerFired(T0 + 24)) == [AskPolicy()]
    assert d.send(Decided(T0 + 24, Counts(2, 1, affordable=True))) == [Submit(F21), WatchPlacement(T0 + 54)]
    assert d.bind_all(T0 + 25) == [Deploy(placed(F21), MODEL, 32)]  # fresh instances: the old ones were removed
    out = d.send(Deployed(T0 + 26, F21))
    assert out == [invoke(F21, epoch=1, step=3, tag="epoch-0001", load=ckpt("calibration-2"))]


# --------------------------------------------------------------------------- 3. retries


def failed(now: float, kind: str = "timeout", hold: float = 4.0, function: str = "lenet-worker-1",
           message: str = "no reply") -> EpochFailed:
    return EpochFailed(now, Failure(function, kind, message, hold), {fid: hold for fid in F21})


def retry_line(at: float, *, attempt: int, cost: float, cumulative: float, will_retry: bool,
               error: str = "lenet-worker-1: timeout: no reply", epoch: int = 1, extra: Mapping = {},
               charged: float = 16.0) -> EpochRecord:
    """A failed attempt's line; by default `failed`'s: 4 functions held their slots 4 s each, 16 slot-seconds."""
    return line("retry", epoch=epoch, at=at, cost=cost, cumulative=cumulative, placement=names(F21),
                attempt=attempt, extra={**extra, "error": error, "will_retry": will_retry}, charged=charged)


@pytest.mark.parametrize("max_retries, waits", [(3, [0.5, 1.0, 2.0]), (6, [0.5, 1.0, 2.0, 4.0, 8.0, 8.0])])
def test_a_failing_epoch_is_retried_with_backoff_on_fresh_functions_then_fails_after_max_retries_plus_one(
        max_retries, waits):
    d = Driver(job_spec(max_retries=max_retries))
    call = d.start_static(T0)
    now = T0 + 20
    for attempt, wait in enumerate(waits, start=1):
        # 4 s of every slot: 2 + 2 + 1 + 1 = 6 per failed attempt, recorded on the attempt's own line
        out = d.send(failed(now))
        assert out == [WriteRecord(retry_line(now, attempt=attempt, cost=6.0, cumulative=6.0 * attempt,
                                              will_retry=True)),
                       WaitUntil(now + wait)]
        assert d.lc.status().phase == "retrying"
        assert d.send(TimerFired(now + wait - 0.25)) == []  # early
        assert d.send(TimerFired(now + wait)) == [Remove(F21), Deploy(placed(F21), MODEL, 32)]  # same nodes
        assert d.send(Deployed(now + wait + 1, F21)) == [replace(call, attempt=attempt + 1)]
        now += 100
    attempts = max_retries + 1
    reason = f"failed after {attempts} attempts: lenet-worker-1: timeout: no reply"
    assert d.send(failed(now)) == [
        WriteRecord(retry_line(now, attempt=attempts, cost=6.0, cumulative=6.0 * attempts, will_retry=False)),
        WriteRecord(line("stopped", epoch=0, at=now, cost=0.0, cumulative=6.0 * attempts, placement=names(F21),
                         stop=reason)),
        Remove(F21), Release(F21), Finish(reason)]
    assert d.lc.reason == reason and d.lc.status().phase == "failed"


def test_a_retried_epoch_that_succeeds_records_its_attempt_and_only_its_own_cost():
    d = Driver()
    call = d.start_static(T0)
    assert d.send(failed(T0 + 20))[-1] == WaitUntil(T0 + 20.5)
    assert d.send(TimerFired(T0 + 20.5)) == [Remove(F21), Deploy(placed(F21), MODEL, 32)]
    second = replace(call, attempt=2)
    assert d.send(Deployed(T0 + 21, F21)) == [second]
    out = d.send(epoch_done(second, T0 + 31, 0.75))
    assert out == [WriteRecord(trained(F21, epoch=1, loss=0.75, cost=COST_21, cumulative=21.0, end=T0 + 31,
                                       tag="epoch-0001", attempt=2)),
                   PruneCheckpoints(ckpt("epoch-0001")), AskPolicy()]
    # the next epoch starts again at attempt 1, and the next failure waits 0.5 s again
    assert d.send(Decided(T0 + 40, STATIC)) == [WatchPlacement(T0 + 70)]
    assert d.bind_all(T0 + 40) == [invoke(F21, epoch=2, step=2, tag="epoch-0002", load=ckpt("epoch-0001"))]
    out = d.send(failed(T0 + 50))
    assert out[-1] == WaitUntil(T0 + 50.5)
    assert out[0].record.attempt == 1 and out[0].record.epoch == 2 and out[0].record.cumulative_cost == 27.0


def test_a_retried_calibration_step_keeps_its_step_fields_on_the_retry_line():
    d = Driver(dynamic_spec(), calibration=((2, 1),))
    assert d.send(Start(T0)) == [Submit(F21), WatchPlacement(T0 + 30)]
    out = d.deployed(d.bind_all(T0 + 1)[0], T0 + 2)
    assert out == [invoke(F21, epoch=0, step=1, tag="calibration-1", load=None, fraction=0.25)]
    out = d.send(failed(T0 + 10))
    assert out == [WriteRecord(retry_line(T0 + 10, attempt=1, cost=6.0, cumulative=6.0, will_retry=True, epoch=0,
                                          extra={"calibration_step": 1, "data_fraction": 0.25,
                                                 "predicted_cost": 4 * MIN_EPOCH_S * 0.5})),
                   WaitUntil(T0 + 10.5)]


def _retry(d: Driver, now: float, attempt: int, call, wait: float) -> None:
    """Carry a failed attempt's retry through: its backoff, fresh functions, the next attempt invoked."""
    assert d.send(TimerFired(now + wait)) == [Remove(F21), Deploy(placed(F21), MODEL, 32)]
    assert d.send(Deployed(now + wait + 1, F21)) == [replace(call, attempt=attempt + 1)]


def test_attempts_broken_from_outside_the_job_are_retried_without_counting_against_its_retries():
    d = Driver(job_spec(max_retries=1))
    call = d.start_static(T0)
    now, attempt = T0 + 20, 1
    broken = "lenet-scheduler-0: foreign: ps-lite aborted on a message from outside the job"
    for _ in range(3):  # more foreign attempts than max_retries: none of them is the job's failure
        out = d.send(failed(now, kind="foreign", function="lenet-scheduler-0",
                            message="ps-lite aborted on a message from outside the job"))
        # its cost still counts (its slots were held; the budget caps what is spent), on a line that says why
        assert out == [WriteRecord(retry_line(now, attempt=attempt, cost=6.0, cumulative=6.0 * attempt,
                                              will_retry=True, error=broken, extra={"foreign": True})),
                       WaitUntil(now + retry_backoff_s(attempt))]
        _retry(d, now, attempt, call, retry_backoff_s(attempt))
        now, attempt = now + 100, attempt + 1
    # the job's own failures still have their bound: max_retries=1 allows one own failure, then the job stops
    out = d.send(failed(now))
    assert out[0].record.extra["will_retry"] is True and "foreign" not in out[0].record.extra
    _retry(d, now, attempt, call, retry_backoff_s(attempt))
    now, attempt = now + 100, attempt + 1
    reason = f"failed after {attempt} attempts, 3 of them broken from outside the job: lenet-worker-1: timeout: no reply"
    out = d.send(failed(now))
    assert out[0].record.extra["will_retry"] is False and out[-1] == Finish(reason)


def test_attempts_broken_from_outside_have_their_own_bound():
    d = Driver(job_spec(max_retries=3))
    call = d.start_static(T0)
    now = T0 + 20
    for attempt in range(1, MAX_FOREIGN_RETRIES + 2):
        out = d.send(failed(now, kind="foreign", function="lenet-server-0", message="ps-lite aborted"))
        if attempt <= MAX_FOREIGN_RETRIES:
            assert out[0].record.extra["will_retry"] is True
            _retry(d, now, attempt, call, retry_backoff_s(attempt))
            now += 100
    reason = (f"failed after {MAX_FOREIGN_RETRIES + 1} attempts, {MAX_FOREIGN_RETRIES + 1} of them broken from "
              f"outside the job: lenet-server-0: foreign: ps-lite aborted")
    assert out[0].record.extra["will_retry"] is False and out[-1] == Finish(reason)
    # what every attempt cost is in the log: the money bound holds whoever broke the attempts
    assert d.lc.history.spent == 6.0 * (MAX_FOREIGN_RETRIES + 1)


def test_a_rejected_request_is_not_retried():
    d = Driver()
    d.start_static(T0)
    reason = "failed after 1 attempts: lenet-worker-0: rejected: data.fraction: must be in (0, 1]"
    out = d.send(failed(T0 + 20, kind="rejected", function="lenet-worker-0",
                        message="data.fraction: must be in (0, 1]"))
    assert out == [
        WriteRecord(retry_line(T0 + 20, attempt=1, cost=6.0, cumulative=6.0, will_retry=False,
                               error="lenet-worker-0: rejected: data.fraction: must be in (0, 1]")),
        WriteRecord(line("stopped", epoch=0, at=T0 + 20, cost=0.0, cumulative=6.0, placement=names(F21),
                         stop=reason)),
        Remove(F21), Release(F21), Finish(reason)]


def test_replies_that_do_not_make_one_epoch_count_as_a_failed_attempt_and_are_charged():
    d = Driver()
    call = d.start_static(T0)
    done = epoch_done(call, T0 + 12, 0.5)
    out = d.send(replace(done, replies={W0: done.replies[W0]}))  # worker 1's reply is missing
    assert out == [WriteRecord(retry_line(T0 + 12, attempt=1, cost=COST_21, cumulative=COST_21, will_retry=True,
                                          error="lenet: error: 1 worker replies for 2 workers", charged=40.0)),
                   WaitUntil(T0 + 12.5)]


def test_an_epoch_without_a_saved_checkpoint_is_a_failed_attempt():
    d = Driver()
    call = d.start_static(T0)
    out = d.send(epoch_done(call, T0 + 12, 0.5, checkpoint=None))
    assert out == [WriteRecord(retry_line(T0 + 12, attempt=1, cost=COST_21, cumulative=COST_21, will_retry=True,
                                          error="lenet-worker: error: rank 0 did not save the checkpoint",
                                          charged=40.0)),
                   WaitUntil(T0 + 12.5)]
    assert d.lc.history.checkpoint is None and d.lc.history.epochs_done == 0


def test_a_failed_deploy_stops_the_job_without_a_retry():
    d = Driver()
    d.send(Start(T0))
    d.send(Decided(T0, STATIC))
    assert d.bind_all(T0 + 1) == [Deploy(placed(F21), MODEL, 32)]
    reason = "failed: lenet-worker-1: deploy: image pull failed"
    out = d.send(Deployed(T0 + 2, (SCHED, S0, W0), Failure("lenet-worker-1", "deploy", "image pull failed")))
    assert out == [WriteRecord(line("stopped", epoch=0, at=T0 + 2, cost=0.0, cumulative=0.0, workers=2, servers=1,
                                    placement=names(F21), stop=reason)),
                   Remove((SCHED, S0, W0)), Release(F21), Finish(reason)]


# --------------------------------------------------------------------------- 4. quorum timeouts and requeues


PARTIAL = {SCHED: "node-a", W0: "node-b"}  # no server: no quorum
PLACED = {"lenet-scheduler-0": "node-a", "lenet-worker-0": "node-b"}


def requeued(at: float, n: int, epoch: int = 0, cumulative: float = 0.0) -> WriteRecord:
    return WriteRecord(line("requeued", epoch=epoch, at=at, cost=0.0, cumulative=cumulative,
                            extra={"reason": WHY, "requeue": n, "placed": PLACED}))


def test_no_quorum_by_the_deadline_requeues_with_backoff_and_the_sixth_timeout_is_unschedulable():
    d = Driver()
    assert d.send(Start(T0)) == [AskPolicy()]
    assert d.send(Decided(T0, STATIC)) == [Submit(F21), WatchPlacement(T0 + 30)]
    assert d.send(Bindings(T0 + 10, PARTIAL, WHY)) == []  # before the deadline it just waits
    assert (d.lc.status().phase, d.lc.status().message) == ("waiting", f"2/4 placed: {WHY}")
    deadline = T0 + 30
    for n, backoff in enumerate([1.0, 2.0, 4.0, 8.0, 16.0], start=1):
        out = d.send(Bindings(deadline, PARTIAL, WHY))
        assert out == [Release(F21), requeued(deadline, n), WaitUntil(deadline + backoff)]
        assert d.lc.held_slots == 0 and d.lc.status().phase == "requeued"
        assert d.send(Bindings(deadline + 0.5, PARTIAL, WHY)) == []  # stale while it backs off
        assert d.send(TimerFired(deadline + backoff - 0.5)) == []
        out = d.send(TimerFired(deadline + backoff))
        deadline = deadline + backoff + 30
        assert out == [Submit(F21), WatchPlacement(deadline)]
        assert d.lc.held_slots == 4
    reason = f"unschedulable: no quorum after 6 tries: {WHY}"
    assert reason.startswith("unschedulable: no quorum after 6 tries")
    out = d.send(Bindings(deadline, PARTIAL, WHY))
    assert out == [Release(F21), requeued(deadline, 6),
                   WriteRecord(line("stopped", epoch=0, at=deadline, cost=0.0, cumulative=0.0, stop=reason)),
                   Finish(reason)]
    assert d.lc.done and d.lc.status().phase == "failed"


def test_a_job_with_its_quorum_but_not_all_its_functions_placed_says_it_waits_for_slots_not_deploying():
    d = Driver()
    d.send(Start(T0))
    d.send(Decided(T0, STATIC))
    quorum = {SCHED: "node-a", S0: "node-a", W0: "node-b"}  # the second worker is still pending
    assert d.send(Bindings(T0 + 1, quorum, WHY)) == [Deploy(tuple(quorum.items()), MODEL, 32)]
    assert (d.lc.status().phase, d.lc.status().message) == ("waiting", f"3/4 placed: {WHY}; starting with the 3 placed")
    d2 = Driver()
    d2.send(Start(T0))
    d2.send(Decided(T0, STATIC))
    d2.bind_all(T0 + 1)
    assert (d2.lc.status().phase, d2.lc.status().message) == ("deploying", "4 functions")


def test_a_timer_past_the_placement_deadline_requeues_too():
    d = Driver(timeout_s=20.0)
    d.send(Start(T0))
    assert d.send(Decided(T0, STATIC)) == [Submit(F21), WatchPlacement(T0 + 20)]
    assert d.send(Bindings(T0 + 5, PARTIAL, WHY)) == []
    assert d.send(TimerFired(T0 + 19)) == []
    assert d.send(TimerFired(T0 + 20)) == [Release(F21), requeued(T0 + 20, 1), WaitUntil(T0 + 21)]


def test_the_requeue_count_starts_again_once_the_job_has_had_its_quorum():
    d = Driver()
    d.send(Start(T0))
    d.send(Decided(T0, STATIC))
    deadline = T0 + 30
    for n in range(1, MAX_REQUEUES + 1):  # five timeouts, then placed
        assert d.send(Bindings(deadline, PARTIAL, WHY))[-1] == WaitUntil(deadline + requeue_backoff_s(n))
        d.send(TimerFired(deadline + requeue_backoff_s(n)))
        deadline += requeue_backoff_s(n) + 30
    assert d.bind_all(deadline - 29) == [Deploy(placed(F21), MODEL, 32)]
    out = d.send(Deployed(deadline - 28, F21))
    assert d.send(epoch_done(out[0], deadline - 18, 0.75))[-1] == AskPolicy()
    # the policy makes it wait, gives the slots back, and the next placement misses its deadline once
    now = deadline
    assert d.send(Decided(now, Wait("cluster busy"))) == [Remove(F21), Release(F21), WaitUntil(now + 1)]
    assert d.send(TimerFired(now + 1)) == [AskPolicy()]
    assert d.send(Decided(now + 1, STATIC)) == [Submit(F21), WatchPlacement(now + 31)]
    out = d.send(Bindings(now + 31, PARTIAL, WHY))
    assert out == [Release(F21), requeued(now + 31, 1, epoch=1, cumulative=COST_21), WaitUntil(now + 32)]
    assert not d.lc.done


def test_a_job_needing_more_slots_than_the_cluster_has_stops_at_once():
    d = Driver(job_spec(workers=10, servers=2), cluster=DEFAULT_CLUSTER)
    assert d.send(Start(T0)) == [AskPolicy()]
    reason = "unschedulable: needs 13 slots, the cluster has 12"
    assert d.send(Decided(T0 + 1, Counts(10, 2, affordable=True))) == [
        WriteRecord(line("stopped", epoch=0, at=T0 + 1, cost=0.0, cumulative=0.0, workers=10, servers=2,
                         stop=reason)),
        Finish(reason)]
    assert d.lc.done and d.lc.held_slots == 0


# --------------------------------------------------------------------------- 5. budget


def test_an_unaffordable_first_decision_stops_with_budget_before_anything_is_spent():
    d = Driver()
    d.send(Start(T0))
    assert d.send(Decided(T0 + 1, Counts(2, 1, affordable=False))) == [
        WriteRecord(line("stopped", epoch=0, at=T0 + 1, cost=0.0, cumulative=0.0, stop="budget")),
        Finish("budget")]
    assert d.lc.status().phase == "done" and d.lc.history.spent == 0.0


def test_an_unaffordable_later_decision_stops_with_budget_and_its_details_and_gives_the_slots_back():
    d = Driver()
    call = d.start_static(T0)
    d.send(epoch_done(call, T0 + 12, 0.75))
    details = {"predicted_cost": 20.0, "budget_left": 10.0}
    assert d.send(Decided(T0 + 20, Counts(2, 1, affordable=False, details=details))) == [
        WriteRecord(line("stopped", epoch=1, at=T0 + 20, cost=0.0, cumulative=15.0, placement=names(F21),
                         stop="budget", extra={"decision": details})),
        Remove(F21), Release(F21), Finish("budget")]


@pytest.mark.parametrize("budget, stops", [(29.0, True), (29.5, False)])
def test_a_calibration_step_predicted_from_the_last_one_scaled_by_slots_to_overspend_stops_with_budget(
        budget, stops):
    # step 1 at (1, 1) costs 12.5 on 3 slots; step 2 at (1, 2) takes 4 slots: predicted 12.5 * 4 / 3 = 16.67,
    # so 12.5 + 16.67 = 29.17 (unscaled it would be 25, under both budgets)
    d = Driver(dynamic_spec(budget=budget), calibration=CALIBRATION)
    d.send(Start(T0))
    out = d.deployed(d.bind_all(T0 + 1)[0], T0 + 2)
    out = d.send(epoch_done(out[0], T0 + 12, 2.0))
    first = WriteRecord(trained((SCHED, S0, W0), epoch=0, loss=2.0, cost=COST_11, cumulative=COST_11, end=T0 + 12,
                                tag="calibration-1", phase="calibration", budget=budget,
                                extra={"calibration_step": 1, "data_fraction": 0.25,
                                       "predicted_cost": 3 * MIN_EPOCH_S * 0.5}))
    if stops:
        assert out == [first, PruneCheckpoints(ckpt("calibration-1")),
                       WriteRecord(line("stopped", epoch=0, at=T0 + 12, cost=0.0, cumulative=12.5, workers=2,
                                        servers=2, placement=names(F22), stop="budget", budget=budget)),
                       Remove(F22), Release(F22), Finish("budget")]
    else:
        assert out == [first, PruneCheckpoints(ckpt("calibration-1")),
                       invoke((SCHED, S0, S1, W0), epoch=0, step=2, tag="calibration-2",
                              load=ckpt("calibration-1"), fraction=255 / 1024,  # 8 batches of 1,024, 1 short
                              deadline=(budget - 12.5) / 1.75 * 0.9 - 0.5, following=(SCHED, S0, W0, W1))]  # 1.75 per second: money ends first


def test_a_calibration_step_that_spends_the_budget_stops_with_budget():
    d = Driver(dynamic_spec(budget=12.5), calibration=CALIBRATION)
    d.send(Start(T0))
    out = d.deployed(d.bind_all(T0 + 1)[0], T0 + 2)
    out = d.send(epoch_done(out[0], T0 + 12, 2.0))
    assert [type(c) for c in out] == [WriteRecord, PruneCheckpoints, WriteRecord, Remove, Release, Finish]
    assert out[0].record.stop_reason is None and out[0].record.cumulative_cost == 12.5
    assert out[2].record == line("stopped", epoch=0, at=T0 + 12, cost=0.0, cumulative=12.5, workers=2, servers=2,
                                 placement=names(F22), stop="budget", budget=12.5)
    assert out[-1] == Finish("budget")


def test_an_epoch_that_spends_the_budget_stops_on_its_own_record():
    d = Driver(job_spec(budget=30.0))
    call = d.start_static(T0)
    assert d.send(epoch_done(call, T0 + 12, 0.75))[-1] == AskPolicy()
    _, out = d.train(T0 + 100, STATIC, 0.75)
    assert out == [WriteRecord(trained(F21, epoch=2, loss=0.75, cost=COST_21, cumulative=30.0, end=T0 + 110,
                                       tag="epoch-0002", stop="budget", budget=30.0)),
                   PruneCheckpoints(ckpt("epoch-0002")), Remove(F21), Release(F21), Finish("budget")]
    assert d.lc.status().phase == "done"


# --------------------------------------------------------------------------- 6. Ctrl-C


def interrupted(at: float, **fields) -> WriteRecord:
    """The closing line of an interrupted job: its own phase, and no stop_reason (a resume may go on after it)."""
    return WriteRecord(line("interrupted", at=at, stop=None, **fields))


def test_stop_while_waiting_for_a_decision_ends_at_once():
    d = Driver()
    d.send(Start(T0))
    assert d.send(StopRequested(T0 + 1)) == [interrupted(T0 + 1, epoch=0, cost=0.0, cumulative=0.0), Finish(
        "interrupted")]
    assert d.lc.status().phase == "interrupted" and d.lc.reason == "interrupted"
    assert d.send(Decided(T0 + 2, STATIC)) == []


def test_stop_while_waiting_for_bindings_releases_the_pending_pods():
    d = Driver()
    d.send(Start(T0))
    d.send(Decided(T0, STATIC))
    assert d.send(StopRequested(T0 + 3)) == [interrupted(T0 + 3, epoch=0, cost=0.0, cumulative=0.0),
                                             Release(F21), Finish("interrupted")]
    assert d.bind_all(T0 + 4) == []


def test_stop_while_backing_off_before_a_retry_ends_at_once():
    d = Driver()
    d.start_static(T0)
    assert d.send(failed(T0 + 20))[-1] == WaitUntil(T0 + 20.5)
    assert d.send(StopRequested(T0 + 20.25)) == [
        interrupted(T0 + 20.25, epoch=0, cost=0.0, cumulative=6.0, placement=names(F21)),
        Remove(F21), Release(F21), Finish("interrupted")]
    assert d.send(TimerFired(T0 + 20.5)) == []


def test_stop_while_waiting_to_ask_the_policy_again_ends_at_once():
    d = Driver()
    d.send(Start(T0))
    assert d.send(Decided(T0, Wait("busy"))) == [WaitUntil(T0 + 1)]
    assert d.send(StopRequested(T0 + 0.5)) == [interrupted(T0 + 0.5, epoch=0, cost=0.0, cumulative=0.0),
                                               Finish("interrupted")]


def test_stop_during_an_epoch_waits_for_its_failure_then_ends_without_a_retry():
    d = Driver()
    d.start_static(T0)
    assert d.send(StopRequested(T0 + 5)) == []  # the driver cancels the epoch
    assert not d.lc.done and d.lc.awaiting == Awaiting.EPOCH
    # the cancelled epoch held its slots 3 s: 1.5 + 1.5 + 0.75 + 0.75 = 4.5, carried by the closing line
    out = d.send(failed(T0 + 6, kind="unreachable", hold=3.0, function="lenet-worker-0", message="cancelled"))
    assert out == [interrupted(T0 + 6, epoch=0, cost=4.5, cumulative=4.5, placement=names(F21), charged=12.0),
                   Remove(F21), Release(F21), Finish("interrupted")]


def test_stop_during_a_deploy_waits_for_it_then_removes_what_was_deployed():
    d = Driver()
    d.send(Start(T0))
    d.send(Decided(T0, STATIC))
    d.bind_all(T0 + 1)
    assert d.send(StopRequested(T0 + 2)) == []
    assert d.send(Deployed(T0 + 3, F21)) == [
        interrupted(T0 + 3, epoch=0, cost=0.0, cumulative=0.0, placement=names(F21)),
        Remove(F21), Release(F21), Finish("interrupted")]


def test_an_epoch_that_completes_after_a_stop_is_recorded_then_the_job_ends():
    d = Driver()
    call = d.start_static(T0)
    d.send(StopRequested(T0 + 5))
    out = d.send(epoch_done(call, T0 + 12, 0.75))
    assert out == [WriteRecord(trained(F21, epoch=1, loss=0.75, cost=COST_21, cumulative=15.0, end=T0 + 12,
                                       tag="epoch-0001")),
                   PruneCheckpoints(ckpt("epoch-0001")),
                   interrupted(T0 + 12, epoch=1, cost=0.0, cumulative=15.0, placement=names(F21)),
                   Remove(F21), Release(F21), Finish("interrupted")]


# --------------------------------------------------------------------------- 7. resume from a log


def log_line(phase: str, epoch: int, workers: int, servers: int, loss: float, start: str, end: str, cost: float,
             cumulative: float, checkpoint: str, stop_reason: str | None = None, step: int | None = None) -> dict:
    """A log line with the fields a resume reads, and no more."""
    line = {"run_id": "run-old", "job": "lenet", "phase": phase, "epoch": epoch, "workers": workers,
            "servers": servers, "placement": {"lenet-scheduler-0": "node-a", "lenet-server-0": "node-a",
                                              "lenet-worker-0": "node-b"},
            "loss": loss, "val_loss": None, "accuracy": None, "train_accuracy": 0.5, "samples": 64 * workers,
            "epoch_time_s": 10.0, "compute_s": 8.0, "start": start, "end": end, "cost": cost,
            "cumulative_cost": cumulative, "budget": 1000.0, "stop_reason": stop_reason, "attempt": 1,
            "checkpoint": checkpoint}
    if step is not None:
        line["calibration_step"] = step
        line["data_fraction"] = 0.25
    return line


LOG = [
    log_line("calibration", 0, 1, 1, 2.5, "2024-05-01T10:00:00.000+00:00", "2024-05-01T10:00:10.000+00:00",
             3.0, 3.0, "/ckpt/lenet/calibration-1", step=1),
    log_line("calibration", 0, 2, 2, 2.0, "2024-05-01T10:00:11.000+00:00", "2024-05-01T10:00:21.000+00:00",
             4.0, 7.0, "/ckpt/lenet/calibration-2", step=2),
    log_line("training", 1, 2, 1, 1.5, "2024-05-01T10:00:30.000+00:00", "2024-05-01T10:00:40.000+00:00",
             5.0, 12.0, "/ckpt/lenet/epoch-0001"),
    log_line("training", 2, 2, 1, 1.0, "2024-05-01T10:00:41.000+00:00", "2024-05-01T10:00:51.000+00:00",
             6.0, 18.0, "/ckpt/lenet/epoch-0002"),
    log_line("training", 3, 2, 1, 0.75, "2024-05-01T10:00:52.000+00:00", "2024-05-01T10:01:02.000+00:00",
             6.0, 24.0, "/ckpt/lenet/epoch-0003", stop_reason="interrupted"),
]


def test_resume_from_a_log_continues_at_epoch_4_from_its_last_checkpoint_and_cost():
    history = history_from_records(LOG)
    assert (history.calibration_done, history.epochs_done, history.steps_done, history.spent,
            history.checkpoint, history.stop_reason) == (2, 3, 5, 24.0, "/ckpt/lenet/epoch-0003", "interrupted")
    d = Driver(dynamic_spec(), calibration=((1, 1), (2, 2)))
    assert d.send(Resume(T0, history)) == [AskPolicy()]  # calibration is done: no step is run again
    assert d.lc.history.stop_reason is None  # the old stop does not stop the resumed job
    assert d.lc.status().epoch == 3 and d.lc.status().cost == 24.0
    assert d.send(Decided(T0, Counts(2, 1, affordable=True))) == [Submit(F21), WatchPlacement(T0 + 30)]
    assert d.bind_all(T0 + 1) == [Deploy(placed(F21), MODEL, 32)]
    out = d.send(Deployed(T0 + 2, F21))
    call = invoke(F21, epoch=4, step=6, tag="epoch-0004", load="/ckpt/lenet/epoch-0003")
    assert out == [call]
    out = d.send(epoch_done(call, T0 + 12, 0.5))
    assert out == [WriteRecord(trained(F21, epoch=4, loss=0.5, cost=COST_21, cumulative=39.0, end=T0 + 12,
                                       tag="epoch-0004")),
                   PruneCheckpoints(ckpt("epoch-0004")), AskPolicy()]
    # the old epochs count towards the target: 0.75, 0.5 so far; one more at or below 0.5 is not enough
    assert d.lc.history.metrics == (1.5, 1.0, 0.75, 0.5)


def test_a_resumed_static_job_stops_on_target_counting_the_old_epochs():
    d = Driver(job_spec(target_loss=1.0))  # epochs 2 and 3 of the old log are at or below 1.0
    assert d.send(Resume(T0, history_from_records(LOG))) == [AskPolicy()]
    call, out = d.train(T0, STATIC, 0.5)
    assert call.epoch == 4 and call.step == 6 and call.checkpoint_load == "/ckpt/lenet/epoch-0003"
    assert out[0].record.stop_reason == "target_loss" and out[0].record.cumulative_cost == 39.0
    assert out[-1] == Finish("target_loss")


# --------------------------------------------------------------------------- finished jobs and crashes


def test_events_a_finished_job_gets_are_ignored():
    d = Driver(job_spec(max_epochs=1))
    call = d.start_static(T0)
    assert d.send(epoch_done(call, T0 + 12, 0.75))[-1] == Finish("max_epochs")
    for event in (Start(T0 + 20), Decided(T0 + 20, STATIC), Bindings(T0 + 20, dict(placed(F21))),
                  Deployed(T0 + 20, F21), epoch_done(call, T0 + 20, 0.5), failed(T0 + 20), TimerFired(T0 + 20),
                  StopRequested(T0 + 20), Resume(T0 + 20, history_from_records(LOG))):
        assert d.send(event) == []
    assert d.lc.crash(T0 + 20, RuntimeError("late")) == []
    assert d.lc.reason == "max_epochs" and d.lc.history.epochs_done == 1


def test_a_crash_stops_the_job_as_an_internal_error_and_gives_everything_back():
    d = Driver()
    d.start_static(T0)
    reason = "failed: internal error: KeyError: 'lenet-worker-9'"
    assert d.lc.crash(T0 + 5, KeyError("lenet-worker-9")) == [
        WriteRecord(line("stopped", epoch=0, at=T0 + 5, cost=0.0, cumulative=0.0, placement=names(F21),
                         stop=reason)),
        Remove(F21), Release(F21), Finish(reason)]
    assert d.lc.done and d.lc.status().phase == "failed" and d.lc.status().message == reason
    assert d.send(StopRequested(T0 + 6)) == []


def test_events_that_are_not_due_are_ignored():
    d = Driver()
    assert d.send(Start(T0)) == [AskPolicy()]
    assert d.bind_all(T0) == []  # waiting for a decision, not bindings
    assert d.send(Deployed(T0, F21)) == []
    assert d.send(TimerFired(T0)) == []
    assert d.send(Decided(T0, STATIC)) == [Submit(F21), WatchPlacement(T0 + 30)]
    assert d.send(Decided(T0, STATIC)) == []  # already decided
    assert d.lc.awaiting == Awaiting.BINDINGS


# --------------------------------------------------------------------------- an interrupt, then a resume


def as_lines(commands) -> list[dict]:
    """The log lines WriteRecord commands append, as a reader gets them back."""
    import json

    from coach.storage.results import record_line

    return [json.loads(record_line(c.record)) for c in commands if isinstance(c, WriteRecord)]


def test_after_an_interrupt_and_a_resume_only_the_logs_last_line_carries_a_stop_reason():
    first = Driver(job_spec(max_epochs=3))
    call = first.start_static(T0)
    log = as_lines(first.send(epoch_done(call, T0 + 12, 0.75)))
    log += as_lines(first.send(StopRequested(T0 + 13)))
    assert [(r["phase"], r["stop_reason"]) for r in log] == [("training", None), ("interrupted", None)]
    assert first.lc.reason == "interrupted" and first.lc.history.stop_reason == "interrupted"

    history = history_from_records(log)
    assert history.stop_reason == "interrupted" and history.epochs_done == 1  # read back as interrupted
    second = Driver(job_spec(max_epochs=3))
    assert second.send(Resume(T0 + 100, history)) == [AskPolicy()]
    for epoch in (2, 3):
        _, out = second.train(T0 + 100 * epoch, STATIC, 0.75)
        log += as_lines(out)
    assert [r["epoch"] for r in log if r["phase"] == "training"] == [1, 2, 3]
    assert [r["stop_reason"] for r in log] == [None, None, None, "max_epochs"]


def recovered_line(at: float, epoch: int, checkpoint: str, cumulative: float, **fields) -> EpochRecord:
    return line("recovered", epoch=epoch, at=at, cost=0.0, cumulative=cumulative, checkpoint=checkpoint,
                extra={"reason": "the log held no finished step: going on from the newest complete checkpoint"},
                **fields)


def test_a_job_resumed_from_a_checkpoint_says_so_then_numbers_on_and_counts_the_lost_epochs():
    from coach.policy.history import history_from_checkpoint

    d = Driver(job_spec(max_epochs=5))
    out = d.send(Resume(T0, history_from_checkpoint(ckpt("epoch-0003"), 3, 24.0)))
    assert out == [WriteRecord(recovered_line(T0, 3, ckpt("epoch-0003"), 24.0)), AskPolicy()]
    assert not d.lc.history.recovered
    call, out = d.train(T0 + 100, STATIC, 0.75)
    assert (call.epoch, call.checkpoint_load) == (4, ckpt("epoch-0003"))
    assert out[0].record.cumulative_cost == 24.0 + COST_21 and out[0].record.stop_reason is None
    _, out = d.train(T0 + 200, STATIC, 0.75)
    assert out[0].record.epoch == 5 and out[0].record.stop_reason == "max_epochs"  # 3 lost + 2 = max_epochs
    # what the log now says reads back the same way
    lines = [json_line(recovered_line(T0, 3, ckpt("epoch-0003"), 24.0))]
    assert history_from_records(lines).epochs_done == 3
    assert history_from_records(lines).checkpoint == ckpt("epoch-0003")


def json_line(record: EpochRecord) -> dict:
    import json

    return json.loads(record.to_json())


def test_a_job_resumed_from_its_last_epochs_checkpoint_stops_at_once_with_max_epochs():
    from coach.policy.history import history_from_checkpoint

    d = Driver(job_spec(max_epochs=3))
    out = d.send(Resume(T0, history_from_checkpoint(ckpt("epoch-0003"), 3, 24.0)))
    assert out == [WriteRecord(recovered_line(T0, 3, ckpt("epoch-0003"), 24.0)),
                   WriteRecord(line("stopped", epoch=3, at=T0, cost=0.0, cumulative=24.0, stop="max_epochs")),
                   Finish("max_epochs")]


def test_a_job_resumed_with_its_budget_spent_stops_with_budget():
    d = Driver(job_spec(budget=20.0))
    history = history_from_records(LOG[:3])  # 12 spent
    assert d.send(Resume(T0, replace(history, spent=20.0))) == [
        WriteRecord(line("stopped", epoch=1, at=T0, cost=0.0, cumulative=20.0, stop="budget", budget=20.0)),
        Finish("budget")]


def test_a_dynamic_job_resumed_from_a_checkpoint_calibrates_again_from_it_before_its_next_epoch():
    from coach.policy.history import history_from_checkpoint

    d = Driver(dynamic_spec(), calibration=((1, 1), (2, 2)))
    out = d.send(Resume(T0, history_from_checkpoint(ckpt("epoch-0002"), 2, 10.0)))
    assert out[0].record.phase == "recovered"
    assert out[1:] == [Submit(F22), WatchPlacement(T0 + 30)]
    out = d.deployed(d.bind_all(T0 + 1)[0], T0 + 2)
    assert out == [invoke((SCHED, S0, W0), epoch=0, step=3, tag="calibration-1", load=ckpt("epoch-0002"),
                          fraction=0.25, following=F22)]
    out = d.send(epoch_done(out[0], T0 + 12, 1.0))
    out = d.send(epoch_done(out[-1], T0 + 22, 0.9))
    assert out[-1] == AskPolicy() and d.lc.history.epochs_done == 2
    _, out = d.train(T0 + 30, Counts(2, 1, affordable=True), 0.8)
    assert out[0].record.epoch == 3 and out[0].record.checkpoint == ckpt("epoch-0003")


# --------------------------------------------------------------------------- diverged training


class DivergedReply(WorkerReply):
    """What the contract's `diverged` field (added by another change) will carry; a stand-in until then."""

    def __init__(self, *args, diverged: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "diverged", diverged)


def test_a_non_finite_loss_ends_the_job_as_diverged_without_a_retry_and_charges_the_epoch():
    d = Driver()
    call = d.start_static(T0)
    done = epoch_done(call, T0 + 12, 0.5)
    replies = dict(done.replies)
    replies[W1] = replace(replies[W1], loss_sum=float("nan"))  # built directly: from_dict refuses NaN
    out = d.send(replace(done, replies=replies))
    assert out == [WriteRecord(line("stopped", epoch=0, at=T0 + 12, cost=COST_21, cumulative=COST_21,
                                    placement=names(F21), stop="diverged", charged=40.0,
                                    extra={"error": "epoch 1: worker rank 1 reported a non-finite loss"})),
                   Remove(F21), Release(F21), Finish("diverged")]
    assert d.lc.reason == "diverged" and d.lc.history.spent == COST_21 and d.lc.status().phase == "failed"
    assert as_lines(out)  # standard JSON: record_line raises on NaN


def test_a_worker_that_says_it_diverged_ends_the_job_even_without_a_loss_or_checkpoint():
    d = Driver()
    call = d.start_static(T0)
    done = epoch_done(call, T0 + 12, 0.5, checkpoint=None)
    replies = {W0: DivergedReply(rank=0, num_workers=2, loss_sum=None, samples=64, correct=0, compute_s=8.0,
                                 checkpoint_saved=None, diverged=True)}
    replies[W1] = WorkerReply(rank=1, num_workers=2, loss_sum=32.0, samples=64, correct=32, compute_s=7.5,
                              checkpoint_saved=None)  # worker 1 was fine
    out = d.send(replace(done, replies=replies))
    assert out[0].record.stop_reason == "diverged" and out[0].record.cost == COST_21
    assert out[0].record.extra["error"] == "epoch 1: worker rank 0 reported a non-finite loss"
    assert out[-1] == Finish("diverged")


@pytest.mark.parametrize("val_loss", [float("inf"), float("-inf"), float("nan")])
def test_a_validation_loss_that_is_not_finite_is_divergence_too(val_loss):
    d = Driver()
    call = d.start_static(T0)
    done = epoch_done(call, T0 + 12, 0.5)
    replies = dict(done.replies)
    replies[W0] = replace(replies[W0], val_loss=val_loss, val_accuracy=0.5)
    out = d.send(replace(done, replies=replies))
    assert out[0].record.phase == "stopped" and out[0].record.stop_reason == "diverged"
    assert "validation loss" in out[0].record.extra["error"]
    assert as_lines(out)[0]["cost"] == COST_21


def test_a_diverged_calibration_step_ends_the_job_as_diverged():
    d = Driver(dynamic_spec(), calibration=CALIBRATION)
    d.send(Start(T0))
    out = d.deployed(d.bind_all(T0 + 1)[0], T0 + 2)
    done = epoch_done(out[0], T0 + 12, float("inf"))
    out = d.send(done)
    assert out[0].record.stop_reason == "diverged"
    assert out[0].record.extra["error"] == "calibration step 1: worker rank 0 reported a non-finite loss"


def test_another_non_finite_number_in_a_reply_is_a_failed_attempt_not_a_record():
    d = Driver()
    call = d.start_static(T0)
    done = epoch_done(call, T0 + 12, 0.5)
    replies = dict(done.replies)
    replies[W0] = replace(replies[W0], val_loss=0.5, val_accuracy=float("nan"))
    out = d.send(replace(done, replies=replies))
    assert out == [WriteRecord(retry_line(T0 + 12, attempt=1, cost=COST_21, cumulative=COST_21, will_retry=True,
                                          error="lenet: error: reply: accuracy not finite", charged=40.0)),
                   WaitUntil(T0 + 12.5)]


def test_non_finite_numbers_in_a_decisions_details_are_recorded_as_null():
    d = Driver()
    d.send(Start(T0))
    details = {"speed_fit": {"b1": float("inf"), "notes": ["x"]}, "predicted_epoch_time_s": float("nan"),
               "per_epoch_budget": 2.5, "points": [1.0, float("-inf")]}
    out = d.send(Decided(T0 + 1, Counts(2, 1, affordable=False, details=details)))
    assert out[0].record.extra["decision"] == {"speed_fit": {"b1": None, "notes": ["x"]},
                                               "predicted_epoch_time_s": None, "per_epoch_budget": 2.5,
                                               "points": [1.0, None]}
    assert as_lines(out)


# --------------------------------------------------------------------------- what the summary says of a job


def test_the_summary_counts_of_a_job_that_failed_on_its_first_epoch_are_those_of_its_last_line():
    from coach.domain.records import JobOutcome
    from coach.policy.history import fill_outcome

    d = Driver(job_spec(max_retries=0))
    d.start_static(T0)
    out = d.send(failed(T0 + 20))
    assert out[1].record.phase == "stopped" and (out[1].record.workers, out[1].record.servers) == (2, 1)
    outcome = JobOutcome(submitted_s=T0)
    fill_outcome(outcome, d.lc.history, T0 + 21)
    assert (outcome.workers, outcome.servers) == (2, 1)
    from_log = JobOutcome(submitted_s=T0)
    fill_outcome(from_log, history_from_records(as_lines(out)), T0 + 21)
    assert (from_log.workers, from_log.servers, from_log.stop_reason) == (2, 1, outcome.stop_reason)


# --------------------------------------------------------------------------- what a view is told


def test_the_status_names_the_epoch_that_runs_and_the_epoch_that_is_done():
    d = Driver()
    call = d.start_static(T0)
    status = d.lc.status()
    assert (status.phase, status.epoch, status.message) == ("training", 0, "running epoch 1")
    d.send(epoch_done(call, T0 + 12, 0.75))
    status = d.lc.status()
    assert (status.phase, status.epoch, status.message) == ("training", 1, "epoch 1 done")
    d.send(Decided(T0 + 20, STATIC))
    d.bind_all(T0 + 21)
    assert d.lc.status().message == "running epoch 2"
    d.send(failed(T0 + 30))
    d.send(TimerFired(T0 + 30.5))
    d.send(Deployed(T0 + 31, F21))
    assert d.lc.status().message == "running epoch 2 (attempt 2)"


def test_a_plain_view_prints_each_epoch_once_unambiguously():
    """The view is told the status after every event, as the drivers do; it prints epoch N once, as done."""
    import io

    from coach.views.terminal import PlainView

    out = io.StringIO()
    view = PlainView("run-7", out=out)
    d = Driver(job_spec(max_epochs=3))
    view.update(d.lc.status())
    call = d.start_static(T0)
    view.update(d.lc.status())
    for epoch in (1, 2, 3):
        d.send(epoch_done(call, T0 + 100 * epoch, 0.75))
        view.update(d.lc.status())
        if epoch < 3:
            d.send(Decided(T0 + 100 * epoch + 1, STATIC))
            view.update(d.lc.status())
            call = d.bind_all(T0 + 100 * epoch + 2)[0]
            view.update(d.lc.status())
    lines = [text.split(" ", 1)[1] for text in out.getvalue().splitlines()]
    assert [text.split("epochs_done=")[1].split()[0] for text in lines] == ["0", "1", "2", "3"]
    assert lines[0].startswith("lenet: waiting epochs_done=0 ")
    assert lines[1].endswith("(epoch 1 done)") and lines[2].endswith("(epoch 2 done)")
    assert lines[3].startswith("lenet: done epochs_done=3 loss=0.7500 ")  # the last epoch ends the job
    assert not any("running" in text for text in lines)


# --------------------------------------------------------------------------- the budget is a hard cap


def test_an_epoch_runs_until_its_money_ends_and_a_timeout_there_ends_the_job_with_budget():
    # budget 30; F21 costs 1.5 per second: the deadline is 30 / 1.5 x 0.9 - 0.5 = 17.5 s, not epoch_timeout_s
    d = Driver(job_spec(budget=30.0))
    call = d.start_static(T0)
    assert (call.deadline_s, call.timeout_s) == (17.5, 32.5)
    # the functions give up at 17.5 s (HTTP 504): 4 x 17.5 slot-seconds, 2 x 0.5 + 2 x 0.25 per second = 26.25
    out = d.send(failed(T0 + 20, hold=17.5, message="deadline of 17.5 s exceeded"))
    assert out[0] == WriteRecord(line("retry", epoch=1, at=T0 + 20, cost=26.25, cumulative=26.25, placement=names(F21),
                                      attempt=1, budget=30.0, charged=70.0,
                                      extra={"error": "lenet-worker-1: timeout: deadline of 17.5 s exceeded",
                                             "will_retry": False}))
    assert out[1].record.stop_reason == "budget" and out[1].record.cumulative_cost == 26.25 <= 30.0
    assert out[-1] == Finish("budget")


def test_a_step_whose_money_cannot_pay_an_epochs_fixed_part_stops_before_it_is_invoked():
    # 1.2 left pays F21 for 1.2 / 1.5 x 0.9 - 0.5 = 0.22 s, less than MIN_EPOCH_S (0.3 s)
    d = Driver(job_spec(budget=1.2))
    assert d.send(Start(T0)) == [AskPolicy()]
    d.send(Decided(T0, STATIC))
    d.bind_all(T0 + 1)
    out = d.send(Deployed(T0 + 2, F21))
    assert not any(isinstance(command, InvokeEpoch) for command in out)
    assert out[0].record.stop_reason == "budget" and out[0].record.cumulative_cost == 0.0
    assert out[-1] == Finish("budget")


def test_a_timeout_far_from_the_money_limit_is_retried_as_before():
    d = Driver(job_spec(budget=100_000.0))
    d.start_static(T0)
    out = d.send(failed(T0 + 10))
    assert out[0].record.extra["will_retry"] is True and out[-1] == WaitUntil(T0 + 10.5)


# --------------------------------------------------------------------------- batch scaling


def test_an_adaptive_job_asks_for_the_noise_scale_records_it_and_grows_the_batch_when_it_is_large():
    d = Driver(job_spec(batch_scaling="adaptive"))
    assert d.send(Start(T0)) == [AskPolicy()]
    d.send(Decided(T0, STATIC))
    d.bind_all(T0 + 1)
    call = d.send(Deployed(T0 + 2, F21))[0]
    # before any measurement: the job file's batch and learning rate, and the workers are asked to measure
    assert call.hyper == Hyper(32, "sgd", 0.05, {"momentum": 0.9}, 7, measure_noise=True)
    done = epoch_done(call, T0 + 12, 0.5, samples=64)
    # each worker's 64 samples are 2 steps of 32 in 8 s; they measured tr(Sigma) = 6400, |G|^2 = 1: B = 6400
    done = replace(done, replies={fid: replace(r, grad_var=6400.0, grad_sqr=1.0, noise_steps=2)
                                  for fid, r in done.replies.items()})
    out = d.send(done)

    line = out[0].record.extra
    shown = ("batch_size", "global_batch", "learning_rate", "batch_scaling", "grad_noise_scale")
    assert {k: line[k] for k in shown} == {"batch_size": 32, "global_batch": 64, "learning_rate": 0.05,
                                           "batch_scaling": "adaptive", "grad_noise_scale": 6400.0}
    d.send(Decided(T0 + 100, STATIC))
    call = d.bind_all(T0 + 100)[-1]
    # one step time known (4 s at 32): half overhead, so M* = sqrt(2 x 6400 x 2 x 32 / 2) = 640, beyond a worker's
    # whole shard (64 samples): the batch doubles to the shard, the learning rate grows by AdaScale's gain
    assert call.hyper.batch_size == 64 and call.hyper.measure_noise
    assert call.hyper.learning_rate == pytest.approx(0.05 * 128 / 32 * (6400 + 32) / (6400 + 128))


def test_a_linear_job_scales_the_learning_rate_with_the_workers_and_asks_for_no_measurement():
    d = Driver(job_spec(batch_scaling="linear"))
    d.send(Start(T0))
    d.send(Decided(T0, STATIC))
    d.bind_all(T0 + 1)
    call = d.send(Deployed(T0 + 2, F21))[0]

    assert call.hyper == Hyper(32, "sgd", 0.1, {"momentum": 0.9}, 7)
    line = d.send(epoch_done(call, T0 + 12, 0.5))[0].record.extra
    assert line == {"batch_size": 32, "global_batch": 64, "learning_rate": 0.1, "batch_scaling": "linear"}


def test_a_users_stop_lets_the_epoch_in_flight_finish_then_ends_the_job_for_good():
    """`coach stop` / the HTTP API: the epoch's line is written, then a `stopped` line with `stopped_by_user`."""
    d = Driver()
    call = d.start_static(T0)
    assert d.send(StopRequested(T0 + 5, USER_STOP)) == []  # nothing is cancelled: the epoch runs on
    assert d.lc.status().message == "stopping once its step in flight ends"
    out = d.send(epoch_done(call, T0 + 12, 0.75))
    assert out == [WriteRecord(trained(F21, epoch=1, loss=0.75, cost=COST_21, cumulative=15.0, end=T0 + 12,
                                       tag="epoch-0001")),
                   PruneCheckpoints(ckpt("epoch-0001")),
                   WriteRecord(line("stopped", at=T0 + 12, epoch=1, cost=0.0, cumulative=15.0, placement=names(F21),
                                    stop=USER_STOP)),
                   Remove(F21), Release(F21), Finish(USER_STOP)]
    assert d.lc.status().phase == USER_STOP and d.lc.reason == USER_STOP


def test_an_interrupt_after_a_users_stop_keeps_the_users_reason():
    d = Driver()
    d.send(Start(T0))
    d.send(Decided(T0, STATIC))
    d.bind_all(T0 + 1)
    assert d.send(StopRequested(T0 + 2, USER_STOP)) == []
    assert d.send(StopRequested(T0 + 2.5)) == []
    assert d.send(Deployed(T0 + 3, F21))[-1] == Finish(USER_STOP)
