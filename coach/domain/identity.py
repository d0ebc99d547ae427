"""Who a function is: (job, role, index), carried as labels and never parsed back out of a name. Pure.

On Kubernetes these are pod labels and a job's PodGroup names its quorum; on the embedded platform the same
labels name the host process. The name is derived from the identity for humans and logs only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import Iterable, Mapping


class Role(str, Enum):
    """The three parameter-server roles of an MXNet job; one definition for controller, scheduler and functions."""

    SCHEDULER = "scheduler"  # the ps-lite rendezvous point, one per job
    SERVER = "server"  # holds a shard of the parameters
    WORKER = "worker"  # trains on a shard of the data

    def __str__(self) -> str:
        return self.value


ROLES: tuple[Role, ...] = (Role.SCHEDULER, Role.SERVER, Role.WORKER)

#: Roles a job needs bound before it can run an epoch: one PS scheduler, one server, one worker.
QUORUM: Mapping[Role, int] = {Role.SCHEDULER: 1, Role.SERVER: 1, Role.WORKER: 1}

#: Label keys, as on Kubernetes pods.
JOB_LABEL, ROLE_LABEL, INDEX_LABEL = "coach.io/job", "coach.io/role", "coach.io/index"

_ORDER = {role: i for i, role in enumerate(ROLES)}


@dataclass(frozen=True)
class FunctionId:
    """One function instance of one job."""

    job: str  # job name
    role: Role  # what it does in the parameter-server job
    index: int  # 0-based, per role

    @cached_property
    def name(self) -> str:
        """`lenet-worker-0`: a display and file name, never read back."""
        return f"{self.job}-{self.role.value}-{self.index}"

    @property
    def labels(self) -> dict[str, str]:
        return {JOB_LABEL: self.job, ROLE_LABEL: self.role.value, INDEX_LABEL: str(self.index)}

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> FunctionId:
        """The inverse of `labels`; KeyError/ValueError when a label is missing or wrong."""
        return cls(labels[JOB_LABEL], Role(labels[ROLE_LABEL]), int(labels[INDEX_LABEL]))

    def sort_key(self) -> tuple[int, int]:
        """Scheduler, then servers, then workers, each by index: the order placement and deployment follow."""
        return _ORDER[self.role], self.index

    def __str__(self) -> str:
        return self.name


def functions_for(job: str, workers: int, servers: int) -> tuple[FunctionId, ...]:
    """The functions of (workers, servers): one scheduler, then `servers` servers, then `workers` workers."""
    return ((FunctionId(job, Role.SCHEDULER, 0),)
            + tuple(FunctionId(job, Role.SERVER, i) for i in range(servers))
            + tuple(FunctionId(job, Role.WORKER, i) for i in range(workers)))


def role_counts(ids: Iterable[FunctionId]) -> dict[Role, int]:
    counts = {role: 0 for role in ROLES}
    for fid in ids:
        counts[fid.role] += 1
    return counts


def has_quorum(ids: Iterable[FunctionId]) -> bool:
    counts = role_counts(ids)
    return all(counts[role] >= need for role, need in QUORUM.items())


def slots_for(workers: int, servers: int) -> int:
    """Slots a job of `workers` workers and `servers` servers occupies: one more for the MXNet PS scheduler."""
    return workers + servers + 1


def pick_for_epoch(deployed: Iterable[FunctionId], workers: int, servers: int) -> tuple[FunctionId, ...]:
    """The scheduler and the first `servers` servers and `workers` workers among deployed functions."""
    left = {Role.SCHEDULER: 1, Role.SERVER: servers, Role.WORKER: workers}
    chosen = []
    for fid in sorted(deployed, key=FunctionId.sort_key):
        if left[fid.role] > 0:
            left[fid.role] -= 1
            chosen.append(fid)
    return tuple(chosen)
