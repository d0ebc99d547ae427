"""Placement through scheduler_fork in this process: the Placement port for the embedded and simulated runs.

Every function is a pod of its job's PodGroup (quorum: one scheduler, one server, one worker), placed by the
chosen profile (gang, gang-strict, default). The current time comes from the caller; nothing here reads a
clock or locks: a driver calls it from one thread. A Kubernetes scheduler is the other implementation.
"""

from __future__ import annotations

import itertools
from typing import Iterable, Mapping

from coach.domain.cluster import ClusterSpec
from coach.domain.identity import QUORUM, FunctionId
from scheduler_fork import PROFILES, Node, Pod, PodGroup, Scheduler


class InProcessPlacement:
    """The run's scheduler: jobs submit pods for their functions, poll for bindings, release when done."""

    def __init__(self, spec: ClusterSpec, profile: str = "gang", seed: int = 0):
        if profile not in PROFILES:
            raise ValueError(f"unknown scheduler profile {profile!r}; known: {', '.join(sorted(PROFILES))}")
        self.spec = spec
        self.profile = profile
        self._scheduler = Scheduler([Node(n.name, n.slots) for n in spec.nodes], profile=profile, seed=seed)
        self._seq = itertools.count()
        self._job_seq: dict[str, int] = {}  # job -> its creation order
        self._ids: dict[str, FunctionId] = {}  # pod name -> function, for every pod the scheduler knows
        self._bound: dict[str, dict[FunctionId, str]] = {}  # job -> its bound functions -> node
        self._quorum = {role.value: need for role, need in QUORUM.items()}
        # Drivers poll every waiting job after every event. Two things keep that cheap without changing any
        # answer: after a scheduling run at now_s, another run at now_s finds nothing to do until a pod is
        # submitted or released (a pod that failed backs off for at least a second); and what poll and explain
        # answer changes only with a submit, a release, or a run that binds, rejects, or changes a pending
        # pod's reason or the pods waiting at Permit.
        self._version = 0  # bumped whenever poll or explain may answer differently
        self._scheduled: tuple[int, float] | None = None  # (version, now_s) after the last scheduling run
        self._seen: tuple[Mapping, Mapping] | None = None  # the last run's pending reasons and pods at Permit
        self._explained: tuple[int, str | None, dict[str, list[str]]] | None = None  # version, deadlock, reasons

    @property
    def version(self) -> int:
        """Changes whenever `poll` or `explain` may answer differently; drivers skip polls that would be no news."""
        return self._version

    def register(self, jobs: Iterable[str]) -> None:
        """Fix the jobs' creation order (FIFO order for the gang profiles) before any pod arrives."""
        for job in jobs:
            self._job_seq.setdefault(job, next(self._seq))

    def submit(self, job: str, ids: Iterable[FunctionId]) -> None:
        """New pending pods for these functions, arriving in the given order."""
        job_seq = self._job_seq.setdefault(job, next(self._seq))
        pods = []
        for fid in ids:
            self._ids[fid.name] = fid
            pods.append(Pod(fid.name, job, fid.role.value, next(self._seq), job_seq))
        if pods:
            self._scheduler.submit(pods, PodGroup(job, min_member=dict(self._quorum)))
            self._version += 1

    def schedule(self, now_s: float) -> bool:
        """Run the scheduler now; True when it bound something."""
        if self._scheduled == (self._version, now_s):
            return False  # nothing was submitted or released since the last run at this time: nothing to do
        result = self._scheduler.schedule(now_s)
        seen = (result.pending, result.waiting)
        if result.bound or result.rejected or seen != self._seen:
            self._version += 1
        self._seen = seen
        self._scheduled = (self._version, now_s)
        for name, node in result.bound.items():
            fid = self._ids[name]
            self._bound.setdefault(fid.job, {})[fid] = node
        return bool(result.bound)

    def poll(self, job: str, now_s: float) -> Mapping[FunctionId, str]:
        """Run the scheduler now; every bound function of `job` and its node."""
        self.schedule(now_s)
        return dict(self._bound.get(job, {}))

    def explain(self, job: str, now_s: float) -> str:
        """Why `job` has no quorum: the deadlock if there is one, else its pods' pending reasons."""
        if self._explained is None or self._explained[0] != self._version:
            deadlock = self._scheduler.deadlock(now_s)  # its answer does not depend on now_s
            reasons: dict[str, set[str]] = {}
            for name, reason in self._scheduler.pending.items():
                reasons.setdefault(self._ids[name].job, set()).add(reason)
            self._explained = (self._version, None if deadlock is None else f"deadlock: {deadlock.reason}",
                               {name: sorted(found) for name, found in reasons.items()})
        _, deadlock_text, reasons_of = self._explained
        if deadlock_text is not None:
            return deadlock_text
        return "; ".join(reasons_of.get(job, ())) or "waiting for slots"

    def release(self, ids: Iterable[FunctionId]) -> None:
        """Forget these pods, pending or bound, and free their slots."""
        ids = list(ids)
        self._scheduler.delete([fid.name for fid in ids])
        self._version += 1
        for fid in ids:
            self._ids.pop(fid.name, None)
            self._bound.get(fid.job, {}).pop(fid, None)

    def close(self) -> None:
        """Nothing to give back: the scheduler lives in this object."""

    @property
    def free_slots(self) -> int:
        return self.spec.total_slots - sum(len(b) for b in self._bound.values()) - len(self._scheduler.waiting)
