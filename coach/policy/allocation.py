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
   predicted such neighbour, for one epoch. Why: calibration mini-epochs and the fit can be 15-20% off, so a
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
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Callable, Protocol, Sequence, runtime_checkable

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

    def to_dict(self) -> dict:
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

    @property
    def gain_per_slot(self) -> float:
        return self.gain / SLOTS_PER_STEP


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


def allocate(demands: Sequence[JobDemand], free_slots: int, min_gain: float = 0.05) -> dict[str, Allocation]:
    """Worker and server counts for every job, keyed by job name in the order given. See the module docstring.

    `free_slots` is what the jobs may share now; `min_gain` is the smallest relative speed gain a step must
    bring. Raises ValueError for a negative `free_slots` or `min_gain` and for duplicate job names.
    """
    if free_slots < 0:
        raise ValueError(f"free_slots must be >= 0, got {free_slots}")
    if not min_gain >= 0:
        raise ValueError(f"min_gain must be >= 0, got {min_gain}")
    names = [demand.job for demand in demands]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"duplicate job names: {', '.join(duplicates)}")

    # Each surface is asked once per point, so a model that is not quite pure cannot make the result wobble.
    cache: dict[tuple[int, int, int], float] = {}

    def f(index: int, workers: int, servers: int) -> float:
        key = (index, workers, servers)
        if key not in cache:
            cache[key] = float(demands[index].speed.epochs_per_s(workers, servers))
        return cache[key]

    def cost(index: int, workers: int, servers: int) -> float:
        return _cost(f(index, workers, servers), workers, servers, demands[index].price_per_slot_s)

    def steps(index: int, workers: int, servers: int, free: int) -> tuple[_Step, _Step]:
        demand, now = demands[index], f(index, workers, servers)
        out = []
        for kind, w, s, limit in ((WORKER, workers + 1, servers, demand.max_workers),
                                  (SERVER, workers, servers + 1, demand.max_servers)):
            after = f(index, w, s)
            utility = (after if _usable(after) else 0.0) - now
            step_cost = cost(index, w, s)
            if limit is not None and (w if kind == WORKER else s) > limit:
                excluded_by = LIMIT
            elif step_cost > demand.per_epoch_budget:
                excluded_by = BUDGET
            elif free < 1:
                excluded_by = CAPACITY
            else:
                excluded_by = None
            ratio = money_ratio(now, after, slots_for(workers, servers), slots_for(w, s))
            out.append(_Step(kind, utility, utility / now, step_cost, excluded_by, ratio))
        return out[0], out[1]

    def more_useful(candidates: Sequence[_Step]) -> _Step | None:
        best = None
        for step in candidates:  # worker first, so a tie keeps the worker
            if best is None or step.utility > best.utility:
                best = step
        return best

    def worth(step: _Step) -> bool:
        return step.utility > 0 and step.gain >= min_gain

    # 1. starts, in the order given
    free = free_slots
    counts: list[tuple[int, int]] = []  # (workers, servers) per job; (0, 0) when not started
    fixed: dict[int, tuple[str, str]] = {}  # jobs that never grow: index -> (stopped_by, reason)
    for index, demand in enumerate(demands):
        if free < START_SLOTS:
            counts.append((0, 0))
            fixed[index] = (CAPACITY, f"(1,1) needs {START_SLOTS} slots but only {free} are free")
            continue
        counts.append((START_WORKERS, START_SERVERS))
        free -= START_SLOTS
        start_speed = f(index, START_WORKERS, START_SERVERS)
        start_cost = cost(index, START_WORKERS, START_SERVERS)
        if not _usable(start_speed):
            fixed[index] = (BUDGET, f"the surface predicts {start_speed:.4g} epochs/s at (1,1), "
                                    "so no epoch cost is bounded")
        elif start_cost > demand.per_epoch_budget:
            fixed[index] = (BUDGET, f"(1,1) predicted epoch cost {_money(start_cost)} > "
                                    f"per-epoch budget {_money(demand.per_epoch_budget)}")

    # 2.-3. growth, the largest gain per slot across all jobs first (ties: the smaller money ratio, then the
    # earlier job). A job's steps change only when it grows (free slots matter only once none is left, which ends
    # the growth), so each job's best step is kept until then.
    def candidate(index: int) -> _Step | None:
        best = more_useful([step for step in steps(index, *counts[index], free) if step.excluded_by is None])
        return best if best is not None and worth(best) else None

    def ahead(step: _Step, other: _Step) -> bool:
        """Gains equal to 9 decimals tie (whatever the float noise); a tie goes to the smaller money ratio."""
        return ((round(step.gain_per_slot, 9), -step.money_ratio) >
                (round(other.gain_per_slot, 9), -other.money_ratio))

    best_of = {index: candidate(index) for index in range(len(demands)) if index not in fixed}
    growth: dict[int, list[str]] = {index: [] for index in range(len(demands))}
    while free >= 1:
        chosen: tuple[int, _Step] | None = None
        for index, best in best_of.items():  # in job order: a tie keeps the earlier job
            if best is not None and (chosen is None or ahead(best, chosen[1])):
                chosen = (index, best)
        if chosen is None:
            break
        index, step = chosen
        workers, servers = counts[index]
        counts[index] = (workers + 1, servers) if step.kind == WORKER else (workers, servers + 1)
        free -= SLOTS_PER_STEP
        growth[index].append(f"{_counts(workers, servers)} +1 {step.kind} -> {_counts(*counts[index])}: "
                             f"{_step_text(step)} ({_source(demands[index], *counts[index])})")
        best_of[index] = candidate(index)

    # 4. settling: a job that has measured its current counts stays there unless growth found clearly better;
    # where it stays, it probes one unmeasured neighbour the fit does not rule out
    choices: dict[int, str] = {}
    chosen_by_rule: set[int] = set()  # jobs whose counts settling chose, not growth
    for index, demand in enumerate(demands):
        if index in fixed or demand.current is None:
            continue
        grown, last = counts[index], tuple(demand.current)
        current = _anchor(index, demand, last, grown, free, f, cost, min_gain)
        epochs_here = demand.current_epochs if current == last else 2  # the anchor's epochs are not known: >= 1
        here = f"{_counts(*current)} {_seconds(f(index, *current))} s per epoch ({_source(demand, *current)})"
        if current != last:
            here += f", its fastest measured, not the last {_counts(*last)} {_seconds(f(index, *last))} s"
        if grown == current:
            choice = (f"stays at {_counts(*current)}: {here}, growth found nothing better" if current == last
                      else f"goes back to {_counts(*current)}: {here}")
        else:
            r = _ratio(f(index, *current), f(index, *grown))
            extra = slots_for(*current) - slots_for(*grown)
            keep = (r > 1 / (1 + min_gain) if extra <= 0
                    else r >= 1 - min_gain / 2 if epochs_here == 1 else r >= 1 + min_gain / 2)
            fits = (_within_limits(demand, *current) and cost(index, *current) <= demand.per_epoch_budget
                    and extra <= free)
            compared = (f"{here} against {_counts(*grown)} {_seconds(f(index, *grown))} s "
                        f"({_source(demand, *grown)})")
            if keep and fits:
                counts[index] = current
                free -= extra
                chosen_by_rule.add(index)
                bar = (f"{_counts(*grown)} is not {_percent(min_gain)} faster" if extra <= 0
                       else f"one epoch there within {_percent(min_gain / 2)} of {_counts(*grown)}: it gets a second"
                       if epochs_here == 1
                       else f"faster by {_percent(r - 1)} >= {_percent(min_gain / 2)} for {extra} more slot(s)")
                choice = f"{_stays(current, last)} {_counts(*current)}: {compared}; {bar}"
            else:
                if keep:
                    why = f"{_counts(*current)} no longer fits the job's limits, budget or the free slots"
                elif r < 1:
                    why = f"{_counts(*grown)} is faster by {_percent(1 / r - 1)}"
                else:  # the current counts are a little faster, but not by enough for their extra slots
                    why = f"{_counts(*grown)} is within {_percent(min_gain / 2)} of it with {extra} fewer slot(s)"
                verb = "explores" if _source(demand, *grown) == PREDICTED else "moves to"
                choices[index] = f"{verb} {_counts(*grown)} from {_counts(*last)}: {compared}; {why}"
                continue
        probe = None
        w0, s0 = current
        for change, w, s in (("+1 worker", w0 + 1, s0), ("+1 server", w0, s0 + 1), ("-1 worker", w0 - 1, s0),
                             ("-1 server", w0, s0 - 1)):
            added = slots_for(w, s) - slots_for(*current)
            if (min(w, s) < 1 or (w, s) in demand.measured or not _within_limits(demand, w, s) or added > free
                    or cost(index, w, s) > demand.per_epoch_budget
                    or not f(index, w, s) >= f(index, *current) * (1 - demand.probe_margin)):
                continue
            if probe is None or f(index, w, s) > f(index, *probe[1:]):  # a tie keeps the earlier in that order
                probe = (change, w, s)
        if probe is not None:
            change, w, s = probe
            counts[index] = (w, s)
            free -= slots_for(w, s) - slots_for(*current)
            chosen_by_rule.add(index)
            choice = (f"probes {_counts(w, s)} ({change}) from {_counts(*current)} for one epoch: never run at "
                      f"full epochs, predicted {_seconds(f(index, w, s))} s per epoch against {here}, within "
                      f"the probe margin {_percent(demand.probe_margin)}")
        choices[index] = choice

    # 5. why each job stopped, told by its more useful step
    result: dict[str, Allocation] = {}
    for index, demand in enumerate(demands):
        workers, servers = counts[index]
        if index in fixed:
            stopped_by, reason = fixed[index]
        else:
            top = more_useful(steps(index, workers, servers, free))
            assert top is not None
            if index in chosen_by_rule and top.excluded_by is None and worth(top):
                stopped_by, reason = GAIN, (f"+1 {top.kind} would gain {_percent(top.gain)} but settling chose "
                                            f"{_counts(workers, servers)}")
            else:
                stopped_by, reason = _why(top, demand, min_gain)
        allocation = _allocation(demand, workers, servers, f(index, workers, servers) if workers else None,
                                 stopped_by, reason)
        result[demand.job] = replace(allocation, growth=tuple(growth[index]), choice=choices.get(index, ""))
    return result


MEASURED, PREDICTED = "measured", "predicted"


def _source(demand: JobDemand, workers: int, servers: int) -> str:
    """Whether the speed at these counts is the job's measurement or the fit's prediction."""
    return MEASURED if (workers, servers) in demand.measured else PREDICTED


def _stays(anchor: tuple[int, int], last: tuple[int, int]) -> str:
    return "stays at" if anchor == last else "goes back to"


def _anchor(index: int, demand: JobDemand, last: tuple[int, int], grown: tuple[int, int], free: int,
            f: Callable[[int, int, int], float], cost: Callable[[int, int, int], float],
            min_gain: float) -> tuple[int, int]:
    """Where the job compares growth from: its last counts, or its fastest measured counts that still fit when
    they beat the last ones by min_gain/2 (a probe that came out slower must not strand the job)."""
    best = last
    for point in sorted(demand.measured):
        if (_within_limits(demand, *point) and cost(index, *point) <= demand.per_epoch_budget
                and slots_for(*point) - slots_for(*grown) <= free and f(index, *point) > f(index, *best)):
            best = point
    return best if _ratio(f(index, *best), f(index, *last)) >= 1 + min_gain / 2 else last


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
    return (f"{step.gain * 100:+.1f}% speed for {SLOTS_PER_STEP} slot, {step.money_ratio:.2f}x the money per "
            f"epoch")


def _why(step: _Step, demand: JobDemand, min_gain: float) -> tuple[str, str]:
    """stopped_by and reason told by the job's more useful step, which growth did not take."""
    head = f"+1 {step.kind} would gain {_percent(step.gain)}"
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
    usable = epochs_per_s is not None and _usable(epochs_per_s)
    return Allocation(
        job=demand.job,
        workers=workers,
        servers=servers,
        predicted_epochs_per_s=epochs_per_s if epochs_per_s is not None and math.isfinite(epochs_per_s) else None,
        predicted_epoch_time_s=1 / epochs_per_s if usable else None,
        predicted_epoch_cost=_cost(epochs_per_s, workers, servers, demand.price_per_slot_s) if usable else None,
        per_epoch_budget=demand.per_epoch_budget,
        stopped_by=stopped_by,
        reason=reason,
    )
