"""One lifecycle per job over a Platform: place -> deploy -> invoke each epoch -> record -> stop -> release.

Every job runs in its own thread and never waits for another job's phase; the only shared things are the
slot allocator (a lock around pure placement) and the platform. Side effects: invokes functions, appends to
the job's result log, updates the view.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from coach.cluster import ClusterSpec, ClusterState
from coach.epochs import BadReplies, EpochMetrics, aggregate
from coach.jobs import JobSpec
from coach.model.cost import epoch_cost, predict_next_epoch_cost
from coach.placement import Placer
from coach.platforms.base import Failure, FunctionRef, Platform, Reply
from coach.policy.stopping import StopInputs, decide, stop_metric
from coach.progress import JobStatus, QuietView
from coach.results import EpochRecord, JobOutcome, ResultLog, iso
from coach.store import CheckpointStore

INVOKE_GRACE_S = 15.0  # the HTTP timeout exceeds the epoch deadline so the function's own 504 arrives first
MAX_PLACEMENT_BACKOFF_S = 2.0


class Allocator:
    """The cluster's slots, shared by all job threads: a lock and a condition around pure placement."""

    def __init__(self, spec: ClusterSpec, placer: Placer):
        self.spec = spec
        self.placer = placer
        self._state = ClusterState(spec)
        self._changed = threading.Condition()

    def place(self, names: list[str]) -> Mapping[str, str] | None:
        with self._changed:
            placement = self.placer(self._state, names)
            if placement is not None:
                self._state = self._state.bind(placement)
            return placement

    def release(self, names) -> None:
        with self._changed:
            self._state = self._state.release(names)
            self._changed.notify_all()

    def wait_for_change(self, timeout_s: float) -> None:
        with self._changed:
            self._changed.wait(timeout_s)

    @property
    def free_slots(self) -> int:
        with self._changed:
            return self._state.free_slots


@dataclass
class RunContext:
    """What every job of one run shares."""

    run_id: str  # results/<run_id>/
    run_dir: Path  # where logs, checkpoints and the summary go
    cluster: ClusterSpec  # nodes, slots, prices
    platform: Platform  # where functions run
    allocator: Allocator  # who holds which slot
    store: CheckpointStore  # where checkpoints live
    view: QuietView  # progress display
    stop: threading.Event = field(default_factory=threading.Event)  # set on Ctrl-C / SIGTERM


@dataclass(frozen=True)
class EpochOutcome:
    metrics: EpochMetrics  # aggregated losses and accuracies
    placement: Mapping[str, str]  # function -> node
    epoch_time_s: float  # wall time of the whole epoch
    cost: float  # price x slot-seconds
    start_s: float  # epoch seconds at the start
    end_s: float  # epoch seconds at the end
    checkpoint: str  # prefix saved by rank 0


def function_names(job: str, workers: int, servers: int) -> list[str]:
    """Scheduler first, then servers, then workers: the order placement and deployment follow."""
    return ([f"{job}-scheduler-0"] + [f"{job}-server-{i}" for i in range(servers)]
            + [f"{job}-worker-{i}" for i in range(workers)])


def role_of(name: str) -> str:
    return name.rsplit("-", 2)[-2]


class JobRunner:
    """The lifecycle of one job. `run()` never raises: every ending becomes a `stop_reason`."""

    def __init__(self, spec: JobSpec, ctx: RunContext, outcome: JobOutcome,
                 on_finish: Callable[[], None] = lambda: None):
        self.spec = spec
        self.ctx = ctx
        self.outcome = outcome
        self.on_finish = on_finish
        self.functions: dict[str, FunctionRef] = {}
        self.placement: Mapping[str, str] = {}
        self.checkpoint: str | None = None
        self.metrics: list[float] = []
        self.costs: list[float] = []
        self.cumulative_cost = 0.0
        self.phase = "waiting"
        self.message = ""
        self.last: EpochMetrics | None = None
        self.unrecorded_cost = 0.0  # spent by a failed epoch, charged on the closing line

    # -- the view -------------------------------------------------------------------------------------------
    def _show(self, phase: str | None = None, message: str | None = None) -> None:
        self.phase = phase or self.phase
        self.message = self.message if message is None else message
        self.ctx.view.update(JobStatus(
            job=self.spec.name, phase=self.phase, epoch=len(self.metrics),
            loss=self.last.loss if self.last else None, val_loss=self.last.val_loss if self.last else None,
            workers=self.spec.workers or 0, servers=self.spec.servers or 0,
            cost=self.cumulative_cost, budget=self.spec.budget, message=self.message))

    # -- lifecycle ------------------------------------------------------------------------------------------
    def run(self) -> JobOutcome:
        log = ResultLog(self.ctx.run_dir / f"{self.spec.name}.jsonl")
        reason = None
        try:
            reason = self._train(log)
        except Exception as error:  # a bug in one job must not take the others down
            reason = f"failed: internal error: {type(error).__name__}: {error}"
            self._write_stop(log, reason)
        finally:
            self._release()
            log.close()
            self.outcome.finished_s = time.time()
            self.outcome.stop_reason = reason
            self.outcome.total_cost = self.cumulative_cost
            ended = "done" if reason in ("target_loss", "max_epochs", "budget") else (
                "interrupted" if reason == "interrupted" else "failed")
            self._show(ended, reason or "")
            self.on_finish()
        return self.outcome

    def _train(self, log: ResultLog) -> str:
        acquired = self._acquire(self.spec.workers, self.spec.servers)
        if isinstance(acquired, str):
            self._write_stop(log, acquired)
            return acquired
        epoch = 0
        while True:
            epoch += 1
            if self.ctx.stop.is_set():
                self._write_stop(log, "interrupted")
                return "interrupted"
            self._show("training", f"epoch {epoch}")
            result = self._epoch(epoch)
            if isinstance(result, Failure):
                reason = "interrupted" if self.ctx.stop.is_set() else f"failed: {result.describe()}"
                self._write_stop(log, reason)
                return reason
            self._record(log, epoch, result)
            if self.outcome.stop_reason:
                return self.outcome.stop_reason

    def _acquire(self, workers: int, servers: int) -> dict[str, FunctionRef] | str:
        """Wait for slots (all or nothing), then start the functions. Returns the refs or a stop reason."""
        names = function_names(self.spec.name, workers, servers)
        total = self.ctx.cluster.total_slots
        if len(names) > total:
            return f"unschedulable: needs {len(names)} slots, the cluster has {total}"
        backoff_s = 0.1
        while (placement := self.ctx.allocator.place(names)) is None:
            if self.ctx.stop.is_set():
                return "interrupted"
            self._show("waiting", f"needs {len(names)} slots, {self.ctx.allocator.free_slots} free")
            self.ctx.allocator.wait_for_change(backoff_s)
            backoff_s = min(backoff_s * 2, MAX_PLACEMENT_BACKOFF_S)
        self.placement = placement
        self._show("deploying", f"{len(names)} functions")
        with ThreadPoolExecutor(len(names)) as pool:
            results = list(pool.map(lambda n: self.ctx.platform.deploy(n, role_of(n), placement[n]), names))
        failures = [r for r in results if isinstance(r, Failure)]
        self.functions = {r.name: r for r in results if isinstance(r, FunctionRef)}
        if failures:
            return "interrupted" if self.ctx.stop.is_set() else f"failed: {failures[0].describe()}"
        return self.functions

    def _release(self) -> None:
        for ref in self.functions.values():
            self.ctx.platform.remove(ref)
        self.ctx.allocator.release(self.placement.keys())
        self.functions, self.placement = {}, {}

    # -- one epoch ------------------------------------------------------------------------------------------
    def _payload(self, epoch: int, save: str) -> dict:
        spec = self.spec
        scheduler = next(ref for ref in self.functions.values() if ref.role == "scheduler")
        host, port = self.ctx.platform.rendezvous_address(scheduler)
        return {
            "job": spec.name,
            "epoch": epoch,
            "attempt": 1,
            "ps": {"root_uri": host, "root_port": port, "num_servers": spec.servers, "num_workers": spec.workers},
            "model": {"path": str(spec.model_path)},
            "data": {"fraction": 1.0},
            "hyper": {"batch_size": spec.batch_size, "optimizer": spec.optimizer,
                      "learning_rate": spec.learning_rate, "optimizer_params": dict(spec.optimizer_params),
                      "seed": spec.seed},
            "checkpoint": {"load": self.checkpoint, "save": save},
            "deadline_s": spec.epoch_timeout_s,
        }

    def _epoch(self, epoch: int) -> EpochOutcome | Failure:
        save = self.ctx.store.prefix(self.spec.name, epoch)
        payload = self._payload(epoch, save)
        start_s, started = time.time(), time.monotonic()
        replies: dict[str, Reply] = {}
        failure: Failure | None = None
        timeout_s = self.spec.epoch_timeout_s + INVOKE_GRACE_S
        with ThreadPoolExecutor(len(self.functions)) as pool:
            futures = {pool.submit(self.ctx.platform.invoke, ref, {**payload, "role": ref.role}, timeout_s): ref
                       for ref in self.functions.values()}
            for future in as_completed(futures):
                result = future.result()
                if isinstance(result, Reply):
                    replies[result.function] = result
                elif failure is None:
                    failure = result
                    for ref in self.functions.values():  # the others would wait for it until their deadline
                        self.ctx.platform.cancel(ref)
        epoch_time_s = time.monotonic() - started
        prices = {n.name: n.price_per_slot_s for n in self.ctx.cluster.nodes}
        durations = {name: reply.duration_s for name, reply in replies.items()}
        if failure is not None:
            durations[failure.function] = failure.duration_s
            return self._charge_failed(epoch_cost(durations, self.placement, prices), failure)
        cost = epoch_cost(durations, self.placement, prices)
        workers = [r.body for r in replies.values() if self.functions[r.function].role == "worker"]
        try:
            metrics = aggregate(workers, self.spec.workers)
        except BadReplies as error:
            return self._charge_failed(cost, Failure(self.spec.name, "error", str(error), epoch_time_s))
        if not self.ctx.store.complete(save):
            return self._charge_failed(
                cost, Failure(f"{self.spec.name}-worker", "error", "rank 0 did not save the checkpoint", epoch_time_s))
        return EpochOutcome(metrics, dict(self.placement), epoch_time_s, cost, start_s, time.time(), save)

    def _charge_failed(self, cost: float, failure: Failure) -> Failure:
        """A failed epoch still used its slots: its cost counts, on the closing line."""
        self.unrecorded_cost += cost
        self.cumulative_cost += cost
        return failure

    def _record(self, log: ResultLog, epoch: int, result: EpochOutcome) -> None:
        spec, metrics = self.spec, result.metrics
        self.checkpoint = result.checkpoint
        self.ctx.store.prune(spec.name, keep=result.checkpoint)
        self.last = metrics
        self.metrics.append(stop_metric(metrics.loss, metrics.val_loss))
        self.costs.append(result.cost)
        self.cumulative_cost += result.cost
        reason = decide(StopInputs(
            metrics=self.metrics, target_loss=spec.target_loss, consecutive=spec.consecutive,
            max_epochs=spec.max_epochs, cumulative_cost=self.cumulative_cost, budget=spec.budget,
            predicted_next_cost=predict_next_epoch_cost(self.costs)))
        log.append(EpochRecord(
            run_id=self.ctx.run_id, job=spec.name, phase="training", epoch=epoch, workers=spec.workers,
            servers=spec.servers, placement=result.placement, loss=metrics.loss, val_loss=metrics.val_loss,
            accuracy=metrics.accuracy, train_accuracy=metrics.train_accuracy, samples=metrics.samples,
            epoch_time_s=round(result.epoch_time_s, 4), compute_s=round(metrics.compute_s, 4),
            start=iso(result.start_s), end=iso(result.end_s), cost=result.cost,
            cumulative_cost=self.cumulative_cost, budget=spec.budget, stop_reason=reason))
        self.outcome.epochs = epoch
        self.outcome.final_loss = metrics.loss
        self.outcome.final_val_loss = metrics.val_loss
        self.outcome.workers, self.outcome.servers = spec.workers, spec.servers
        self.outcome.total_cost = self.cumulative_cost
        self.outcome.stop_reason = reason
        self._show("training", f"epoch {epoch} done")

    def _write_stop(self, log: ResultLog, reason: str) -> None:
        """The closing line of a job that stopped without finishing an epoch (failure, interrupt, no slots)."""
        now = time.time()
        log.append(EpochRecord(
            run_id=self.ctx.run_id, job=self.spec.name, phase="stopped", epoch=len(self.metrics),
            workers=self.spec.workers, servers=self.spec.servers, placement=dict(self.placement),
            loss=None, val_loss=None, accuracy=None, train_accuracy=None, samples=0, epoch_time_s=0.0,
            compute_s=None, start=iso(now), end=iso(now), cost=self.unrecorded_cost, cumulative_cost=self.cumulative_cost,
            budget=self.spec.budget, stop_reason=reason))
