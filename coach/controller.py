"""One lifecycle per job over a Platform: place -> deploy -> invoke each epoch -> record -> stop -> release.

Every job runs in its own thread and never waits for another job's phase; the only shared things are the
slot allocator (a lock around pure placement) and the platform. Side effects: invokes functions, appends to
the job's result log, updates the view.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from coach.domain.cluster import ClusterSpec
from coach.model.epochs import BadReplies, EpochMetrics, aggregate
from coach.drivers.fanout import invoke_together
from coach.domain.jobs import JobSpec
from coach.model.cost import epoch_cost, predict_next_epoch_cost
from coach.policy.planning import CALIBRATION_POINTS, Plan, plan
from coach.policy.allocation import slots_for
from coach.domain.invocation import Failure, FunctionRef, Platform
from coach.policy.stopping import StopInputs, decide, stop_metric
from coach.ui.progress import JobStatus, QuietView
from coach.domain.records import EpochRecord, JobOutcome, iso
from coach.storage.results import ResultLog
from coach.placement.fork import Allocator, has_quorum, role_counts, role_of
from coach.storage.checkpoints import CheckpointStore

INVOKE_GRACE_S = 15.0  # the HTTP timeout exceeds the epoch deadline so the function's own 504 arrives first
MAX_REQUEUES = 5  # a job that misses its quorum this often stops as unschedulable
REQUEUE_BACKOFF_S = 1.0  # first wait after giving slots back; doubles per requeue
MAX_REQUEUE_BACKOFF_S = 30.0
RETRY_BACKOFF_S = 0.5  # first wait before retrying a failed epoch; doubles per attempt
MAX_RETRY_BACKOFF_S = 8.0


@dataclass
class RunContext:
    """What every job of one run shares."""

    run_id: str  # results/<run_id>/
    run_dir: Path  # where logs, checkpoints and the summary go
    cluster: ClusterSpec  # nodes, slots, prices
    platform: Platform  # where functions run
    allocator: Allocator  # who holds which slot (the scheduler_fork profile)
    store: CheckpointStore  # where checkpoints live
    view: QuietView  # progress display
    placement_timeout_s: float = 30.0  # how long a job waits for its quorum before it is requeued
    stop: threading.Event = field(default_factory=threading.Event)  # set on Ctrl-C / SIGTERM


@dataclass(frozen=True)
class EpochOutcome:
    metrics: EpochMetrics  # aggregated losses and accuracies
    workers: int  # MXNet workers of this epoch
    servers: int  # MXNet servers of this epoch
    placement: Mapping[str, str]  # function -> node
    epoch_time_s: float  # wall time of the whole epoch
    cost: float  # price x slot-seconds
    start_s: float  # epoch seconds at the start
    end_s: float  # epoch seconds at the end
    checkpoint: str  # prefix saved by rank 0
    attempt: int = 1  # which try of the epoch this was


def function_names(job: str, workers: int, servers: int) -> list[str]:
    """Scheduler first, then servers, then workers: the order placement and deployment follow."""
    return ([f"{job}-scheduler-0"] + [f"{job}-server-{i}" for i in range(servers)]
            + [f"{job}-worker-{i}" for i in range(workers)])


class JobRunner:
    """The lifecycle of one job. `run()` never raises: every ending becomes a `stop_reason`."""

    def __init__(self, spec: JobSpec, ctx: RunContext, outcome: JobOutcome,
                 on_finish: Callable[[], None] = lambda: None, min_gain: float = 0.05):
        self.spec = spec
        self.ctx = ctx
        self.outcome = outcome
        self.on_finish = on_finish
        self.functions: dict[str, FunctionRef] = {}
        self.placement: dict[str, str] = {}  # function -> node, for the deployed functions
        self.checkpoint: str | None = None
        self.metrics: list[float] = []
        self.costs: list[float] = []
        self.cumulative_cost = 0.0
        self.phase = "waiting"
        self.message = ""
        self.last: EpochMetrics | None = None
        self.unrecorded_cost = 0.0  # spent by a failed epoch, charged on the closing line
        self.workers, self.servers = spec.workers or 0, spec.servers or 0  # counts of the current functions
        self.counts_of_last = (self.workers, self.servers)  # counts of the last recorded epoch
        self.records: list[dict] = []  # this job's log lines, as written (the planner reads them)
        self.submitted: list[str] = []  # function names with a pod in the scheduler (bound or pending)
        self.log: ResultLog | None = None  # set by run()
        self.queued = threading.Event()  # set once its first pods are submitted (or it ended): FIFO start order
        self.min_gain = min_gain  # threshold of relative gain for one more worker or server

    def adopt(self, records: list[dict]) -> None:
        """Continue from a log written by an earlier controller: its epochs, costs and newest checkpoint."""
        for r in records:
            self.records.append(r)
            if r.get("phase") in ("calibration", "training"):
                self.costs.append(float(r["cost"]))
                self.counts_of_last = (int(r["workers"]), int(r["servers"]))
                if r.get("checkpoint"):
                    self.checkpoint = r["checkpoint"]
            if r.get("phase") == "training":
                self.metrics.append(stop_metric(r["loss"], r.get("val_loss")))
                self.outcome.epochs = int(r["epoch"])
                self.outcome.final_loss, self.outcome.final_val_loss = r["loss"], r.get("val_loss")
        if records:
            self.cumulative_cost = float(records[-1]["cumulative_cost"])
        if self.checkpoint and not self.ctx.store.complete(self.checkpoint):
            raise ValueError(f"checkpoint {self.checkpoint} of job {self.spec.name} is missing or incomplete")

    # -- the view -------------------------------------------------------------------------------------------
    def _show(self, phase: str | None = None, message: str | None = None) -> None:
        self.phase = phase or self.phase
        self.message = self.message if message is None else message
        self.ctx.view.update(JobStatus(
            job=self.spec.name, phase=self.phase, epoch=len(self.metrics),
            loss=self.last.loss if self.last else None, val_loss=self.last.val_loss if self.last else None,
            workers=self.workers, servers=self.servers,
            cost=self.cumulative_cost, budget=self.spec.budget, message=self.message))

    # -- lifecycle ------------------------------------------------------------------------------------------
    def run(self) -> JobOutcome:
        log = self.log = ResultLog(self.ctx.run_dir / f"{self.spec.name}.jsonl")
        reason = None
        try:
            reason = self._train(log)
        except Exception as error:  # a bug in one job must not take the others down
            reason = f"failed: internal error: {type(error).__name__}: {error}"
            self._write_stop(log, reason)
        finally:
            self.queued.set()
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
        if not self.spec.is_static:
            reason = self._calibrate(log)
            if reason:
                return reason
        epoch = len(self.metrics)  # epochs an earlier controller finished, when resuming
        while True:
            epoch += 1
            if self.ctx.stop.is_set():
                return self._write_stop(log, "interrupted")
            decision: dict = {}
            if self.spec.is_static:
                workers, servers = self.spec.workers, self.spec.servers
            else:
                next_plan = self._plan()
                decision = {"decision": next_plan.to_dict()}
                if not next_plan.affordable:
                    return self._write_stop(log, "budget", decision)
                workers, servers = next_plan.allocation.workers, next_plan.allocation.servers
            acquired = self._ensure(workers, servers)
            if isinstance(acquired, str):
                return self._write_stop(log, acquired, decision)
            workers, servers = self.workers, self.servers  # what was actually placed
            self._show("training", f"epoch {epoch}")
            result = self._attempts(log, epoch, f"epoch-{epoch:04d}", workers, servers, 1.0, decision)
            if isinstance(result, str):
                return self._write_stop(log, result, decision)
            self._record(log, "training", epoch, result, decision)
            if self.outcome.stop_reason:
                return self.outcome.stop_reason

    def _calibrate(self, log: ResultLog) -> str | None:
        """Four mini-epochs at (1,1), (1,2), (2,1), (2,2) on a slice of the data; they train for real too."""
        fraction = self.spec.calibration_fraction
        if sum(1 for r in self.records if r.get("phase") == "calibration") >= len(CALIBRATION_POINTS):
            return None
        acquired = self._ensure(*CALIBRATION_POINTS[-1])  # every point uses a subset of these functions
        if isinstance(acquired, str):
            return self._write_stop(log, acquired)
        done = sum(1 for r in self.records if r.get("phase") == "calibration")  # when resuming
        for step, (workers, servers) in enumerate(CALIBRATION_POINTS, start=1):
            if step <= done:
                continue
            if self.ctx.stop.is_set():
                return self._write_stop(log, "interrupted")
            if self.costs:  # the last step's cost, scaled by the slots this step uses
                predicted = self.costs[-1] * slots_for(workers, servers) / slots_for(*self.counts_of_last)
                if self.cumulative_cost + predicted > self.spec.budget:
                    return self._write_stop(log, "budget")
            self._show("calibration", f"step {step}/{len(CALIBRATION_POINTS)} at {workers}/{servers}")
            extra = {"calibration_step": step, "data_fraction": fraction}
            workers, servers = min(workers, self.workers), min(servers, self.servers)  # what was placed
            result = self._attempts(log, 0, f"calibration-{step}", workers, servers, fraction, extra)
            if isinstance(result, str):
                return self._write_stop(log, result)
            self._record(log, "calibration", 0, result, extra)
            if self.cumulative_cost >= self.spec.budget:
                return self._write_stop(log, "budget")
        return None

    def _attempts(self, log: ResultLog, epoch: int, tag: str, workers: int, servers: int, fraction: float,
                  extra: Mapping) -> EpochOutcome | str:
        """Run one epoch, retrying a failed attempt from the last checkpoint with fresh function instances.

        Every failed attempt is logged (phase "retry") with its cost; after `max_retries` retries the job stops.
        Returns the outcome, or the stop reason.
        """
        save = self.ctx.store.prefix(self.spec.name, tag)
        attempt = 1
        while True:
            result = self._epoch(epoch, save, workers, servers, fraction, attempt)
            if not isinstance(result, Failure):
                return result
            if self.ctx.stop.is_set():
                return "interrupted"
            exhausted = attempt > self.spec.max_retries or not result.retryable
            self._write_line(log, "retry", epoch, None, {**extra, "error": result.describe(),
                                                         "will_retry": not exhausted}, attempt)
            if exhausted:
                return f"failed after {attempt} attempts: {result.describe()}"
            self._show("retrying", f"attempt {attempt} failed: {result.describe()}")
            if self.ctx.stop.wait(min(RETRY_BACKOFF_S * 2 ** (attempt - 1), MAX_RETRY_BACKOFF_S)):
                return "interrupted"
            refreshed = self._refresh(self._epoch_functions(workers, servers))
            if isinstance(refreshed, str):
                return refreshed
            attempt += 1

    def _refresh(self, names: list[str]) -> dict[str, FunctionRef] | str:
        """Replace these functions by fresh instances on the same nodes (a dead or wedged host is gone)."""
        for name in names:
            ref = self.functions.pop(name, None)
            if ref is not None:
                self.ctx.platform.remove(ref)
        return self._deploy(names)

    def _plan(self) -> Plan:
        held = len(self.placement)
        prices = [node.price_per_slot_s for node in self.ctx.cluster.nodes]
        return plan(self.spec, self.records, self.ctx.allocator.slots_for_growth(self.spec.name, held),
                    self.spec.budget - self.cumulative_cost, max(prices), self.min_gain)

    def _ensure(self, workers: int, servers: int) -> dict[str, FunctionRef] | str:
        """Ask the scheduler for the functions of (workers, servers); run with what it binds.

        Keeps what stays, releases what is no longer wanted, submits pods for what is new, then waits for the
        job's quorum (scheduler, a server, a worker). The epoch runs with the functions actually bound, and
        MXNet counts that match them; pods still pending join a later epoch when bound. Returns the refs, or a
        stop reason.
        """
        wanted = function_names(self.spec.name, workers, servers)
        total = self.ctx.cluster.total_slots
        if len(wanted) > total:
            return f"unschedulable: needs {len(wanted)} slots, the cluster has {total}"
        surplus = [name for name in self.submitted if name not in wanted]
        for name in surplus:
            if name in self.functions:
                self.ctx.platform.remove(self.functions.pop(name))
            self.placement.pop(name, None)
        if surplus:
            self.ctx.allocator.release(surplus)
            self.submitted = [name for name in self.submitted if name not in surplus]
        new = [name for name in wanted if name not in self.submitted]
        self.ctx.allocator.submit(self.spec.name, new)
        self.submitted += new
        self.queued.set()
        return self._await_quorum(wanted)

    def _await_quorum(self, wanted: list[str]) -> dict[str, FunctionRef] | str:
        allocator = self.ctx.allocator
        deadline = time.monotonic() + self.ctx.placement_timeout_s
        requeues = 0
        while True:
            bound = allocator.poll(self.spec.name)
            if has_quorum(bound):
                allocator.set_waiting(self.spec.name, 0)
                fresh = [name for name in wanted if name in bound and name not in self.functions]
                self.placement.update({name: bound[name] for name in fresh})
                deployed = self._deploy(fresh) if fresh else self.functions
                if isinstance(deployed, str):
                    return deployed
                counts = role_counts(self.functions)
                self.workers, self.servers = counts["worker"], counts["server"]
                return self.functions
            if self.ctx.stop.is_set():
                return "interrupted"
            allocator.set_waiting(self.spec.name, len(wanted) - len(bound))
            why = allocator.explain(self.spec.name)
            if time.monotonic() < deadline:
                self._show("waiting", f"{len(bound)}/{len(wanted)} placed: {why}")
                allocator.wait_for_change(0.2)
                continue
            # no quorum in time: give back what is held so others can run, then queue again after a backoff
            requeues += 1
            allocator.release(self.submitted)
            allocator.set_waiting(self.spec.name, 0)
            self.submitted, self.placement = [], {}
            self._write_line(self.log, "requeued", len(self.metrics), None,
                             {"reason": why, "requeue": requeues, "placed": dict(bound)})
            if requeues > MAX_REQUEUES:
                return f"unschedulable: no quorum after {requeues} tries: {why}"
            backoff_s = min(REQUEUE_BACKOFF_S * 2 ** (requeues - 1), MAX_REQUEUE_BACKOFF_S)
            self._show("requeued", f"{why}; retry in {backoff_s:g} s")
            if self.ctx.stop.wait(backoff_s):
                return "interrupted"
            allocator.submit(self.spec.name, wanted)
            self.submitted = list(wanted)
            deadline = time.monotonic() + self.ctx.placement_timeout_s

    def _deploy(self, names: list[str]) -> dict[str, FunctionRef] | str:
        """Start placed functions and warm the new workers; returns the refs or a stop reason."""
        self._show("deploying", f"{len(names)} functions")
        with ThreadPoolExecutor(len(names)) as pool:
            results = list(pool.map(lambda n: self.ctx.platform.deploy(n, role_of(n), self.placement[n]), names))
        self.functions.update({r.name: r for r in results if isinstance(r, FunctionRef)})
        failures = [r for r in results if isinstance(r, Failure)]
        new_workers = [r for r in results if isinstance(r, FunctionRef) and r.role == "worker"]
        if not failures and new_workers:  # load the model and its data now, not inside the first timed epoch
            warm = {"action": "warm", "model": {"path": str(self.spec.model_path)}}
            warmed = invoke_together(self.ctx.platform, new_workers, lambda ref: warm, self.spec.epoch_timeout_s)
            failures = [warmed.failure] if warmed.failure else []
        if failures:
            return "interrupted" if self.ctx.stop.is_set() else f"failed: {failures[0].describe()}"
        return self.functions

    def _release(self) -> None:
        for ref in self.functions.values():
            self.ctx.platform.remove(ref)
        self.ctx.allocator.release(self.submitted)
        self.ctx.allocator.set_waiting(self.spec.name, 0)
        self.functions, self.placement, self.submitted = {}, {}, []

    # -- one epoch ------------------------------------------------------------------------------------------
    def _payload(self, epoch: int, workers: int, servers: int, fraction: float, save: str) -> dict:
        spec = self.spec
        scheduler = next(ref for ref in self.functions.values() if ref.role == "scheduler")
        host, port = self.ctx.platform.rendezvous_address(scheduler)
        return {
            "job": spec.name,
            "epoch": epoch,
            "step": len(self.costs) + 1,  # calibration mini-epochs and epochs, counted together: seeds shuffling
            "attempt": 1,
            "ps": {"root_uri": host, "root_port": port, "num_servers": servers, "num_workers": workers},
            "model": {"path": str(spec.model_path)},
            "data": {"fraction": fraction},
            "hyper": {"batch_size": spec.batch_size, "optimizer": spec.optimizer,
                      "learning_rate": spec.learning_rate, "optimizer_params": dict(spec.optimizer_params),
                      "seed": spec.seed},
            "checkpoint": {"load": self.checkpoint, "save": save},
            "deadline_s": spec.epoch_timeout_s,
        }

    def _epoch_functions(self, workers: int, servers: int) -> list[str]:
        """The PS scheduler and the first `servers` servers and `workers` workers among the deployed functions."""
        deployed = sorted(self.functions, key=lambda n: (role_of(n), int(n.rsplit("-", 1)[1])))
        pick = {"scheduler": 1, "server": servers, "worker": workers}
        chosen = []
        for name in deployed:
            if pick[role_of(name)] > 0:
                pick[role_of(name)] -= 1
                chosen.append(name)
        return chosen

    def _epoch(self, epoch: int, save: str, workers: int, servers: int, fraction: float,
               attempt: int = 1) -> EpochOutcome | Failure:
        """Invoke the scheduler, `servers` servers and `workers` workers together; collect; price the epoch."""
        used = {name: self.functions[name] for name in self._epoch_functions(workers, servers)}
        placement = {name: self.placement[name] for name in used}
        payload = {**self._payload(epoch, workers, servers, fraction, save), "attempt": attempt}
        start_s = time.time()
        together = invoke_together(self.ctx.platform, list(used.values()), lambda ref: {**payload, "role": ref.role},
                                   self.spec.epoch_timeout_s + INVOKE_GRACE_S)
        replies, failure, epoch_time_s = together.replies, together.failure, together.wall_s
        prices = {n.name: n.price_per_slot_s for n in self.ctx.cluster.nodes}
        durations = {name: reply.duration_s for name, reply in replies.items()}
        if failure is not None:
            durations[failure.function] = failure.duration_s
            return self._charge_failed(epoch_cost(durations, placement, prices), failure)
        cost = epoch_cost(durations, placement, prices)
        worker_replies = [r.body for r in replies.values() if used[r.function].role == "worker"]
        try:
            metrics = aggregate(worker_replies, workers)
        except BadReplies as error:
            return self._charge_failed(cost, Failure(self.spec.name, "error", str(error), epoch_time_s))
        if not self.ctx.store.complete(save):
            return self._charge_failed(
                cost, Failure(f"{self.spec.name}-worker", "error", "rank 0 did not save the checkpoint", epoch_time_s))
        return EpochOutcome(metrics, workers, servers, placement, epoch_time_s, cost, start_s, time.time(), save,
                            attempt)

    def _charge_failed(self, cost: float, failure: Failure) -> Failure:
        """A failed epoch still used its slots: its cost counts, on the closing line."""
        self.unrecorded_cost += cost
        self.cumulative_cost += cost
        return failure

    def _record(self, log: ResultLog, phase: str, epoch: int, result: EpochOutcome, extra: Mapping) -> None:
        spec, metrics = self.spec, result.metrics
        self.checkpoint = result.checkpoint
        self.ctx.store.prune(spec.name, keep=result.checkpoint)
        self.last = metrics
        self.costs.append(result.cost)
        self.counts_of_last = (result.workers, result.servers)
        self.cumulative_cost += result.cost
        reason = None
        if phase == "training":
            self.metrics.append(stop_metric(metrics.loss, metrics.val_loss))
            # static jobs predict the next epoch from the last; dynamic ones check their plan before each epoch
            predicted = predict_next_epoch_cost(self.costs) if spec.is_static else None
            reason = decide(StopInputs(
                metrics=self.metrics, target_loss=spec.target_loss, consecutive=spec.consecutive,
                max_epochs=spec.max_epochs, cumulative_cost=self.cumulative_cost, budget=spec.budget,
                predicted_next_cost=predicted))
        record = EpochRecord(
            run_id=self.ctx.run_id, job=spec.name, phase=phase, epoch=epoch, workers=result.workers,
            servers=result.servers, placement=result.placement, loss=metrics.loss, val_loss=metrics.val_loss,
            accuracy=metrics.accuracy, train_accuracy=metrics.train_accuracy, samples=metrics.samples,
            epoch_time_s=round(result.epoch_time_s, 4), compute_s=round(metrics.compute_s, 4),
            start=iso(result.start_s), end=iso(result.end_s), cost=result.cost,
            cumulative_cost=self.cumulative_cost, budget=spec.budget, stop_reason=reason, attempt=result.attempt,
            checkpoint=result.checkpoint, extra=dict(extra))
        log.append(record)
        self.records.append(json.loads(record.to_json()))
        if phase == "training":
            self.outcome.epochs = epoch
        self.outcome.final_loss = metrics.loss
        self.outcome.final_val_loss = metrics.val_loss
        self.outcome.workers, self.outcome.servers = result.workers, result.servers
        self.outcome.total_cost = self.cumulative_cost
        self.outcome.stop_reason = reason
        self._show(phase, f"{phase} {epoch or extra.get('calibration_step')} done")

    def _write_stop(self, log: ResultLog, reason: str, extra: Mapping | None = None) -> str:
        """The closing line of a job that stopped without finishing an epoch; returns the reason."""
        self._write_line(log, "stopped", len(self.metrics), reason, extra or {})
        return reason

    def _write_line(self, log: ResultLog, phase: str, epoch: int, reason: str | None, extra: Mapping,
                    attempt: int = 1) -> None:
        """A line that is not a finished epoch (a failed attempt, or the stop); it carries unrecorded cost."""
        now = time.time()
        log.append(EpochRecord(
            run_id=self.ctx.run_id, job=self.spec.name, phase=phase, epoch=epoch,
            workers=self.workers, servers=self.servers, placement=dict(self.placement),
            loss=None, val_loss=None, accuracy=None, train_accuracy=None, samples=0, epoch_time_s=0.0,
            compute_s=None, start=iso(now), end=iso(now), cost=self.unrecorded_cost,
            cumulative_cost=self.cumulative_cost, budget=self.spec.budget, stop_reason=reason, attempt=attempt,
            extra=dict(extra)))
        self.unrecorded_cost = 0.0
