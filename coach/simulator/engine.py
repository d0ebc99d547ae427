"""The cluster simulator's clock: scheduling rounds in simulated time. Pure apart from the progress callback.

Every round (`interval_s`, 60 s as in the Pollux evaluation): arrived jobs join; the policy grants GPUs and batch
sizes; jobs whose grant changed get their replicas resubmitted to scheduler_fork (coach.simulator.placement);
the scheduler binds; a job whose replicas are all bound trains at its goodput (throughput x statistical
efficiency at its placement and batch size) after a restart delay; a partly placed job holds its GPUs without
training. When the scheduler reports a deadlock, a deadlocked job gives its GPUs back after Coach's placement
timeout and asks again, up to Coach's MAX_REQUEUES times (then it stops as unschedulable); a partly placed job
that only waits for running jobs to end keeps its place.

Time to finish on a fixed allocation is the integral of 1/goodput over the remaining progress (efficiency rises
as training goes on), so a policy that never changes a running job (`elastic` False) is simulated event by
event: rounds in which nothing arrives, finishes or waits on a timeout are skipped without changing any answer.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from coach.domain.cluster import ClusterSpec
from coach.domain.jobs import MAX_REQUEUES
from coach.simulator.placement import ReplicaPlacement
from coach.simulator.grants import GrantChecker, fit_batch
from coach.simulator.view import AppModel, ClusterSnapshot, Grant, ClusterJobView, ClusterPolicy, packed_nodes
from coach.simulator.workloads import SimJob

RESTART_S = 30.0  # a (re)started job's replicas load the checkpoint before training (the Pollux artifact's cost)
PLACEMENT_TIMEOUT_S = 30.0  # Coach's lifecycle: a job without its quorum this long gives its pods back
INTEGRAL_POINTS = 9  # samples of 1/goodput over the remaining progress of a fixed allocation


@dataclass
class JobRun:
    """One job's simulated life; what the results are written from."""

    spec: SimJob
    app: AppModel
    total_progress: float
    budget: float | None  # money the job may spend; None for no limit
    progress: float = 0.0
    attained_gpu_s: float = 0.0
    spent: float = 0.0
    grant: Grant | None = None
    running: bool = False
    nodes: Mapping[str, int] = field(default_factory=dict)  # node -> replicas while running
    price_s: float = 0.0  # money per second of the GPUs it holds on `nodes` (0 while not running)
    rate: float = 0.0  # M0-samples per second while running
    train_from_s: float = 0.0  # when the current segment starts making progress (after the restart delay)
    updated_s: float = 0.0  # progress is accounted up to here
    finish_at_s: float = math.inf
    partial_since_s: float | None = None  # partly placed since
    started_s: float | None = None
    finished_s: float | None = None
    stop_reason: str | None = None
    restarts: int = 0  # starts after the first (a new allocation, or a resume after preemption), as the artifact
    training_gpu_s: float = 0.0  # GPU-seconds spent training (the restart delays not counted)
    restart_gpu_s: float = 0.0  # GPU-seconds held in restart delays (loading the checkpoint, no progress)
    requeues: int = 0  # placement timeouts (Coach's lifecycle stops a job after MAX_REQUEUES of them)
    held_gpu_s: float = 0.0  # GPU-seconds held by replicas of a job that could not run (partly placed)
    deadlocked: bool = False  # ever part of a scheduler deadlock
    out_of_money: bool = False  # its finish time is when its budget runs out, not when its work is done
    segments: list[dict] = field(default_factory=list)  # one per placement the job trained on
    order: int = 0  # its place in arrival order (ties by name)

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class Outcome:
    jobs: list[JobRun]
    rounds: int  # rounds simulated (skipped ones not counted)
    events: int  # arrivals, grants, bindings, completions and releases handled
    utilization: list[tuple[float, float]]  # (simulated s, share of GPUs training) at every simulated round
    deadlocks: int  # rounds in which the scheduler reported a deadlock
    total_gpus: int = 0  # GPUs of the cluster


class Simulator:
    """One simulation: a workload, a cluster, a policy and a scheduler profile."""

    def __init__(self, jobs: Sequence[SimJob], apps: Mapping[str, AppModel], totals: Mapping[str, float],
                 cluster: ClusterSpec, policy: ClusterPolicy, profile: str, interval_s: float = 60.0, seed: int = 0,
                 budgets: Mapping[str, float] | None = None, restart_s: float = RESTART_S,
                 on_round: Callable[[float, int], None] | None = None):
        self.policy = policy
        self.interval_s = interval_s
        self.restart_s = restart_s
        self.placement = ReplicaPlacement(cluster, profile, seed)
        self.node_gpus = tuple(node.slots for node in cluster.nodes)
        self.total_gpus = sum(self.node_gpus)
        self.price_of = {node.name: node.price_per_slot_s for node in cluster.nodes}
        self.price_per_gpu_s = max(self.price_of.values())
        self.pending = sorted(jobs, key=lambda j: (j.arrival_s, j.name))
        arrival = {j.name: i for i, j in enumerate(self.pending)}
        self.runs = {j.name: JobRun(j, apps[j.app], totals[j.name], (budgets or {}).get(j.name), order=arrival[j.name])
                     for j in jobs}  # in the workload's order, as the results list them
        self.active: dict[str, JobRun] = {}  # arrived, unfinished, in arrival order
        self.waiting: dict[str, JobRun] = {}  # active without a grant (what a non-elastic policy is asked about)
        self.granted: dict[str, JobRun] = {}  # active with a grant (running, or waiting for the scheduler)
        self.running: dict[str, JobRun] = {}  # active and training (or in its restart delay)
        # what the policy sees of every active job, in arrival order: only granted jobs change between rounds (a
        # job without GPUs makes no progress and spends nothing), so only theirs are built again each round
        self.views: dict[str, ClusterJobView] = {}
        self.partial: dict[str, JobRun] = {}  # partly placed jobs
        self.checker = GrantChecker()
        self.stuck = False  # the scheduler reported a deadlock in the last round
        self.finishing: list[tuple[float, str]] = []  # (finish time, job) of running jobs; stale entries skipped
        self.training_gpus = 0  # GPUs of running jobs
        self.restarting: list[JobRun] = []  # jobs started recently: maybe still in their restart delay
        self.on_round = on_round
        self.events = 0
        self.rounds = 0
        self.deadlocks = 0
        self.utilization: list[tuple[float, float]] = []

    # ---- the loop ----------------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        now_s = 0.0
        next_arrival = 0
        jobs = self.pending
        while next_arrival < len(jobs) or self.active:
            if not self.active and next_arrival < len(jobs):  # an idle cluster: jump to the next arrival's round
                now_s = max(now_s, self._round_at(jobs[next_arrival].arrival_s))
            self._advance(now_s)
            while next_arrival < len(jobs) and jobs[next_arrival].arrival_s <= now_s:
                self._arrive(jobs[next_arrival], now_s)
                next_arrival += 1
            self._decide(now_s)
            self._place(now_s)
            if next_arrival == len(jobs) and self._idle_for_good():
                self._give_up(now_s)
            self.rounds += 1
            self.utilization.append((now_s, self._training_share(now_s)))
            if self.on_round is not None:
                self.on_round(now_s, len(jobs) - next_arrival + len(self.active))
            now_s = self._next_round(now_s, jobs[next_arrival].arrival_s if next_arrival < len(jobs) else None)
        return Outcome(list(self.runs.values()), self.rounds, self.events, self.utilization, self.deadlocks,
                       self.total_gpus)

    def _training_share(self, now_s: float) -> float:
        """The share of GPUs training from this round to the next: a job in its restart delay counts for the part of
        the round after it (the delay is not training)."""
        if not self.total_gpus:
            return 0.0
        delayed = 0.0
        self.restarting = [run for run in self.restarting if run.running and run.train_from_s > now_s]
        for run in self.restarting:
            delayed += run.grant.gpus * min((run.train_from_s - now_s) / self.interval_s, 1.0)
        return max(self.training_gpus - delayed, 0.0) / self.total_gpus

    def _idle_for_good(self) -> bool:
        """No job runs, none has replicas waiting at the scheduler, none arrives, and the policy granted nothing:
        nothing can change any more (no policy decides differently on an idle cluster where time alone passes)."""
        if not self.active or self.training_gpus or self.partial or self.stuck:
            return False
        if not self.granted and not self.placement.pending:
            return True
        # replicas wait at a settled scheduler with nothing running: no round will bind them
        return not self.policy.elastic and self.placement.settled and bool(self.placement.pending)

    def _give_up(self, now_s: float) -> None:
        for run in list(self.active.values()):
            if run.grant is not None:
                reason = "unschedulable: its replicas can never all be placed"
            elif run.budget is not None:
                reason = "budget"  # only a policy that spends within budgets withholds GPUs from an idle cluster
            else:
                reason = "unschedulable: the policy never granted it GPUs"
            self._finish(run, now_s, reason)

    def _round_at(self, t_s: float) -> float:
        """The first round boundary at or after t_s."""
        return math.ceil(t_s / self.interval_s - 1e-9) * self.interval_s  # within 1e-9 of a round: that round

    def _next_round(self, now_s: float, next_arrival_s: float | None) -> float:
        following = now_s + self.interval_s
        if self.policy.elastic or self.stuck or not self.placement.settled:
            return following
        while self.finishing and self._stale(self.finishing[0]):
            heapq.heappop(self.finishing)
        soonest = min(self.finishing[0][0] if self.finishing else math.inf,
                      math.inf if next_arrival_s is None else next_arrival_s)
        if not math.isfinite(soonest):
            return following  # nothing will happen by itself: keep rounds going
        return max(following, self._round_at(soonest))

    def _stale(self, entry: tuple[float, str]) -> bool:
        run = self.runs[entry[1]]
        return not run.running or run.finish_at_s != entry[0]

    # ---- progress ------------------------------------------------------------------------------------------------

    def _advance(self, now_s: float) -> None:
        """Account progress, service and money up to now_s; finish the jobs that got there."""
        if self.policy.elastic:
            for run in sorted(self.running.values(), key=_arrival_order):
                self._account(run, min(now_s, run.finish_at_s))
                if run.finish_at_s <= now_s:
                    self._finish(run, run.finish_at_s, "completed")
                else:
                    self._set_rate(run)
                    self._no_progress(run, now_s)
        else:  # only the jobs due: the others' progress is accounted when they finish
            while self.finishing and self.finishing[0][0] <= now_s + self.interval_s * 1e-9:
                entry = heapq.heappop(self.finishing)
                if not self._stale(entry):
                    run = self.runs[entry[1]]
                    self._account(run, entry[0])
                    self._finish(run, entry[0], "completed")
        for run in self.partial.values():
            run.held_gpu_s += self.placement.bound(run.name) * (now_s - run.updated_s)
            run.updated_s = now_s

    def _account(self, run: JobRun, until_s: float) -> None:
        if until_s <= run.updated_s:
            return
        gpus = run.grant.gpus if run.grant else 0
        elapsed_s = until_s - run.updated_s
        training_s = max(0.0, until_s - max(run.updated_s, run.train_from_s))
        run.progress = min(run.total_progress, run.progress + run.rate * training_s)
        run.attained_gpu_s += gpus * elapsed_s  # the restart delay included (Tiresias's service, the artifact's)
        if run.running:
            run.training_gpu_s += gpus * training_s
            run.restart_gpu_s += gpus * (elapsed_s - training_s)
        cost = elapsed_s * self._price_s(run)
        run.spent += cost
        run.updated_s = until_s
        if run.segments:
            run.segments[-1]["end_s"] = until_s
            run.segments[-1]["cost"] += cost

    def _set_rate(self, run: JobRun) -> None:
        """Goodput on the current placement; the finish time it implies (and the budget's end, if sooner)."""
        grant = run.grant
        assert grant is not None
        nodes = len(run.nodes)
        remaining = run.total_progress - run.progress
        if remaining <= 0:
            run.rate, run.finish_at_s = 0.0, run.updated_s
            return
        start_s = max(run.updated_s, run.train_from_s)
        if self.policy.elastic:  # re-decided every round: the goodput at the current progress
            run.rate = run.app.throughput(grant.gpus, nodes, grant.batch) * run.app.efficiency(grant.batch,
                                                                                             run.progress)
            run.finish_at_s = start_s + remaining / run.rate if run.rate > 0 else math.inf
        else:  # fixed until the job ends: integrate 1/goodput over the remaining progress
            throughput = run.app.throughput(grant.gpus, nodes, grant.batch)
            duration_s = _seconds_to_finish(run.app, throughput, grant.batch, run.progress, run.total_progress)
            run.rate = remaining / duration_s if duration_s > 0 else 0.0
            run.finish_at_s = start_s + duration_s
        run.out_of_money = False
        if run.budget is not None:  # never spend more than the budget: stop when it runs out
            price_s = self._price_s(run)
            left_s = (run.budget - run.spent) / price_s if price_s > 0 else math.inf
            if run.updated_s + left_s < run.finish_at_s:
                run.finish_at_s = run.updated_s + max(left_s, 0.0)
                run.out_of_money = True
        if not self.policy.elastic and math.isfinite(run.finish_at_s):
            heapq.heappush(self.finishing, (run.finish_at_s, run.name))

    def _price_s(self, run: JobRun) -> float:
        """Money per second of the GPUs the job holds while it runs (each at its node's price), worked out when it
        starts: the same for the whole segment."""
        return run.price_s

    # ---- arrivals, decisions, placement ----------------------------------------------------------------------------

    def _arrive(self, job: SimJob, now_s: float) -> None:
        run = self.runs[job.name]
        self.events += 1
        run.updated_s = now_s
        if job.gpus > self.total_gpus:
            self._finish(run, now_s, f"unschedulable: needs {job.gpus} GPUs, the cluster has {self.total_gpus}",
                         active=False)
            return
        self.active[job.name] = run
        self.waiting[job.name] = run
        self.views[job.name] = self._view(run)
        self.placement.register(job.name)

    def _view(self, run: JobRun) -> ClusterJobView:
        spec, grant = run.spec, run.grant
        remaining = math.inf if run.budget is None else run.budget - run.spent
        return ClusterJobView(spec.name, spec.arrival_s, run.app, spec.gpus, spec.batch, run.progress,
                              run.total_progress, run.attained_gpu_s, grant.gpus if grant and run.running else 0,
                              grant.batch if grant else spec.batch, remaining,
                              min(self.total_gpus, max(spec.gpus, getattr(run.app, "max_gpus", self.total_gpus))))

    def _decide(self, now_s: float) -> None:
        asked = self.active if self.policy.elastic else self.waiting
        if not asked:
            return
        views = self.views
        if self.policy.elastic:  # every active job: only the granted ones changed since they were last seen
            for name, run in self.granted.items():
                views[name] = self._view(run)
            snapshot = ClusterSnapshot(now_s, self.node_gpus, self.price_per_gpu_s, self.interval_s,
                                       tuple(views.values()), index=views)
            candidates: Iterable[str] = self.granted.keys()
        else:  # the jobs without a grant: unchanged since they were last seen
            snapshot = ClusterSnapshot(now_s, self.node_gpus, self.price_per_gpu_s, self.interval_s,
                                       tuple(views[name] for name in asked))
            candidates = ()
        grants = self.policy.allocate(snapshot)
        self.checker.check(snapshot, grants, queued=not self.policy.elastic)  # a policy's bug stops here, named
        # only a job granted now or before can change, in arrival order
        changed = sorted((asked[name] for name in grants.keys() | candidates if name in asked), key=_arrival_order)
        for run in changed:
            name, grant = run.name, grants.get(run.name)
            if grant == run.grant:
                continue
            if grant is not None and run.grant is not None and grant.gpus == run.grant.gpus and run.running:
                self._account(run, now_s)  # a new batch size on the same GPUs: changed in place, no restart
                run.grant = grant
                run.segments[-1]["batch"] = grant.batch  # a segment keeps the last batch size it ran at
                self._set_rate(run)
                self._no_progress(run, now_s)
                continue
            self._stop_segment(run, now_s)
            run.grant = grant
            self.events += 1
            if grant is None:
                self.placement.release(name)
                self.waiting[name] = run
                del self.granted[name]
                views[name] = self._view(run)  # as it stays until its next grant
            else:
                self.placement.submit(name, grant.gpus)
                self.waiting.pop(name, None)
                self.granted[name] = run

    def _stop_segment(self, run: JobRun, now_s: float) -> None:
        if run.running:
            self._account(run, now_s)
            self.training_gpus -= run.grant.gpus
        run.running = False
        self.running.pop(run.name, None)
        run.nodes = {}
        run.price_s = 0.0
        run.rate = 0.0
        run.finish_at_s = math.inf
        run.partial_since_s = None
        self.partial.pop(run.name, None)
        run.updated_s = now_s

    def _place(self, now_s: float) -> None:
        placement = self.placement
        touched = placement.schedule(now_s)
        self.events += len(touched)
        for name in sorted(touched):
            run = self.active.get(name)
            if run is None or run.running or run.grant is None:
                continue
            if placement.bound(name) >= run.grant.gpus:
                self.partial.pop(name, None)
                self._start(run, now_s)
            elif name not in self.partial:
                run.partial_since_s = now_s
                run.updated_s = now_s  # held GPU time is counted from here
                self.partial[name] = run
        if not self.partial:
            self.stuck = False
            return
        stuck = set(placement.deadlocked(now_s))
        self.stuck = bool(stuck)
        if stuck:
            self.deadlocks += 1
        for run in list(self.partial.values()):
            if run.name not in stuck:  # waiting for running jobs to end: it keeps its place (and its GPUs)
                continue
            run.deadlocked = True
            if now_s - run.partial_since_s >= PLACEMENT_TIMEOUT_S:  # give the GPUs back, ask again
                run.partial_since_s = None
                del self.partial[run.name]
                run.requeues += 1
                run.updated_s = now_s
                self.events += 1
                if run.requeues > MAX_REQUEUES:
                    self._finish(run, now_s, f"unschedulable: no quorum after {MAX_REQUEUES} placement timeouts")
                else:
                    placement.submit(run.name, run.grant.gpus)

    def _no_progress(self, run: JobRun, now_s: float) -> bool:
        """A job whose allocation trains at no speed would hold its GPUs for ever: it stops instead."""
        if run.rate > 0 or run.progress >= run.total_progress or run.out_of_money:
            return False
        self._account(run, now_s)
        self._finish(run, now_s, f"unschedulable: no progress on {run.grant.gpus} GPUs at batch {run.grant.batch}")
        return True

    def _start(self, run: JobRun, now_s: float) -> None:
        run.running = True
        self.running[run.name] = run
        self.training_gpus += run.grant.gpus
        run.partial_since_s = None
        run.nodes = dict(self.placement.nodes_of(run.name))
        run.price_s = sum(self.price_of[node] * n for node, n in run.nodes.items())
        run.updated_s = now_s
        run.train_from_s = now_s + self.restart_s
        self.restarting.append(run)
        if run.started_s is None:
            run.started_s = now_s
        else:  # the artifact counts every placement after the first (its num_restarts)
            run.restarts += 1
        run.segments.append({"start_s": now_s, "end_s": now_s, "gpus": run.grant.gpus, "batch": run.grant.batch,
                             "nodes": dict(sorted(run.nodes.items())), "cost": 0.0})
        self._set_rate(run)
        if self._no_progress(run, now_s):
            return
        self.events += 1

    def _finish(self, run: JobRun, at_s: float, reason: str, active: bool = True) -> None:
        if reason == "completed":
            if run.out_of_money:
                reason = "budget"
            else:
                run.progress = run.total_progress  # the work is done (accounting may end an ulp short)
        run.finished_s = at_s
        run.stop_reason = reason
        if run.running:
            self.training_gpus -= run.grant.gpus
        run.running = False
        self.running.pop(run.name, None)
        if active:
            self.partial.pop(run.name, None)
            self.active.pop(run.name, None)
            self.waiting.pop(run.name, None)
            self.granted.pop(run.name, None)
            self.views.pop(run.name, None)
            self.placement.release(run.name)
        self.events += 1


def _arrival_order(run: JobRun) -> int:
    return run.order


def _seconds_to_finish(app: AppModel, throughput: float, batch: int, progress: float, total: float) -> float:
    """The integral of 1/goodput over [progress, total]: exact, epoch by epoch, for an application that says how
    (App.seconds_to_train), else the trapezoid rule (plain floats: called once per start)."""
    exact = getattr(app, "seconds_to_train", None)
    if exact is not None:
        return float(exact(throughput, batch, progress, total))
    if throughput <= 0:
        return math.inf
    step = (total - progress) / (INTEGRAL_POINTS - 1)
    inverse = [1.0 / max(throughput * app.efficiency(batch, progress + i * step), 1e-300)
               for i in range(INTEGRAL_POINTS)]
    return step * (sum(inverse) - (inverse[0] + inverse[-1]) / 2)


def alone_s(run: JobRun, gpus_per_node: int, restart_s: float = RESTART_S, gpus: int | None = None) -> float:
    """Seconds the job takes alone on the cluster at its request, or on `gpus` GPUs (packed, its batch fitted to
    them, one restart delay): what its slowdown is measured against."""
    app = run.app
    gpus = max(1, min(run.spec.gpus if gpus is None else gpus, getattr(app, "max_gpus", run.spec.gpus)))
    batch = fit_batch(app, gpus, run.spec.batch)
    throughput = app.throughput(gpus, packed_nodes(gpus, gpus_per_node), batch)
    return restart_s + _seconds_to_finish(app, throughput, batch, 0.0, run.total_progress)
