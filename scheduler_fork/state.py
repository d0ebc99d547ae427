"""What the plugins read: the nodes (scheduler_fork.nodes), pods by status, and one ledger per job.

`SchedulingState` is the scheduler's cache (kube: the scheduler cache and snapshot, plus the coscheduling
plugin's PodGroup bookkeeping). It is plain data kept up to date incrementally, so that no extension point has
to walk every node or every pod:

- per node (`NodeTable`): slot cap and free slots, class (allocatable, taints, cordon, the labels pods read), the
  resources its pods request, and how many slot-taking pods of each job it holds; the nodes in *buckets* of one
  shape, which Filter and Score plugins judge at once;
- per job (`JobLedger`): its PodGroup, how many pods of each role it has pending, reserved and bound, and
  whether its quorum fits the cluster, emptied of pods, all at once (`fit.place_at_once`);
- the jobs the head-of-line rule looks at: *open* jobs (started and still placing pods) and *ready* jobs
  (not started, quorum present and fitting, pods pending) ordered by job creation.

Nodes may join, change or leave placement (`set_node`, `remove_node`) while pods are known: a node out of
placement is in no bucket and counts toward no total, and the pods bound there keep what they take until deleted.
Pods of other schedulers, found bound, take no slot (`Pod.slots == 0`) and count only toward their node's
resources.

Only `scheduler_fork.scheduler.Scheduler` changes a state (through the methods below); plugins only read it.
Side effects: none (no I/O, no clock, no randomness).
"""

from __future__ import annotations

import heapq
from typing import Sequence

from scheduler_fork.constraints import PODS
from scheduler_fork.fit import place_at_once, quorum_members
from scheduler_fork.framework import BOUND, PENDING, RESERVED, ROLES, Node, Pod, PodGroup, default_group
from scheduler_fork.nodes import IndexedSet, NodeTable
from scheduler_fork.plugins import PLUGINS
from scheduler_fork.profiles import NODE_FILTERS


_UNKNOWN = object()


class JobLedger:
    """One job's pods by role and status (kube coscheduling: the PodGroup's status)."""

    __slots__ = (
        "job", "job_seq", "group", "present", "reserved", "bound",
        "n_pending", "n_reserved", "n_bound", "names", "reserved_names", "eligible", "misfit", "fit_stale",
        "fit_version", "quorum_present", "quorum_pods",
    )

    def __init__(self, job: str, job_seq: int, group: PodGroup) -> None:
        self.job = job  # the job's name
        self.job_seq = job_seq  # its creation order
        self.group = group  # what it needs to run
        self.present = dict.fromkeys(ROLES, 0)  # role -> pods known (pending, reserved or bound)
        self.reserved = dict.fromkeys(ROLES, 0)  # role -> pods holding a reservation at Permit
        self.bound = dict.fromkeys(ROLES, 0)  # role -> pods bound
        self.n_pending = 0  # pods in the queue
        self.n_reserved = 0  # pods reserved
        self.n_bound = 0  # pods bound
        self.names: set[str] = set()  # every pod of the job
        self.reserved_names: set[str] = set()  # its reserved pods
        self.eligible = False  # quorum present and fitting the empty cluster at once (see SchedulingState._touch)
        self.misfit: str | None = None  # why its quorum does not fit the empty cluster ("pod: 0/2 nodes ..."), if not
        self.fit_stale = True  # its pods or group changed since `misfit` (and the two below) were worked out
        self.quorum_present = False  # its known pods meet the quorum (group.met(present))
        self.quorum_pods = group.quorum_pods  # how many pods its quorum takes
        self.fit_version: tuple[int, int] = (-1, -1)  # the nodes' (fit_version, others_version) when it was

    def held(self) -> dict[str, int]:
        """Role -> pods holding slots (reserved or bound)."""
        return {role: self.bound[role] + self.reserved[role] for role in ROLES}

    @property
    def started(self) -> bool:
        """The job holds slots (some pod reserved or bound)."""
        return self.n_bound + self.n_reserved > 0

    @property
    def runnable(self) -> bool:
        """Its bound pods meet the quorum: the controller can run it, and it will release its slots."""
        return self.group.met(self.bound)

    def __repr__(self) -> str:
        return (f"JobLedger({self.job!r}, seq={self.job_seq}, pending={self.n_pending}, "
                f"reserved={self.n_reserved}, bound={self.n_bound})")


class SchedulingState(NodeTable):
    """The cluster and the pods as the scheduler sees them; see the module docstring."""

    def __init__(self, nodes: Sequence[Node], permit_timeout_s: float = 30.0, filters: Sequence | None = None) -> None:
        super().__init__(tuple(nodes))
        if permit_timeout_s <= 0:
            raise ValueError(f"permit_timeout_s must be > 0, got {permit_timeout_s}")
        #: The Filter plugins that say whether a pod fits a node (the profile's; by default every node filter).
        self.filters: tuple = tuple(filters) if filters is not None else tuple(PLUGINS[n] for n in NODE_FILTERS)
        self.permit_timeout_s: float = float(permit_timeout_s)  # how long a pod may wait at Permit
        self.pods: dict[str, Pod] = {}  # every known pod
        self.status: dict[str, str] = {}  # pod -> PENDING, RESERVED or BOUND
        self.node_of: dict[str, int] = {}  # reserved or bound pod -> node number
        self.jobs: dict[str, JobLedger] = {}  # job -> ledger
        self.job_nodes: dict[str, dict[int, int]] = {}  # job -> node -> its slot-taking pods there
        self.open_jobs: dict[str, int] = {}  # started, eligible jobs with pods pending or reserved -> job_seq
        self.unplaced_jobs: set[str] = set()  # jobs with pods pending or reserved (the ones eligibility matters for)
        self._ready: set[str] = set()  # not started, eligible jobs with pods pending
        self._ready_heap: list[tuple[int, str]] = []  # (job_seq, job), lazily cleaned
        self._fits: dict[tuple, object] = {}  # the demands of a quorum -> its Misfit on the empty cluster, or None
        self._settled_others = self.others_version  # the others_version every job was last judged at
        self.touched: set[str] = set()  # jobs judged again since the scheduler last looked (its parked pods wake)
        self.touched_all = False  # every job was: the nodes, or other schedulers' pods on them, changed
        self._fits_version = (self.fit_version, self.others_version)  # the versions `_fits` holds for

    # ---- queries for plugins ---------------------------------------------------------------------------------

    def first_open_job(self) -> str | None:
        """The earliest job that has started placing pods and still has pods to place (None if there is none)."""
        if not self.open_jobs:
            return None
        return min(self.open_jobs.items(), key=lambda item: (item[1], item[0]))[0]

    def first_ready_job(self) -> str | None:
        """The earliest job not started yet whose quorum is present and fits, and that has pods pending."""
        heap = self._ready_heap
        while heap:
            job_seq, job = heap[0]
            if job in self._ready and self.jobs[job].job_seq == job_seq:
                return job
            heapq.heappop(heap)
        return None

    # ---- changes (called by the Scheduler only) --------------------------------------------------------------

    def set_node(self, node: Node) -> None:
        """Add a node, or change a known one, and bring it (back) into placement (see NodeTable.set_node)."""
        super().set_node(node)
        self._touch_all()

    def remove_node(self, name: str) -> None:
        """Take a node out of placement (gone); unknown names are ignored."""
        i = self.node_index.get(name)
        if i is None or i in self.off:
            return
        super().remove_node(name)
        self._touch_all()

    def settle(self) -> None:
        """Judge every job's eligibility again if other schedulers' pods took or gave back room since (once per
        scheduling pass rather than once per such pod: a relist brings thousands)."""
        if self._settled_others != self.others_version:
            self._settled_others = self.others_version
            self._touch_all()

    def _touch_all(self) -> None:
        """The nodes changed: every job still placing pods may have become (in)eligible."""
        self.touched_all = True
        for job in list(self.unplaced_jobs):
            self._touch(self.jobs[job])

    def add(self, pod: Pod, group: PodGroup | None = None) -> None:
        """A new pending pod; `group` (if given) becomes its job's group."""
        if pod.name in self.pods:
            raise ValueError(f"pod {pod.name!r} is already known")
        ledger = self.jobs.get(pod.job)
        if ledger is None:
            ledger = self.jobs[pod.job] = JobLedger(pod.job, pod.job_seq, group or default_group(pod.job))
        elif ledger.job_seq != pod.job_seq:
            raise ValueError(f"pod {pod.name}: job_seq {pod.job_seq} differs from job {pod.job}'s {ledger.job_seq}")
        if group is not None:
            ledger.group = group
        self.pods[pod.name] = pod
        self.status[pod.name] = PENDING
        self.watch_selectors(pod, 1)
        ledger.names.add(pod.name)
        ledger.present[pod.role] += 1
        ledger.n_pending += 1
        ledger.fit_stale = True
        self._touch(ledger)

    def reserve(self, name: str, node: int, force: bool = False) -> None:
        """PENDING -> RESERVED on `node` (kube: assume); `force` accepts a node without room (a pod found bound)."""
        pod = self.pods[name]
        self._expect(name, PENDING)
        self._take(node, pod, force)
        self.status[name] = RESERVED
        self.node_of[name] = node
        ledger = self.jobs[pod.job]
        ledger.n_pending -= 1
        ledger.n_reserved += 1
        ledger.reserved[pod.role] += 1
        ledger.reserved_names.add(name)
        self._touch(ledger)

    def bind(self, name: str) -> None:
        """RESERVED -> BOUND on the reserved node."""
        pod = self.pods[name]
        self._expect(name, RESERVED)
        self.status[name] = BOUND
        ledger = self._leave_reserved(name, pod)
        ledger.n_bound += 1
        ledger.bound[pod.role] += 1
        self._touch(ledger)

    def unreserve(self, name: str) -> None:
        """RESERVED -> PENDING: what the pod took on its node is given back."""
        pod = self.pods[name]
        self._expect(name, RESERVED)
        self._give(self.node_of.pop(name), pod)
        self.status[name] = PENDING
        ledger = self._leave_reserved(name, pod)
        ledger.n_pending += 1
        self._touch(ledger)

    def _leave_reserved(self, name: str, pod):
        """The job's ledger, with `name` taken off its reserved pods (before it is bound or unreserved)."""
        ledger = self.jobs[pod.job]
        ledger.n_reserved -= 1
        ledger.reserved[pod.role] -= 1
        ledger.reserved_names.discard(name)
        return ledger

    def remove(self, name: str) -> None:
        """Forget a pod in any status, giving back what it took; a job with no pods left is forgotten too."""
        pod = self.pods.pop(name)
        status = self.status.pop(name)
        ledger = self.jobs[pod.job]
        if status != PENDING:
            self._give(self.node_of.pop(name), pod)
        if status == PENDING:
            ledger.n_pending -= 1
        elif status == RESERVED:
            ledger.n_reserved -= 1
            ledger.reserved[pod.role] -= 1
            ledger.reserved_names.discard(name)
        else:
            ledger.n_bound -= 1
            ledger.bound[pod.role] -= 1
        ledger.present[pod.role] -= 1
        ledger.names.discard(name)
        self.watch_selectors(pod, -1)
        if ledger.names:
            ledger.fit_stale = True
            self._touch(ledger)
        else:
            del self.jobs[pod.job]
            self.open_jobs.pop(pod.job, None)
            self.unplaced_jobs.discard(pod.job)
            self._ready.discard(pod.job)

    def set_group(self, job: str, group: PodGroup) -> None:
        ledger = self.jobs[job]
        ledger.group = group
        ledger.fit_stale = True
        self._touch(ledger)

    # ---- internals -------------------------------------------------------------------------------------------

    def _expect(self, name: str, status: str) -> None:
        if self.status.get(name) != status:
            raise ValueError(f"pod {name} is {self.status.get(name, 'unknown')}, not {status}")

    def _take(self, node: int, pod: Pod, force: bool = False) -> None:
        if not force:
            why = self.room_for(node, pod)
            if why is not None:
                raise ValueError(why)
        self.take(node, pod)
        if pod.slots:
            on = self.jobs_on[node]
            on[pod.job] = on.get(pod.job, 0) + 1
            where = self.job_nodes.get(pod.job)
            if where is None:
                where = self.job_nodes[pod.job] = {}
            where[node] = where.get(node, 0) + 1

    def _give(self, node: int, pod: Pod) -> None:
        self.give(node, pod)
        if not pod.slots:
            return
        on = self.jobs_on[node]
        if on[pod.job] == 1:
            del on[pod.job]
        else:
            on[pod.job] -= 1
        where = self.job_nodes[pod.job]
        if where[node] == 1:
            del where[node]
            if not where:
                del self.job_nodes[pod.job]
        else:
            where[node] -= 1

    def _touch(self, ledger: JobLedger) -> None:
        """Recompute the job's eligibility and its place among open and ready jobs.

        Eligible: its quorum is present, and fits the cluster's nodes in placement, emptied of pods, all at once
        (worked out again only when its pods, its group or the nodes changed)."""
        self.touched.add(ledger.job)
        if ledger.fit_stale:
            group = ledger.group
            ledger.quorum_present = group.met(ledger.present)
            ledger.quorum_pods = group.quorum_pods
        present = ledger.quorum_present
        version = (self.fit_version, self.others_version)
        if present and (ledger.fit_stale or ledger.fit_version != version):
            ledger.misfit = self._misfit(ledger)
            ledger.fit_version = version
        ledger.fit_stale = False
        ledger.eligible = (present and not (self.uncapped == 0 and ledger.quorum_pods > self.total_slots)
                           and ledger.misfit is None)
        job = ledger.job
        started = ledger.n_bound + ledger.n_reserved > 0
        if ledger.n_pending + ledger.n_reserved > 0:
            self.unplaced_jobs.add(job)
        else:
            self.unplaced_jobs.discard(job)
        if started and ledger.eligible and ledger.n_pending + ledger.n_reserved > 0:
            self.open_jobs[job] = ledger.job_seq
        else:
            self.open_jobs.pop(job, None)
        if not started and ledger.eligible and ledger.n_pending > 0:
            if job not in self._ready:
                self._ready.add(job)
                heapq.heappush(self._ready_heap, (ledger.job_seq, job))
        else:
            self._ready.discard(job)

    def _misfit(self, ledger: JobLedger) -> str | None:
        """None when the job's quorum fits at once the nodes in placement as other schedulers' pods leave them
        (Coach's own pods aside: they leave when their jobs end), else which pod does not and why."""
        members = quorum_members(ledger.group, [self.pods[name] for name in sorted(ledger.names)], {})
        if not members:
            return None
        if self._fits_version != (self.fit_version, self.others_version):
            self._fits.clear()
            self._fits_version = (self.fit_version, self.others_version)
        demands = tuple(pod.demand for pod in members)
        found = self._fits.get(demands, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._fits[demands] = place_at_once(self, self.filters, members, self.left_by_others())
        return None if found is None else f"{members[found.pod].name}: {found.message()}"

    def check(self, overcommit: bool = False) -> None:
        """Recount everything from the pods and compare with the incremental indexes (for tests).

        `overcommit`: allow nodes whose pods take more than they have (pods found bound beyond a node's room)."""
        slots_used = [0] * len(self.nodes)
        used: list[dict[str, int]] = [{} for _ in self.nodes]
        jobs_on: list[dict[str, int]] = [{} for _ in self.nodes]
        others: dict[int, dict[str, int]] = {}
        for name, status in self.status.items():
            if status != PENDING:
                node, pod = self.node_of[name], self.pods[name]
                slots_used[node] += pod.slots
                for resource, amount in ((PODS, 1),) + pod.requests:
                    used[node][resource] = used[node].get(resource, 0) + amount
                    if not pod.slots:
                        theirs = others.setdefault(node, {})
                        theirs[resource] = theirs.get(resource, 0) + amount
                if pod.slots:
                    jobs_on[node][pod.job] = jobs_on[node].get(pod.job, 0) + 1
        assert slots_used == self.slots_used, (slots_used, self.slots_used)
        assert used == self.used, (used, self.used)
        assert others == self.others_used, (others, self.others_used)
        assert jobs_on == self.jobs_on
        if not overcommit:
            for i in range(len(self.nodes)):
                assert self.shape[i].free >= 0, (i, self.shape[i])
                allocatable = self.node_class[i].allocatable
                if allocatable is not None:
                    assert all(amount <= allocatable.get(r, 0) for r, amount in used[i].items()), (i, used[i])
        self.check_nodes()


__all__ = ["PENDING", "RESERVED", "BOUND", "IndexedSet", "JobLedger", "SchedulingState"]
