"""The cluster as the scheduler knows it, and scheduler_fork fed from it. Pure: no I/O, no clock, no threads.

The watch reports nodes, pods and PodGroups as they change (or whole lists after a relist); `Mirror` turns
each change into scheduler_fork calls, so that scheduler_fork always holds:
- every node in placement with what kube-scheduler's filters read (allocatable resources, labels, taints,
  cordon) and Coach's slot cap (the coach.io/slots label, if any); deleted nodes out of placement;
- every pod bound in the apiserver as bound on its node (`restore`), whoever bound it and whenever, holding its
  requests there: Coach's pods (those whose schedulerName is Coach's) and everyone else's ("others", from
  `apply_other`), which take no Coach slot (but Coach's functions of another namespace do). A terminated pod
  (Succeeded, Failed) holds nothing; a pod being deleted holds its node until it is gone, as kube-scheduler
  counts them;
- every pending pod that carries a function's labels and whose PodGroup exists, as pending;
- the pods this scheduler has decided but whose binding the apiserver has not shown yet, as bound ("assumed",
  kube-scheduler's assume cache): a relist that still shows them pending does not submit them again, so
  nothing is bound twice.
Pods it cannot place whatever the cluster holds (no labels, no PodGroup yet) are kept aside with the reason.
`schedule(now_s)` runs one scheduler_fork call and answers what to bind and why every other pod is pending.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from coach.domain.identity import QUORUM
from coach.domain.kube import SCHEDULER_NAME
from coach.kube_scheduler.objects import GroupInfo, NodeInfo, PodInfo
from scheduler_fork import Node, Pod, PodGroup, Scheduler

#: The scheduler_fork PodGroup of a pod that is not one of Coach's functions: a job of its own needing nothing.
NO_QUORUM: dict[str, int] = {}

#: scheduler_fork's per-role quorum of every Coach job, and the PodGroup spec.minMember that matches it.
QUORUM_BY_ROLE = {role.value: need for role, need in QUORUM.items()}
QUORUM_PODS = sum(QUORUM_BY_ROLE.values())
QUEUED = "queued"  # scheduler_fork's reason for a pod not tried yet: nothing to report


@dataclass(frozen=True)
class Cycle:
    """What one scheduling run decided."""

    binds: tuple[tuple[PodInfo, str], ...]  # pods to bind now, and the node of each, in scheduler_fork's order
    pending: Mapping[str, str]  # every pending pod (key) -> why it is pending, "queued" if not tried yet
    attempts: int  # scheduling cycles scheduler_fork ran


@dataclass(frozen=True)
class Counts:
    """How many pods and nodes are where, for /metrics (cheap: counted from scheduler_fork's indexes)."""

    pending: int  # pods without a node that Coach should place: queued, at Permit, or held aside
    assumed: int  # decided, binding not seen yet
    nodes: int  # nodes in placement


@dataclass
class _Holds:
    """Pending pods kept out of scheduler_fork, with why."""

    reason: dict[str, str] = field(default_factory=dict)  # pod key -> why it is not placed
    retry_at_s: dict[str, float] = field(default_factory=dict)  # pod key -> when a failed binding is retried


class Mirror:
    """Nodes, pods and PodGroups from the watch -> scheduler_fork state; see the module docstring."""

    def __init__(self, profile: str, seed: int = 0, permit_timeout_s: float = 30.0):
        self.fork = Scheduler([], profile=profile, seed=seed, permit_timeout_s=permit_timeout_s)
        self._gate = "PodGroupRoles" in self.fork.profile.pre_filter  # hold a job's pods until its roles exist
        self.nodes: dict[str, NodeInfo] = {}  # every node seen
        self.pods: dict[str, PodInfo] = {}  # every live pod with Coach's schedulerName, by key
        self.others: dict[str, PodInfo] = {}  # every live bound pod of someone else's, by key
        self.groups: dict[str, GroupInfo] = {}  # every PodGroup, by key
        self.in_fork: dict[str, str] = {}  # pod key -> "pending" or "bound", as scheduler_fork holds it
        self.assumed: dict[str, str] = {}  # pod key -> node: decided here, binding not seen in the watch yet
        self.parked: dict[str, set[str]] = {}  # node not seen yet -> keys of pods (Coach's or others) bound there
        self.holds = _Holds()
        self.members: dict[str, set[str]] = {}  # PodGroup key -> keys of its pods
        self.warnings: list[tuple[str, str]] = []  # (pod key, message) to report once; the caller drains it
        self._seq = itertools.count()
        self._job_seq: dict[str, int] = {}  # job key -> creation order (first sight)
        self._fork_groups: dict[str, PodGroup] = {}  # job key -> its scheduler_fork PodGroup

    # ---- nodes -----------------------------------------------------------------------------------------------

    def apply_node(self, node: NodeInfo) -> None:
        """A node was added or changed: its slots, resources, labels, taints and cordon take effect (a status
        update that changes none of them, such as a kubelet's heartbeat, costs nothing)."""
        old = self.nodes.get(node.name)
        self.nodes[node.name] = node
        if old != node:
            self.fork.set_node(Node(node.name, node.slots, allocatable=node.allocatable, labels=node.labels,
                                    taints=node.taints, unschedulable=not node.schedulable))
        for key in sorted(self.parked.pop(node.name, ())):
            pod = self.pods.get(key) or self.others.get(key)
            if pod is not None and pod.node == node.name:
                self._restore(pod)

    def delete_node(self, name: str) -> None:
        """A node went away: out of placement; its pods keep their slots there until they are deleted."""
        if self.nodes.pop(name, None) is not None:
            self.fork.remove_node(name)

    def replace_nodes(self, nodes: Iterable[NodeInfo]) -> None:
        """A fresh list of every node (after a relist): forget the ones missing from it."""
        nodes = list(nodes)
        for name in set(self.nodes) - {node.name for node in nodes}:
            self.delete_node(name)
        for node in nodes:
            self.apply_node(node)

    # ---- PodGroups -------------------------------------------------------------------------------------------

    def apply_group(self, group: GroupInfo) -> None:
        """A PodGroup was created or changed: its pods that waited for it are submitted.

        A spec.minMember other than Coach's quorum is reported once on each of its pods (a warning); the
        pods are placed with Coach's per-role quorum all the same, which is what the gang plugins need.
        """
        old = self.groups.get(group.key)
        self.groups[group.key] = group
        changed = old is not None and old.min_member != group.min_member
        for key in sorted(self.members.get(group.key, ())):
            pod = self.pods[key]
            if pod.node is None and key not in self.in_fork and key not in self.holds.retry_at_s:
                self._submit(pod)  # warns about a mismatch itself
            elif changed and group.min_member != QUORUM_PODS and self.in_fork.get(key) == "pending":
                self.warnings.append((key, self._mismatch(group)))

    def delete_group(self, key: str) -> None:
        """A PodGroup went away: its pending pods wait for it again; bound ones stay."""
        if self.groups.pop(key, None) is None:
            return
        if key not in self.members:  # nothing of the job is left: forget its place in line
            self._job_seq.pop(key, None)
            self._fork_groups.pop(key, None)
        for pod_key in sorted(self.members.get(key, ())):
            if self.in_fork.get(pod_key) == "pending":
                self.fork.delete([pod_key])
                del self.in_fork[pod_key]
                self._submit(self.pods[pod_key])

    def replace_groups(self, groups: Iterable[GroupInfo]) -> None:
        groups = list(groups)
        for key in set(self.groups) - {group.key for group in groups}:
            self.delete_group(key)
        for group in groups:
            self.apply_group(group)

    @staticmethod
    def _mismatch(group: GroupInfo) -> str:
        found = "missing" if group.min_member is None else str(group.min_member)
        need = ", ".join(f"{role} {n}" for role, n in QUORUM_BY_ROLE.items())
        return (f"PodGroup {group.name}: spec.minMember is {found}, Coach's quorum is {QUORUM_PODS} ({need}); "
                f"placing with Coach's quorum")

    # ---- pods ------------------------------------------------------------------------------------------------

    def apply_pod(self, pod: PodInfo) -> None:
        """A pod was added or changed (bound, relabelled, terminated, being deleted)."""
        key = pod.key
        old = self.pods.get(key)
        if pod.terminal or (old is not None and old.uid != pod.uid):
            self.delete_pod(key)  # a terminated pod holds no slot; a new uid is a new pod under an old name
            old = None
            if pod.terminal:
                return
        self.pods[key] = pod
        if old is not None and old.group_key != pod.group_key and old.group_key in self.members:
            self.members[old.group_key].discard(key)
        if pod.group_key is not None:
            self.members.setdefault(pod.group_key, set()).add(key)
        if pod.node is not None:
            self._bound_in_apiserver(pod)
            return
        if key in self.assumed:
            return  # our binding is on its way; the watch will show it (or the binder will report a failure)
        if pod.deleting:
            self._forget_pending(key)
            return
        if old is not None and (old.fid, old.group_key, old.demand) != (pod.fid, pod.group_key, pod.demand):
            self._forget_pending(key)  # relabelled or asking other things: place it as what it is now
        if key in self.in_fork or key in self.holds.retry_at_s:
            return
        self._submit(pod)

    def delete_pod(self, key: str) -> None:
        """A pod went away (or terminated): its slot is free."""
        pod = self.pods.pop(key, None)
        if pod is None:
            return
        if pod.group_key in self.members:
            self.members[pod.group_key].discard(key)
            if not self.members[pod.group_key]:
                del self.members[pod.group_key]
        self.assumed.pop(key, None)
        if pod.node is not None and pod.node in self.parked:
            self.parked[pod.node].discard(key)
        self._forget_pending(key)
        if self.in_fork.pop(key, None) is not None:
            self.fork.delete([key])

    def replace_pods(self, pods: Iterable[PodInfo]) -> None:
        """A fresh list of every pod (after a relist): forget the missing ones, take the others in arrival order."""
        pods = sorted(pods, key=lambda pod: (pod.created, pod.key))
        for key in set(self.pods) - {pod.key for pod in pods}:
            self.delete_pod(key)
        for pod in pods:
            self.apply_pod(pod)

    # ---- everyone else's pods -----------------------------------------------------------------------------------

    def apply_other(self, pod: PodInfo) -> None:
        """A pod that is not Coach's to place was added or changed: once bound and until it terminates, it holds
        its requests on its node (Terminating included)."""
        key = pod.key
        old = self.others.get(key)
        if pod.terminal or pod.node is None:
            self.delete_other(key)
            return
        if old is not None and (old.uid, old.node, old.requests) == (pod.uid, pod.node, pod.requests):
            self.others[key] = pod
            return
        self.delete_other(key)
        self.others[key] = pod
        self._restore(pod)

    def delete_other(self, key: str) -> None:
        """Someone else's pod went away (or terminated): what it held is free."""
        pod = self.others.pop(key, None)
        if pod is None:
            return
        if pod.node in self.parked:
            self.parked[pod.node].discard(key)
        self.fork.delete([key])

    def replace_others(self, pods: Iterable[PodInfo]) -> None:
        """A fresh list of everyone else's pods (after a relist): forget the missing ones, take the others in."""
        pods = list(pods)
        for key in set(self.others) - {pod.key for pod in pods}:
            self.delete_other(key)
        for pod in pods:
            self.apply_other(pod)

    def _bound_in_apiserver(self, pod: PodInfo) -> None:
        key = pod.key
        self._forget_pending(key)
        assumed = self.assumed.pop(key, None)
        state = self.in_fork.get(key)
        if state == "bound" and self._fork_node(key) == pod.node:
            return  # confirmed (our own binding, or one taken in already)
        if state is not None or assumed is not None:
            self.fork.delete([key])
            self.in_fork.pop(key, None)
        self._restore(pod)

    def _fork_node(self, key: str) -> str:
        """The node scheduler_fork holds a reserved or bound pod on (without copying its whole `bound` map)."""
        state = self.fork.state
        return state.nodes[state.node_of[key]].name

    def _restore(self, pod: PodInfo) -> None:
        """Take a bound pod in as bound on its node, or park it until its node is seen."""
        if pod.node not in self.fork.state.node_index:
            self.parked.setdefault(pod.node, set()).add(pod.key)
            return
        if pod.fid is not None and pod.key in self.pods:
            job = pod.group_key or f"{pod.namespace}/{pod.fid.job}"
            fork_pod = Pod(pod.key, job, pod.fid.role.value, next(self._seq), self._job_of(job), requests=pod.requests)
            group = self._group_of(job)
        else:  # not Coach's to place: it holds its requests, as a job of its own that needs nothing to run
            seq = next(self._seq)
            job = f"{pod.key} (not placed here)"
            # a slot only if it is one of Coach's functions (placed by Coach's scheduler for another namespace)
            slots = 1 if pod.scheduler == SCHEDULER_NAME and pod.fid is not None else 0
            fork_pod = Pod(pod.key, job, "worker", seq, seq, slots=slots, requests=pod.requests)
            group = PodGroup(job, min_member=NO_QUORUM)
        self.fork.restore([fork_pod], group, {pod.key: pod.node})
        if pod.key in self.pods:
            self.in_fork[pod.key] = "bound"

    def _submit(self, pod: PodInfo) -> None:
        """A pending pod: into scheduler_fork if it can be placed at all, else aside with the reason.

        When the profile holds pods until their job's roles exist (PodGroupRoles), a job's pods enter
        scheduler_fork only once its quorum of pods exists (bound or pending), as the coscheduling plugin's
        PreEnqueue keeps them out of kube-scheduler's queue: pods of a job that arrive over several watch batches
        would otherwise fail PodGroupRoles, back off, and hold every later job behind them (HeadOfLine) for
        seconds. Profiles without it (default) place every pod as it comes.
        """
        key = pod.key
        if pod.deleting:
            return
        if pod.problem is not None:
            self.holds.reason[key] = pod.problem
            return
        group = self.groups.get(pod.group_key)
        if group is None:
            self.holds.reason[key] = f"waiting for PodGroup {pod.group}"
            return
        missing = self._missing_roles(pod.group_key) if self._gate else ""
        if missing:
            reason = f"PodGroupRoles: waiting for roles: {missing}"
            self.holds.reason[key] = reason
            for other in self.members.get(pod.group_key, ()):  # their reason changed with this pod
                if self.holds.reason.get(other, "").startswith("PodGroupRoles:"):
                    self.holds.reason[other] = reason
            return
        job = pod.group_key
        for other in [pod] + [self.pods[k] for k in sorted(self.members.get(job, ())) if k != key]:
            if other.node is None and other.key not in self.in_fork and other.key not in self.holds.retry_at_s \
                    and other.problem is None and not other.deleting:
                self._enter(other, group)

    def _enter(self, pod: PodInfo, group: GroupInfo) -> None:
        key, job = pod.key, pod.group_key
        self.holds.reason.pop(key, None)
        if group.min_member != QUORUM_PODS:
            self.warnings.append((key, self._mismatch(group)))
        fork_pod = Pod(key, job, pod.fid.role.value, next(self._seq), self._job_of(job), requests=pod.requests,
                       tolerations=pod.tolerations, node_selector=pod.node_selector, node_affinity=pod.node_affinity)
        self.fork.submit([fork_pod], self._group_of(job))
        self.in_fork[key] = "pending"

    def _missing_roles(self, job: str) -> str:
        """The roles the job's live pods lack for its quorum, in words ('server, worker'); '' when none."""
        have = dict.fromkeys(QUORUM_BY_ROLE, 0)
        for key in self.members.get(job, ()):
            pod = self.pods[key]
            if pod.fid is not None and not pod.deleting:
                have[pod.fid.role.value] += 1
        return ", ".join(role for role, need in QUORUM_BY_ROLE.items() if have[role] < need)

    def _forget_pending(self, key: str) -> None:
        self.holds.reason.pop(key, None)
        self.holds.retry_at_s.pop(key, None)
        if self.in_fork.get(key) == "pending" and key not in self.assumed:
            self.fork.delete([key])
            del self.in_fork[key]

    def _group_of(self, job: str) -> PodGroup:
        """The job's scheduler_fork PodGroup (one object per job: building one validates it)."""
        group = self._fork_groups.get(job)
        if group is None:
            group = self._fork_groups[job] = PodGroup(job, min_member=QUORUM_BY_ROLE)
        return group

    def _job_of(self, job: str) -> int:
        seq = self._job_seq.get(job)
        if seq is None:
            seq = self._job_seq[job] = next(self._seq)
        return seq

    # ---- scheduling and what the bindings turned out to be -----------------------------------------------------

    def schedule(self, now_s: float) -> Cycle:
        """One scheduler_fork run at `now_s`: the pods to bind (assumed from now on) and every pending reason."""
        for key, at_s in list(self.holds.retry_at_s.items()):
            if at_s <= now_s:
                del self.holds.retry_at_s[key]
                self._submit(self.pods[key])
        result = self.fork.schedule(now_s)
        binds = []
        for key, node in result.bound.items():
            self.assumed[key] = node
            self.in_fork[key] = "bound"
            binds.append((self.pods[key], node))
        pending = dict(result.pending)
        for key, node in result.waiting.items():
            pending[key] = f"Coscheduling: holding node {node} until the job's quorum is reserved"
        if pending and not binds and not result.waiting:
            deadlock = self.fork.deadlock(now_s)
            if deadlock is not None:
                jobs = set(deadlock.jobs)
                for key in pending:
                    if self.fork.state.pods[key].job in jobs:
                        pending[key] = f"deadlock: {deadlock.reason}"
        pending.update(self.holds.reason)
        return Cycle(binds=tuple(binds), pending=pending, attempts=result.attempts)

    def bind_conflict(self, key: str, current: PodInfo | None) -> None:
        """The apiserver refused our binding as a conflict; `current` is the pod as it is now (None: gone)."""
        if key not in self.assumed:
            return  # the watch has settled it already
        if current is None:
            self.delete_pod(key)
        elif current.node is not None or current.uid != self.pods[key].uid:
            self.apply_pod(current)  # adopt the node it is bound to (never bind it again), or a new pod
        else:  # the same pod, still without a node: the conflict was about something else; place it afresh
            self.bind_failed(key, None, "binding refused as a conflict")

    def bind_failed(self, key: str, retry_at_s: float | None, reason: str) -> None:
        """Our binding did not happen: the pod is pending again, at once or from `retry_at_s`."""
        if self.assumed.pop(key, None) is None:
            return  # the watch has settled it already (bound, deleted)
        if self.in_fork.pop(key, None) is not None:
            self.fork.delete([key])
        pod = self.pods[key]
        if retry_at_s is None:
            self._submit(pod)
        else:
            self.holds.retry_at_s[key] = retry_at_s
            self.holds.reason[key] = reason

    def has_pending(self) -> bool:
        """Some pod waits in scheduler_fork's queue, at Permit, or for a binding retry."""
        return len(self.fork.queue) > 0 or bool(self.fork.waiting) or bool(self.holds.retry_at_s)

    def counts(self) -> Counts:
        return Counts(pending=len(self.fork.queue) + len(self.fork.waiting) + len(self.holds.reason),
                      assumed=len(self.assumed), nodes=self.fork.state.active_nodes)
