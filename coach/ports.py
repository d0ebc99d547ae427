"""The ports: what a driver needs from the world, as Protocols. A run composes one implementation of each.

Implementations today: Placement = scheduler_fork in-process (coach.placement.in_process); Platform = warm hosts on
this machine (coach.platforms.local) or computed speeds (coach.platforms.virtual); CheckpointStore = file://
(coach.storage.checkpoints); RecordSink = JSON lines (coach.storage.results); View = coach.views.terminal; Clock =
wall or virtual (coach.drivers). A Kubernetes scheduler and the Nuclio dashboard plug in as Placement and
Platform; an s3:// store as CheckpointStore; on Kubernetes, Workloads (the Nuclio dashboard) make the pods that
the kube Placement waits for. Nothing here does anything: these are only shapes.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Protocol

from coach.domain.contracts import AheadRequest, EpochRequest, WarmRequest
from coach.domain.identity import FunctionId
from coach.domain.invocation import Failure, FunctionRef, Reply
from coach.domain.records import EpochRecord
from coach.domain.status import JobStatus


class Clock(Protocol):
    """Seconds since the Unix epoch, wall or virtual."""

    def now_s(self) -> float:
        """The current time."""
        ...


class Placement(Protocol):
    """Who holds which slot: pods are submitted, bound by a scheduler, and released."""

    def register(self, jobs: Iterable[str]) -> None:
        """Fix the jobs' submission order (the FIFO order of the gang profiles)."""
        ...

    def submit(self, job: str, ids: Iterable[FunctionId]) -> None:
        """New pending pods for these functions, arriving in the given order."""
        ...

    def poll(self, job: str, now_s: float) -> Mapping[FunctionId, str]:
        """Let the scheduler run, then every bound function of `job` and its node."""
        ...

    def release(self, ids: Iterable[FunctionId]) -> None:
        """Give these functions' slots back, bound or pending."""
        ...

    def explain(self, job: str, now_s: float) -> str:
        """Why `job`'s pending pods are pending: a deadlock, or the plugins' reasons."""
        ...

    @property
    def version(self) -> int:
        """Changes whenever poll or explain may answer differently (on Kubernetes: the resourceVersion seen)."""
        ...

    def close(self) -> None:
        """The run is over: stop watching, delete what this placement created (on Kubernetes: the PodGroups)."""
        ...


class Platform(Protocol):
    """Where functions run: deployed for a pod once it is bound, invoked once per epoch, removed after."""

    def deploy(self, fid: FunctionId, node: str) -> FunctionRef | Failure:
        """Start the function on its bound node; ready to invoke when this returns a ref."""
        ...

    def invoke(self, ref: FunctionRef, request: EpochRequest | WarmRequest | AheadRequest,
               timeout_s: float) -> Reply | Failure:
        """One request, one reply or failure value; never raises."""
        ...

    def cancel(self, ref: FunctionRef) -> None:
        """Stop the function's in-flight invocation (another role of its epoch failed)."""
        ...

    def remove(self, ref: FunctionRef) -> None:
        """Delete the function; its slot is the Placement's to release."""
        ...

    def joins_ahead(self, scheduler: FunctionRef) -> bool:
        """Whether the job's next step may be announced so that its nodes join while this one runs: only when each
        function is one host process, which then holds its one ps-lite node (coach/drivers/rendezvous.py)."""
        ...

    def rendezvous_address(self, scheduler: FunctionRef, avoid_ports: frozenset[int] = frozenset()) -> tuple[str, int]:
        """Where the job's ps-lite scheduler will listen for an epoch; not at `avoid_ports` (at most two), where an
        epoch's may listen meanwhile (the next epoch's rendezvous is announced while this one runs, and an
        announcement that does not come true listens until its host's next request: coach/drivers/rendezvous.py)."""
        ...

    def close(self) -> None:
        """Remove every function; in-flight invocations fail at once."""
        ...


class Workloads(Protocol):
    """What makes a function's pod on Kubernetes (the Nuclio dashboard's Deployments); used by the kube Placement,
    which then waits for Coach's scheduler to bind the pod."""

    def create(self, fid: FunctionId, scheduler_name: str) -> Failure | None:
        """Ask for the function's workload, its pod to be bound by the scheduler of that name (Coach's or the
        cluster's default); the pod appears later. A failure value when it was refused."""
        ...

    def delete(self, fid: FunctionId) -> Failure | None:
        """Delete the function's workload and its pod; one that is gone already is no failure."""
        ...


class CheckpointStore(Protocol):
    """URL-addressed checkpoint prefixes: `file://` (coach.storage.checkpoints), `s3://` (coach.storage.s3)."""

    def check(self) -> str | None:
        """None when the store can be used; else one line saying why not (asked once, before a run starts)."""
        ...

    def prefix(self, job: str, tag: str) -> str:
        """Where step `tag` of `job` saves its checkpoint."""
        ...

    def locate(self, job: str, prefix: str) -> str:
        """A prefix that a log recorded, as this store has it now (a file store finds a moved run folder's)."""
        ...

    def complete(self, prefix: str | None) -> bool:
        """True when every object of the checkpoint is in place (never a half-written one)."""
        ...

    def prune(self, job: str, keep: str) -> int:
        """Delete the job's checkpoints other than `keep`; returns how many files or objects went."""
        ...

    def newest_complete(self, job: str) -> str | None:
        """The job's newest complete checkpoint (a resume whose log lost its records starts there)."""
        ...


class RecordSink(Protocol):
    """A job's append-only results log."""

    def append(self, record: EpochRecord) -> None:
        """Write one record durably before returning."""
        ...

    def close(self) -> None:
        """No more records."""
        ...


class View(Protocol):
    """What a person watching the run sees."""

    def update(self, status: JobStatus) -> None:
        """A job's status changed."""
        ...

    def final(self) -> None:
        """The run is over."""
        ...
