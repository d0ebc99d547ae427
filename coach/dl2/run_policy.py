"""`coach run --policy dl2`: the learned DL2 policy deciding a live run's workers and servers.

Every time jobs ask for counts, the asking jobs (up to the network's window) form a round
(coach.dl2.run_round): each is shown to the network through its own speed fit (the chosen form
over every calibration and training epoch), its counts, limits, progress and money; the network takes one action
at a time, one more worker, one more server, or both, for one job, or stops, within the slots the other jobs do
not hold and each job's money. The network was trained in virtual time on Coach's own lifecycle
(coach.dl2.learn_run). Jobs whose file fixes the counts keep them and jobs with nothing measured yet calibrate,
as under `coach`; a job that no counts within its limits can pay for ends with `budget`, as under every
run-level policy. Pure apart from reading the model file once (kept, with no other state between rounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from coach.domain.jobs import JobSpec
from coach.estimates.speed_forms import fit_chosen
from coach.policy.run_policy import RunClusterView, CoachPolicy, Counts, Decision, RunJobView, Wait
from coach.dl2 import RUN_MODEL, ModelFileError
from coach.dl2.numpy_net import load_numpy_net
from coach.dl2.run_round import (
    COUNTS_SHAPE,
    COUNTS_WINDOW,
    KIND_NAMES,
    KINDS,
    CountsJob,
    CountsRound,
    Greedy,
    greedy_counts,
)


def load_counts(model: Path = RUN_MODEL) -> Greedy:
    """The fast (numpy) network of a counts model file; ModelFileError (one line naming the file) when it is
    missing or does not fit."""
    model = Path(model)
    if not model.is_file():
        raise ModelFileError(f"{model}: no DL2 model file here; train one with `coach train-policy --level run "
                             f"--imitate coach --out {model}`")
    return load_numpy_net(model, COUNTS_SHAPE)


@dataclass
class Dl2RunPolicy:
    model: Path | None = None  # None: the shipped counts model
    window: int = COUNTS_WINDOW
    _net: Greedy | None = field(default=None, repr=False)
    _coach: CoachPolicy = field(default_factory=CoachPolicy, repr=False)

    def network(self) -> Greedy:
        if self._net is None:
            self._net = load_counts(self.model or RUN_MODEL)
        return self._net

    def check(self, spec: JobSpec) -> str | None:
        try:
            self.network()
        except ValueError as error:  # the model file is missing or does not fit the network
            return f"policy: {error}"
        return None

    def calibration(self, spec: JobSpec) -> tuple[tuple[int, int], ...]:
        return self._coach.calibration(spec)

    def choose(self, round_: CountsRound):
        """(counts per job, actions taken) for a round: the network's most likely actions (training samples)."""
        return greedy_counts(self.network(), round_)

    def decide(self, cluster: RunClusterView, jobs: Sequence[RunJobView], now_s: float) -> dict[str, Decision]:
        others = [job for job in jobs if not learns(job)]  # fixed counts, or nothing measured yet
        decisions = self._coach.decide(cluster, others, now_s)  # as under `coach`
        asking, held_elsewhere, round_ = asking_round(cluster, jobs, self.window)
        if round_ is None:
            return decisions
        given, actions = self.choose(round_)
        if not given.any() and held_elsewhere == 0:
            given, actions = _never_idle(round_)
        given = round_.settle(given)
        for job in asking[self.window:]:
            decisions[job.spec.name] = Wait(f"dl2: beyond the network's window of {self.window} asking jobs")
        for i, job in enumerate(round_.jobs):
            decisions[job.name] = _decision(round_, i, given[i], [a % KINDS for a in actions if a // KINDS == i])
        return decisions


def learns(job: RunJobView) -> bool:
    """Whether the network decides this job: its counts are not fixed and it has measured its speed."""
    return not job.spec.fixed_counts and bool(job.history.observations)


def asking_round(cluster: RunClusterView, jobs: Sequence[RunJobView], window: int = COUNTS_WINDOW
                 ) -> tuple[list[RunJobView], int, CountsRound | None]:
    """(the asking jobs the network decides, the slots every other job holds, their round over the slots those
    leave free; None when no such job asks)."""
    asking = [job for job in jobs if learns(job) and job.asking]
    held_elsewhere = sum(job.held_slots for job in jobs if not (learns(job) and job.asking))
    if not asking:
        return asking, held_elsewhere, None
    total = cluster.total_slots
    return asking, held_elsewhere, CountsRound([counts_job(job, total) for job in asking[:window]],
                                               total - held_elsewhere, total, cluster.price_per_slot_s, window)


def counts_job(job: RunJobView, total_slots: int) -> CountsJob:
    spec, history = job.spec, job.history
    return CountsJob(name=spec.name, speed=fit_chosen(history.observations),
                     current=tuple(history.last_counts) if history.last_counts else (0, 0),
                     max_workers=spec.max_workers or total_slots, max_servers=spec.max_servers or total_slots,
                     epochs_done=history.epochs_done, max_epochs=spec.max_epochs, budget_left=job.budget_left)


def _never_idle(round_: CountsRound):
    """An idle cluster and a network that gave nothing: the first job that can run gets one worker and one
    server (a policy that stops on an empty cluster would leave every job waiting for ever)."""
    given = round_.start()
    mask = round_.mask(given)
    for i in range(len(round_.jobs)):
        if mask[i * KINDS + 2]:
            return round_.apply(given, i * KINDS + 2), [i * KINDS + 2]
    return given, []


def _decision(round_: CountsRound, i: int, counts, kinds: list[int]) -> Decision:
    job = round_.jobs[i]
    workers, servers = int(counts[0]), int(counts[1])
    if workers == 0:
        if round_.fastest_affordable(i, round_.total) is None:  # no counts it may use pay for an epoch: it ends
            return Counts(1, 1, False, {"policy": "dl2", "why": "no counts within its limits fit the money left"})
        return Wait("dl2: no counts for this job this round")
    cost = round_.cost(i, (workers, servers))
    epoch_s = round_.epoch_s(i, (workers, servers))
    return Counts(workers, servers, cost <= job.budget_left,
                  {"policy": "dl2", "by": "network", "actions": [KIND_NAMES[k] for k in kinds],
                   "predicted_epoch_s": epoch_s if math.isfinite(epoch_s) else None,
                   "predicted_epoch_cost": cost if math.isfinite(cost) else None})


#: What `coach train-policy --level run` offers, named here so that parsing the command line does not import the
#: trainer (coach.dl2.learn_run, which imports MXNet): the run-level policies it may imitate, and its rewards
#: (the keys of learn_run.REWARDS; tests/unit check that the two agree).
RUN_TEACHERS = ("coach",)  # run-level policies that decide dynamic jobs' counts (static only repeats the files)
REWARD_NAMES = ("jct", "progress")
