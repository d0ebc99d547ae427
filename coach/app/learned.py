"""`coach run --policy dl2`: the simulator's learned policy (coach.simulator.policies.dl2) deciding a live run.

The network was trained on simulated GPU jobs, whose only resource is a GPU per replica; a live job is shown to
it in those terms, through its own measurements:
- one "GPU" is one worker; the job's throughput at w workers is its fitted speed (the chosen form over every
  calibration and training epoch) at the server count that is fastest for w within max_servers, so the network
  picks workers and the fit picks the servers for them (the simulator has no parameter servers to learn from);
- progress is counted in epochs (done of max_epochs), the batch is the job's own (DL2 does not tune batches);
- the slots a job's scheduler and servers need are set aside before the network shares the rest as workers.
Jobs whose file fixes the counts keep them, and a job runs an epoch only when its predicted cost fits the money
it has left, as under every run-level policy. Pure apart from reading the model file once (kept, with no
other state between rounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from coach.domain.jobs import JobSpec
from coach.model.cost import cost_from_speed
from coach.model.speed_forms import SpeedModel, fit_chosen
from coach.policy.run_policy import POLICIES, ClusterView, CoachPolicy, Counts, Decision, JobView, Policy, Wait
from coach.simulator.view import ClusterSnapshot
from coach.simulator.view import JobView as SimJob

ROUND_S = 60.0  # the simulator's round, which the network's features were scaled for


@dataclass(frozen=True)
class FittedApp:
    """A live job as the simulator's AppModel: throughput in epochs per second from its speed fit."""

    name: str
    speed: SpeedModel
    max_servers: int
    init_batch: int
    max_batch: int
    max_local_batch: int

    def servers_for(self, workers: int, limit: int | None = None) -> int:
        """The fastest server count for `workers` (the fewest on a tie), at most `limit`."""
        top = max(1, min(self.max_servers, limit or self.max_servers))
        return max(range(1, top + 1), key=lambda s: (self.speed.epochs_per_s(workers, s), -s))

    def throughput(self, gpus: int, nodes: int, batch: int) -> float:
        return self.speed.epochs_per_s(gpus, self.servers_for(gpus)) if gpus > 0 else 0.0

    def efficiency(self, batch: int, progress: float) -> float:
        return 1.0

    def best_batch(self, gpus: int, nodes: int, progress: float) -> tuple[int, float]:
        return self.init_batch, self.throughput(gpus, nodes, self.init_batch)


@dataclass
class Dl2RunPolicy:
    model: Path | None = None  # None: the shipped model
    _net: object | None = field(default=None, repr=False)
    _coach: CoachPolicy = field(default_factory=CoachPolicy, repr=False)

    def _policy(self):
        if self._net is None:
            from coach.simulator.policies.dl2 import DEFAULT_MODEL, dl2

            self._net = dl2(0, self.model or DEFAULT_MODEL)
        return self._net

    def check(self, spec: JobSpec) -> str | None:
        try:
            self._policy()
        except ValueError as error:  # the model file is missing or does not fit the network
            return f"policy: {error}"
        return None

    def calibration(self, spec: JobSpec) -> tuple[tuple[int, int], ...]:
        return self._coach.calibration(spec)

    def decide(self, cluster: ClusterView, jobs: Sequence[JobView], now_s: float) -> dict[str, Decision]:
        price = cluster.price_per_slot_s
        learned = [job for job in jobs if not job.spec.fixed_counts and job.history.observations]
        names = {job.spec.name for job in learned}
        decisions = {name: decision for name, decision in self._coach.decide(cluster, jobs, now_s).items()
                     if name not in names}  # fixed counts, or nothing measured yet: as under `coach`
        if not learned:
            return decisions
        held_elsewhere = sum(job.held_slots for job in jobs if job.spec.name not in names)
        apps = {job.spec.name: _app(job, cluster.total_slots) for job in learned}
        # a scheduler and one server per job first; what is left is shared as workers
        workers_free = max(cluster.total_slots - held_elsewhere - 2 * len(learned), 0)
        sim_jobs = tuple(_sim_job(job, apps[job.spec.name], workers_free, price) for job in learned)
        snapshot = ClusterSnapshot(now_s=0.0, node_gpus=(workers_free,), price_per_gpu_s=price, interval_s=ROUND_S,
                                   jobs=sim_jobs)
        policy = self._policy()
        policy.speeds.clear()  # its cache is keyed by app objects, which are new every round here
        grants = policy.allocate(snapshot) if workers_free else {}
        spare = workers_free - sum(grant.gpus for grant in grants.values())
        for job in learned:
            if not job.asking:
                continue
            name, app = job.spec.name, apps[job.spec.name]
            grant = grants.get(name)
            if grant is None:
                decisions[name] = Wait("dl2: no workers for this job this round")
                continue
            workers = grant.gpus
            servers = app.servers_for(workers, 1 + spare)  # more than one server only from slots left over
            spare -= servers - 1
            cost = cost_from_speed(app.speed.epochs_per_s(workers, servers), workers, servers, price)
            decisions[name] = Counts(workers, servers, cost <= job.budget_left,
                                     {"policy": "dl2", "workers_by": "network", "servers_by": "speed fit",
                                      "predicted_epoch_cost": cost if math.isfinite(cost) else None})
        return decisions


def _app(job: JobView, total_slots: int) -> FittedApp:
    spec = job.spec
    return FittedApp(name=spec.model_path.stem, speed=fit_chosen(job.history.observations),
                     max_servers=max(1, spec.max_servers or 2), init_batch=spec.batch_size,
                     max_batch=spec.batch_size * max(1, spec.max_workers or total_slots),
                     max_local_batch=spec.batch_size)


def _sim_job(job: JobView, app: FittedApp, gpus_free: int, price: float) -> SimJob:
    history, spec = job.history, job.spec
    current = history.last_counts[0] if history.last_counts else 0
    limit = min(spec.max_workers or gpus_free, gpus_free) if gpus_free else 0
    return SimJob(name=spec.name, arrival_s=0.0, app=app, requested_gpus=max(1, min(current or 1, max(limit, 1))),
                  requested_batch=spec.batch_size, progress=float(history.epochs_done),
                  total_progress=float(spec.max_epochs), attained_gpu_s=history.spent / price if price else 0.0,
                  gpus=current if job.held_slots else 0, batch=spec.batch_size, remaining_budget=job.budget_left,
                  max_gpus=max(limit, 0))


#: Every run-level policy `coach run --policy` and `coach serve --policy` take: the pure ones and the learned one.
RUN_POLICIES: dict[str, Policy] = {**POLICIES, "dl2": Dl2RunPolicy()}
