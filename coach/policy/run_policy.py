"""Run-level policies: one signature, `decide(cluster, jobs, now_s) -> {job: Counts or Wait}`, one registry. Pure.

A policy decides how many workers and servers every job of a run gets (the run level; the cluster simulator's
policies, GPUs per job per round, are the cluster level: coach.simulator.view); placement of the functions stays with
scheduler_fork's profiles. Drivers ask the run's policy whenever a job needs counts for its next epoch, with
every job of the run in view, so decisions are made across jobs at once (Ray autoscaler v2's
`schedule(request) -> reply` and AdaptDL's policy folder are the models). New policies (fifo, drf, tiresias,
optimus, pollux, ...) are new entries of the run level's registry (coach.app.run_policies.RUN_POLICIES), never a
name check in a caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

from coach.policy import DEFAULT_POLICY
from coach.domain.jobs import JobSpec
from coach.estimates.cost import predicted_cost
from coach.policy.history import History
from coach.policy.planning import CALIBRATION_POINTS, PlanInput, calibration_within, plan_jobs


@dataclass(frozen=True)
class RunClusterView:
    """The cluster as a policy sees it."""

    total_slots: int  # slots of every node together
    price_per_slot_s: float  # the highest node price: predictions stay conservative


@dataclass(frozen=True)
class RunJobView:
    """One job of the run as a policy sees it."""

    spec: JobSpec  # targets, limits, the file's counts if it fixes them
    history: History  # what it has measured so far
    held_slots: int  # slots its pods hold or wait for now
    asking: bool  # wants counts for its next epoch now

    @property
    def budget_left(self) -> float:
        return self.spec.budget - self.history.spent


@dataclass(frozen=True)
class Counts:
    """Run the next epoch with these counts."""

    workers: int
    servers: int
    affordable: bool  # False: the predicted epoch cost exceeds the budget left, so the job stops with `budget`
    details: Mapping = field(default_factory=dict)  # recorded as the line's `decision` (empty: not recorded)


@dataclass(frozen=True)
class Wait:
    """Not now: give the slots back and ask again later."""

    reason: str  # shown to the user


Decision = Counts | Wait


class RunPolicy(Protocol):
    def check(self, spec: JobSpec) -> str | None:
        """Why this policy cannot run the job (`FIELD: problem`), or None."""
        ...

    def calibration(self, spec: JobSpec) -> tuple[tuple[int, int], ...]:
        """The (workers, servers) of the mini-epochs the job runs before its first decision."""
        ...

    def decide(self, cluster: RunClusterView, jobs: Sequence[RunJobView], now_s: float) -> dict[str, Decision]:
        """Counts or Wait for every asking job, weighing all the jobs given (every unfinished job of the run)."""
        ...


def _fixed(job: RunJobView, cluster: RunClusterView) -> Counts:
    """The job file's counts; affordable unless the predicted epoch (the last one's cost, or before any epoch
    the cost floor) exceeds what is left."""
    counts = job.spec.fixed_counts
    predicted = predicted_cost(job.history.last_cost, job.history.last_counts, counts, cluster.price_per_slot_s)
    return Counts(*counts, affordable=predicted <= job.budget_left)


class StaticPolicy:
    """Every job runs at the counts its file gives, as the thesis's static runs did."""

    def check(self, spec: JobSpec) -> str | None:
        if spec.fixed_counts is None:
            return "workers: the static policy needs workers and servers in every job file"
        return None

    def calibration(self, spec: JobSpec) -> tuple[tuple[int, int], ...]:
        return ()

    def decide(self, cluster: RunClusterView, jobs: Sequence[RunJobView], now_s: float) -> dict[str, Decision]:
        return {job.spec.name: _fixed(job, cluster) for job in jobs if job.asking}


@dataclass(frozen=True)
class CoachPolicy:
    """The thesis's marginal-utility greedy within budget and capacity, across every dynamic job of the run.

    Jobs whose file fixes the counts keep them. The others calibrate, then share the slots that the fixed,
    calibrating and waiting jobs do not hold, the largest speed gain per slot first, each step within its own
    job's money (coach.policy.allocation). A job's own full epochs override the fit where it has run them, and
    it settles at measured counts unless it knows of clearly better ones (coach.policy.measured); every decision
    records the steps it took, what each gained for its slot and its money, and why the job stays or moves.
    """

    min_gain: float = 0.05  # smallest relative speed gain worth one more worker or server
    measured: bool = True  # False: the fit alone decides, as before issue 13 (for benchmarks/choice_regret.py)

    def check(self, spec: JobSpec) -> str | None:
        return None

    def calibration(self, spec: JobSpec) -> tuple[tuple[int, int], ...]:
        return () if spec.fixed_counts else calibration_within(CALIBRATION_POINTS, spec.max_workers, spec.max_servers)

    def decide(self, cluster: RunClusterView, jobs: Sequence[RunJobView], now_s: float) -> dict[str, Decision]:
        decisions: dict[str, Decision] = {}
        planned = [job for job in jobs if not job.spec.fixed_counts and job.history.observations]
        planned_names = {job.spec.name for job in planned}
        held_elsewhere = sum(job.held_slots for job in jobs if job.spec.name not in planned_names)
        free = max(cluster.total_slots - held_elsewhere, 0)
        plans = plan_jobs([PlanInput(job.spec, job.history, job.budget_left) for job in planned], free,
                          cluster.price_per_slot_s, self.min_gain, self.measured)
        for job in jobs:
            if not job.asking:
                continue
            if job.spec.fixed_counts:
                decisions[job.spec.name] = _fixed(job, cluster)
            elif job.spec.name in planned_names:
                chosen = plans[job.spec.name]
                allocation = chosen.allocation
                if allocation.workers == 0:
                    decisions[job.spec.name] = Wait(allocation.reason)
                else:
                    decisions[job.spec.name] = Counts(allocation.workers, allocation.servers, chosen.affordable,
                                                      chosen.to_dict())
            else:  # not calibrated: nothing to decide from yet
                decisions[job.spec.name] = Wait("no speed measured yet")
        return decisions


__all__ = ["DEFAULT_POLICY", "RunClusterView", "RunJobView", "Counts", "Wait", "Decision", "RunPolicy"]
