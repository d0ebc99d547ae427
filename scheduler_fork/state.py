"""What the plugins read: nodes with their free slots and jobs, pods by status, and one ledger per job.

`SchedulingState` is the scheduler's cache (kube: the scheduler cache and snapshot, plus the coscheduling
plugin's PodGroup bookkeeping). It is plain data kept up to date incrementally, so that no extension point has
to walk every node or every pod:

- per node: capacity, free slots, and how many pods of each job it holds (bound or reserved);
- *buckets*: the nodes grouped by (capacity, free slots). Filter and Score plugins whose answer depends only on
  those two numbers judge a whole bucket at once; a cluster of 7,500 identical nodes has at most five buckets;
- per job (`JobLedger`): its PodGroup, how many pods of each role it has pending, reserved and bound;
- the jobs the head-of-line rule looks at: *open* jobs (started and still placing pods) and *ready* jobs
  (not started, quorum present, pods pending) ordered by job creation.

Nodes may join, change capacity or leave placement (`set_node`, `remove_node`) while pods are known: a node out
of placement is in no bucket and counts toward no total, and the pods bound there keep their slots until deleted.

Only `scheduler_fork.scheduler.Scheduler` changes a state (through the methods below); plugins only read it.
Side effects: none (no I/O, no clock, no randomness).
"""

from __future__ import annotations

import heapq
from bisect import insort
from typing import Iterable, Iterator, Sequence

from scheduler_fork.framework import ROLES, Node, Pod, PodGroup, default_group

PENDING = "pending"  # in the scheduling queue (active or backing off)
RESERVED = "reserved"  # holds a node's slots, waiting at Permit (or about to bind)
BOUND = "bound"  # placed


class IndexedSet:
    """A set of ints with O(1) add, discard and access by position (for a uniform seeded pick)."""

    __slots__ = ("items", "pos")

    def __init__(self, items: Iterable[int] = ()) -> None:
        self.items: list[int] = []
        self.pos: dict[int, int] = {}
        for item in items:
            self.add(item)

    def add(self, item: int) -> None:
        if item not in self.pos:
            self.pos[item] = len(self.items)
            self.items.append(item)

    def discard(self, item: int) -> None:
        at = self.pos.pop(item, None)
        if at is None:
            return
        last = self.items.pop()
        if last != item:
            self.items[at] = last
            self.pos[last] = at

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, item: object) -> bool:
        return item in self.pos

    def __iter__(self) -> Iterator[int]:
        return iter(self.items)


class JobLedger:
    """One job's pods by role and status (kube coscheduling: the PodGroup's status)."""

    __slots__ = (
        "job", "job_seq", "group", "present", "reserved", "bound",
        "n_pending", "n_reserved", "n_bound", "names", "reserved_names", "eligible",
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
        self.eligible = False  # quorum present and no larger than the cluster (see SchedulingState._touch)

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


class SchedulingState:
    """The cluster and the pods as the scheduler sees them; see the module docstring."""

    def __init__(self, nodes: Sequence[Node], permit_timeout_s: float = 30.0) -> None:
        nodes = tuple(nodes)
        seen: set[str] = set()
        for node in nodes:
            if not isinstance(node, Node):
                raise TypeError(f"nodes must be scheduler_fork.Node, got {type(node).__name__}")
            if node.name in seen:
                raise ValueError(f"duplicate node name {node.name!r}")
            seen.add(node.name)
        if permit_timeout_s <= 0:
            raise ValueError(f"permit_timeout_s must be > 0, got {permit_timeout_s}")
        self.nodes: list[Node] = list(nodes)  # in the order given, then in the order added
        self.off: set[int] = set()  # nodes out of placement (removed); their pods keep their slots until deleted
        self.node_index: dict[str, int] = {node.name: i for i, node in enumerate(nodes)}  # name -> number
        self.capacity: list[int] = [node.slots for node in nodes]  # node -> slots
        self.free: list[int] = list(self.capacity)  # node -> free slots
        self.jobs_on: list[dict[str, int]] = [{} for _ in nodes]  # node -> job -> its pods there
        self.buckets: dict[tuple[int, int], IndexedSet] = {}  # (capacity, free) -> nodes
        self.bucket_keys: list[tuple[int, int]] = []  # the buckets' keys, sorted
        for i, slots in enumerate(self.capacity):
            self._bucket((slots, slots)).add(i)
        self.total_slots: int = sum(self.capacity)  # cluster capacity
        self.total_free: int = self.total_slots  # free slots in the cluster
        self.permit_timeout_s: float = float(permit_timeout_s)  # how long a pod may wait at Permit
        self.pods: dict[str, Pod] = {}  # every known pod
        self.status: dict[str, str] = {}  # pod -> PENDING, RESERVED or BOUND
        self.node_of: dict[str, int] = {}  # reserved or bound pod -> node number
        self.jobs: dict[str, JobLedger] = {}  # job -> ledger
        self.job_nodes: dict[str, dict[int, int]] = {}  # job -> node -> its pods there
        self.open_jobs: dict[str, int] = {}  # started, eligible jobs with pods pending or reserved -> job_seq
        self._ready: set[str] = set()  # not started, eligible jobs with pods pending
        self._ready_heap: list[tuple[int, str]] = []  # (job_seq, job), lazily cleaned

    # ---- queries for plugins ---------------------------------------------------------------------------------

    def node_name(self, node: int) -> str:
        return self.nodes[node].name

    @property
    def active_nodes(self) -> int:
        """How many nodes are in placement."""
        return len(self.nodes) - len(self.off)

    def first_open_job(self) -> str | None:
        """The earliest job that has started placing pods and still has pods to place (None if there is none)."""
        if not self.open_jobs:
            return None
        return min(self.open_jobs.items(), key=lambda item: (item[1], item[0]))[0]

    def first_ready_job(self) -> str | None:
        """The earliest job not started yet whose quorum is present and that has pods pending."""
        heap = self._ready_heap
        while heap:
            job_seq, job = heap[0]
            if job in self._ready and self.jobs[job].job_seq == job_seq:
                return job
            heapq.heappop(heap)
        return None

    # ---- changes (called by the Scheduler only) --------------------------------------------------------------

    def set_node(self, node: Node) -> None:
        """Add a node, or give a known one a new capacity and bring it (back) into placement.

        Its pods keep their slots: free = capacity - slots they take, which may be below zero when the capacity
        shrinks under them (then nothing more fits there).
        """
        if not isinstance(node, Node):
            raise TypeError(f"nodes must be scheduler_fork.Node, got {type(node).__name__}")
        i = self.node_index.get(node.name)
        if i is None:
            i = len(self.nodes)
            self.nodes.append(node)
            self.node_index[node.name] = i
            self.capacity.append(node.slots)
            self.free.append(node.slots)
            self.jobs_on.append({})
            self.off.add(i)
        self._leave(i)
        used = self.capacity[i] - self.free[i]
        self.nodes[i] = node
        self.capacity[i] = node.slots
        self.free[i] = node.slots - used
        self.off.discard(i)
        self._bucket((node.slots, self.free[i])).add(i)
        self.total_slots += node.slots
        self.total_free += self.free[i]
        self._touch_all()

    def remove_node(self, name: str) -> None:
        """Take a node out of placement (gone, or unschedulable); unknown names are ignored."""
        i = self.node_index.get(name)
        if i is None or i in self.off:
            return
        self._leave(i)
        self.off.add(i)
        self._touch_all()

    def _leave(self, i: int) -> None:
        """Take node `i` out of its bucket and the totals (nothing when it is out of placement already)."""
        if i in self.off:
            return
        self.buckets[(self.capacity[i], self.free[i])].discard(i)
        self.total_slots -= self.capacity[i]
        self.total_free -= self.free[i]

    def _touch_all(self) -> None:
        """The cluster's size changed: every job's eligibility may have."""
        for ledger in self.jobs.values():
            self._touch(ledger)

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
        ledger.names.add(pod.name)
        ledger.present[pod.role] += 1
        ledger.n_pending += 1
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
        """RESERVED -> PENDING: the node's slots are given back."""
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
        """Forget a pod in any status, giving back its slots; a job with no pods left is forgotten too."""
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
        if ledger.names:
            self._touch(ledger)
        else:
            del self.jobs[pod.job]
            self.open_jobs.pop(pod.job, None)
            self._ready.discard(pod.job)

    # ---- internals -------------------------------------------------------------------------------------------

    def _expect(self, name: str, status: str) -> None:
        if self.status.get(name) != status:
            raise ValueError(f"pod {name} is {self.status.get(name, 'unknown')}, not {status}")

    def _bucket(self, key: tuple[int, int]) -> IndexedSet:
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = IndexedSet()
            insort(self.bucket_keys, key)
        return bucket

    def _take(self, node: int, pod: Pod, force: bool = False) -> None:
        cap, free = self.capacity[node], self.free[node]
        if pod.slots > free and not force:
            raise ValueError(f"node {self.node_name(node)} has {free} free slots, pod {pod.name} takes {pod.slots}")
        self.free[node] = free - pod.slots
        if node not in self.off:
            self.buckets[(cap, free)].discard(node)
            self._bucket((cap, free - pod.slots)).add(node)
            self.total_free -= pod.slots
        on = self.jobs_on[node]
        on[pod.job] = on.get(pod.job, 0) + 1
        where = self.job_nodes.get(pod.job)
        if where is None:
            where = self.job_nodes[pod.job] = {}
        where[node] = where.get(node, 0) + 1

    def _give(self, node: int, pod: Pod) -> None:
        cap, free = self.capacity[node], self.free[node]
        self.free[node] = free + pod.slots
        if node not in self.off:
            self.buckets[(cap, free)].discard(node)
            self._bucket((cap, free + pod.slots)).add(node)
            self.total_free += pod.slots
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
        """Recompute the job's eligibility and its place among open and ready jobs."""
        group = ledger.group
        ledger.eligible = group.met(ledger.present) and group.quorum_pods <= self.total_slots
        job = ledger.job
        started = ledger.n_bound + ledger.n_reserved > 0
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

    def set_group(self, job: str, group: PodGroup) -> None:
        ledger = self.jobs[job]
        ledger.group = group
        self._touch(ledger)

    def check(self, overcommit: bool = False) -> None:
        """Recount everything from the pods and compare with the incremental indexes (for tests).

        `overcommit`: allow nodes with fewer than zero free slots (pods found bound beyond a node's capacity)."""
        free = list(self.capacity)
        jobs_on: list[dict[str, int]] = [{} for _ in self.nodes]
        for name, status in self.status.items():
            if status != PENDING:
                node, pod = self.node_of[name], self.pods[name]
                free[node] -= pod.slots
                jobs_on[node][pod.job] = jobs_on[node].get(pod.job, 0) + 1
        assert free == self.free, (free, self.free)
        assert overcommit or all(f >= 0 for f in free), free
        assert jobs_on == self.jobs_on
        active = [i for i in range(len(self.nodes)) if i not in self.off]
        assert self.total_free == sum(free[i] for i in active)
        assert self.total_slots == sum(self.capacity[i] for i in active)
        for (cap, fr), bucket in self.buckets.items():
            for node in bucket:
                assert node not in self.off
                assert (self.capacity[node], self.free[node]) == (cap, fr)
        assert sum(len(b) for b in self.buckets.values()) == len(active)

