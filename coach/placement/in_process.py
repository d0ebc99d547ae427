"""Placement through scheduler_fork in this process: the one adapter Coach has over scheduler_fork's Scheduler.

SchedulerForkBook holds the Scheduler of one run or one simulation and the bookkeeping both users need: the jobs'
creation order (the gang profiles' FIFO order), the pods' arrival order, and which pod of which job is bound on
which node. Two faces build on it: InProcessPlacement, the Placement port of the embedded and virtual-time runs,
where every function is a pod of its job's PodGroup (quorum: one scheduler, one server, one worker); and the
cluster simulator's ReplicaPlacement (coach.simulator.placement), where every GPU replica is a pod. A Kubernetes
scheduler is the port's other implementation (coach.placement.kube). The current time comes from the caller;
nothing here reads a clock or locks: a driver calls it from one thread.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence

from coach.domain.cluster import ClusterSpec
from coach.domain.identity import QUORUM, FunctionId
from scheduler_fork import PROFILES, CycleResult, Deadlock, Node, Pod, PodGroup, Scheduler


class SchedulerForkBook:
    """scheduler_fork's Scheduler over a cluster's nodes (one slot per pod), with its pods kept by job."""

    def __init__(self, spec: ClusterSpec, profile: str, seed: int = 0):
        self._scheduler = Scheduler([Node(n.name, n.slots) for n in spec.nodes], profile=profile, seed=seed)
        self._seq = itertools.count()  # jobs' creation order and pods' arrival order, one sequence
        self._job_seq: dict[str, int] = {}  # job -> its creation order
        self._job_of: dict[str, str] = {}  # pod -> its job, for every pod the scheduler knows
        self._bound: dict[str, dict[str, str]] = {}  # job -> its bound pods -> node, in bind order

    def register(self, job: str) -> None:
        """Fix the job's creation order, if it has none yet."""
        self._job_seq.setdefault(job, next(self._seq))

    def submit(self, job: str, pods: Sequence[tuple[str, str]], quorum: Mapping[str, int]) -> None:
        """New pending pods (name, role) of `job`, arriving in the given order, in a PodGroup that needs `quorum`."""
        job_seq = self._job_seq.setdefault(job, next(self._seq))
        made = [Pod(name, job, role, next(self._seq), job_seq) for name, role in pods]
        if made:
            self._scheduler.submit(made, PodGroup(job, min_member=dict(quorum)))
            self._job_of.update((pod.name, job) for pod in made)

    def release(self, names: Iterable[str]) -> None:
        """Forget these pods, pending or bound, and free their slots."""
        names = list(names)
        self._scheduler.delete(names)
        for name in names:
            job = self._job_of.pop(name, None)
            if job is not None:
                self._bound.get(job, {}).pop(name, None)

    def schedule(self, now_s: float) -> CycleResult:
        """Run the scheduler now; what it did (the bindings are kept by job)."""
        result = self._scheduler.schedule(now_s)
        for name, node in result.bound.items():
            self._bound.setdefault(self._job_of[name], {})[name] = node
        return result

    def job_of(self, pod: str) -> str:
        return self._job_of[pod]

    def bound(self, job: str) -> Mapping[str, str]:
        """The job's bound pods -> node, in bind order."""
        return self._bound.get(job, {})

    @property
    def bound_pods(self) -> int:
        return sum(len(pods) for pods in self._bound.values())

    @property
    def pending(self) -> Mapping[str, str]:
        """Every pending pod -> the reason it is pending."""
        return self._scheduler.pending

    @property
    def pending_count(self) -> int:
        """How many pods are pending (without working out their reasons)."""
        return self._scheduler.pending_count

    @property
    def waiting(self) -> Mapping[str, str]:
        """Pods holding a reservation at Permit -> their node."""
        return self._scheduler.waiting

    def deadlock(self, now_s: float) -> Deadlock | None:
        return self._scheduler.deadlock(now_s)


class InProcessPlacement:
    """The run's scheduler: jobs submit pods for their functions, poll for bindings, release when done."""

    def __init__(self, spec: ClusterSpec, profile: str = "gang", seed: int = 0):
        if profile not in PROFILES:
            raise ValueError(f"unknown scheduler profile {profile!r}; known: {', '.join(sorted(PROFILES))}")
        self.spec = spec
        self.profile = profile
        self._book = SchedulerForkBook(spec, profile, seed)
        self._ids: dict[str, FunctionId] = {}  # pod name -> function, for every pod the scheduler knows
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
            self._book.register(job)

    def submit(self, job: str, ids: Iterable[FunctionId]) -> None:
        """New pending pods for these functions, arriving in the given order."""
        ids = list(ids)
        self._ids.update((fid.name, fid) for fid in ids)
        self._book.submit(job, [(fid.name, fid.role.value) for fid in ids], self._quorum)
        if ids:
            self._version += 1

    def schedule(self, now_s: float) -> bool:
        """Run the scheduler now; True when it bound something."""
        if self._scheduled == (self._version, now_s):
            return False  # nothing was submitted or released since the last run at this time: nothing to do
        result = self._book.schedule(now_s)
        seen = (result.pending, result.waiting)
        if result.bound or result.rejected or seen != self._seen:
            self._version += 1
        self._seen = seen
        self._scheduled = (self._version, now_s)
        return bool(result.bound)

    def poll(self, job: str, now_s: float) -> Mapping[FunctionId, str]:
        """Run the scheduler now; every bound function of `job` and its node."""
        self.schedule(now_s)
        return {self._ids[name]: node for name, node in self._book.bound(job).items()}

    def explain(self, job: str, now_s: float) -> str:
        """Why `job` has no quorum: the deadlock if there is one, else its pods' pending reasons."""
        if self._explained is None or self._explained[0] != self._version:
            deadlock = self._book.deadlock(now_s)  # its answer does not depend on now_s
            reasons: dict[str, set[str]] = {}
            for name, reason in self._book.pending.items():
                reasons.setdefault(self._ids[name].job, set()).add(reason)
            self._explained = (self._version, None if deadlock is None else f"deadlock: {deadlock.reason}",
                               {name: sorted(found) for name, found in reasons.items()})
        _, deadlock_text, reasons_of = self._explained
        if deadlock_text is not None:
            return deadlock_text
        return "; ".join(reasons_of.get(job, ())) or "waiting for slots"

    def release(self, ids: Iterable[FunctionId]) -> None:
        """Forget these pods, pending or bound, and free their slots."""
        names = [fid.name for fid in ids]
        self._book.release(names)
        self._version += 1
        for name in names:
            self._ids.pop(name, None)

    def close(self) -> None:
        """Nothing to give back: the scheduler lives in this object."""

    @property
    def free_slots(self) -> int:
        return self.spec.total_slots - self._book.bound_pods - len(self._book.waiting)
