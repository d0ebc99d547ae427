"""What the DL2 network sees of Coach's own jobs (workers and parameter servers) and which actions are legal. Pure.

A round covers the jobs asking for counts now (at most COUNTS_WINDOW, in the run's order); the slots the other jobs
hold are not the round's to give. Every decision picks one action for one job, or STOP:
- WORKER: one more worker; SERVER: one more server; BOTH: one of each (job i's kind k is action i * KINDS + k);
- a job given nothing yet can only take BOTH, which also brings its scheduler function: its first step costs 3
  slots (scheduler, worker, server), every later one 1 or 2.
An action is legal when the job's counts stay within its max_workers / max_servers, the slots are free, and one
epoch at the new counts is predicted to cost no more than the money the job has left. STOP is always legal.

Each job is described through its own speed fit (epochs per second at any counts, coach.estimates.speed_forms): its
predicted epoch time and cost at the counts given so far, and what each action would change in them. Every number
is a deterministic function of the jobs and the counts given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from coach.domain.identity import slots_for
from coach.estimates.cost import cost_from_speed
from coach.dl2.observation import Observation, Shape

WORKER, SERVER, BOTH = 0, 1, 2
KINDS = 3
STEPS = ((1, 0), (0, 1), (1, 1))  # (workers, servers) each kind adds
KIND_NAMES = ("worker", "server", "both")
COUNTS_WINDOW = 32
COUNTS_JOB_FEATURES = 24
COUNTS_GLOBAL_FEATURES = 4
COUNTS_SHAPE = Shape(COUNTS_JOB_FEATURES, COUNTS_GLOBAL_FEATURES, KINDS)  # a network for these rounds
_CAP = 10.0


class Speed(Protocol):
    def epochs_per_s(self, workers: int, servers: int) -> float: ...


@dataclass(frozen=True)
class CountsJob:
    """One asking job of a run, as the network's round sees it."""

    name: str
    speed: Speed  # its fitted speed surface
    current: tuple[int, int]  # (workers, servers) of its last epoch; (0, 0) before any
    max_workers: int
    max_servers: int
    epochs_done: int
    max_epochs: int
    budget_left: float  # money


def _clip(value: float) -> float:
    if math.isnan(value):
        return 0.0
    return max(-_CAP, min(_CAP, value))


def _log(value: float, scale: float = 4.0) -> float:
    return _clip(math.log1p(value) / scale if math.isfinite(value) else _CAP)


class CountsRound:
    """One decision round over asking jobs; `given` is an (n, 2) int array of (workers, servers) given so far."""

    def __init__(self, jobs: Sequence[CountsJob], free_slots: int, total_slots: int, price_per_slot_s: float,
                 window: int = COUNTS_WINDOW):
        self.jobs = tuple(jobs[:window])
        self.window = window
        self.free_slots = max(int(free_slots), 0)
        self.total = max(int(total_slots), 1)
        self.price = price_per_slot_s
        self._epoch: dict[tuple[int, int, int], float] = {}
        self._affordable: dict[tuple[int, int], tuple[int, int] | None] = {}
        self._mask: tuple[bytes, np.ndarray] | None = None  # the last counts' mask: open() then observe() ask alike
        n = len(self.jobs)
        static = np.zeros((n, 9), dtype=np.float32)
        for i, job in enumerate(self.jobs):
            left = max(job.max_epochs - job.epochs_done, 0)
            static[i] = (
                job.epochs_done / max(job.max_epochs, 1),
                _log(left),
                job.current[0] / self.total,
                job.current[1] / self.total,
                min(job.max_workers, self.total) / self.total,
                min(job.max_servers, self.total) / self.total,
                _log(self.epoch_s(i, (1, 1)), 5.0),
                _log(job.budget_left / self.cost(i, (1, 1)) if self.cost(i, (1, 1)) > 0 else math.inf),
                i / window,
            )
        self.static = static
        self.globals_base = (math.log1p(self.total) / 6, n / window,
                             1.0 - self.free_slots / self.total)

    def start(self) -> np.ndarray:
        return np.zeros((len(self.jobs), 2), dtype=np.int64)

    # -- predictions ------------------------------------------------------------------------------------------

    def epoch_s(self, i: int, counts: tuple[int, int]) -> float:
        """Job i's predicted epoch time at (workers, servers); inf at none or where the fit predicts no progress."""
        w, s = int(counts[0]), int(counts[1])
        if w <= 0 or s <= 0:
            return math.inf
        key = (i, w, s)
        if key not in self._epoch:
            speed = self.jobs[i].speed.epochs_per_s(w, s)
            self._epoch[key] = 1.0 / speed if math.isfinite(speed) and speed > 0 else math.inf
        return self._epoch[key]

    def cost(self, i: int, counts: tuple[int, int]) -> float:
        epoch_s = self.epoch_s(i, counts)
        return cost_from_speed(1.0 / epoch_s if epoch_s > 0 else math.inf, int(counts[0]), int(counts[1]), self.price)

    # -- slots and legality -----------------------------------------------------------------------------------

    def used(self, given: np.ndarray) -> int:
        """Slots the counts given take (a job's scheduler included)."""
        return sum(slots_for(int(w), int(s)) for w, s in given if w > 0)

    def free(self, given: np.ndarray) -> int:
        return self.free_slots - self.used(given)

    def step_slots(self, given_i: Sequence[int], kind: int) -> int:
        return 3 if given_i[0] == 0 else sum(STEPS[kind])

    def after(self, given_i: Sequence[int], kind: int) -> tuple[int, int]:
        return int(given_i[0]) + STEPS[kind][0], int(given_i[1]) + STEPS[kind][1]

    def legal(self, i: int, given: np.ndarray, kind: int, free: int) -> bool:
        job, mine = self.jobs[i], given[i]
        if mine[0] == 0:  # a start: one of each, when some counts within these slots can pay for an epoch
            return kind == BOTH and free >= 3 and self.fastest_affordable(i, free) is not None
        w, s = self.after(mine, kind)
        return (w <= job.max_workers and s <= job.max_servers and self.step_slots(mine, kind) <= free
                and self.cost(i, (w, s)) <= job.budget_left)

    def fastest_affordable(self, i: int, slots: int) -> tuple[int, int] | None:
        """Job i's fastest counts within its limits, `slots` slots and its money (the fewer slots on a tie)."""
        if (i, slots) not in self._affordable:
            self._affordable[i, slots] = self._fastest_affordable(i, slots)
        return self._affordable[i, slots]

    def _fastest_affordable(self, i: int, slots: int) -> tuple[int, int] | None:
        job, best = self.jobs[i], None
        for w in range(1, min(job.max_workers, slots) + 1):
            for s in range(1, min(job.max_servers, slots - w - 1) + 1):
                if self.cost(i, (w, s)) <= job.budget_left and (
                        best is None or (self.epoch_s(i, (w, s)), slots_for(w, s)) < (self.epoch_s(i, best),
                                                                                     slots_for(*best))):
                    best = (w, s)
        return best

    def settle(self, given: np.ndarray) -> np.ndarray:
        """The counts the jobs run at: the ones given, except that a job whose counts its money cannot pay for
        (its cheaper counts lie beyond a dearer first step: one more worker can make an epoch cheaper) gets its
        fastest affordable counts within its slots and those left over; none left: nothing."""
        settled = given.copy()
        spare = self.free(given)
        for i, (w, s) in enumerate(given.tolist()):
            if w and self.cost(i, (w, s)) > self.jobs[i].budget_left:
                mine = slots_for(w, s)
                best = self.fastest_affordable(i, mine + spare)
                settled[i] = best if best is not None else (0, 0)
                spare += mine - (slots_for(*best) if best is not None else 0)
        return settled

    def mask(self, given: np.ndarray) -> np.ndarray:
        """1 for every legal action, STOP last (always 1). Read-only: the last counts' mask is kept and reused."""
        key = np.asarray(given, dtype=np.int64).tobytes()
        if self._mask is not None and self._mask[0] == key:
            return self._mask[1]
        free = self.free(given)
        mask = np.zeros(len(self.jobs) * KINDS + 1, dtype=np.float32)
        for i in range(len(self.jobs)):
            for kind in range(KINDS):
                mask[i * KINDS + kind] = self.legal(i, given, kind, free)
        mask[-1] = 1.0
        mask.flags.writeable = False
        self._mask = (key, mask)
        return mask

    def open(self, given: np.ndarray) -> bool:
        """Whether any action but STOP is legal."""
        return bool(self.mask(given)[:-1].any())

    def apply(self, given: np.ndarray, action: int) -> np.ndarray:
        i, kind = divmod(action, KINDS)
        changed = given.copy()
        changed[i] = self.after(given[i], kind)
        return changed

    # -- one decision's state ---------------------------------------------------------------------------------

    def _job_dynamic(self, i: int, mine: Sequence[int]) -> list[float]:
        job = self.jobs[i]
        counts = (int(mine[0]), int(mine[1]))
        now_s, now_cost = self.epoch_s(i, counts), self.cost(i, counts)
        left = max(job.max_epochs - job.epochs_done, 0)
        gains, costs = [], []
        for kind in range(KINDS):
            after = self.after(counts, kind)
            then_s = self.epoch_s(i, after)
            if math.isinf(now_s):
                gains.append(1.0 if math.isfinite(then_s) else 0.0)
                costs.append(0.0)
            else:
                gains.append(_clip((now_s - then_s) / now_s if math.isfinite(then_s) else -1.0))
                then_cost = self.cost(i, after)
                costs.append(_clip(then_cost / now_cost - 1.0 if now_cost > 0 and math.isfinite(then_cost) else 1.0))
        affordable = job.budget_left / now_cost if now_cost > 0 and math.isfinite(now_cost) else 0.0
        return [
            counts[0] / self.total,
            counts[1] / self.total,
            float(counts[0] == 0),
            float(counts == tuple(job.current)),
            *gains,
            *costs,
            min(affordable / max(left, 1), 2.0) / 2,
            _log(left * now_s / 60.0),
            float(counts[0] >= job.max_workers),
            float(counts[1] >= job.max_servers),
            min(counts[0] / max(counts[1], 1), 8.0) / 8,
        ]

    def observe(self, given: np.ndarray) -> Observation:
        n = len(self.jobs)
        dynamic = np.array([self._job_dynamic(i, given[i]) for i in range(n)], dtype=np.float32).reshape(n, -1)
        jobs = np.concatenate([self.static, dynamic], axis=1) if n else np.zeros((0, COUNTS_JOB_FEATURES),
                                                                                   dtype=np.float32)
        globals_ = np.array((self.free(given) / self.total, *self.globals_base), dtype=np.float32)
        return Observation(jobs, globals_, self.mask(given), KINDS)


def describe(round_: CountsRound, action: int) -> str:
    """An action in words, for decision records."""
    if action == len(round_.jobs) * KINDS:
        return "stop"
    i, kind = divmod(action, KINDS)
    return f"{round_.jobs[i].name}: +{KIND_NAMES[kind]}"


# -- an existing policy's counts as decisions (imitation) ----------------------------------------------------


def teacher_next(round_: CountsRound, given: np.ndarray, targets: np.ndarray) -> int | None:
    """The next decision towards the teacher's (workers, servers) per job: the job with the fewest slots given
    among those short of their target (ties: the earlier), BOTH while both counts are short, else the one that is;
    STOP when none is short; None when nothing but STOP is legal (the round ends by itself). A step the mask
    forbids ends that job's share of the round."""
    if not round_.open(given):
        return None
    mask = round_.mask(given)
    targets = targets.copy()
    while True:
        short = [i for i in range(len(round_.jobs)) if (given[i] < targets[i]).any()]
        if not short:
            return len(round_.jobs) * KINDS
        i = min(short, key=lambda j: (slots_for(int(given[j][0]), int(given[j][1])) if given[j][0] else 0, j))
        w_short, s_short = given[i][0] < targets[i][0], given[i][1] < targets[i][1]
        kind = BOTH if (w_short and s_short) or given[i][0] == 0 else (WORKER if w_short else SERVER)
        if mask[i * KINDS + kind]:
            return i * KINDS + kind
        targets[i] = given[i]  # the teacher's counts do not fit here: the job keeps what it has


def teacher_steps(round_: CountsRound, targets: np.ndarray) -> list[tuple[Observation, int]]:
    """(state, teacher's action) of every decision of a round."""
    steps: list[tuple[Observation, int]] = []
    given = round_.start()
    while True:
        action = teacher_next(round_, given, targets)
        if action is None:
            return steps
        steps.append((round_.observe(given), action))
        if action == len(round_.jobs) * KINDS:
            return steps
        given = round_.apply(given, action)


class Greedy(Protocol):
    def greedy(self, observation: Observation) -> int: ...


def counts_by(round_: CountsRound, pick: Callable[[Observation], int]) -> tuple[np.ndarray, list[int]]:
    """(counts given per job, the actions taken) after `pick`'s actions until STOP or until nothing but STOP is
    legal."""
    given, actions = round_.start(), []
    while round_.open(given):
        observation = round_.observe(given)
        action = pick(observation)
        if action == observation.stop:
            break
        given = round_.apply(given, action)
        actions.append(action)
    return given, actions


def greedy_counts(net: Greedy, round_: CountsRound) -> tuple[np.ndarray, list[int]]:
    """`counts_by` the network's most likely actions."""
    return counts_by(round_, net.greedy)
