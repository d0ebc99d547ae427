"""GPU replicas placed by scheduler_fork's profiles: the same plugins as `coach run`, one pod per GPU.

A job's replicas form one PodGroup whose quorum is all of them (data-parallel training needs every replica), so
the gang profiles hold a job until all of its replicas can start, in job order; the default profile binds pod by
pod, which can leave a job partly placed: holding GPUs it cannot use, and possibly deadlocked with others.
Built on coach.placement.in_process's SchedulerForkBook, Coach's one adapter over scheduler_fork; what is the
simulator's own is the naming of replicas and when a scheduling run can be skipped. Side effects: none (scheduler_fork
is pure); times are arguments.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from coach.domain.cluster import ClusterSpec
from coach.placement.in_process import SchedulerForkBook
from scheduler_fork.framework import MAX_BACKOFF_S

REPLICA_ROLE = "worker"  # every replica is a worker; an all-reduce job has no scheduler or server pods


class ReplicaPlacement:
    """Submit, bind and release the replicas of many jobs; answer where each job's replicas are."""

    def __init__(self, cluster: ClusterSpec, profile: str, seed: int = 0):
        self._book = SchedulerForkBook(cluster, profile, seed)
        self._pods: dict[str, list[str]] = {}  # job -> its pod names
        self._changed = False  # a pod was submitted or released since the last scheduling run
        self._settle_at_s = 0.0  # a run from then on, with nothing changed, tries every pending pod
        self.settled = True  # such a run happened: running the scheduler again would change nothing

    def register(self, job: str) -> None:
        """Fix the job's creation order (the gang profiles' FIFO order) when it arrives."""
        self._book.register(job)

    def submit(self, job: str, gpus: int) -> None:
        """Replace the job's replicas, if any, with `gpus` new pending ones."""
        self.release(job)
        names = [f"{job}-r{i}" for i in range(gpus)]
        self._book.submit(job, [(name, REPLICA_ROLE) for name in names], {REPLICA_ROLE: gpus})
        self._pods[job] = names
        self._changed = True

    def release(self, job: str) -> None:
        """Forget the job's replicas, pending or bound, and free their GPUs."""
        names = self._pods.pop(job, None)
        if names:
            self._book.release(names)
            self._changed = True

    def schedule(self, now_s: float) -> set[str]:
        """Run the scheduler; the jobs that got a replica bound.

        Skipped once settled: no pod came, went or was bound since a run that came at least kube's longest pod
        backoff (10 s) after the last change, so every pending pod was tried against the current state and
        would fail exactly as it did; and none waits at Permit."""
        if self.settled and not self._changed and not self._book.waiting:
            return set()
        changed, self._changed = self._changed, False
        result = self._book.schedule(now_s)
        if changed or result.bound or result.rejected:
            self._settle_at_s, self.settled = now_s + MAX_BACKOFF_S, False
        elif now_s >= self._settle_at_s and not self._book.waiting:  # a pod at Permit is allowed or times out
            self.settled = True
        return {self._book.job_of(name) for name in result.bound}

    def bound(self, job: str) -> int:
        return len(self._book.bound(job))

    def nodes_of(self, job: str) -> Mapping[str, int]:
        """Node -> replicas of the job bound there."""
        return Counter(self._book.bound(job).values())

    def deadlocked(self, now_s: float) -> tuple[str, ...]:
        """The jobs of a deadlock (no pending replica can ever be placed and no partly placed job can run)."""
        found = self._book.deadlock(now_s)
        return () if found is None else found.jobs

    @property
    def pending(self) -> int:
        return self._book.pending_count
