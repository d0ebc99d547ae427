"""Who holds which slot: the run's one scheduler_fork.Scheduler, shared by all job threads behind a lock.

Every function of the embedded platform is placed through the chosen profile (gang, gang-strict, default).
This is the edge that gives the pure scheduler its clock; side effects: none beyond the shared state.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Callable, Iterable, Mapping

from coach.domain.cluster import ClusterSpec
from scheduler_fork import PROFILES, Node, Pod, PodGroup, Scheduler

#: Roles a job needs bound before it can run an epoch: one PS scheduler, one server, one worker.
QUORUM: Mapping[str, int] = {"scheduler": 1, "server": 1, "worker": 1}


def role_of(name: str) -> str:
    """`lenet-worker-0` -> `worker` (function names end in `-<role>-<index>`)."""
    return name.rsplit("-", 2)[-2]


def role_counts(names: Iterable[str]) -> dict[str, int]:
    counts = {role: 0 for role in QUORUM}
    for name in names:
        counts[role_of(name)] += 1
    return counts


def has_quorum(names: Iterable[str]) -> bool:
    counts = role_counts(names)
    return all(counts[role] >= need for role, need in QUORUM.items())


class Allocator:
    """The run's scheduler: jobs submit pods for their functions, poll for bindings, release when done."""

    def __init__(self, spec: ClusterSpec, profile: str = "gang", seed: int = 0,
                 clock: Callable[[], float] = time.monotonic):
        if profile not in PROFILES:
            raise ValueError(f"unknown scheduler profile {profile!r}; known: {', '.join(sorted(PROFILES))}")
        self.spec = spec
        self.profile = profile
        self._scheduler = Scheduler([Node(n.name, n.slots) for n in spec.nodes], profile=profile, seed=seed)
        self._clock = clock
        self._started = clock()
        self._seq = itertools.count()
        self._job_seq: dict[str, int] = {}  # job -> its first pod's arrival
        self._changed = threading.Condition()
        self._waiting: dict[str, int] = {}  # job -> slots it is waiting for

    def _now_s(self) -> float:
        return self._clock() - self._started

    def register(self, jobs: Iterable[str]) -> None:
        """Fix the jobs' creation order (FIFO order for the gang profiles) before their threads race."""
        with self._changed:
            for job in jobs:
                self._job_seq.setdefault(job, next(self._seq))

    def submit(self, job: str, names: Iterable[str]) -> None:
        """New pending pods for these function names, arriving in the given order."""
        with self._changed:
            job_seq = self._job_seq.setdefault(job, next(self._seq))
            pods = [Pod(name, job, role_of(name), next(self._seq), job_seq) for name in names]
            if pods:
                self._scheduler.submit(pods, PodGroup(job, min_member=dict(QUORUM)))

    def poll(self, job: str) -> dict[str, str]:
        """Run the scheduler now; return every bound pod of `job` (function name -> node)."""
        with self._changed:
            result = self._scheduler.schedule(self._now_s())
            if result.bound:
                self._changed.notify_all()
            prefix = f"{job}-"
            return {name: node for name, node in self._scheduler.bound.items() if name.startswith(prefix)
                    and name.rsplit("-", 2)[0] == job}

    def explain(self, job: str) -> str:
        """Why `job` has no quorum: the deadlock if there is one, else its pods' pending reasons."""
        with self._changed:
            deadlock = self._scheduler.deadlock(self._now_s())
            if deadlock is not None:
                return f"deadlock: {deadlock.reason}"
            reasons = sorted({reason for name, reason in self._scheduler.pending.items()
                              if name.rsplit("-", 2)[0] == job})
            return "; ".join(reasons) or "waiting for slots"

    def release(self, names: Iterable[str]) -> None:
        with self._changed:
            self._scheduler.delete(list(names))
            self._changed.notify_all()

    def set_waiting(self, job: str, slots: int) -> None:
        """Record (slots > 0) or clear (0) that `job` waits for slots; growing jobs leave them free."""
        with self._changed:
            if slots > 0:
                self._waiting[job] = slots
            else:
                self._waiting.pop(job, None)

    def slots_for_growth(self, job: str, held: int) -> int:
        """Slots a job may plan with: what is free plus what it holds, minus what other jobs wait for.

        Never below what it already holds up to (1,1)'s three slots, so a running job can always continue.
        """
        with self._changed:
            queued = sum(n for other, n in self._waiting.items() if other != job)
            return max(self._free_slots() + held - queued, min(held, 3))

    def _free_slots(self) -> int:
        return self.spec.total_slots - len(self._scheduler.bound) - len(self._scheduler.waiting)

    @property
    def free_slots(self) -> int:
        with self._changed:
            return self._free_slots()

    def wait_for_change(self, timeout_s: float) -> None:
        with self._changed:
            self._changed.wait(timeout_s)
