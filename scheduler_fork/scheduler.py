"""The Scheduler: runs pods through a profile's plugins, one scheduling cycle per pod (kube: scheduleOne).

The only stateful object of the library. Its state is plain data (`SchedulingState`, `SchedulingQueue`, a few
dicts) and changes only through `submit`, `delete` and `schedule`. Time is an argument (`now_s`), never read;
the tie-break between equally good nodes draws from `random.Random(seed)`, so the same calls with the same seed
give the same placements.

One cycle, for the active pod with the smallest QueueSort key:

1. PreFilter plugins, in profile order; the first reason makes the pod unschedulable.
2. Filter + Score + NormalizeScore over the nodes, then the best node (seeded random among equals). Two ways:
   - indexed (the default when every Filter and Score plugin offers a bucket form): nodes are grouped by shape
     (scheduler_fork.nodes: slot cap, free slots, class, what their pods request); a filter or score is computed
     once per group, plus the few nodes a score plugin names as exceptions (JobIsolation: the nodes of the pod's
     own job). Exact over *all* nodes, at a cost that grows with the number of shapes, not of nodes.
   - per node (kube's loop, for plugins without a bucket form): from a rotating start index, filter nodes until
     `feasible_nodes_to_find(n)` pass (kube's percentageOfNodesToScore), score those, pick the best.
   When no node passes, the pod's reason is kube's FitError, counting nodes per cause ("0/5 nodes are available:
   2 Insufficient cpu, 3 node(s) were unschedulable."); Filters that say they cannot fail (`skip`) are not asked.
3. Reserve (the node's slots and resources are taken) and the Reserve plugins.
4. Permit: Allow binds now (with the waiting pods the plugin names); Wait keeps the reservation until allowed
   or `timeout_s` later; Reject gives it back.
5. Bind.

An unschedulable or rejected pod goes back to the queue with its backoff (1 s doubling to 10 s, passed-in time),
or, when the plugin that rejected it says only its job's turn can help (`waits_for_turn`: HeadOfLine's "behind
job X, first in line"), is parked until its job is first in line or changes, or the nodes change: a line of
thousands of jobs then costs a pass nothing. With passes at least 10 s apart (the simulator's rounds) that places
exactly what trying every pod would; with shorter ones a woken pod's backoff counts its fewer attempts, as kube's.
`pending` and `CycleResult.pending` give a parked pod's reason as a cycle would now; the latter is worked out
when first read (or just before the scheduler next changes), so a caller that never reads it pays nothing.
Nodes may join, change or leave (`set_node`, `remove_node`), and pods found already bound elsewhere are taken in
as bound (`restore`): what a scheduler driven by a cluster's watch needs.
Side effects: none outside the object (no I/O, no clock).
"""

from __future__ import annotations

import heapq
import random
import weakref
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from scheduler_fork.fit import add_failure, filters_for, fit_error
from scheduler_fork.framework import (
    RESERVED,
    Allow,
    CycleResult,
    Deadlock,
    Node,
    Pod,
    PodGroup,
    Profile,
    Reject,
    Wait,
    frozen,
)
from scheduler_fork.plugins import PLUGINS
from scheduler_fork.profiles import PROFILES
from scheduler_fork.queue import SchedulingQueue
from scheduler_fork.state import SchedulingState

#: kube-scheduler's sampling constants (pkg/scheduler/schedule_one.go).
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
BASE_PERCENTAGE_OF_NODES_TO_SCORE = 50


def feasible_nodes_to_find(num_nodes: int) -> int:
    """kube's numFeasibleNodesToFind with the adaptive percentage: all nodes below 100, else 50% - n/125 (>= 5%)."""
    if num_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_nodes
    percentage = max(BASE_PERCENTAGE_OF_NODES_TO_SCORE - num_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


def _resolve(name: str, method: str, point: str):
    plugin = PLUGINS.get(name)
    if plugin is None:
        raise ValueError(f"unknown plugin {name!r} at {point}; known: {', '.join(sorted(PLUGINS))}")
    if not callable(getattr(plugin, method, None)):
        raise ValueError(f"plugin {name!r} has no {method}() and cannot run at {point}")
    return plugin


class PendingReasons(Mapping[str, str]):
    """Pod -> reason, as they were when the scheduling call that made this ended; built when first read."""

    def __init__(self, build: Callable[[], dict[str, str]]) -> None:
        self._build: Callable[[], dict[str, str]] | None = build
        self._data: dict[str, str] | None = None

    def freeze(self) -> None:
        """Build it now: the scheduler is about to change."""
        if self._data is None:
            assert self._build is not None
            self._data, self._build = self._build(), None

    def _get(self) -> dict[str, str]:
        self.freeze()
        assert self._data is not None
        return self._data

    def __getitem__(self, name: str) -> str:
        return self._get()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __repr__(self) -> str:
        return repr(self._get())


class Scheduler:
    """Places pods on nodes with one profile's plugins. See the module docstring."""

    def __init__(
        self,
        nodes: Sequence[Node],
        profile: str | Profile = "gang",
        seed: int = 0,
        permit_timeout_s: float = 30.0,
        *,
        indexed: bool = True,
    ) -> None:
        if isinstance(profile, str):
            if profile not in PROFILES:
                raise ValueError(f"unknown profile {profile!r}; known: {', '.join(sorted(PROFILES))}")
            profile = PROFILES[profile]
        self.profile: Profile = profile  # the plugins in use
        self._sort = _resolve(profile.queue_sort, "key", "QueueSort")
        self._pre_filters = [_resolve(n, "pre_filter", "PreFilter") for n in profile.pre_filter]
        self._filters = [_resolve(n, "filter", "Filter") for n in profile.filter]
        self._skips = [(f, getattr(f, "skip", None)) for f in self._filters]  # (plugin, its skip or None)
        self._scores = [(_resolve(n, "score", "Score"), weight) for n, weight in profile.score]
        self._reserves = [_resolve(n, "unreserve", "Reserve") for n in profile.reserve]
        self._permits = [_resolve(n, "permit", "Permit") for n in profile.permit]
        self._binder = _resolve(profile.bind, "bind", "Bind")
        #: True when the bucket index serves Filter and Score (see the module docstring).
        self.indexed: bool = bool(indexed) and all(hasattr(f, "bucket_filter") for f in self._filters) and all(
            hasattr(s, "bucket_score") for s, _ in self._scores
        )
        self.state = SchedulingState(nodes, permit_timeout_s, self._filters)  # read it, do not change it
        self.queue = SchedulingQueue(self._sort.key)
        self.seed = seed
        self._rng = random.Random(seed)
        self._reasons: dict[str, str] = {}  # pending pod -> last reason
        self._bound: dict[str, str] = {}  # bound pod -> node name
        self._waiting: dict[str, tuple[float, float, str]] = {}  # pod at Permit -> (deadline, timeout, plugin)
        self._deadlines: list[tuple[float, str]] = []  # (deadline, pod), lazily cleaned
        self._next_start = 0  # kube's nextStartNodeIndex (per-node path)
        self._last_now_s: float | None = None
        self._turns = {p.name: p.waits_for_turn for p in self._pre_filters if hasattr(p, "waits_for_turn")}
        self._handed_out: weakref.ref[PendingReasons] | None = None  # the last call's reasons, maybe not built yet

    # ---- what is where ---------------------------------------------------------------------------------------

    @property
    def bound(self) -> Mapping[str, str]:
        """Pod -> node, for every bound pod (a snapshot)."""
        return frozen(self._bound)

    @property
    def pending(self) -> Mapping[str, str]:
        """Pod -> its last reason ("Plugin: message", or "queued" before its first attempt) (a snapshot); a parked
        pod's reason is what its PreFilters say now."""
        return frozen(self._reasons_now())

    @property
    def pending_count(self) -> int:
        """How many pods are pending: `len(pending)` without working out parked pods' reasons."""
        return len(self._reasons)

    def _reasons_now(self) -> dict[str, str]:
        reasons = dict(self._reasons)
        is_parked = self.queue.is_parked
        for name in reasons:
            if is_parked(name):
                reasons[name] = self._pre_filter_reason(self.state.pods[name]) or reasons[name]
        return reasons

    def _pre_filter_reason(self, pod: Pod) -> str | None:
        for plugin in self._pre_filters:
            why = plugin.pre_filter(self.state, pod)
            if why is not None:
                return f"{plugin.name}: {why}"
        return None

    def _changing(self) -> None:
        """Build the reasons handed out by the last call before anything they are worked out from changes."""
        handed_out = self._handed_out() if self._handed_out is not None else None
        if handed_out is not None:
            handed_out.freeze()
        self._handed_out = None

    @property
    def waiting(self) -> Mapping[str, str]:
        """Pod waiting at Permit -> the node it holds (a snapshot)."""
        node_of, names = self.state.node_of, self.state.nodes
        return frozen({name: names[node_of[name]].name for name in self._waiting})

    # ---- changes ---------------------------------------------------------------------------------------------

    def set_node(self, node: Node) -> None:
        """Add a node, or change a known node (slots, resources, labels, taints, cordon) and bring it (back) into
        placement; its pods stay."""
        self._changing()
        self.state.set_node(node)

    def remove_node(self, name: str) -> None:
        """Take a node out of placement (gone); its bound pods keep what they take until deleted. (A cordoned node
        stays in placement: `Node.unschedulable` keeps pods off it, and counts it in the pending reasons.)"""
        self._changing()
        self.state.remove_node(name)

    def restore(self, pods: Sequence[Pod], group: PodGroup | None, nodes: Mapping[str, str]) -> None:
        """Take in pods that are already bound (by an earlier life of the caller, or by someone else).

        `nodes` maps each pod to its node's name (a known node, in placement or not). The pods take their
        nodes' slots and resources as bound pods, even beyond a node's room: they are there whatever this scheduler
        thinks. A pod of another scheduler is restored with `slots=0`: it holds its requests, not a Coach slot.
        """
        self._changing()
        pods = list(pods)
        where = {}
        for pod in pods:
            node = self.state.node_index.get(nodes.get(pod.name, ""))
            if node is None:
                raise ValueError(f"pod {pod.name}: unknown node {nodes.get(pod.name)!r}")
            where[pod.name] = node
        self._check_new(pods, group)
        state = self.state
        for pod in pods:
            state.add(pod, group)
            state.reserve(pod.name, where[pod.name], force=True)
            state.bind(pod.name)
            self._bound[pod.name] = state.nodes[where[pod.name]].name

    def submit(self, pods: Sequence[Pod], group: PodGroup | None = None) -> None:
        """Make `pods` pending. `group`, if given, is the group of their job (all pods must be of that job)."""
        self._changing()
        pods = list(pods)
        self._check_new(pods, group)
        state = self.state
        if group is not None and not pods and group.job in state.jobs:
            state.set_group(group.job, group)
        for pod in pods:
            state.add(pod, group)
            self.queue.add(pod)
            self._reasons[pod.name] = "queued"

    def _check_new(self, pods: list[Pod], group: PodGroup | None) -> None:
        """ValueError unless `pods` are new, distinct, of `group`'s job and agree with their jobs' job_seq."""
        state = self.state
        names = [pod.name for pod in pods]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate pod names in one submit: {sorted({n for n in names if names.count(n) > 1})}")
        known = sorted(name for name in names if name in state.pods)
        if known:
            raise ValueError(f"pods already submitted: {known}")
        if group is not None:
            others = sorted({pod.job for pod in pods} - {group.job})
            if others:
                raise ValueError(f"group is for job {group.job!r} but pods belong to {others}")
        job_seq: dict[str, int] = {}
        for pod in pods:
            if pod.job not in job_seq and pod.job in state.jobs:
                job_seq[pod.job] = state.jobs[pod.job].job_seq
            if job_seq.setdefault(pod.job, pod.job_seq) != pod.job_seq:
                raise ValueError(f"pod {pod.name}: job_seq {pod.job_seq} differs from job {pod.job}'s {job_seq[pod.job]}")

    def delete(self, names: Iterable[str]) -> None:
        """Forget these pods, pending, waiting or bound, and free their slots. Unknown names are ignored."""
        self._changing()
        state = self.state
        for name in names:
            status = state.status.get(name)
            if status is None:
                continue
            self.queue.remove(name)
            self.queue.forget_attempts(name)
            self._reasons.pop(name, None)
            self._waiting.pop(name, None)
            self._bound.pop(name, None)
            state.remove(name)

    def schedule(self, now_s: float, max_attempts: int | None = None) -> CycleResult:
        """Run scheduling cycles until no pod can make progress at `now_s`.

        Order: (1) pods whose backoff has expired by `now_s` become active; (2) one cycle per active pod, in
        QueueSort order (a pod that fails backs off, so it is tried at most once per call); (3) pods whose
        Permit deadline is `<= now_s` are rejected with their group, their slots given back, and requeued.
        Step 3 comes after the cycles because those pods' backoffs expired before `now_s` too: the group gets the
        cycle it would have had had the caller called at that moment. `max_attempts` caps the cycles.
        """
        if self._last_now_s is not None and now_s < self._last_now_s:
            raise ValueError(f"time went backwards: now_s={now_s} after {self._last_now_s}")
        self._changing()
        self._last_now_s = now_s
        bound: dict[str, str] = {}
        rejected: dict[str, str] = {}
        self.state.settle()
        self._wake(now_s)
        self.queue.flush(now_s)
        attempts = 0
        while max_attempts is None or attempts < max_attempts:
            name = self.queue.pop()
            if name is None:
                break
            attempts += 1
            self._cycle(name, now_s, bound, rejected)
            self._wake(now_s)
        self._expire(now_s, rejected)
        self._wake(now_s)
        pending = PendingReasons(self._reasons_now)
        self._handed_out = weakref.ref(pending)
        return CycleResult(
            bound=frozen(bound),
            pending=pending,
            waiting=self.waiting,
            rejected=frozen(rejected),
            attempts=attempts,
        )

    # ---- deadlock --------------------------------------------------------------------------------------------

    def deadlock(self, now_s: float) -> Deadlock | None:
        """A Deadlock when no scheduling can ever make progress without outside help, else None.

        Deadlocked means all of:
        1. some pods are pending;
        2. no pod waits at Permit (a waiting pod is allowed or times out, and either is progress);
        3. no pending pod can be placed now, nor once every pod of another scheduler (restored with no slot) has
           gone: each fails a PreFilter, or every node fails a Filter (backoff is ignored: it only delays). A pod
           that waits for room other schedulers' pods hold is waiting for them to end, not deadlocked, and its
           reason says what it lacks;
        4. some pods are bound, and no job that holds bound pods has its quorum bound. A job whose quorum is
           bound can run (the controller runs it with the functions actually placed) and will free its slots.
        Only jobs that need some pods to run count: pods restored with an empty quorum (another scheduler's
        pods) neither make a deadlock nor break one.
        `now_s` is the time of the question; the answer does not depend on it (backoff is ignored).
        """
        state = self.state
        if self._waiting or not self._reasons or not self._bound:
            return None
        jobs = [ledger for ledger in state.jobs.values() if ledger.quorum_pods > 0]
        if not any(ledger.n_bound for ledger in jobs):
            return None
        for ledger in jobs:
            if ledger.n_bound and ledger.runnable:
                return None
        shapes = state.shapes_without_others()
        for name in self._reasons:
            if self._placeable(state.pods[name], shapes):
                return None
        ledgers = sorted((led for led in jobs if led.n_bound or led.n_pending), key=lambda led: (led.job_seq, led.job))
        parts = []
        for led in ledgers:
            quorum = led.group.quorum_pods
            toward = quorum - led.group.deficit(led.bound)
            extra = f" (+{led.n_bound - toward} more)" if led.n_bound > toward else ""
            parts.append(f"{led.job} {toward}/{quorum} needed pods bound{extra}, short of {led.group.shortfall(led.bound)}")
        n = len(self._reasons)
        reason = f"{n} pending pod{'s' if n != 1 else ''} fit nowhere and no job can run: " + "; ".join(parts)
        return Deadlock(jobs=tuple(led.job for led in ledgers), reason=reason)

    def _placeable(self, pod: Pod, shapes) -> bool:
        """`pod` passes every PreFilter, and every Filter on some node of `shapes` (shape -> nodes)."""
        state = self.state
        for plugin in self._pre_filters:
            if plugin.pre_filter(state, pod) is not None:
                return False
        filters = filters_for(state, self._filters, pod)
        if self.indexed:
            return any(all(f.bucket_filter(state, pod, shape) is None for f in filters) for shape in shapes)
        return any(all(f.filter(state, pod, i) is None for f in filters)
                   for i in range(len(state.nodes)) if i not in state.off)

    # ---- one cycle -------------------------------------------------------------------------------------------

    def _cycle(self, name: str, now_s: float, bound: dict[str, str], rejected: dict[str, str]) -> None:
        state = self.state
        pod = state.pods[name]
        for plugin in self._pre_filters:
            why = plugin.pre_filter(state, pod)
            if why is not None:
                self._fail(pod, plugin.name, why, now_s)
                return
        node, why = self._select_indexed(pod) if self.indexed else self._select_per_node(pod)
        if node is None:
            self._reasons[pod.name] = why  # kube's FitError, without a plugin's name: the causes are its words
            self.queue.requeue(pod, now_s)
            return
        state.reserve(name, node)
        del self._reasons[name]
        for plugin in self._reserves:
            why = plugin.reserve(state, pod, node)
            if why is not None:
                self._reject((name,), f"{plugin.name}: {why}", now_s, rejected)
                return
        verdict, plugin_name = self._permit(pod, node)
        if isinstance(verdict, Reject):
            self._reject((name,), f"{plugin_name}: {verdict.reason}", now_s, rejected)
        elif isinstance(verdict, Wait):
            deadline = now_s + verdict.timeout_s
            self._waiting[name] = (deadline, verdict.timeout_s, plugin_name)
            heapq.heappush(self._deadlines, (deadline, name))
        else:
            self._bind(name, now_s, bound, rejected)
            for other in verdict.also:
                if other in self._waiting:
                    del self._waiting[other]
                    self._bind(other, now_s, bound, rejected)

    def _permit(self, pod: Pod, node: int):
        wait: tuple[Wait, str] | None = None
        also: list[str] = []
        for plugin in self._permits:
            verdict = plugin.permit(self.state, pod, node)
            if isinstance(verdict, Reject):
                return verdict, plugin.name
            if isinstance(verdict, Wait):
                if wait is None or verdict.timeout_s < wait[0].timeout_s:
                    wait = (verdict, plugin.name)
            else:
                also.extend(verdict.also)
        if wait is not None:
            return wait
        return Allow(tuple(also)), ""

    def _bind(self, name: str, now_s: float, bound: dict[str, str], rejected: dict[str, str]) -> None:
        state = self.state
        node = state.node_of[name]
        why = self._binder.bind(state, state.pods[name], node)
        if why is not None:
            self._reject((name,), f"{self._binder.name}: {why}", now_s, rejected)
            return
        state.bind(name)
        self.queue.forget_attempts(name)
        node_name = state.nodes[node].name
        self._bound[name] = node_name
        bound[name] = node_name

    def _fail(self, pod: Pod, plugin: str, why: str, now_s: float) -> None:
        self._reasons[pod.name] = f"{plugin}: {why}"
        waits_for_turn = self._turns.get(plugin)
        if waits_for_turn is not None and waits_for_turn(self.state, pod):
            self.queue.park(pod, now_s, pod.job)
        else:
            self.queue.requeue(pod, now_s)

    def _wake(self, now_s: float) -> None:
        """Parked pods whose job changed (or all, when the nodes did), and those of the job first in line, go back
        to the queue."""
        state, queue = self.state, self.queue
        if state.touched_all:
            queue.wake_all(now_s)
        else:
            for job in state.touched:
                if queue.parked(job):
                    queue.wake(job, now_s)
        state.touched.clear()
        state.touched_all = False
        head = state.first_ready_job()
        if head is not None and queue.parked(head):
            queue.wake(head, now_s)

    def _reject(self, names: Sequence[str], reason: str, now_s: float, rejected: dict[str, str]) -> None:
        """Give back the reservations of `names` and of the pods the Reserve plugins reject with them."""
        state = self.state
        todo = list(names)
        seen = set(todo)
        i = 0
        while i < len(todo):
            pod = state.pods[todo[i]]
            i += 1
            for plugin in self._reserves:
                for other in plugin.unreserve(state, pod):
                    if other not in seen and state.status.get(other) == RESERVED:
                        seen.add(other)
                        todo.append(other)
        for name in todo:
            self._waiting.pop(name, None)
            state.unreserve(name)
            self._reasons[name] = reason
            rejected[name] = reason
            self.queue.requeue(state.pods[name], now_s)

    def _expire(self, now_s: float, rejected: dict[str, str]) -> None:
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now_s:
            deadline, name = heapq.heappop(deadlines)
            entry = self._waiting.get(name)
            if entry is None or entry[0] != deadline:
                continue
            _, timeout_s, plugin = entry
            ledger = self.state.jobs[self.state.pods[name].job]
            held = ledger.held()
            reason = (
                f"{plugin}: timed out after {timeout_s:g} s at Permit: job {ledger.job} held "
                f"{sum(held.values())} of {ledger.group.quorum_pods} pods it needs (short of {ledger.group.shortfall(held)})"
            )
            self._reject((name,), reason, now_s, rejected)

    # ---- node selection --------------------------------------------------------------------------------------

    def _no_fit(self, failures: dict[str, int]) -> str:
        """Why no node fits: kube's '0/5 nodes are available: 2 Insufficient cpu, 3 node(s) were unschedulable.'"""
        return fit_error(self.state.active_nodes, failures)

    def _select_indexed(self, pod: Pod):
        """Exact Filter + Score over all nodes through the buckets of nodes of one shape. See the module docstring."""
        feasible, sets, failures = self._feasible_buckets(pod)
        if not feasible:
            return None, self._no_fit(failures)
        overrides, special = self._overrides(pod, feasible)
        classes, excluded = _score_classes(sets, special)
        totals = self._class_totals(pod, feasible, classes, overrides)
        best = max(totals)
        best_classes = [classes[c] for c, total in enumerate(totals) if total == best]
        how_many = sum(count for _, _, count in best_classes)
        pick = self._rng.randrange(how_many) if how_many > 1 else 0
        return _node_at(pick, best_classes, sets, special, excluded), None

    def _feasible_buckets(self, pod: Pod) -> tuple[list, list, dict[str, int]]:
        """The shapes whose buckets pass every filter (in bucket order), their buckets, and the nodes of the others
        counted per reason (for the FitError)."""
        state = self.state
        feasible: list = []
        sets: list = []
        failures: dict[str, int] = {}
        filters = [f for f, skip in self._skips if skip is None or not skip(state, pod)]
        for shape in state.bucket_keys:
            bucket = state.buckets[shape]
            why = _bucket_failure(filters, state, pod, shape)
            if why is not None:
                add_failure(failures, why, len(bucket.items))
            else:
                feasible.append(shape)
                sets.append(bucket)
        return feasible, sets, failures

    def _overrides(self, pod: Pod, feasible: list) -> tuple[list[dict], dict[int, int]]:
        """Every score plugin's nodes scored differently from their bucket (in `_scores` order), and the *special*
        ones among them, active and in a feasible bucket: node -> the position of its bucket in `feasible`."""
        state = self.state
        overrides = []
        special: dict[int, int] = {}
        position: dict | None = None  # shape -> its position in `feasible`, made only when a plugin names a node
        for plugin, _ in self._scores:
            found = plugin.node_overrides(state, pod) if hasattr(plugin, "node_overrides") else {}
            overrides.append(found)
            for node in found:
                if node not in special and node not in state.off:
                    if position is None:
                        position = {shape: k for k, shape in enumerate(feasible)}
                    k = position.get(state.shape[node])
                    if k is not None:
                        special[node] = k
        return overrides, special

    def _class_totals(self, pod: Pod, feasible: list, classes: list[tuple[int, int, int]],
                      overrides: list[dict]) -> list:
        """Score + NormalizeScore of every plugin, weighted and summed per score class."""
        totals = [0] * len(classes)
        for (plugin, weight), found in zip(self._scores, overrides):
            for c, value in plugin.normalize(self._class_scores(plugin, pod, feasible, classes, found)).items():
                totals[c] += weight * value
        return totals

    def _class_scores(self, plugin, pod: Pod, feasible: list, classes: list[tuple[int, int, int]],
                      found: dict) -> dict[int, int]:
        """One plugin's raw score per class: a special node's override, else its bucket's (asked once per bucket)."""
        per_bucket: dict[int, int] = {}
        raw = {}
        for c, (k, node, _) in enumerate(classes):
            if node >= 0 and node in found:
                raw[c] = found[node]
                continue
            value = per_bucket.get(k)
            if value is None:
                value = per_bucket[k] = plugin.bucket_score(self.state, pod, feasible[k])
            raw[c] = value
        return raw

    def _select_per_node(self, pod: Pod):
        """kube's findNodesThatFitPod + prioritizeNodes + selectHost, node by node."""
        state = self.state
        total = len(state.nodes)
        if state.active_nodes == 0:
            return None, self._no_fit({})
        want = feasible_nodes_to_find(state.active_nodes)
        feasible: list[int] = []
        failures: dict[str, int] = {}
        filters = filters_for(state, self._filters, pod)
        start = self._next_start
        visited = 0
        for offset in range(total):
            node = (start + offset) % total
            visited += 1
            if node in state.off:
                continue
            for plugin in filters:
                why = plugin.filter(state, pod, node)
                if why is not None:
                    add_failure(failures, why, 1)
                    break
            else:
                feasible.append(node)
                if len(feasible) >= want:
                    break
        self._next_start = (start + visited) % total
        if not feasible:
            return None, self._no_fit(failures)
        if len(feasible) == 1:
            return feasible[0], None
        totals = self._totals(state, pod, feasible)
        best = max(totals.values())
        best_nodes = [node for node in feasible if totals[node] == best]
        return best_nodes[self._rng.randrange(len(best_nodes))] if len(best_nodes) > 1 else best_nodes[0], None

    # ---- for tests -------------------------------------------------------------------------------------------

    def best_nodes(self, pod: Pod) -> set[str]:
        """Every node with the best score for `pod` over all feasible nodes, computed node by node (no RNG use)."""
        state = self.state
        feasible = [i for i in range(len(state.nodes))
                    if i not in state.off and all(f.filter(state, pod, i) is None for f in self._filters)]
        if not feasible:
            return set()
        totals = self._totals(state, pod, feasible)
        best = max(totals.values())
        return {state.nodes[node].name for node in feasible if totals[node] == best}

    def _totals(self, state, pod: Pod, feasible) -> dict:
        """Score + NormalizeScore of every plugin, weighted and summed per feasible node."""
        totals = dict.fromkeys(feasible, 0)
        for plugin, weight in self._scores:
            raw = {node: plugin.score(state, pod, node) for node in feasible}
            for node, value in plugin.normalize(raw).items():
                totals[node] += weight * value
        return totals


def _bucket_failure(filters: list, state: SchedulingState, pod: Pod, shape) -> str | None:
    """Why the first filter that fails the bucket of `shape` does (the filters after it are not asked); None when
    every filter passes."""
    for plugin in filters:
        why = plugin.bucket_filter(state, pod, shape)
        if why is not None:
            return why
    return None


def _score_classes(sets: list, special: dict[int, int]) -> tuple[list[tuple[int, int, int]], list[int]]:
    """The score classes: each feasible bucket without its special nodes, then each special node alone, as (bucket
    position, special node or -1, nodes in the class); and how many special nodes each bucket has."""
    excluded = [0] * len(sets)
    for k in special.values():
        excluded[k] += 1
    classes: list[tuple[int, int, int]] = []
    for k, bucket in enumerate(sets):
        count = len(bucket.items) - excluded[k]
        if count:
            classes.append((k, -1, count))
    for node, k in special.items():
        classes.append((k, node, 1))
    return classes, excluded


def _node_at(pick: int, classes: list[tuple[int, int, int]], sets: list, special: dict[int, int],
             excluded: list[int]) -> int:
    """The node at 0-based position `pick` of `classes` taken in order (a bucket's class leaves out its special
    nodes)."""
    for k, node, count in classes:
        if pick >= count:
            pick -= count
            continue
        if node >= 0:
            return node
        bucket = sets[k]
        if excluded[k]:
            for where in sorted(bucket.pos[n] for n, at in special.items() if at == k):
                if where > pick:
                    break
                pick += 1  # a special node before the pick: the pick is one further on
        return bucket.items[pick]
    raise AssertionError("unreachable: the pick lies in some class")


__all__ = ["Scheduler", "feasible_nodes_to_find"]
