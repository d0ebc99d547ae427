"""The thesis's policy in the simulator: greedy marginal utility within each job's budget (coach.policy). Pure.

It runs coach.policy.allocation's greedy (rules 1-3, as coach_greedy.py restates them on plain numbers for the
simulator's case, with the same answers), mapping one simulated job to one job of allocate's:
- workers = GPUs; max_servers = 1, so the job sits at 1 server and only ever grows workers (GPU jobs here have
  no parameter servers). allocate counts a scheduler and a server slot per job, which take no GPU: we pass
  free_slots = GPUs + 2 x candidates and let at most total_gpus jobs be candidates, so every candidate starts
  (3 slots each) and every slot beyond the starts is one GPU; the GPUs granted never exceed the cluster's.
- one "epoch" is one M0-sample (remaining_epochs = 1 and a price of 0, so its size matters nowhere), so
  epochs_per_s(w, s) = goodput at w packed GPUs (app.best_batch, the batch the job then runs at), and min_gain
  (5%, the module's default) is the smallest relative speed-up one more GPU must bring. Goodput rather than the
  share of the remaining work per second: allocate weighs only ratios of speeds, and goodputs stay the same from
  round to round while a job's stage of training does, so the step sizes worth weighing can be kept (below).
- Budget: money is spent per GPU-second (price_per_gpu_s), not per slot, so allocate's own per-slot cost is set
  to 0 and the budget is enforced in the speed adapter instead: a GPU count whose predicted spend to finish,
  gpus x price_per_gpu_s x remaining_progress / goodput, exceeds job.remaining_budget predicts no progress, so
  allocate never takes that step; a job that cannot afford to finish even on 1 GPU is not started.
Candidates are taken in the order given to allocate (the thesis's Coach: arrival order; here by default least
attained GPU time first).

Speed (the Philly trace asks this every round for days of simulated time): goodputs are kept per application,
stage and node size across rounds (as Pollux's); for a job without a budget, of the sizes a step from w GPUs may
reach only those that beat every smaller one on gain per GPU are handed to allocate (any other loses to a smaller
one whatever the free GPUs), kept with the goodputs, and so are its steps in the order the greedy tries them;
with as many candidates as GPUs, allocate's answer (one each) is known without asking; and a round that asks what
the last one asked (the same jobs in the same order, each at the same stage, none with a budget) gets the last
answer (7 rounds in 10 in Philly's first weeks, far fewer once more jobs queue).

What the thesis's greedy lacked against Pollux in the simulator (issue 35), given here and measured on workloads
1-8 at load 1.0 (mean JCT, Pollux 0.766 h): with its 5% minimum gain it left GPUs idle that any gain would use
(0.868 h; min_gain 0: 0.795 h); and it re-decided every job every round, restarting a running job for any gain,
5,509 restarts over the 8 workloads. So: min_gain is 0 (a GPU that speeds a job up at all is better used than
idle), and a running job grows only when the time it saves on its remaining work exceeds the restart delay it
pays (`restart_s`, 30 s as the engine's); shrinking to make room for others is not damped; candidates are taken
by least attained GPU time, as Pollux orders them (0.794 h in all). And it grew one GPU at a time, stalling where
the next GPU, on a second node, gains nothing; a step may now add several GPUs, Pollux's sizes (`node_steps`,
allocate's `worker_sizes` option): 0.753 h, and faster than Pollux, paired over jobs, at loads 0.5 to 2.0
(docs/simulator.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Callable, Mapping

from coach.policy.allocation import SLOTS_PER_STEP
from coach.simulator.grants import fit_batch, gpu_cap, stage
from coach.simulator.policies.coach_greedy import GreedyJob, greedy_counts
from coach.simulator.policies.pollux import step_sizes
from coach.simulator.view import AppModel, ClusterSnapshot, Grant, ClusterJobView, packed_nodes

MIN_GAIN = 0.0
RESTART_S = 30.0  # what a change of allocation costs a running job (the simulator's restart delay)


@dataclass(slots=True)
class _Speed:
    """SpeedModel adapter: goodput on `workers` GPUs (an epoch is one M0-sample), 0 if unaffordable. Asked
    millions of times over Philly, so it reads the goodput table itself and works out only what is missing; made
    for every candidate every round, so what the round asks of the job is worked out once, here."""

    job: ClusterJobView
    known: dict[int, tuple[int, float]]  # the job's goodput table: GPUs -> (batch, M0-samples per second)
    per_node: int  # GPUs per node: replicas are packed on such nodes
    price_per_gpu_s: float
    unlimited: bool  # no budget: every count with a goodput is affordable
    stage: float  # the job's stage of training (grants.stage)
    cap: int  # the most GPUs it may get this round (grants.gpu_cap)
    table: _Goodputs  # its application's goodputs at its stage

    def goodput(self, gpus: int) -> float:
        found = self.known.get(gpus)
        return found[1] if found is not None else _best(self.known, self.job, gpus, self.per_node)[1]

    def affordable(self, gpus: int) -> bool:
        return self._affordable(gpus, self.goodput(gpus))

    def _affordable(self, gpus: int, goodput: float) -> bool:
        if goodput <= 0:
            return False
        if self.unlimited:
            return True
        return gpus * self.price_per_gpu_s * self.job.remaining_progress / goodput <= self.job.remaining_budget

    def epochs_per_s(self, workers: int, servers: int) -> float:
        found = self.known.get(workers)
        goodput = found[1] if found is not None else _best(self.known, self.job, workers, self.per_node)[1]
        return goodput if self._affordable(workers, goodput) else 0.0

    def one_server(self, workers: int) -> float:
        """epochs_per_s at `workers` GPUs (a simulated job has no servers)."""
        return self.epochs_per_s(workers, 1)


@dataclass
class _Goodputs:
    """One application at one stage of training on one node size: GPUs -> (batch, goodput), and the step sizes
    worth weighing from w GPUs up to a cap (for jobs without a budget)."""

    app: AppModel  # held so that the id in the key stays this application's
    best: dict[int, tuple[int, float]] = field(default_factory=dict)
    leading: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # (w, cap) -> sizes
    ordered: dict[tuple[int, int], list] = field(default_factory=dict)  # the greedy's memo (coach_greedy.GreedyJob)

    def leading_sizes(self, workers: int, cap: int, per_node: int, speed: Callable[[int], float]) -> list[int]:
        """Of w+1 and Pollux's sizes from w up to cap, those whose gain per GPU (allocate's, to 9 decimals) beats
        every smaller one's: the only ones allocate can choose, whatever the free GPUs (the best within any
        limit is the last of them below it). `speed` is allocate's epochs_per_s, so the gains are its own."""
        found = self.leading.get((workers, cap))
        if found is None:
            found, top, known = [], -math.inf, self.best
            now = speed(workers)
            for target in sorted({workers + 1, *step_sizes(workers, cap, per_node)}):
                # a goodput of the table gives the same utility as `speed`, which turns one <= 0 into 0
                pair = known.get(target)
                after = pair[1] if pair is not None else speed(target)
                utility = (after if 0.0 < after < math.inf else 0.0) - now
                if utility > 0:
                    gain = utility / now / (SLOTS_PER_STEP * (target - workers))
                    if gain < top - 2e-9:  # rounding moves a gain by at most 5e-10: it cannot beat the top
                        continue
                    gain = round(gain, 9)
                    if gain > top:
                        found.append(target)
                        top = gain
            self.leading[(workers, cap)] = found
        return found


@dataclass
class Coach:
    min_gain: float = MIN_GAIN
    restart_s: float = RESTART_S  # 0: grow whenever the greedy says so (the thesis's behaviour)
    least_attained_first: bool = True  # candidates by attained GPU time (False: arrival order, the thesis's)
    node_steps: bool = True  # a step may add several GPUs, as Pollux's (False: one GPU at a time, the thesis's)
    elastic: bool = True
    # (id(app), stage, GPUs per node) -> its goodputs and leading step sizes: the last round's, for the next; a
    # queue of jobs of one application shares one
    goodputs: dict[tuple[int, float, int], _Goodputs] = field(default_factory=dict)
    # job -> (progress, stage) as the last round found them (a queued job's stays the same)
    stages: dict[str, tuple[float, float]] = field(default_factory=dict)
    # what the greedy answered last round, and to what (_demand_key): most rounds ask the same again
    last_counts: tuple[tuple, dict[str, int]] | None = None

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        total, per_node = snapshot.total_gpus, snapshot.gpus_per_node
        used: dict[tuple[int, float, int], _Goodputs] = {}
        tables: dict[str, _Goodputs] = {}  # per job: its application's at its stage
        stages: dict[str, tuple[float, float]] = {}  # per job asked: (progress, stage), for the next round

        def table(job: ClusterJobView, at: float | None = None) -> _Goodputs:
            known = tables.get(job.name)
            if known is None:
                # goodputs are of replicas packed on such nodes
                key = (id(job.app), stage(job) if at is None else at, per_node)
                known = used.get(key) or self.goodputs.get(key) or _Goodputs(job.app)
                used[key] = tables[job.name] = known
            return known

        def best(job: ClusterJobView, gpus: int) -> tuple[int, float]:
            return _best(table(job).best, job, gpus, per_node)

        def speed_of(job: ClusterJobView) -> _Speed:
            seen = self.stages.get(job.name)  # a job that did not train since the last round is where it was
            at = seen[1] if seen is not None and seen[0] == job.progress else stage(job)
            stages[job.name] = (job.progress, at)
            held = table(job, at)
            return _Speed(job, held.best, per_node, snapshot.price_per_gpu_s, _unlimited(job.remaining_budget), at,
                          gpu_cap(job, total), held)

        speeds: list[_Speed] = []
        order = snapshot.jobs if not self.least_attained_first else sorted(
            snapshot.jobs, key=attrgetter("attained_gpu_s", "arrival_s", "name"))
        for job in order:
            if len(speeds) >= total:
                break
            speed = speed_of(job)
            if job.remaining_progress > 0 and speed.cap >= 1 and speed.affordable(1):
                speeds.append(speed)
        jobs = {s.job.name: s.job for s in speeds}
        if len(speeds) >= total:  # as many candidates as GPUs: each starts on one and none is left to grow
            counts = dict.fromkeys(jobs, 1)  # allocate's answer, without asking it (a queue of thousands)
        else:
            key = _demand_key(speeds, total, per_node)
            if self.last_counts is not None and self.last_counts[0] == key:
                counts = dict(self.last_counts[1])
            else:
                counts = self._counts(speeds, total, per_node)
                self.last_counts = (key, dict(counts))
        for name, gpus in counts.items():
            job = jobs[name]
            if 0 < job.gpus < gpus and not self._pays(job, best(job, job.gpus)[1], best(job, gpus)[1]):
                counts[name] = job.gpus  # the restart would cost more than the growth saves: keep what it has
        self.goodputs, self.stages = used, stages
        return {name: Grant(gpus, best(jobs[name], gpus)[0]) for name, gpus in counts.items()}

    def _counts(self, speeds: list[_Speed], total: int, per_node: int) -> dict[str, int]:
        """GPUs per job by allocate's greedy, for jobs that all start (fewer candidates than GPUs)."""
        # jobs without a budget of one application at one stage share their speeds and step sizes: their steps
        # are kept with the table, from round to round
        jobs = [GreedyJob(s.one_server, s.cap, s.job.remaining_budget, s.table.ordered if s.unlimited else None)
                for s in speeds]
        sizes = None
        if self.node_steps:
            def sizes(index: int, workers: int, cap: int) -> list[int]:
                speed = speeds[index]
                if not speed.unlimited:  # affordability is the job's own: every size
                    return step_sizes(workers, cap, per_node)
                return speed.table.leading_sizes(workers, cap, per_node, speed.one_server)
        chosen = greedy_counts(jobs, total + 2 * len(jobs), self.min_gain, sizes)
        return {s.job.name: workers for s, workers in zip(speeds, chosen) if workers}

    def _pays(self, job: ClusterJobView, goodput_now: float, goodput_then: float) -> bool:
        """Growing saves more time on the job's remaining work than the restart delay costs."""
        if goodput_now <= 0 or goodput_then <= 0:
            return goodput_then > 0
        remaining = job.remaining_progress
        return remaining / goodput_now - remaining / goodput_then > self.restart_s


def _best(known: dict[int, tuple[int, float]], job: ClusterJobView, gpus: int, per_node: int) -> tuple[int, float]:
    """(batch, goodput) of the job on that many GPUs packed on such nodes, from its table or worked out into it."""
    found = known.get(gpus)
    if found is None:
        batch, goodput = job.app.best_batch(gpus, packed_nodes(gpus, per_node), job.progress)
        found = known[gpus] = (fit_batch(job.app, gpus, batch), float(goodput))
    return found


def _demand_key(speeds: list[_Speed], total: int, per_node: int) -> tuple:
    """Everything `_counts` reads, in its order: equal keys, equal counts. A job's speeds are its application's
    goodputs at its stage of training on such nodes (the application itself is in the key, so that it stays alive
    and no other takes its place); with a budget they also depend on how much is left to do."""
    return (total, per_node, tuple(
        (s.job.name, s.job.app, s.stage, s.cap, s.job.remaining_budget, None if s.unlimited else s.job.remaining_progress)
        for s in speeds))


def _unlimited(budget: float) -> bool:
    return math.isinf(budget) and budget > 0


def coach(seed: int) -> Coach:
    return Coach()
