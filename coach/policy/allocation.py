"""How many workers and servers each running job gets now (DESIGN.md step 3, "chooses"). Pure.

Why it exists: the original Coach grew every job on its own and ignored how many slots the cluster had left.
Here one greedy pass weighs, across all jobs at once, the speed gain per slot of one more worker or one more
server against each job's per-epoch budget, its own limits and the free slots, lets a job that has measured its
counts stay there unless something clearly better is known, and says for every job why it grew as it did and
why its growth stopped. The speed surfaces are passed in (anything with `epochs_per_s(workers, servers)`), so this
module does no I/O, reads no clock and keeps no state between calls; the same input gives the same output.

The rules, in order:

1. Every job starts at (1 worker, 1 server) = 3 slots (the MXNet PS scheduler takes the third), in the order
   given (the caller passes submission order). A job whose 3 slots do not fit gets (0, 0), "capacity". A job
   whose (1,1) epoch is predicted to cost more than its per-epoch budget (remaining budget / remaining epochs)
   still gets (1,1) -- the controller decides separately whether it can afford any epoch -- but does not grow
   ("budget"); so does a job whose surface predicts no progress at (1,1) (its epoch cost is unbounded).
2. Then repeatedly, for every job still at play, its two steps are +1 worker and +1 server. A step is excluded
   when it breaks the job's max_workers/max_servers ("limit"), when its predicted epoch cost exceeds the
   per-epoch budget ("budget": the money per epoch after the step, times the epochs left, would exceed the
   money left), or when no slot is free ("capacity"); when several hold, the first in that order is named.
   Among a job's allowed steps the one with the larger marginal utility f(after) - f(now) is its best (ties:
   the worker); its relative gain is that utility / f(now). A step is worth taking when its utility is positive
   and its relative gain is at least `min_gain`.
3. Across all jobs the worth-taking best step with the largest gain per added slot is applied (slots are what
   the jobs share; every step adds one), ties going to the step that raises its job's money per epoch least
   (money is each job's own: it decides which steps a job may take, not which job gets a slot), then to the
   earlier job; then everything is recomputed. Growth ends when no job has a step worth taking; every step
   takes one slot, so it ends within `free_slots` rounds. Every step taken is told in `growth`, e.g.
   "(1,1) +1 worker -> (2,1): +35.8% speed for 1 slot, 0.98x the money per epoch (predicted)".
4. Settling (bounded exploration). A job whose demand names its `current` counts (those of its last full
   epoch, which it has measured) compares its anchor with where growth took it. The anchor is the current
   counts, or its fastest measured counts that still fit if those are min_gain/2 faster (a probe that came out
   slower must not strand a job away from the best it knows). With r = f(anchor) / f(grown):
   it keeps its anchor when that uses more slots and r >= 1 + min_gain/2 (clearly faster, so worth its slots;
   after a single epoch there, r >= 1 - min_gain/2 earns it a second, so that one noisy epoch does not decide),
   or uses no more slots and r > 1 / (1 + min_gain) (the grown counts are not clearly faster), provided it still
   fits the job's limits, its per-epoch budget and the slots left after growth; otherwise the job moves.
   A job that stays probes one neighbour of its counts (+1 or -1 worker or server) that it has never run at
   full epochs, that fits its limits, budget and the free slots, and that the fit predicts at most the job's
   `probe_margin` slower (the fit's own error on this job, coach.policy.measured.probe_margin): the fastest
   predicted such neighbour, for one epoch. Why: calibration mini-epochs and the fit can be well off, so a
   neighbour predicted a little slower may be the fastest; one epoch tells.
   With the speeds of coach.policy.measured (a job's own median full-epoch time wherever it has one), this
   bounds exploration: a move to counts never run (growth's or a probe) costs one epoch, after which those
   counts are measured and never explored again; a move between measured counts needs one to be clearly better
   than the other, by min_gain one way and min_gain/2 the other, so noise in the medians cannot make a job
   swing back and forth (a median that keeps learning may still, rarely, cross a threshold late and move the job
   to counts that are in fact better). A job thus runs at most one exploring epoch per (workers, servers) it may
   use; once it has measured its neighbours and found them slower, it settles. `choice` says what it did and why.
5. Why a job stopped is told by its more useful step, the one of the two with the larger marginal utility
   whether allowed or not (ties: the worker): "gain" when even that step is not worth taking (no constraint
   held it back: lifting them would not grow the job), otherwise the constraint that excludes it. This names
   the thing to relax to let the job grow: e.g. a job capped at one worker whose next worker would gain 19%
   says "limit" even though its allowed +1 server step would lose speed. Exclusions are named limit, then
   budget, then capacity, because capacity is the most transient and budget the job's own: a step over
   budget stays unaffordable when slots free up. A job that settled at its current counts although a step
   from them would be worth taking says "gain": it chose to stay.

Option (off by default, so `coach run` never uses it): `worker_sizes(job, workers, max_workers)` names the worker
counts one worker step of that job may reach instead of workers + 1 (the simulator's coach policy passes Pollux's: every
count up to one node more, then whole nodes). The worker step is then, among the allowed sizes whose utility is
positive, the one with the largest gain per added slot (ties: the smaller), else the +1 step; it takes as many
slots as workers it adds. Why: goodput may dip one GPU past a node boundary (the step onto a second node pays
the network) and rise beyond it, where +1 steps stall.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence, runtime_checkable

from coach.domain.identity import slots_for
from coach.estimates.cost import cost_from_speed

GAIN, BUDGET, CAPACITY, LIMIT = "gain", "budget", "capacity", "limit"
START_WORKERS, START_SERVERS = 1, 1
WORKER, SERVER = "worker", "server"


START_SLOTS = slots_for(START_WORKERS, START_SERVERS)


@runtime_checkable
class SpeedModel(Protocol):
    """A job's predicted speed surface, e.g. the fit of coach.estimates.speed."""

    def epochs_per_s(self, workers: int, servers: int) -> float:
        """Predicted full epochs per second with `workers` workers and `servers` servers."""
        ...


@dataclass(frozen=True)
class JobDemand:
    job: str  # job name, unique within one allocate() call
    speed: SpeedModel  # predicted full epochs per second for (workers, servers)
    remaining_epochs: float  # predicted epochs still to run (>= 1)
    remaining_budget: float  # money left (negative: nothing is affordable)
    price_per_slot_s: float  # money per slot-second, used to predict an epoch's cost
    max_workers: int | None = None  # the job's own cap on workers (>= 1), None for none
    max_servers: int | None = None  # the job's own cap on servers (>= 1), None for none
    current: tuple[int, int] | None = None  # counts of its last full epoch, where it may settle (rule 4)
    current_epochs: int = 0  # full epochs measured at `current`
    measured: frozenset[tuple[int, int]] = frozenset()  # counts whose speed is measured, not predicted
    probe_margin: float = 0.0  # probe unmeasured neighbours predicted at most this much slower (rule 4), >= 0

    def __post_init__(self) -> None:
        if not callable(getattr(self.speed, "epochs_per_s", None)):  # runtime_checkable isinstance is slow
            raise TypeError(f"job {self.job!r}: speed must have a method epochs_per_s(workers, servers)")
        if not (math.isfinite(self.remaining_epochs) and self.remaining_epochs >= 1):
            raise ValueError(f"job {self.job!r}: remaining_epochs must be finite and >= 1, "
                             f"got {self.remaining_epochs}")
        if math.isnan(self.remaining_budget):
            raise ValueError(f"job {self.job!r}: remaining_budget must be a number, got nan")
        if not (math.isfinite(self.price_per_slot_s) and self.price_per_slot_s >= 0):
            raise ValueError(f"job {self.job!r}: price_per_slot_s must be finite and >= 0, "
                             f"got {self.price_per_slot_s}")
        for name in ("max_workers", "max_servers"):
            limit = getattr(self, name)
            if limit is not None and limit < 1:
                raise ValueError(f"job {self.job!r}: {name} must be >= 1 or None, got {limit}")
        if not (math.isfinite(self.probe_margin) and self.probe_margin >= 0):
            raise ValueError(f"job {self.job!r}: probe_margin must be finite and >= 0, got {self.probe_margin}")
        if self.current is not None and not (len(self.current) == 2 and min(self.current) >= 1):
            raise ValueError(f"job {self.job!r}: current must be (workers, servers), both >= 1, got {self.current}")

    @property
    def per_epoch_budget(self) -> float:
        """Money one epoch may cost: remaining budget spread over the predicted remaining epochs."""
        return self.remaining_budget / self.remaining_epochs


@dataclass(frozen=True)
class Allocation:
    job: str  # job name
    workers: int  # workers to run; 0 (and servers 0) when the job cannot even start at (1,1) now
    servers: int  # parameter servers to run
    predicted_epochs_per_s: float | None  # surface at (workers, servers); None when not started or not finite
    predicted_epoch_time_s: float | None  # 1 / epochs_per_s; None unless the surface predicts progress
    predicted_epoch_cost: float | None  # (workers + servers + 1) * epoch_time_s * price_per_slot_s; same None
    per_epoch_budget: float  # remaining_budget / remaining_epochs
    stopped_by: str  # why growth stopped: "gain", "budget", "capacity" or "limit"
    reason: str  # one human-readable line with the numbers, e.g. "+1 worker would gain 3.1% < 5%"
    growth: tuple[str, ...] = ()  # every step growth took, e.g. "(1,1) +1 worker -> (2,1): +35.8% speed for ..."
    choice: str = ""  # how the counts compare with the job's current ones, and why it stays or moves (rule 4)

    @property
    def slots(self) -> int:
        """Slots this allocation occupies (scheduler included); 0 when the job did not start."""
        return slots_for(self.workers, self.servers) if self.workers else 0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of the fields."""
        return {**asdict(self), "growth": list(self.growth)}


def _usable(epochs_per_s: float) -> bool:
    """A prediction a cost can be derived from: finite and positive."""
    return math.isfinite(epochs_per_s) and epochs_per_s > 0


def predicted_epoch_cost(speed: SpeedModel, workers: int, servers: int, price_per_slot_s: float) -> float:
    """Money one epoch at (workers, servers) is predicted to cost: slots * epoch time * price.

    Infinite when the surface predicts no progress there (zero, negative or non-finite epochs per second).
    """
    if workers < 1 or servers < 1:
        raise ValueError(f"a job needs at least one worker and one server, got ({workers},{servers})")
    return _cost(float(speed.epochs_per_s(workers, servers)), workers, servers, price_per_slot_s)


_cost = cost_from_speed


SLOTS_PER_STEP = 1  # +1 worker and +1 server both take one more slot


@dataclass(frozen=True)
class _Step:
    kind: str  # WORKER or SERVER: which one more of is added
    utility: float  # f(after) - f(now), epochs per second; an unusable f(after) counts as 0
    gain: float  # utility / f(now)
    cost: float  # predicted epoch cost after the step
    excluded_by: str | None  # LIMIT, BUDGET or CAPACITY; None when the step is allowed
    money_ratio: float = math.inf  # money per epoch after the step / before (price-free: slots x epoch time)
    size: int = 1  # workers or servers added (more than 1 only with allocate's worker_sizes)

    @property
    def gain_per_slot(self) -> float:
        return self.gain / (SLOTS_PER_STEP * self.size)


def money_ratio(speed_now: float, speed_after: float, slots_now: int, slots_after: int) -> float:
    """How many times the money per epoch a change of counts costs: (slots x epoch time) after / before."""
    if not (_usable(speed_now) and _usable(speed_after)):
        return math.inf
    return (slots_after / speed_after) / (slots_now / speed_now)


def _counts(workers: int, servers: int) -> str:
    return f"({workers},{servers})"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"


def _money(amount: float) -> str:
    return f"{amount:.4g}"


WorkerSizes = Callable[[str, int, "int | None"], Iterable[int]]  # (job, workers, max_workers) -> sizes


def allocate(demands: Sequence[JobDemand], free_slots: int, min_gain: float = 0.05,
             worker_sizes: WorkerSizes | None = None) -> dict[str, Allocation]:
    """Worker and server counts for every job, keyed by job name in the order given. See the module docstring.

    `free_slots` is what the jobs may share now; `min_gain` is the smallest relative speed gain a step must
    bring; `worker_sizes` (None: +1 worker) the worker counts one step may reach, see the module docstring.
    Raises ValueError for a negative `free_slots` or `min_gain` and for duplicate job names.
    """
    return _allocated(demands, free_slots, min_gain, worker_sizes).allocations()


def _allocated(demands: Sequence[JobDemand], free_slots: int, min_gain: float,
               worker_sizes: WorkerSizes | None) -> _Allocator:
    _check_arguments(demands, free_slots, min_gain)
    allocator = _Allocator(demands, free_slots, min_gain, worker_sizes)
    allocator.start()
    allocator.grow()
    allocator.settle()
    return allocator


def _check_arguments(demands: Sequence[JobDemand], free_slots: int, min_gain: float) -> None:
    """allocate()'s own argument errors; each JobDemand has checked its fields already."""
    if free_slots < 0:
        raise ValueError(f"free_slots must be >= 0, got {free_slots}")
    if not min_gain >= 0:
        raise ValueError(f"min_gain must be >= 0, got {min_gain}")
    duplicates = sorted(name for name, count in Counter(demand.job for demand in demands).items() if count > 1)
    if duplicates:
        raise ValueError(f"duplicate job names: {', '.join(duplicates)}")


class _Allocator:
    """The working state of one allocate() call, which runs its rules in turn: start, grow, settle, then tell.

    Pure like allocate(): it lives for one call and only reads the demands. Each surface is asked once per point,
    so a model that is not quite pure cannot make the result wobble.
    """

    def __init__(self, demands: Sequence[JobDemand], free_slots: int, min_gain: float,
                 worker_sizes: WorkerSizes | None = None) -> None:
        self.demands = demands
        self.min_gain = min_gain  # the smallest relative speed gain a step must bring
        self.worker_sizes = worker_sizes  # the worker counts one step may reach; None: +1
        self.free = free_slots  # slots no job holds yet
        self.counts: list[tuple[int, int]] = []  # (workers, servers) per job; (0, 0) when not started
        self.fixed: dict[int, tuple[str, str]] = {}  # jobs that never grow: index -> (stopped_by, reason)
        self.growth: dict[int, list[str]] = {index: [] for index in range(len(demands))}  # steps taken, told
        self.choices: dict[int, str] = {}  # what settling did and why, per job (rule 4)
        self.chosen_by_rule: set[int] = set()  # jobs whose counts settling chose, not growth
        self._speeds: dict[tuple[int, int, int], float] = {}  # (index, workers, servers) -> epochs per second

    # The surfaces, asked once per point.

    def f(self, index: int, workers: int, servers: int) -> float:
        """Predicted full epochs per second of job `index` at (workers, servers)."""
        key = (index, workers, servers)
        if key not in self._speeds:
            self._speeds[key] = float(self.demands[index].speed.epochs_per_s(workers, servers))
        return self._speeds[key]

    def cost(self, index: int, workers: int, servers: int) -> float:
        """Predicted money of one epoch of job `index` at (workers, servers)."""
        return _cost(self.f(index, workers, servers), workers, servers, self.demands[index].price_per_slot_s)

    def steps(self, index: int) -> tuple[_Step, _Step]:
        """The job's two steps from its counts now: +1 worker, then +1 server."""
        workers, servers = self.counts[index]
        demand, now = self.demands[index], self.f(index, workers, servers)
        return (self._worker_step(index, now),
                self._step(index, SERVER, (workers, servers + 1), demand.max_servers, now))

    def _worker_step(self, index: int, now: float) -> _Step:
        """+1 worker; with worker_sizes the useful size with the most gain per slot (ties: the smaller), an
        allowed one first (else the excluded one tells why the job stopped), or +1 when no size is useful."""
        workers, servers = self.counts[index]
        limit = self.demands[index].max_workers
        one = self._step(index, WORKER, (workers + 1, servers), limit, now)
        if self.worker_sizes is None:
            return one
        speeds = self._speeds  # read directly: a job may have a hundred sizes, every step of every round
        useful = [(one.gain_per_slot, workers + 1)] if one.utility > 0 else []
        sizes = self.worker_sizes(self.demands[index].job, workers, limit)
        for target in sorted({t for t in sizes if t > workers + 1}):
            after = speeds.get((index, target, servers))
            if after is None:
                after = self.f(index, target, servers)
            utility = (after if 0.0 < after < math.inf else 0.0) - now  # an unusable speed counts as 0
            if utility > 0:
                useful.append((utility / now / (SLOTS_PER_STEP * (target - workers)), target))
        if not useful:
            return one
        return self._first_allowed(index, one, useful, limit, now)

    def _first_allowed(self, index: int, one: _Step, useful: list[tuple[float, int]], limit: int | None,
                       now: float) -> _Step:
        """Among useful (gain per slot, workers after) sizes, most gain per slot first (equal to 9 decimals: the
        smaller size first), the first allowed one, else the first. Sizes are weighed in full (cost, constraints)
        in that order until one is allowed: nearly always the first."""
        workers, servers = self.counts[index]
        first = None
        for target in by_gain(useful):
            step = one if target == workers + 1 else self._step(index, WORKER, (target, servers), limit, now)
            if step.excluded_by is None:
                return step
            first = step if first is None else first
        assert first is not None
        return first

    def _step(self, index: int, kind: str, after_counts: tuple[int, int], limit: int | None, now: float) -> _Step:
        """One step to `after_counts`, with what it brings, what it costs and the first constraint it breaks."""
        demand = self.demands[index]
        after = self.f(index, *after_counts)
        utility = (after if _usable(after) else 0.0) - now
        step_cost = self.cost(index, *after_counts)
        raised = after_counts[0] if kind == WORKER else after_counts[1]
        size = raised - (self.counts[index][0] if kind == WORKER else self.counts[index][1])
        excluded_by = _first_broken(over_limit=limit is not None and raised > limit,
                                    over_budget=step_cost > demand.per_epoch_budget, no_slot=self.free < size)
        ratio = money_ratio(now, after, slots_for(*self.counts[index]), slots_for(*after_counts))
        return _Step(kind, utility, utility / now, step_cost, excluded_by, ratio, size)

    # Rule 1: starts, in the order given.

    def start(self) -> None:
        """Every job at (1,1) while its 3 slots are free, (0,0) once they are not; which started jobs never grow."""
        for index in range(len(self.demands)):
            if self.free < START_SLOTS:
                self.counts.append((0, 0))
                self.fixed[index] = (CAPACITY, f"(1,1) needs {START_SLOTS} slots but only {self.free} are free")
                continue
            self.counts.append((START_WORKERS, START_SERVERS))
            self.free -= START_SLOTS
            held = self._held_at_start(index)
            if held is not None:
                self.fixed[index] = held

    def _held_at_start(self, index: int) -> tuple[str, str] | None:
        """(BUDGET, reason) when no epoch cost at (1,1) is bounded or the epoch is over the per-epoch budget."""
        demand = self.demands[index]
        start_speed = self.f(index, START_WORKERS, START_SERVERS)
        start_cost = self.cost(index, START_WORKERS, START_SERVERS)
        if not _usable(start_speed):
            return BUDGET, f"the surface predicts {start_speed:.4g} epochs/s at (1,1), so no epoch cost is bounded"
        if start_cost > demand.per_epoch_budget:
            return BUDGET, (f"(1,1) predicted epoch cost {_money(start_cost)} > "
                            f"per-epoch budget {_money(demand.per_epoch_budget)}")
        return None

    # Rules 2-3: growth.

    def grow(self) -> None:
        """Take the largest gain per slot across all jobs, one step at a time, until no step is worth a slot.

        A job's steps change only when it grows (free slots matter only once none is left, which ends the
        growth), so each job's best step is kept until then; with worker_sizes, a step of several workers that no
        longer fits is chosen again.
        """
        if self.free < 1:
            return
        best_of = {index: self._candidate(index) for index in range(len(self.demands)) if index not in self.fixed}
        ahead = _StepQueue(best_of)
        while self.free >= 1:
            chosen = ahead.pop()
            if chosen is None:
                break
            index, step = chosen
            if SLOTS_PER_STEP * step.size > self.free:  # a step of several workers no longer fits: choose again
                ahead.replace(index, self._candidate(index))
                continue
            self._take(index, step)
            ahead.replace(index, self._candidate(index))

    def _candidate(self, index: int) -> _Step | None:
        """The job's more useful allowed step when it is worth taking, else None. A server step beyond the job's
        max_servers is excluded by its limit whatever it brings, so it is not worked out (the simulator's jobs
        sit at 1 server, and this is asked at every step)."""
        workers, servers = self.counts[index]
        demand, now = self.demands[index], self.f(index, workers, servers)
        steps = [self._worker_step(index, now)]
        if demand.max_servers is None or servers < demand.max_servers:
            steps.append(self._step(index, SERVER, (workers, servers + 1), demand.max_servers, now))
        best = _more_useful([step for step in steps if step.excluded_by is None])
        return best if best is not None and _worth(best, self.min_gain) else None

    def _take(self, index: int, step: _Step) -> None:
        workers, servers = self.counts[index]
        self._apply(index, step)
        self.growth[index].append(f"{_counts(workers, servers)} +{step.size} {step.kind} -> "
                                  f"{_counts(*self.counts[index])}: "
                                  f"{_step_text(step)} ({_source(self.demands[index], *self.counts[index])})")

    def _apply(self, index: int, step: _Step) -> None:
        workers, servers = self.counts[index]
        self.counts[index] = (workers + step.size, servers) if step.kind == WORKER else (workers, servers + step.size)
        self.free -= SLOTS_PER_STEP * step.size

    # Rule 4: settling.

    def settle(self) -> None:
        """A job that has measured its current counts stays there unless growth found clearly better; where it
        stays, it probes one unmeasured neighbour the fit does not rule out. Jobs in the order given."""
        for index, demand in enumerate(self.demands):
            if index not in self.fixed and demand.current is not None:
                self._settle(index, demand.current)

    def _settle(self, index: int, current: tuple[int, int]) -> None:
        grown, last = self.counts[index], (current[0], current[1])  # a list read from JSON compares as a tuple
        anchor = self._anchor(index, last, grown)
        here = self._here(index, anchor, last)
        if grown == anchor:
            choice = (f"stays at {_counts(*anchor)}: {here}, growth found nothing better" if anchor == last
                      else f"goes back to {_counts(*anchor)}: {here}")
        else:
            kept, choice = self._keep_or_move(index, anchor, last, grown, here)
            if not kept:
                self.choices[index] = choice
                return
        self.choices[index] = self._probe(index, anchor, here) or choice

    def _anchor(self, index: int, last: tuple[int, int], grown: tuple[int, int]) -> tuple[int, int]:
        """Where the job compares growth from: its last counts, or its fastest measured counts that still fit when
        they beat the last ones by min_gain/2 (a probe that came out slower must not strand the job)."""
        best = last
        for point in sorted(self.demands[index].measured):
            if (self._fits(index, point, slots_for(*point) - slots_for(*grown))
                    and self.f(index, *point) > self.f(index, *best)):
                best = point
        return best if _ratio(self.f(index, *best), self.f(index, *last)) >= 1 + self.min_gain / 2 else last

    def _fits(self, index: int, point: tuple[int, int], added_slots: int) -> bool:
        """Within the job's limits and per-epoch budget, and no more slots added than are free."""
        demand = self.demands[index]
        return (_within_limits(demand, *point) and self.cost(index, *point) <= demand.per_epoch_budget
                and added_slots <= self.free)

    def _here(self, index: int, anchor: tuple[int, int], last: tuple[int, int]) -> str:
        """The anchor's epoch time and where it comes from, for `choice` (and the last counts' when not the same)."""
        demand = self.demands[index]
        here = f"{_counts(*anchor)} {_seconds(self.f(index, *anchor))} s per epoch ({_source(demand, *anchor)})"
        if anchor != last:
            here += f", its fastest measured, not the last {_counts(*last)} {_seconds(self.f(index, *last))} s"
        return here

    def _keep_or_move(self, index: int, anchor: tuple[int, int], last: tuple[int, int], grown: tuple[int, int],
                      here: str) -> tuple[bool, str]:
        """Whether the job keeps its anchor rather than the counts growth took it to, and `choice` saying why."""
        demand = self.demands[index]
        comparison = _Comparison(anchor=anchor, grown=grown,
                                 ratio=_ratio(self.f(index, *anchor), self.f(index, *grown)),
                                 extra_slots=slots_for(*anchor) - slots_for(*grown),
                                 epochs_here=demand.current_epochs if anchor == last else 2)
        keep = comparison.keeps(self.min_gain)
        fits = self._fits(index, anchor, comparison.extra_slots)
        compared = (f"{here} against {_counts(*grown)} {_seconds(self.f(index, *grown))} s "
                    f"({_source(demand, *grown)})")
        if keep and fits:
            self.counts[index] = anchor
            self.free -= comparison.extra_slots
            self.chosen_by_rule.add(index)
            return True, (f"{_stays(anchor, last)} {_counts(*anchor)}: {compared}; "
                          f"{comparison.why_keep(self.min_gain)}")
        verb = "explores" if _source(demand, *grown) == PREDICTED else "moves to"
        return False, (f"{verb} {_counts(*grown)} from {_counts(*last)}: {compared}; "
                       f"{comparison.why_move(keep, self.min_gain)}")

    def _probe(self, index: int, anchor: tuple[int, int], here: str) -> str | None:
        """Moves a job that stays to the neighbour it probes for one epoch, if any; `choice` saying so, else None."""
        probe = self._probe_target(index, anchor)
        if probe is None:
            return None
        change, w, s = probe
        self.counts[index] = (w, s)
        self.free -= slots_for(w, s) - slots_for(*anchor)
        self.chosen_by_rule.add(index)
        return (f"probes {_counts(w, s)} ({change}) from {_counts(*anchor)} for one epoch: never run at "
                f"full epochs, predicted {_seconds(self.f(index, w, s))} s per epoch against {here}, within "
                f"the probe margin {_percent(self.demands[index].probe_margin)}")

    def _probe_target(self, index: int, anchor: tuple[int, int]) -> tuple[str, int, int] | None:
        """The fastest predicted neighbour that may be probed, as (change, workers, servers); None if none may."""
        probe = None
        w0, s0 = anchor
        for change, w, s in (("+1 worker", w0 + 1, s0), ("+1 server", w0, s0 + 1), ("-1 worker", w0 - 1, s0),
                             ("-1 server", w0, s0 - 1)):
            if not self._probeable(index, anchor, w, s):
                continue
            if probe is None or self.f(index, w, s) > self.f(index, *probe[1:]):  # a tie keeps the earlier one
                probe = (change, w, s)
        return probe

    def _probeable(self, index: int, anchor: tuple[int, int], w: int, s: int) -> bool:
        """Never run at full epochs, within limits, free slots and budget, and predicted within the probe margin."""
        demand = self.demands[index]
        added = slots_for(w, s) - slots_for(*anchor)
        return not (min(w, s) < 1 or (w, s) in demand.measured or not _within_limits(demand, w, s)
                    or added > self.free or self.cost(index, w, s) > demand.per_epoch_budget
                    or not self.f(index, w, s) >= self.f(index, *anchor) * (1 - demand.probe_margin))

    # Rule 5: why each job stopped, told by its more useful step.

    def allocations(self) -> dict[str, Allocation]:
        """Every job's counts with its predictions, why its growth stopped, the steps it took and its choice."""
        result: dict[str, Allocation] = {}
        for index, demand in enumerate(self.demands):
            workers, servers = self.counts[index]
            stopped_by, reason = self._stopped(index)
            allocation = _allocation(demand, workers, servers, self.f(index, workers, servers) if workers else None,
                                     stopped_by, reason)
            result[demand.job] = replace(allocation, growth=tuple(self.growth[index]),
                                         choice=self.choices.get(index, ""))
        return result

    def _stopped(self, index: int) -> tuple[str, str]:
        """stopped_by and reason: the start's verdict, settling's choice to stay, or the more useful step's."""
        if index in self.fixed:
            return self.fixed[index]
        top = _more_useful(self.steps(index))
        assert top is not None
        if index in self.chosen_by_rule and top.excluded_by is None and _worth(top, self.min_gain):
            return GAIN, (f"+{top.size} {top.kind} would gain {_percent(top.gain)} but settling chose "
                          f"{_counts(*self.counts[index])}")
        return _why(top, self.demands[index], self.min_gain)


def _first_broken(over_limit: bool, over_budget: bool, no_slot: bool) -> str | None:
    """The constraint that excludes a step, named in rule 2's order (limit, budget, capacity); None if none."""
    for name, broken in ((LIMIT, over_limit), (BUDGET, over_budget), (CAPACITY, no_slot)):
        if broken:
            return name
    return None


def _more_useful(candidates: Sequence[_Step]) -> _Step | None:
    """The step with the larger marginal utility; candidates come worker first, so a tie keeps the worker."""
    best = None
    for step in candidates:
        if best is None or step.utility > best.utility:
            best = step
    return best


def _worth(step: _Step, min_gain: float) -> bool:
    """A step worth taking: it speeds the job up, by at least min_gain."""
    return step.utility > 0 and step.gain >= min_gain


def by_gain(useful: list[tuple[float, int]]) -> Iterator[int]:
    """The sizes of (gain per slot, size) pairs, most gain first (equal to 9 decimals: the smaller size first).
    Only the gains that tie with the top one are rounded and sorted before the first size is given: the rest only
    if it is asked for."""
    top = max(gain for gain, _ in useful)
    rounded_top = round(top, 9)
    # two gains 2e-9 apart cannot round to the same 9 decimals
    leading = sorted(size for gain, size in useful if gain >= top - 2e-9 and round(gain, 9) == rounded_top)
    yield from leading
    rest = sorted(((round(gain, 9), -size) for gain, size in useful if size not in leading), reverse=True)
    yield from (-negative for _, negative in rest)


class _StepQueue:
    """Every job's best step, the one ahead of all others first (rule 3: the most gain per slot, gains equal to 9
    decimals tie, then the smaller money ratio, then the earlier job). A heap, because hundreds of jobs may grow by
    hundreds of steps in one call (the simulator's coach policy on a large cluster); a replaced step's entry stays
    in the heap and is skipped when it surfaces."""

    def __init__(self, best_of: dict[int, _Step | None]) -> None:
        self.best_of: dict[int, _Step | None] = {}
        self.heap: list[tuple[float, float, int, int, _Step]] = []
        self.pushed = 0
        for index, step in best_of.items():
            self.replace(index, step)

    def replace(self, index: int, step: _Step | None) -> None:
        self.best_of[index] = step
        if step is not None:
            self.pushed += 1
            heapq.heappush(self.heap, (-round(step.gain_per_slot, 9), step.money_ratio, index, self.pushed, step))

    def pop(self) -> tuple[int, _Step] | None:
        """The job whose best step is ahead of every other job's, with that step; None when no job has one."""
        while self.heap:
            *_, index, _, step = heapq.heappop(self.heap)
            if self.best_of.get(index) is step:
                self.best_of[index] = None
                return index, step
        return None


@dataclass(frozen=True)
class _Comparison:
    """Rule 4's comparison of a job's anchor with the counts growth took it to."""

    anchor: tuple[int, int]  # the job's last counts or its fastest measured ones
    grown: tuple[int, int]  # where growth took the job
    ratio: float  # f(anchor) / f(grown)
    extra_slots: int  # slots the anchor takes beyond the grown counts (<= 0: no more)
    epochs_here: int  # full epochs measured at the anchor (2 when not known: at least one)

    def keeps(self, min_gain: float) -> bool:
        """Clearly faster for more slots (after a single epoch there: not clearly slower), or the grown counts
        are not clearly faster for no fewer slots."""
        if self.extra_slots <= 0:
            return self.ratio > 1 / (1 + min_gain)
        if self.epochs_here == 1:
            return self.ratio >= 1 - min_gain / 2
        return self.ratio >= 1 + min_gain / 2

    def why_keep(self, min_gain: float) -> str:
        if self.extra_slots <= 0:
            return f"{_counts(*self.grown)} is not {_percent(min_gain)} faster"
        if self.epochs_here == 1:
            return f"one epoch there within {_percent(min_gain / 2)} of {_counts(*self.grown)}: it gets a second"
        return (f"faster by {_percent(self.ratio - 1)} >= {_percent(min_gain / 2)} for {self.extra_slots} more "
                f"slot(s)")

    def why_move(self, keep: bool, min_gain: float) -> str:
        if keep:
            return f"{_counts(*self.anchor)} no longer fits the job's limits, budget or the free slots"
        if self.ratio < 1:
            return f"{_counts(*self.grown)} is faster by {_percent(1 / self.ratio - 1)}"
        # the anchor is a little faster, but not by enough for its extra slots
        return (f"{_counts(*self.grown)} is within {_percent(min_gain / 2)} of it with {self.extra_slots} fewer "
                f"slot(s)")


MEASURED, PREDICTED = "measured", "predicted"


def _source(demand: JobDemand, workers: int, servers: int) -> str:
    """Whether the speed at these counts is the job's measurement or the fit's prediction."""
    return MEASURED if (workers, servers) in demand.measured else PREDICTED


def _stays(anchor: tuple[int, int], last: tuple[int, int]) -> str:
    return "stays at" if anchor == last else "goes back to"


def _within_limits(demand: JobDemand, workers: int, servers: int) -> bool:
    return ((demand.max_workers is None or workers <= demand.max_workers)
            and (demand.max_servers is None or servers <= demand.max_servers))


def _ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator for speeds; a speed without progress counts as infinitely slow."""
    if not _usable(denominator):
        return math.inf
    return numerator / denominator if _usable(numerator) else 0.0


def _seconds(epochs_per_s: float) -> str:
    return f"{1 / epochs_per_s:.4g}" if _usable(epochs_per_s) else "inf"


def _step_text(step: _Step) -> str:
    """What a step brings for what it costs, e.g. "+12.0% speed for 1 slot, 1.19x the money per epoch"."""
    slots = SLOTS_PER_STEP * step.size
    return (f"{step.gain * 100:+.1f}% speed for {slots} slot{'s' if slots > 1 else ''}, {step.money_ratio:.2f}x "
            f"the money per epoch")


def _why(step: _Step, demand: JobDemand, min_gain: float) -> tuple[str, str]:
    """stopped_by and reason told by the job's more useful step, which growth did not take."""
    head = f"+{step.size} {step.kind} would gain {_percent(step.gain)}"
    if not (step.utility > 0 and step.gain >= min_gain):
        if step.gain < min_gain:
            return GAIN, f"{head} < {min_gain * 100:.3g}%"
        return GAIN, f"{head}: no speed-up"
    if step.excluded_by == LIMIT:
        name, limit = ("max_workers", demand.max_workers) if step.kind == WORKER else ("max_servers",
                                                                                       demand.max_servers)
        return LIMIT, f"{head} but {name} is {limit}"
    if step.excluded_by == BUDGET:
        return BUDGET, (f"{head} but its predicted epoch cost {_money(step.cost)} > "
                        f"per-epoch budget {_money(demand.per_epoch_budget)}")
    if step.excluded_by is None:  # slots another job's settling freed after growth ended stay free this round
        return CAPACITY, f"{head} but no slot was free while the jobs grew"
    return CAPACITY, f"{head} but no slot is free"


def _allocation(demand: JobDemand, workers: int, servers: int, epochs_per_s: float | None, stopped_by: str,
                reason: str) -> Allocation:
    usable = epochs_per_s if epochs_per_s is not None and _usable(epochs_per_s) else None  # one a cost derives from
    return Allocation(
        job=demand.job,
        workers=workers,
        servers=servers,
        predicted_epochs_per_s=epochs_per_s if epochs_per_s is not None and math.isfinite(epochs_per_s) else None,
        predicted_epoch_time_s=1 / usable if usable is not None else None,
        predicted_epoch_cost=_cost(usable, workers, servers, demand.price_per_slot_s) if usable is not None else None,
        per_epoch_budget=demand.per_epoch_budget,
        stopped_by=stopped_by,
        reason=reason,
    )
