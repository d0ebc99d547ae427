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


class ForkPlacement:
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

    def schedule(self, now_s: float) -> bool:
        """Run the scheduler now; True when it bound something."""
        result = self._scheduler.schedule(now_s)
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
        deadlock = self._scheduler.deadlock(now_s)
        if deadlock is not None:
            return f"deadlock: {deadlock.reason}"
        reasons = sorted({reason for name, reason in self._scheduler.pending.items() if self._ids[name].job == job})
        return "; ".join(reasons) or "waiting for slots"

    def release(self, ids: Iterable[FunctionId]) -> None:
        """Forget these pods, pending or bound, and free their slots."""
        ids = list(ids)
        self._scheduler.delete([fid.name for fid in ids])
        for fid in ids:
            self._ids.pop(fid.name, None)
            self._bound.get(fid.job, {}).pop(fid, None)

    @property
    def free_slots(self) -> int:
        return self.spec.total_slots - sum(len(b) for b in self._bound.values()) - len(self._scheduler.waiting)
