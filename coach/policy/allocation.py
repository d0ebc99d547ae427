"""How many workers and servers each running job gets now (DESIGN.md step 3, "chooses"). Pure.

Why it exists: the original Coach grew every job on its own and ignored how many slots the cluster had left.
Here one greedy pass weighs, across all jobs at once, the predicted speed gain of one more worker or one more
server against each job's per-epoch budget, its own limits and the free slots, and says for every job why its
growth stopped. The speed surfaces are passed in (anything with `epochs_per_s(workers, servers)`), so this
module does no I/O, reads no clock and keeps no state between calls; the same input gives the same output.

The rules, in order:

1. Every job starts at (1 worker, 1 server) = 3 slots (the MXNet PS scheduler takes the third), in the order
   given (the caller passes submission order). A job whose 3 slots do not fit gets (0, 0), "capacity". A job
   whose (1,1) epoch is predicted to cost more than its per-epoch budget (remaining budget / remaining epochs)
   still gets (1,1) -- the controller decides separately whether it can afford any epoch -- but does not grow
   ("budget"); so does a job whose surface predicts no progress at (1,1) (its epoch cost is unbounded).
2. Then repeatedly, for every job still at play, its two steps are +1 worker and +1 server. A step is excluded
   when it breaks the job's max_workers/max_servers ("limit"), when its predicted epoch cost exceeds the
   per-epoch budget ("budget"), or when no slot is free ("capacity"); when several hold, the first in that
   order is named. Among a job's allowed steps the one with the larger marginal utility f(after) - f(now) is
   its best (ties: the worker); its relative gain is that utility / f(now). A step is worth taking when its
   utility is positive and its relative gain is at least `min_gain`. Across all jobs the worth-taking best step
   with the largest relative gain is applied (ties: the earlier job), then everything is recomputed. Growth
   ends when no job has a step worth taking; every step takes one slot, so it ends within `free_slots` rounds.
3. Why a job stopped is told by its more useful step, the one of the two with the larger marginal utility
   whether allowed or not (ties: the worker): "gain" when even that step is not worth taking (no constraint
   held it back: lifting them would not grow the job), otherwise the constraint that excludes it. This names
   the thing to relax to let the job grow: e.g. a job capped at one worker whose next worker would gain 19%
   says "limit" even though its allowed +1 server step would lose speed. Exclusions are named limit, then
   budget, then capacity, because capacity is the most transient and budget the job's own: a step over
   budget stays unaffordable when slots free up.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Protocol, Sequence, runtime_checkable

from coach.domain.identity import slots_for
from coach.model.cost import cost_from_speed

GAIN, BUDGET, CAPACITY, LIMIT = "gain", "budget", "capacity", "limit"
START_WORKERS, START_SERVERS = 1, 1
WORKER, SERVER = "worker", "server"


START_SLOTS = slots_for(START_WORKERS, START_SERVERS)


@runtime_checkable
class SpeedModel(Protocol):
    """A job's predicted speed surface, e.g. the fit of coach.model.speed."""

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

    @property
    def slots(self) -> int:
        """Slots this allocation occupies (scheduler included); 0 when the job did not start."""
        return slots_for(self.workers, self.servers) if self.workers else 0

    def to_dict(self) -> dict:
        """Plain JSON-ready dict of the fields."""
        return asdict(self)


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


@dataclass(frozen=True)
class _Step:
    kind: str  # WORKER or SERVER: which one more of is added
    utility: float  # f(after) - f(now), epochs per second; an unusable f(after) counts as 0
    gain: float  # utility / f(now)
    cost: float  # predicted epoch cost after the step
    excluded_by: str | None  # LIMIT, BUDGET or CAPACITY; None when the step is allowed


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
            out.append(_Step(kind, utility, utility / now, step_cost, excluded_by))
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

    # 2. growth, the largest relative gain across all jobs first. A job's steps change only when it grows (free
    # slots matter only once none is left, which ends the growth), so each job's best step is kept until then.
    def candidate(index: int) -> _Step | None:
        best = more_useful([step for step in steps(index, *counts[index], free) if step.excluded_by is None])
        return best if best is not None and worth(best) else None

    best_of = {index: candidate(index) for index in range(len(demands)) if index not in fixed}
    while free >= 1:
        chosen: tuple[int, _Step] | None = None
        for index, best in best_of.items():  # in job order: a tie keeps the earlier job
            if best is not None and (chosen is None or best.gain > chosen[1].gain):
                chosen = (index, best)
        if chosen is None:
            break
        index, step = chosen
        workers, servers = counts[index]
        counts[index] = (workers + 1, servers) if step.kind == WORKER else (workers, servers + 1)
        free -= 1
        best_of[index] = candidate(index)

    # 3. why each job stopped, told by its more useful step
    result: dict[str, Allocation] = {}
    for index, demand in enumerate(demands):
        workers, servers = counts[index]
        if index in fixed:
            stopped_by, reason = fixed[index]
        else:
            top = more_useful(steps(index, workers, servers, free))
            assert top is not None
            stopped_by, reason = _why(top, demand, min_gain)
        result[demand.job] = _allocation(demand, workers, servers, f(index, workers, servers) if workers else None,
                                         stopped_by, reason)
    return result


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
    assert step.excluded_by == CAPACITY, step
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
