"""One job's lifecycle: events in, commands out. Pure: no clock, no sleep, no threads, no I/O.

Every decision of a job lives here — which calibration step is next, when to ask the run's policy, the quorum
wait and its requeue bound, the retry bound and its backoff (returned as WaitUntil, never slept), what every
step cost, and why the job stops. A driver (coach.drivers) delivers events with the current time inside and
carries the commands out against the ports; the live driver and the virtual-time driver run this same class.

The steps of a job:
  calibration (the policy's points; placement of the largest one once) -> for every epoch: AskPolicy ->
  Decided -> Submit/Release -> WatchPlacement -> Bindings with quorum -> Deploy the new ones -> InvokeEpoch
  -> EpochDone (record, stop?) or EpochFailed (retry after a backoff on fresh functions, or stop).

The lines a job writes besides its finished steps:
- `retry`: a failed attempt; `cost` and `charged_s` (the slot-seconds its functions held) are what it used. One
  that a peer from outside the job broke (`foreign: true`: ps-lite aborted on bytes that were not its own) is not
  the job's failure: it does not count against `max_retries` (MAX_FOREIGN_RETRIES bounds those on their own), while
  its cost counts as any attempt's, since its slots were held and the budget caps what is spent.
A step whose deadline came first (the money's, or epoch_timeout_s) is still a finished step: its workers left their
training loop together a reserve before the deadline and saved what they trained (coach.domain.deadlines); its
line says `stopped_early: true`, `epoch_fraction` (the share of the step done) and `data_fraction` (the share of
the data trained, which its speed observation scales by), and the next step starts from its checkpoint.
- `requeued`: no quorum in time; the slots went back.
- `stopped`: the job ended without finishing a step; `stop_reason` says why, and it carries what failed
  attempts or a diverged epoch used that no earlier line carried.
- `interrupted`: Ctrl-C or SIGTERM. Its `stop_reason` is null: a resumed job goes on in the same log, and only a
  log's last line carries a stop reason. The job's stop reason (the summary's, `History.stop_reason`) is
  `interrupted`.
- `recovered`: a resume found no finished step in the log and went on from the newest complete checkpoint.
Every one of them carries `charged_s` (0 when it charges nothing). Nothing non-finite is ever recorded: a loss
that is not finite ends the job as `diverged`; other non-finite numbers in replies are a failed attempt, and in a
policy's decision details they are recorded as null.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Callable, Mapping, Sequence, TypeGuard

from coach.domain.cluster import ClusterSpec
from coach.domain.contracts import Hyper, WorkerReply
from coach.domain.identity import (FunctionId, Role, functions_for, has_quorum, pick_for_epoch, role_counts,
                                   slots_for)
from coach.domain.deadlines import STOP_RESERVE_S
from coach.domain.invocation import FOREIGN, TIMEOUT, Failure
from coach.domain.jobs import MAX_REQUEUES, JobSpec
from coach.domain.records import EpochRecord, iso
from coach.domain.status import JobStatus
from coach.lifecycle import commands as cmd
from coach.lifecycle import events as ev
from coach.estimates.batch_size import (SCALINGS, BatchChoice, BatchInputs, NoiseStats, WorkerNoise, choose_batch,
                                        combine, smooth)
from coach.estimates.cost import MIN_EPOCH_S, epoch_cost, predicted_cost
from coach.estimates.epochs import BadReplies, EpochMetrics, aggregate
from coach.policy.history import INTERRUPTED, RECOVERED, History, observation
from coach.policy.planning import calibration_fraction, calibration_within
from coach.policy.run_policy import Counts, Wait
from coach.policy.stopping import StopInputs, decide, stop_metric

#: An epoch's deadline from money is this share of the seconds the money left pays for, less REPLY_RESERVE_S: the
#: replies come a little after the deadline, and what they cost must still fit (the budget is a hard cap).
BUDGET_MARGIN = 0.9
REPLY_RESERVE_S = 0.5
INVOKE_GRACE_S = 15.0  # the HTTP timeout exceeds the epoch deadline so the function's own 504 arrives first
REQUEUE_BACKOFF_S = 1.0  # first wait after giving slots back; doubles per requeue
MAX_REQUEUE_BACKOFF_S = 30.0
RETRY_BACKOFF_S = 0.5  # first wait before retrying a failed epoch; doubles per attempt
MAX_RETRY_BACKOFF_S = 8.0
MAX_FOREIGN_RETRIES = 8  # attempts of one step broken from outside the job, retried besides its max_retries
POLICY_WAIT_S = 1.0  # a job the policy told to wait asks again after this long
NORMAL_ENDINGS = frozenset({"target_loss", "max_epochs", "budget"})
USER_STOP = "stopped_by_user"  # a user stopped this one job (`coach stop`, the HTTP API): final, never resumed
DIVERGED = "diverged"  # a worker saw a non-finite loss, or the epoch's loss is not finite: never retried
# INTERRUPTED is the stop reason of an interrupted job and the phase of its closing line (whose stop_reason is
# null); RECOVERED is the phase of the line a resume from the checkpoints folder writes (coach.policy.history)


def ended_phase(reason: str) -> str:
    """The phase a view shows for a job that ended with `reason`."""
    return "done" if reason in NORMAL_ENDINGS else reason if reason in (INTERRUPTED, USER_STOP) else "failed"


def _finite_or_none(value: Any) -> Any:
    """`value` with every NaN or infinity replaced by None: a decision's details are recorded as standard JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(item) for item in value]
    return value


def _planned_samples(replies: Sequence[WorkerReply]) -> int | None:
    """The samples of the workers' shards together: what the step was to train; None from a reply of a version that
    does not say its shard (one that never stopped early)."""
    planned = [r.shard_samples for r in replies]
    return None if None in planned or not planned else sum(p for p in planned if p is not None)


def _epoch_share(replies: Sequence[WorkerReply]) -> float:
    """The share of their shards the workers trained before their deadline stopped them (all stop at one step)."""
    planned = _planned_samples(replies)
    return 1.0 if planned is None else min(1.0, sum(r.samples for r in replies) / planned)


def _data_size(replies: Sequence[WorkerReply], data_fraction: float) -> int | None:
    """The samples of a full epoch, as a step planned on `data_fraction` of them tells, however much of its shards
    it trained."""
    planned = _planned_samples(replies)
    return None if planned is None else round(planned / data_fraction)


def _finite(value: float | None) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and math.isfinite(value)


@dataclass(frozen=True)
class _Diverged:
    """A step whose training blew up: a non-finite loss, which a retry from the same checkpoint would repeat."""

    detail: str  # what was not finite, for the closing line's error


def _judge_replies(job: str, replies: list[WorkerReply], workers: int, event: ev.EpochDone) -> EpochMetrics | Failure | _Diverged:
    """A finished step's metrics when its replies hold together; else why not, as data: diverged, or a failed
    attempt (a deadline before the first training step, replies that disagree, a non-finite number, no checkpoint).
    """
    # a worker that saw a non-finite loss says so (`diverged`, with no checkpoint and maybe no loss_sum)
    diverged = sorted(r.rank for r in replies if r.diverged or not _finite(r.loss_sum))
    if diverged:
        return _Diverged(f"worker rank {', '.join(map(str, diverged))} reported a non-finite loss")
    stopped = any(r.stopped_early for r in replies)  # the deadline came first
    if stopped and not any(r.samples for r in replies):  # before the first step: as if it had timed out
        return Failure(f"{job}-worker", TIMEOUT, "the deadline of this attempt came before its first training step",
                       event.wall_s)
    try:
        metrics = aggregate(replies, workers)
    except BadReplies as error:
        return Failure(job, "error", str(error), event.wall_s)
    if not (_finite(metrics.loss) and (metrics.val_loss is None or _finite(metrics.val_loss))):
        return _Diverged(f"loss {metrics.loss!r}, validation loss {metrics.val_loss!r}")
    odd = [name for name, value in (("accuracy", metrics.accuracy), ("compute_s", metrics.compute_s))
           if value is not None and not _finite(value)]
    if odd:
        return Failure(job, "error", f"reply: {', '.join(odd)} not finite", event.wall_s)
    if not event.checkpoint:
        return Failure(f"{job}-worker", "error", "rank 0 did not save the checkpoint", event.wall_s)
    return metrics


def retry_backoff_s(attempt: int) -> float:
    """Wait before attempt `attempt + 1`: 0.5 s, 1 s, 2 s, ... at most 8 s."""
    return min(RETRY_BACKOFF_S * 2.0 ** (attempt - 1), MAX_RETRY_BACKOFF_S)


def requeue_backoff_s(requeues: int, first_s: float = REQUEUE_BACKOFF_S) -> float:
    """Wait before submitting again after the `requeues`-th requeue: 1 s, 2 s, 4 s, ... at most 30 s (by default;
    `first_s` is the first wait)."""
    return min(first_s * 2.0 ** (requeues - 1), MAX_REQUEUE_BACKOFF_S)


class Awaiting(str, Enum):
    """What the lifecycle waits for; a driver reads it to know which events are due."""

    NOTHING = "nothing"  # not started
    DECISION = "decision"  # Decided
    BINDINGS = "bindings"  # Bindings (and, past the deadline, requeue)
    DEPLOY = "deploy"  # Deployed
    EPOCH = "epoch"  # EpochDone or EpochFailed
    TIMER = "timer"  # TimerFired
    DONE = "done"  # nothing ever again


@dataclass(frozen=True)
class Step:
    """The calibration mini-epoch or training epoch being run."""

    epoch: int  # 1-based training epoch; 0 for calibration
    tag: str  # names its checkpoint: `epoch-0003`, `calibration-2`
    workers: int  # wanted counts (the epoch runs with at most what is deployed)
    servers: int
    data_fraction: float
    extra: Mapping[str, Any] = field(default_factory=dict)  # fields added to its record


class JobLifecycle:
    """The decisions of one job. `handle(event)` returns the commands to carry out, in order."""

    def __init__(self, spec: JobSpec, run_id: str, cluster: ClusterSpec,
                 calibration: tuple[tuple[int, int], ...] = (), placement_timeout_s: float = 30.0,
                 first_requeue_backoff_s: float = REQUEUE_BACKOFF_S):
        self.spec = spec
        self.run_id = run_id
        # the policy's calibration points for this job, as many as fit in the cluster together (none fits: the first,
        # which ends the job as unschedulable)
        self.calibration = calibration_within(calibration, total_slots=cluster.total_slots) or calibration[:1]
        self.placement_timeout_s = placement_timeout_s
        self._money_bound = False  # the running attempt's deadline is where its money ends, not epoch_timeout_s
        self.first_requeue_backoff_s = first_requeue_backoff_s  # wait after the first requeue; doubles per requeue
        self._total_slots = cluster.total_slots
        self._prices = {node.name: node.price_per_slot_s for node in cluster.nodes}
        self._max_price = max(self._prices.values())  # predictions stay conservative
        self.history = History()
        self.awaiting = Awaiting.NOTHING
        self.stop_requested: str | None = None  # the reason to stop with (INTERRUPTED or USER_STOP) once asked
        self.reason: str | None = None  # set when the job is over
        self.submitted: tuple[FunctionId, ...] = ()  # pods in the placement, bound or pending
        self.bound: dict[FunctionId, str] = {}  # function -> node, for the functions the job uses
        self.deployed: set[FunctionId] = set()
        self.step: Step | None = None
        self.attempt = 1
        self.foreign = 0  # attempts of this step broken from outside the job (FOREIGN): not the job's own
        self.requeues = 0
        self.watch_deadline_s = math.inf
        self.timer_at_s: float | None = None
        self._after_timer = ""  # what the timer is for: "retry", "resubmit" or "ask"
        self._wanted: tuple[FunctionId, ...] = ()
        self._unrecorded_cost = 0.0  # spent by failed attempts, charged on the next non-epoch line
        self._unrecorded_slot_s = 0.0  # the slot-seconds behind that cost
        self._why_pending = ""
        self._partial: dict[str, str] = {}  # what the last Bindings had bound of the wanted functions
        self._decision: Mapping[str, Any] = {}  # the last decision's details, recorded on its lines
        self.phase, self.message = "waiting", ""
        self.workers, self.servers = spec.workers or 0, spec.servers or 0  # counts of the current functions
        # batch scaling (coach.estimates.batch_size): the running step's choice and what later choices learn from; a
        # resumed job measures again from scratch
        self._batch: BatchChoice | None = None
        self._noise: NoiseStats | None = None  # smoothed NoiseStats the workers measured
        self._step_times: tuple[tuple[int, int, float], ...] = ()  # (workers, per-worker batch, step seconds)
        self._train_samples: int | None = None  # samples of a full epoch, once one ran
        self._data_samples: int | None = None  # the same, as any step told (a mini-epoch's shards / its share)
        self._trained_share: float | None = None  # share of the data the last step trained (a resumed job: None)

    # -- what a driver or policy may read -------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.awaiting == Awaiting.DONE

    @property
    def held_slots(self) -> int:
        return len(self.submitted)

    def status(self) -> JobStatus:
        return JobStatus(job=self.spec.name, phase=self.phase, epoch=len(self.history.metrics),
                         loss=self.history.final_loss, val_loss=self.history.final_val_loss,
                         workers=self.workers, servers=self.servers, cost=self.history.spent,
                         budget=self.spec.budget, message=self.message)

    # -- events ---------------------------------------------------------------------------------------------
    def handle(self, event: ev.Event) -> list[cmd.Command]:
        """The commands this event calls for; events a finished job gets are ignored."""
        if self.done:
            return []
        handler = _HANDLERS[type(event)]
        return handler(self, event)

    def crash(self, now_s: float, error: BaseException) -> list[cmd.Command]:
        """A bug in this job's handling must not take the run down: it stops the job with its name."""
        if self.done:
            return []
        return self._finish(now_s, f"failed: internal error: {type(error).__name__}: {error}")

    def _on_start(self, event: ev.Start) -> list[cmd.Command]:
        return self._next(event.now_s)

    def _on_resume(self, event: ev.Resume) -> list[cmd.Command]:
        past = event.history
        self.history = replace(past, stop_reason=None, recovered=False)
        out: list[cmd.Command] = []
        if past.recovered:  # the log lost its finished steps: say where the job starts again
            out.append(self._line(event.now_s, RECOVERED, past.epochs_done, None,
                                  {"reason": "the log held no finished step: going on from the newest complete "
                                             "checkpoint"}, checkpoint=past.checkpoint))
        if past.epochs_done >= self.spec.max_epochs:  # e.g. the last epoch's own line was lost
            return out + self._finish(event.now_s, "max_epochs")
        if past.spent >= self.spec.budget:
            return out + self._finish(event.now_s, "budget")
        return out + self._next(event.now_s)

    def _on_stop(self, event: ev.StopRequested) -> list[cmd.Command]:
        self.stop_requested = self.stop_requested or event.reason
        if self.awaiting in (Awaiting.DEPLOY, Awaiting.EPOCH):
            if self.stop_requested == USER_STOP:  # it ends the step first: say so meanwhile
                self._show(self.phase, f"stopping once its {'deploy' if self.awaiting == Awaiting.DEPLOY else 'step'}"
                                       " in flight ends")
            return []  # an interrupt cancels what is in flight, a user's stop lets it end: either event ends the job
        return self._finish(event.now_s, self.stop_requested)

    def _on_timer(self, event: ev.TimerFired) -> list[cmd.Command]:
        if self.awaiting == Awaiting.BINDINGS and event.now_s >= self.watch_deadline_s:
            return self._requeue(event.now_s)
        if self.awaiting != Awaiting.TIMER or self.timer_at_s is None or event.now_s < self.timer_at_s:
            return []  # an old timer
        self.timer_at_s = None
        if self._after_timer == "retry":
            return self._refresh(event.now_s)
        if self._after_timer == "resubmit":
            return [cmd.Submit(self._wanted), *self._watch(event.now_s, list(self._wanted))]
        return self._next(event.now_s)

    # -- the next step --------------------------------------------------------------------------------------
    def _next(self, now_s: float) -> list[cmd.Command]:
        if self.stop_requested:
            return self._finish(now_s, self.stop_requested)
        done = self.history.calibration_done
        # never calibrate after training epochs were measured (a log that lost them, `recovered`, calibrates again)
        if done < len(self.calibration) and not self.history.metrics:
            return self._calibrate(now_s, done + 1)
        self.awaiting = Awaiting.DECISION
        return [cmd.AskPolicy()]

    def _calibrate(self, now_s: float, number: int) -> list[cmd.Command]:
        workers, servers = self.calibration[number - 1]
        predicted = predicted_cost(self.history.last_cost, self.history.last_counts, (workers, servers),
                                   self._max_price)
        fraction = self._calibration_share(workers)
        last = self._trained_share
        if last and fraction > last:  # more data than the last step trained; never more than its timeout's worth
            predicted = min(predicted * fraction / last,
                            slots_for(workers, servers) * self._max_price * self.spec.epoch_timeout_s)
        if self.history.spent + predicted > self.spec.budget:
            return self._finish(now_s, "budget")
        self.step = Step(0, f"calibration-{number}", workers, servers, fraction,
                         {"calibration_step": number, "data_fraction": fraction, "predicted_cost": predicted})
        self._decision = {}
        self._show("calibration", f"running step {number}/{len(self.calibration)} at {workers}/{servers}")
        if self.submitted:  # placed for an earlier step
            return self._run_step(now_s)
        largest = (max(w for w, _ in self.calibration), max(s for _, s in self.calibration))
        return self._ensure(now_s, *largest)  # every point uses a subset of these functions

    def _calibration_share(self, workers: int) -> float:
        running = min(workers, self.workers) if self.workers else workers  # it runs with at most those deployed
        return calibration_fraction(self.spec.calibration_fraction, running, self._batch_for(running).batch_size,
                                    self._data_samples)

    def _calibrate_whole_batches(self) -> None:
        """A calibration step planned before the data's size was known (the first) trains whole batches once the
        warmed workers have told it, as every later step does: on a share of data of unknown size ResNet-18's
        first step had two batches, too few for its loop to have a steady rate."""
        step = self.step
        if step is None or step.epoch or "calibration_step" not in step.extra:
            return
        fraction = self._calibration_share(step.workers)
        self.step = replace(step, data_fraction=fraction, extra={**step.extra, "data_fraction": fraction})

    def _on_decided(self, event: ev.Decided) -> list[cmd.Command]:
        if self.awaiting != Awaiting.DECISION:
            return []
        decision = event.decision
        if isinstance(decision, Wait):
            self._decision = {}
            self._show("waiting", decision.reason)
            out = self._give_back()
            return out + self._wait(event.now_s + POLICY_WAIT_S, "ask")
        assert isinstance(decision, Counts)
        self._decision = {"decision": _finite_or_none(dict(decision.details))} if decision.details else {}
        if not decision.affordable:
            return self._finish(event.now_s, "budget")
        epoch = self.history.epochs_done + 1
        self.step = Step(epoch, f"epoch-{epoch:04d}", decision.workers, decision.servers, 1.0, self._decision)
        return self._ensure(event.now_s, decision.workers, decision.servers)

    # -- placement ------------------------------------------------------------------------------------------
    def _ensure(self, now_s: float, workers: int, servers: int) -> list[cmd.Command]:
        """Ask the placement for the functions of (workers, servers): keep, release the surplus, submit new."""
        wanted = functions_for(self.spec.name, workers, servers)
        if len(wanted) > self._total_slots:
            return self._finish(now_s, f"unschedulable: needs {len(wanted)} slots, the cluster has "
                                       f"{self._total_slots}")
        out: list[cmd.Command] = []
        surplus = tuple(fid for fid in self.submitted if fid not in wanted)
        if surplus:
            out += self._drop(surplus)
        new = tuple(fid for fid in wanted if fid not in self.submitted)
        if new:
            out.append(cmd.Submit(new))
            self.submitted += new
        self._wanted = wanted
        return out + self._watch(now_s, list(wanted))

    def _watch(self, now_s: float, wanted: list[FunctionId]) -> list[cmd.Command]:
        self.submitted = tuple(dict.fromkeys([*self.submitted, *wanted]))
        self.awaiting = Awaiting.BINDINGS
        self.watch_deadline_s = now_s + self.placement_timeout_s
        return [cmd.WatchPlacement(self.watch_deadline_s)]

    def _drop(self, ids: tuple[FunctionId, ...]) -> list[cmd.Command]:
        """Remove the deployed ones among `ids` and release all their slots."""
        out: list[cmd.Command] = []
        deployed = tuple(fid for fid in ids if fid in self.deployed)
        if deployed:
            out.append(cmd.Remove(deployed))
            self.deployed -= set(deployed)
        out.append(cmd.Release(ids))
        for fid in ids:
            self.bound.pop(fid, None)
        self.submitted = tuple(fid for fid in self.submitted if fid not in ids)
        return out

    def _give_back(self) -> list[cmd.Command]:
        return self._drop(self.submitted) if self.submitted else []

    def _on_bindings(self, event: ev.Bindings) -> list[cmd.Command]:
        if self.awaiting != Awaiting.BINDINGS:
            return []
        bound = {fid: node for fid, node in event.bound.items() if fid in self._wanted}
        self._why_pending = event.why_pending
        self._partial = {fid.name: node for fid, node in sorted(bound.items(), key=lambda kv: kv[0].sort_key())}
        if has_quorum(bound):
            self.watch_deadline_s = math.inf
            self.requeues = 0  # the bound and its backoff count the misses of one placement, not of the job
            fresh = tuple(fid for fid in self._wanted if fid in bound and fid not in self.deployed)
            self.bound.update({fid: bound[fid] for fid in fresh})
            if fresh:
                return self._deploy(fresh)
            return self._run_step(event.now_s)
        self._show("waiting", f"{len(bound)}/{len(self._wanted)} placed: {event.why_pending or 'waiting for slots'}")
        if event.now_s >= self.watch_deadline_s:
            return self._requeue(event.now_s)
        return []

    def _requeue(self, now_s: float) -> list[cmd.Command]:
        """No quorum in time: give back what is held so others can run, then queue again after a backoff."""
        why = self._why_pending or "waiting for slots"
        placed = dict(self._partial)
        self.requeues += 1
        out = self._give_back()
        out.append(self._line(now_s, "requeued", self.history.epochs_done, None,
                              {"reason": why, "requeue": self.requeues, "placed": placed}))
        if self.requeues > MAX_REQUEUES:
            return out + self._finish(now_s, f"unschedulable: no quorum after {self.requeues} tries: {why}")
        backoff_s = requeue_backoff_s(self.requeues, self.first_requeue_backoff_s)
        self._show("requeued", f"{why}; retry in {backoff_s:g} s")
        self.submitted = ()
        return out + self._wait(now_s + backoff_s, "resubmit")

    def _deploy(self, ids: tuple[FunctionId, ...]) -> list[cmd.Command]:
        """Deploy `ids`. The job shows `deploying` only once every function it wants is bound; with a quorum and
        some still pending it goes on showing that it waits for slots (and starts with the functions placed)."""
        self.awaiting = Awaiting.DEPLOY
        placed = sum(1 for fid in self._wanted if fid in self.bound)
        if placed < len(self._wanted):
            self._show("waiting", f"{placed}/{len(self._wanted)} placed: {self._why_pending or 'waiting for slots'}"
                                  f"; starting with the {placed} placed")
        else:
            self._show("deploying", f"{len(ids)} functions")
        return [cmd.Deploy(tuple((fid, self.bound[fid]) for fid in ids), str(self.spec.model_path),
                           self.spec.batch_size)]

    def _on_deployed(self, event: ev.Deployed) -> list[cmd.Command]:
        if self.awaiting != Awaiting.DEPLOY:
            return []
        self.deployed |= set(event.ready)
        if event.failure is not None or self.stop_requested:
            reason = self.stop_requested or f"failed: {event.failure.describe()}"
            return self._finish(event.now_s, reason)
        counts = role_counts(self.deployed)
        self.workers, self.servers = counts[Role.WORKER], counts[Role.SERVER]
        if self._data_samples is None and event.train_samples:
            self._data_samples = event.train_samples
            self._calibrate_whole_batches()
        if self._after_timer == "retry":  # fresh instances of a failed epoch's functions
            self._after_timer = ""
            self._show_running(f" (attempt {self.attempt})")
            return self._invoke(event.now_s)
        return self._run_step(event.now_s)

    # -- epochs ---------------------------------------------------------------------------------------------
    def _run_step(self, now_s: float) -> list[cmd.Command]:
        counts = role_counts(self.deployed)
        self.workers, self.servers = counts[Role.WORKER], counts[Role.SERVER]
        self.attempt, self.foreign = 1, 0
        if self.step.epoch:
            self._show_running()
        return self._invoke(now_s)

    def _show_running(self, suffix: str = "") -> None:
        """`running epoch N` / `running step k/K at w/s`: a view tells a step that runs from one that is done."""
        step = self.step
        if step.epoch:
            self._show("training", f"running epoch {step.epoch}{suffix}")
        else:
            number = step.extra.get("calibration_step")
            self._show("calibration", f"running step {number}/{len(self.calibration)} at {step.workers}/"
                                      f"{step.servers}{suffix}")

    def _epoch_functions(self, counts: tuple[int, int] | None = None) -> tuple[FunctionId, ...]:
        """The deployed functions a step at `counts` (default: the running step's) runs on: at most those deployed."""
        workers, servers = (self.step.workers, self.step.servers) if counts is None else counts
        return pick_for_epoch(self.deployed, min(workers, self.workers), min(servers, self.servers))

    def _invoke(self, now_s: float) -> list[cmd.Command]:
        spec, step = self.spec, self.step
        used = self._epoch_functions()
        counts = role_counts(used)
        # the budget is a hard cap: the functions stop at the time the money left pays for (with a margin)
        price_s = sum(self._prices[self.bound[fid]] for fid in used)
        money_s = ((spec.budget - self.history.spent) / price_s * BUDGET_MARGIN - REPLY_RESERVE_S if price_s > 0
                   else math.inf)
        deadline_s = min(spec.epoch_timeout_s, money_s)
        # not even an epoch's fixed part and the workers' reserve after their training loop fit in what is left
        if deadline_s < MIN_EPOCH_S + STOP_RESERVE_S:
            return self._finish(now_s, "budget")
        self._money_bound = deadline_s < spec.epoch_timeout_s
        self.awaiting = Awaiting.EPOCH
        self._batch = batch = self._batch_for(counts[Role.WORKER])
        number = None if step.epoch else step.extra.get("calibration_step")
        if number is not None and number < len(self.calibration):  # the next point's functions, deployed already
            following = self._epoch_functions(self.calibration[number])
        else:  # an epoch is most often followed by one at the same counts
            following = used
        return [cmd.InvokeEpoch(
            functions=tuple((fid, self.bound[fid]) for fid in used), workers=counts[Role.WORKER],
            servers=counts[Role.SERVER], epoch=step.epoch, step=self.history.steps_done + 1, attempt=self.attempt,
            data_fraction=step.data_fraction, save_tag=step.tag, checkpoint_load=self.history.checkpoint,
            model_path=str(spec.model_path),
            hyper=Hyper(batch.batch_size, spec.optimizer, batch.learning_rate, dict(spec.optimizer_params), spec.seed,
                        SCALINGS[spec.batch_scaling].measures_noise),
            deadline_s=deadline_s, timeout_s=deadline_s + INVOKE_GRACE_S, following=following)]

    def _batch_for(self, workers: int) -> BatchChoice:
        """The per-worker batch and learning rate of a step at `workers` (coach.estimates.batch_size), from what the
        job has measured so far."""
        spec = self.spec
        return choose_batch(spec.batch_scaling, BatchInputs(spec.batch_size, spec.learning_rate, workers, self._noise,
                                                          self._step_times, self._train_samples))

    def _cost(self, durations_s: Mapping[FunctionId, float]) -> float:
        return epoch_cost({fid.name: d for fid, d in durations_s.items()},
                          {fid.name: node for fid, node in self.bound.items()}, self._prices)

    def _on_epoch_done(self, event: ev.EpochDone) -> list[cmd.Command]:
        if self.awaiting != Awaiting.EPOCH:
            return []
        used = self._epoch_functions()
        cost, slot_s = self._cost(event.durations_s), sum(event.durations_s.values())
        replies = list(event.replies.values())
        judged = _judge_replies(self.spec.name, replies, role_counts(used)[Role.WORKER], event)
        if isinstance(judged, _Diverged):
            return self._diverged(event.now_s, cost, slot_s, judged.detail)
        if isinstance(judged, Failure):
            return self._failed(event.now_s, judged, cost, slot_s)
        return self._step_done(event, used, replies, judged, cost)

    def _step_done(self, event: ev.EpochDone, used: tuple[FunctionId, ...], replies: list[WorkerReply],
                   metrics: EpochMetrics, cost: float) -> list[cmd.Command]:
        """A step whose replies hold: learn from it, write its line, then stop or go on to the next step."""
        counts = role_counts(used)
        workers, servers = counts[Role.WORKER], counts[Role.SERVER]
        step, spec = self.step, self.spec
        assert event.checkpoint, "_judge_replies refuses a step without its checkpoint"
        stopped = any(r.stopped_early for r in replies)  # the deadline came first
        done = _epoch_share(replies) if stopped else 1.0  # the share of the step's data the workers trained on
        fraction = step.data_fraction * done
        partial = {"data_fraction": fraction, "epoch_fraction": done, "stopped_early": True} if stopped else {}
        batch_fields = self._learn_batch(replies, workers, metrics.samples, metrics.compute_s, fraction)
        self._data_samples = _data_size(replies, step.data_fraction) or self._data_samples
        self._trained_share = fraction
        warmup_s = None if metrics.warmup_s is None else round(metrics.warmup_s, 4)  # <= compute_s (the contract)
        self._add_step(event, (workers, servers), metrics, cost, fraction, warmup_s)
        reason = self._stop_reason() if step.epoch else None
        extra = {**step.extra, **partial, **batch_fields, **({} if warmup_s is None else {"warmup_s": warmup_s})}
        record = self._step_record(event, used, metrics, cost, reason, extra)
        self._show(record.phase, f"epoch {step.epoch} done" if step.epoch else
                   f"step {step.extra.get('calibration_step')}/{len(self.calibration)} done")
        out: list[cmd.Command] = [cmd.WriteRecord(record), cmd.PruneCheckpoints(event.checkpoint)]
        if reason is not None:
            return out + self._finish(event.now_s, reason, written=True)
        if not step.epoch and self.history.spent >= spec.budget:
            return out + self._finish(event.now_s, "budget")
        return out + self._next(event.now_s)

    def _add_step(self, event: ev.EpochDone, counts: tuple[int, int], metrics: EpochMetrics, cost: float,
                  data_fraction: float, warmup_s: float | None) -> None:
        """The history after a finished step: its speed observation, its stop metric, its cost and checkpoint."""
        step, before = self.step, self.history
        workers, servers = counts
        observed = observation(workers, servers, round(event.wall_s, 4), round(metrics.compute_s, 4), data_fraction,
                               warmup_s)
        self.history = replace(
            before,
            observations=before.observations + (observed,),
            metrics=before.metrics + ((stop_metric(metrics.loss, metrics.val_loss),) if step.epoch else ()),
            calibration_done=before.calibration_done + (0 if step.epoch else 1),
            epochs_done=step.epoch or before.epochs_done, steps_done=before.steps_done + 1,
            last_counts=counts, last_cost=cost, checkpoint=event.checkpoint, spent=before.spent + cost,
            final_loss=metrics.loss, final_val_loss=metrics.val_loss, last_end=iso(event.now_s),
            line_counts=counts)

    def _stop_reason(self) -> str | None:
        """Why the job stops after the training epoch just added to its history (coach.policy.stopping); None: on."""
        spec, history = self.spec, self.history
        lost = history.epochs_done - len(history.metrics)  # epochs done whose lines a log lost
        return decide(StopInputs(metrics=history.metrics, target_loss=spec.target_loss,
                                 consecutive=spec.consecutive, max_epochs=spec.max_epochs - lost,
                                 cumulative_cost=history.spent, budget=spec.budget, predicted_next_cost=None))

    def _step_record(self, event: ev.EpochDone, used: tuple[FunctionId, ...], metrics: EpochMetrics, cost: float,
                     reason: str | None, extra: Mapping[str, Any]) -> EpochRecord:
        """The line of a finished step, written once the history holds it."""
        step, spec = self.step, self.spec
        counts = role_counts(used)
        workers, servers = counts[Role.WORKER], counts[Role.SERVER]
        return EpochRecord(
            run_id=self.run_id, job=spec.name, phase="training" if step.epoch else "calibration", epoch=step.epoch,
            workers=workers, servers=servers, placement={fid.name: self.bound[fid] for fid in used},
            loss=metrics.loss, val_loss=metrics.val_loss, accuracy=metrics.accuracy,
            train_accuracy=metrics.train_accuracy, samples=metrics.samples, epoch_time_s=round(event.wall_s, 4),
            compute_s=round(metrics.compute_s, 4), start=iso(event.started_s), end=iso(event.now_s), cost=cost,
            cumulative_cost=self.history.spent, budget=spec.budget, stop_reason=reason, attempt=self.attempt,
            checkpoint=event.checkpoint, extra=extra)

    def _learn_batch(self, replies: Sequence[WorkerReply], workers: int, samples: int, compute_s: float,
                     data_fraction: float) -> dict[str, Any]:
        """The batch fields of a finished step's line; keeps the step time and the noise the workers measured.

        `grad_noise_scale` is the smoothed noise scale after this step's measurement: the next choice's input."""
        batch = self._batch
        measured = combine([WorkerNoise(r.grad_var, r.grad_sqr, r.noise_steps) for r in replies
                            if r.noise_steps and _finite(r.grad_var) and _finite(r.grad_sqr)])
        if measured is not None:
            self._noise = smooth(self._noise, measured)
        steps = math.ceil(samples / workers / batch.batch_size)
        if steps > 0 and _finite(compute_s) and compute_s > 0:
            self._step_times += ((workers, batch.batch_size, compute_s / steps),)
        if data_fraction == 1.0:
            self._train_samples = samples
        fields = batch.record()
        if SCALINGS[self.spec.batch_scaling].measures_noise:
            scale = self._noise.noise_scale if self._noise is not None else None
            fields["grad_noise_scale"] = scale if _finite(scale) else None
        return fields

    def _on_epoch_failed(self, event: ev.EpochFailed) -> list[cmd.Command]:
        if self.awaiting != Awaiting.EPOCH:
            return []
        return self._failed(event.now_s, event.failure, self._cost(event.durations_s),
                            sum(event.durations_s.values()))

    def _charge(self, cost: float, slot_s: float) -> None:
        """Spent by a step that has no line of its own: carried by the next line that is not a finished step."""
        self._unrecorded_cost += cost
        self._unrecorded_slot_s += slot_s
        self.history = replace(self.history, spent=self.history.spent + cost)

    def _diverged(self, now_s: float, cost: float, slot_s: float, detail: str) -> list[cmd.Command]:
        """Training blew up: retrying from the same checkpoint would blow up again. The epoch's cost is charged."""
        self._charge(cost, slot_s)
        step = self.step
        what = f"epoch {step.epoch}" if step.epoch else f"calibration step {step.extra.get('calibration_step')}"
        return self._finish(now_s, DIVERGED, extra={"error": f"{what}: {detail}"})

    def _failed(self, now_s: float, failure: Failure, cost: float, slot_s: float = 0.0) -> list[cmd.Command]:
        """A failed attempt still used its slots: its cost counts, on its retry line."""
        self._charge(cost, slot_s)
        if self.stop_requested:
            return self._finish(now_s, self.stop_requested)
        broke = self._money_bound and failure.kind == TIMEOUT  # it ran until the money was spent
        foreign = failure.kind == FOREIGN  # broken from outside the job: not one of its own failures
        self.foreign += foreign
        exhausted = (self.attempt - self.foreign > self.spec.max_retries or self.foreign > MAX_FOREIGN_RETRIES
                     or not failure.retryable or broke)
        out = [self._line(now_s, "retry", self.step.epoch, None,
                          {**self.step.extra, "error": failure.describe(), "will_retry": not exhausted,
                           **({"foreign": True} if foreign else {})},
                          self.attempt)]
        if broke:
            return out + self._finish(now_s, "budget")
        if exhausted:
            outside = f", {self.foreign} of them broken from outside the job" if self.foreign else ""
            return out + self._finish(now_s, f"failed after {self.attempt} attempts{outside}: {failure.describe()}")
        self._show("retrying", f"attempt {self.attempt} failed: {failure.describe()}")
        return out + self._wait(now_s + retry_backoff_s(self.attempt), "retry")

    def _refresh(self, now_s: float) -> list[cmd.Command]:
        """Replace the failed epoch's functions by fresh instances on the same nodes (a dead host is gone)."""
        ids = self._epoch_functions()
        self.deployed -= set(ids)
        self.attempt += 1
        self._after_timer = "retry"
        return [cmd.Remove(ids), *self._deploy(ids)]

    # -- helpers --------------------------------------------------------------------------------------------
    def _wait(self, at_s: float, then: str) -> list[cmd.Command]:
        self.awaiting = Awaiting.TIMER
        self.timer_at_s = at_s
        self._after_timer = then
        return [cmd.WaitUntil(at_s)]

    def _show(self, phase: str, message: str) -> None:
        self.phase, self.message = phase, message

    def _line(self, now_s: float, phase: str, epoch: int, reason: str | None, extra: Mapping[str, Any],
              attempt: int = 1, checkpoint: str | None = None) -> cmd.WriteRecord:
        """A line that is not a finished epoch (a failed attempt, a requeue, the stop); it carries unrecorded cost
        and `charged_s`, the slot-seconds behind that cost."""
        record = EpochRecord(
            run_id=self.run_id, job=self.spec.name, phase=phase, epoch=epoch, workers=self.workers,
            servers=self.servers, placement={fid.name: node for fid, node in self.bound.items()},
            loss=None, val_loss=None, accuracy=None, train_accuracy=None, samples=0, epoch_time_s=0.0,
            compute_s=None, start=iso(now_s), end=iso(now_s), cost=self._unrecorded_cost,
            cumulative_cost=self.history.spent, budget=self.spec.budget, stop_reason=reason, attempt=attempt,
            checkpoint=checkpoint, extra={**extra, "charged_s": round(self._unrecorded_slot_s, 4)})
        self._unrecorded_cost = self._unrecorded_slot_s = 0.0
        self.history = replace(self.history, line_counts=(record.workers, record.servers))
        return cmd.WriteRecord(record)

    def _finish(self, now_s: float, reason: str, written: bool = False,
                extra: Mapping[str, Any] = {}) -> list[cmd.Command]:
        """The closing line (unless the last epoch's line carries the reason), then give everything back.

        An interrupt closes with a `phase: "interrupted"` line whose stop_reason is null: the job may go on in the
        same log after a resume, and only the log's last line carries a stop reason.
        """
        out: list[cmd.Command] = []
        if not written:
            phase, recorded = (INTERRUPTED, None) if reason == INTERRUPTED else ("stopped", reason)
            out.append(self._line(now_s, phase, self.history.epochs_done, recorded, {**self._decision, **extra}))
        out += self._give_back()
        self.reason = reason
        self.awaiting = Awaiting.DONE
        self.history = replace(self.history, stop_reason=reason)
        self._show(ended_phase(reason), reason)
        return out + [cmd.Finish(reason)]


_HANDLERS: dict[type[Any], Callable[[JobLifecycle, Any], list[cmd.Command]]] = {
    ev.Start: JobLifecycle._on_start,
    ev.Resume: JobLifecycle._on_resume,
    ev.Decided: JobLifecycle._on_decided,
    ev.Bindings: JobLifecycle._on_bindings,
    ev.Deployed: JobLifecycle._on_deployed,
    ev.EpochDone: JobLifecycle._on_epoch_done,
    ev.EpochFailed: JobLifecycle._on_epoch_failed,
    ev.TimerFired: JobLifecycle._on_timer,
    ev.StopRequested: JobLifecycle._on_stop,
}
