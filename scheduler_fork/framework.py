"""The scheduling framework's plain data: pods, nodes, pod groups, plugin verdicts, profiles and results.

This mirrors kube-scheduler's framework (pkg/scheduler/framework) at the size Coach needs. Every pod goes
through the extension points in this order, each filled by the plugins a `Profile` names:

    QueueSort -> PreFilter -> Filter (per node) -> Score (per node) + NormalizeScore -> Reserve -> Permit -> Bind

Plugins are stateless objects with one method per extension point they implement; they read the scheduler's
state (`scheduler_fork.state.SchedulingState`) and return a verdict. They never change the state, do I/O, sleep,
read the clock or draw random numbers: times arrive as arguments and the only random choice (the tie-break
between equally scored nodes) is made by the framework with a seeded `random.Random`.

Side effects: none. This module only defines data and small pure helpers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Protocol, runtime_checkable

from coach.domain.identity import QUORUM
from coach.domain.identity import ROLES as _ROLES
from scheduler_fork.constraints import Amounts, Labels, Taint, Term, Toleration, amounts, labels

#: The MXNet parameter-server roles a Coach job is made of (one definition: coach.domain.identity).
ROLES = tuple(role.value for role in _ROLES)

#: A job needs one PS scheduler, at least one server and at least one worker to run at all.
DEFAULT_MIN_MEMBER: Mapping[str, int] = MappingProxyType({role.value: need for role, need in QUORUM.items()})

#: A known pod's status in the scheduler's state.
PENDING = "pending"  # in the scheduling queue (active or backing off)
RESERVED = "reserved"  # holds what it takes on a node, waiting at Permit (or about to bind)
BOUND = "bound"  # placed

#: kube-scheduler's pod backoff: initial 1 s, doubled on every failed attempt, at most 10 s.
INITIAL_BACKOFF_S = 1.0
MAX_BACKOFF_S = 10.0

#: kube-scheduler's highest node score; NormalizeScore maps every plugin's scores onto 0..MAX_NODE_SCORE.
MAX_NODE_SCORE = 100


@dataclass(frozen=True)
class Pod:
    """One function instance to place (kube: a Pod), and what it asks of a node.

    The placement fields default to asking nothing: no resources, no toleration, any node. A pod from another
    scheduler, found bound, takes no slot (`slots=0`) but holds its requests.
    """

    name: str  # unique among the pods a scheduler knows
    job: str  # the training job, i.e. the pod group, it belongs to
    role: str  # "scheduler", "server" or "worker"
    seq: int  # arrival order of this pod (kube: the queue timestamp)
    job_seq: int  # creation order of the job = its first pod's arrival; the same for every pod of a job
    priority: int = 0  # higher goes first in the default profile's queue
    slots: int = 1  # node slots the pod takes (Coach's functions take one; other schedulers' pods none)
    requests: Amounts = ()  # resource -> amount it requests (cpu in millicores, memory in bytes); a mapping is accepted
    tolerations: tuple[Toleration, ...] = ()  # the node taints it tolerates
    node_selector: Labels = ()  # labels a node must carry (spec.nodeSelector); a mapping is accepted
    node_affinity: tuple[Term, ...] | None = None  # required node affinity's terms, ORed; None: no requirement

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"pod name must be a non-empty string, got {self.name!r}")
        if self.role not in ROLES:
            raise ValueError(f"pod {self.name}: role must be one of {', '.join(ROLES)}, got {self.role!r}")
        if isinstance(self.slots, bool) or not isinstance(self.slots, int) or self.slots < 0:
            raise ValueError(f"pod {self.name}: slots must be an integer >= 0, got {self.slots!r}")
        if self.requests:
            object.__setattr__(self, "requests", amounts(self.requests, f"pod {self.name} requests"))
        if self.tolerations:
            object.__setattr__(self, "tolerations", tuple(self.tolerations))
            if not all(isinstance(t, Toleration) for t in self.tolerations):
                raise ValueError(f"pod {self.name}: tolerations must be scheduler_fork Tolerations")
        if self.node_selector:
            object.__setattr__(self, "node_selector", labels(self.node_selector, f"pod {self.name} node selector"))
        if self.node_affinity is not None:
            object.__setattr__(self, "node_affinity", tuple(self.node_affinity))
            if not all(isinstance(t, Term) for t in self.node_affinity):
                raise ValueError(f"pod {self.name}: node_affinity must be scheduler_fork Terms")

    @property
    def demand(self) -> tuple:
        """Everything about the pod that decides which nodes it fits (equal demands fit the same nodes)."""
        return (self.slots, self.requests, self.tolerations, self.node_selector, self.node_affinity)


@dataclass(frozen=True)
class Node:
    """A node and what it offers. Without `allocatable` its resources are unlimited; without `slots`, so are its
    slots: `Node(name, slots)` is a node of that many slots and nothing else to fit."""

    name: str  # unique in the cluster
    slots: int | None = None  # at most this many slots of pods (the coach.io/slots cap); None: no cap
    allocatable: Amounts | None = None  # resource -> amount (cpu in millicores, memory in bytes, pods); None: unlimited
    labels: Labels = ()  # label key -> value; a mapping is accepted
    taints: tuple[Taint, ...] = ()  # in the node's order (the first untolerated one is reported)
    unschedulable: bool = False  # cordoned (spec.unschedulable)

    def __post_init__(self) -> None:
        slots = self.slots
        if slots is not None and (isinstance(slots, bool) or not isinstance(slots, int) or slots < 0):
            raise ValueError(f"node {self.name}: slots must be an integer >= 0 or None, got {self.slots!r}")
        if self.allocatable is not None:
            object.__setattr__(self, "allocatable", amounts(self.allocatable, f"node {self.name} allocatable"))
        if self.labels:
            object.__setattr__(self, "labels", labels(self.labels, f"node {self.name} labels"))
        if self.taints:
            object.__setattr__(self, "taints", tuple(self.taints))
            if not all(isinstance(t, Taint) for t in self.taints):
                raise ValueError(f"node {self.name}: taints must be scheduler_fork Taints")
        object.__setattr__(self, "unschedulable", bool(self.unschedulable))


@dataclass(frozen=True)
class PodGroup:
    """What a job needs before it can run (the coscheduling plugin's PodGroup, by role).

    The job's *quorum* is met by a set of pods when it holds at least `min_member[role]` pods of every role and,
    when `whole` is set, at least `whole` pods in all. The quorum decides when gang pods may start
    (PodGroupRoles), when gang-strict binds (Coscheduling), and whether a job can run (deadlock detection).
    """

    job: str  # the job's name, as in Pod.job
    min_member: Mapping[str, int] = field(default_factory=lambda: DEFAULT_MIN_MEMBER)  # role -> fewest pods of that role the job runs with
    whole: int | None = None  # when set: the job runs only with this many pods (its whole requested set)
    # worked out once (__post_init__): the scheduler asks a group's deficit several times for every pod it places
    _needs: tuple[tuple[str, int], ...] = field(init=False, repr=False, compare=False)  # (role, pods > 0)
    _quorum_pods: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        counts = dict(self.min_member)
        unknown = sorted(set(counts) - set(ROLES))
        if unknown:
            raise ValueError(f"pod group {self.job}: unknown roles {unknown}; roles are {', '.join(ROLES)}")
        for role, count in counts.items():
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"pod group {self.job}: min_member[{role}] must be an integer >= 0, got {count!r}")
        if self.whole is not None and (isinstance(self.whole, bool) or not isinstance(self.whole, int) or self.whole < 1):
            raise ValueError(f"pod group {self.job}: whole must be an integer >= 1 or None, got {self.whole!r}")
        object.__setattr__(self, "min_member", MappingProxyType({r: counts.get(r, 0) for r in ROLES}))
        object.__setattr__(self, "_needs", tuple((r, n) for r, n in self.min_member.items() if n > 0))
        object.__setattr__(self, "_quorum_pods", max(sum(self.min_member.values()), self.whole or 0))

    def __hash__(self) -> int:
        return hash((self.job, tuple(self.min_member.items()), self.whole))

    @property
    def quorum_pods(self) -> int:
        """How many pods the quorum takes at least."""
        return self._quorum_pods

    def deficit(self, counts: Mapping[str, int]) -> int:
        """How many more pods `counts` (role -> pods) needs to meet the quorum; 0 when met."""
        by_role = 0
        for role, need in self._needs:
            have = counts.get(role, 0)
            if have < need:
                by_role += need - have
        if self.whole is None:
            return by_role
        return max(by_role, self.whole - sum(counts.values()))

    def met(self, counts: Mapping[str, int]) -> bool:
        """True when `counts` (role -> pods) meets the quorum."""
        return self.deficit(counts) == 0

    def shortfall(self, counts: Mapping[str, int]) -> str:
        """What `counts` lacks, in words: 'server', 'worker 1 of 2', '1 more pod'; '' when the quorum is met."""
        parts = []
        for role, need in self.min_member.items():
            have = counts.get(role, 0)
            if have < need:
                parts.append(role if have == 0 and need == 1 else f"{role} {have} of {need}")
        if self.whole is not None:
            after_roles = sum(counts.values()) + sum(max(0, n - counts.get(r, 0)) for r, n in self.min_member.items())
            if after_roles < self.whole:
                more = self.whole - after_roles
                parts.append(f"{more} more pod{'s' if more != 1 else ''}")
        return ", ".join(parts)


def job_pods(job: str, job_seq: int, servers: int = 1, workers: int = 1, first_seq: int = 0) -> list[Pod]:
    """A job's pods, named `<job>-scheduler`, `<job>-server-<i>`, `<job>-worker-<i>`, arriving in that order
    with seq = first_seq, first_seq + 1, ..."""
    roles = [("scheduler", f"{job}-scheduler")]
    roles += [("server", f"{job}-server-{i}") for i in range(servers)]
    roles += [("worker", f"{job}-worker-{i}") for i in range(workers)]
    return [Pod(name, job, role, first_seq + k, job_seq) for k, (role, name) in enumerate(roles)]


def default_group(job: str) -> PodGroup:
    """The group of a job submitted without one: one scheduler, one server, one worker."""
    return PodGroup(job)


# ---- plugin verdicts -------------------------------------------------------------------------------------------

#: PreFilter, Filter and Reserve plugins answer None (fits) or a short reason (unschedulable, kube's Status).
Reason = str | None
#: A Filter plugin may give several reasons for one node (kube's NodeResourcesFit: "Insufficient cpu" and
#: "Insufficient memory"); each counts the node once in the pod's pending reason.
FilterReason = str | tuple[str, ...] | None


@dataclass(frozen=True)
class Allow:
    """Permit verdict: bind this pod now, and bind these waiting pods (its group) together with it."""

    also: tuple[str, ...] = ()  # names of pods waiting at Permit to allow at the same time


@dataclass(frozen=True)
class Wait:
    """Permit verdict: keep the node reserved and wait at most `timeout_s` (passed-in time) to be allowed."""

    timeout_s: float  # seconds after the pod's reservation at which it is rejected if not allowed


@dataclass(frozen=True)
class Reject:
    """Permit verdict: give the reservation back and requeue the pod with backoff."""

    reason: str  # why, for the pod's pending reason


PermitVerdict = Allow | Wait | Reject


# ---- plugin protocols (one per extension point; a plugin may implement several) ------------------------------


@runtime_checkable
class QueueSortPlugin(Protocol):
    name: str

    def key(self, pod: Pod) -> tuple:
        """Sort key of the active queue: the smallest key is scheduled first (kube: Less)."""


@runtime_checkable
class PreFilterPlugin(Protocol):
    name: str

    def pre_filter(self, state: Any, pod: Pod) -> Reason:
        """Whole-pod check before any node is looked at; a reason makes the pod unschedulable.

        Optional queueing hint: `waits_for_turn(state, pod) -> bool`, asked right after this plugin rejected `pod`:
        True when nothing but its job becoming `state.first_ready_job()` (or a change to its own job, or to the
        nodes) can make it pass. The scheduler then parks the pod until one of those happens instead of trying it
        again every pass (kube: a QueueingHint that skips every other event).
        """


@runtime_checkable
class FilterPlugin(Protocol):
    name: str

    def filter(self, state: Any, pod: Pod, node: int) -> FilterReason:
        """None when the pod fits node number `node`, else kube's reason(s) for the node ('Insufficient cpu').

        Optional fast path: `bucket_filter(state, pod, shape) -> FilterReason`, the same answer from the node's
        `Shape` alone (its slots, its class, the resources its pods take: scheduler_fork.nodes); the framework then
        judges whole buckets of nodes at once.

        Optional: `skip(state, pod) -> bool`, True when the plugin passes every node in placement for this pod
        (kube: a PreFilter that returns Skip), so that the framework does not ask it node by node.
        """


@runtime_checkable
class ScorePlugin(Protocol):
    name: str

    def score(self, state: Any, pod: Pod, node: int) -> int:
        """Raw score of a feasible node; higher is better."""

    def normalize(self, scores: dict) -> dict:
        """NormalizeScore: map raw scores (any keys) onto 0..100; must depend only on the values.

        Optional fast path: `bucket_score(state, pod, shape) -> int` (the score of a node of this `Shape`) and
        `node_overrides(state, pod) -> Mapping[int, int]` (the nodes whose score differs from their bucket's).
        """


@runtime_checkable
class ReservePlugin(Protocol):
    name: str

    def reserve(self, state: Any, pod: Pod, node: int) -> Reason:
        """Called once the pod holds its node; a reason undoes the reservation."""

    def unreserve(self, state: Any, pod: Pod) -> tuple[str, ...]:
        """Called when a reserved pod is rejected; returns the other waiting pods to reject with it."""


@runtime_checkable
class PermitPlugin(Protocol):
    name: str

    def permit(self, state: Any, pod: Pod, node: int) -> PermitVerdict:
        """Allow, Wait(timeout_s) or Reject a pod that holds a reservation on `node`."""


@runtime_checkable
class BindPlugin(Protocol):
    name: str

    def bind(self, state: Any, pod: Pod, node: int) -> Reason:
        """Confirm the binding (kube: write it to the API server); a reason makes the bind fail."""


def normalize_to_max(scores: Mapping[Any, int], max_score: int = MAX_NODE_SCORE) -> dict:
    """kube's DefaultNormalizeScore: scale so the best score becomes `max_score`; all zero stays all zero."""
    top = max(scores.values(), default=0)
    if top <= 0:
        return {key: 0 for key in scores}
    return {key: value * max_score // top for key, value in scores.items()}


def backoff_s(attempts: int) -> float:
    """Backoff after `attempts` failed scheduling attempts: 1, 2, 4, 8, 10, 10, ... seconds."""
    if attempts < 1:
        return 0.0
    return min(INITIAL_BACKOFF_S * 2 ** min(attempts - 1, 32), MAX_BACKOFF_S)


# ---- profiles and results --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile:
    """Which plugin (by name in PLUGINS) runs at each extension point (kube: a KubeSchedulerProfile)."""

    name: str  # the profile's name in PROFILES
    queue_sort: str  # one QueueSort plugin
    pre_filter: tuple[str, ...] = ()  # run in order; the first reason stops the pod
    filter: tuple[str, ...] = ()  # run in order on each node; a node passes when every filter passes
    score: tuple[tuple[str, int], ...] = ()  # (plugin, weight): normalised scores are summed with these weights
    reserve: tuple[str, ...] = ()  # Reserve/Unreserve hooks
    permit: tuple[str, ...] = ()  # none means allow
    bind: str = "DefaultBinder"  # one Bind plugin
    summary: str = ""  # one line for humans


@dataclass(frozen=True)
class CycleResult:
    """What one `Scheduler.schedule(now_s)` call did."""

    bound: Mapping[str, str]  # pod -> node, bound during this call, in bind order
    pending: Mapping[str, str]  # every pod still pending after the call -> its last reason, "Plugin: message"
    waiting: Mapping[str, str]  # pods holding a reservation at Permit after the call -> reserved node
    rejected: Mapping[str, str]  # pods whose reservation was rejected or timed out during the call -> reason
    attempts: int  # scheduling cycles run (pods taken from the active queue)


@dataclass(frozen=True)
class Deadlock:
    """A state no scheduling can get out of: see `Scheduler.deadlock` for the definition."""

    jobs: tuple[str, ...]  # the jobs holding or waiting for slots, in job creation order
    reason: str  # one line: every such job's bound / needed pods


def frozen(mapping: Mapping) -> Mapping:
    """A read-only snapshot of `mapping`."""
    return MappingProxyType(dict(mapping))


__all__ = [
    "ROLES",
    "DEFAULT_MIN_MEMBER",
    "INITIAL_BACKOFF_S",
    "MAX_BACKOFF_S",
    "MAX_NODE_SCORE",
    "PENDING",
    "RESERVED",
    "BOUND",
    "Pod",
    "Node",
    "PodGroup",
    "default_group",
    "job_pods",
    "Reason",
    "FilterReason",
    "Allow",
    "Wait",
    "Reject",
    "PermitVerdict",
    "QueueSortPlugin",
    "PreFilterPlugin",
    "FilterPlugin",
    "ScorePlugin",
    "ReservePlugin",
    "PermitPlugin",
    "BindPlugin",
    "normalize_to_max",
    "backoff_s",
    "Profile",
    "CycleResult",
    "Deadlock",
    "frozen",
]
