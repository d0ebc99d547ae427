"""`KubeScheduler`: scheduler_fork's plugins scheduling the pods of a kube-apiserver.

The parts, each in its own module and thread, meet in one queue that a single loop thread drains:

    Informers (nodes, pods, PodGroups: list+watch) --Replace/Change--\\
    Binder (bindings, a thread pool)              --BindOutcome-------> queue -> loop: Mirror (scheduler_fork)
    LeaseElector (the Lease)                      --leader changed---/              |
                                                                        binds, Events, conditions, /metrics

The pods informer watches every pod of the cluster that has not terminated, as kube-scheduler's does: the pods
whose schedulerName is Coach's (in the configured namespace) are Coach's to place, and every other bound pod
holds its requests on its node (`Mirror.apply_other`), whichever scheduler bound it.

The loop applies everything queued, then, if this replica is the leader and every informer has listed once,
runs one scheduling pass at the wall clock's `now_s` (scheduler_fork itself never reads a clock), hands the
bindings to the binder and the pending reasons to the Event poster. A follower keeps its mirror up to date
from the watch but never schedules, so it can take over at once. Side effects: threads, HTTP, one port.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Callable

from kubernetes import client

from coach.domain.kube import PODGROUP_GROUP, PODGROUP_PLURAL, PODGROUP_VERSION
from coach.kube_scheduler.bind_process import ProcessBinder
from coach.kube_scheduler.binder import BOUND, CONFLICT, FAILED, GONE, NOT_LEADER, BindOutcome, Binder
from coach.kube_scheduler.events import EventPoster, PodRef, ReasonTracker
from coach.kube_scheduler.group_status import GroupStatusWriter, group_status
from coach.kube_scheduler.leader import LeaseElector
from coach.kube_scheduler.metrics import Metrics, MetricsServer
from coach.kube_scheduler.mirror import QUORUM_PODS, Mirror
from coach.kube_scheduler.objects import coachs, group_info, node_info, pod_info
from coach.kube_scheduler.watch import Change, Informer, Replace

log = logging.getLogger(__name__)

#: How often the loop runs a pass while pods are pending (their backoffs expire in passed-in time).
PENDING_TICK_S = 0.1
#: How often the leader recomputes its PodGroups' status (written only where it changed).
GROUP_STATUS_EVERY_S = 1.0
#: How often it runs one otherwise (to notice a lost leadership, a Permit deadline).
IDLE_TICK_S = 1.0
#: Where bindings are sent from: threads of the scheduler's process, or threads of a child process (see
#: bind_process: the HTTP of 1,000 bindings a second is most of a core).
BINDERS: dict[str, type[Binder] | type[ProcessBinder]] = {"threads": Binder, "process": ProcessBinder}
#: Bindings and conflicts remembered for inspection (tests, the benchmark); older ones are forgotten.
RECORDED = 100_000
#: The pods the scheduler watches: every pod that has not terminated (kube-scheduler's own selector); a pod that
#: terminates leaves the watch as DELETED, and what it held on its node is free.
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True)
class Config:
    """What `coach scheduler` is asked to do."""

    profile: str = "gang"  # scheduler_fork profile
    namespace: str | None = None  # the namespace whose pods are placed; None: every namespace
    lease_namespace: str = "default"  # where the Lease lives
    identity: str = ""  # this replica's name in the Lease; "" = hostname + a random suffix
    lease_duration_s: float = 15.0  # leaseDurationSeconds
    metrics_host: str = "0.0.0.0"  # /metrics and /healthz address
    metrics_port: int = 10259  # 0: any free port
    bind_threads: int = 16  # bindings in flight at once (more in flight batched better in the benchmark)
    report_after_s: float = 0.5  # a pending reason is told once it has held this long
    bind_retry_s: float = 1.0  # pause before a pod whose binding failed is tried again
    seed: int = 0  # scheduler_fork's tie-break seed
    permit_timeout_s: float = 30.0  # gang-strict's wait at Permit
    scheduled_events: bool = True  # post a `Scheduled` Event on every binding
    binder: str = "threads"  # a key of BINDERS


def default_identity() -> str:
    """kube-scheduler's default: the host name and a unique suffix."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


class KubeScheduler:
    """One replica of `coach scheduler`; see the module docstring. `start()`, then `stop()`."""

    def __init__(self, api: client.ApiClient, config: Config,
                 on_bound: Callable[[BindOutcome], None] | None = None):
        self.config = config
        self.identity = config.identity or default_identity()
        self.metrics = Metrics()
        self._server = MetricsServer(self.metrics, self.health, config.metrics_host, config.metrics_port)  # OSError
        self.mirror = Mirror(config.profile, seed=config.seed, permit_timeout_s=config.permit_timeout_s)
        self.tracker = ReasonTracker(config.report_after_s)
        self._on_bound = on_bound  # told of every successful binding, from the loop thread
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._stopped = False
        self._last_now_s = 0.0
        self._was_leader = False
        self.bound: dict[str, str] = {}  # pod key -> node, of this replica's bindings (201; the latest RECORDED)
        self.conflicts: list[str] = []  # pod keys whose binding was answered 409 (the latest RECORDED)
        self.bound_total = 0  # bindings this replica made
        self.passes = 0  # scheduling passes run as the leader
        self._elector = LeaseElector(api, config.lease_namespace, self.identity, config.lease_duration_s,
                                     on_change=self._leadership_changed)
        self._binder = BINDERS[config.binder](api, self._elector.leads_until_s, self._queue.put,
                                              threads=config.bind_threads)
        self._group_status = GroupStatusWriter(api)
        self._group_status_at_s = 0.0
        self._poster = EventPoster(api, self.identity, on_drop=self.metrics.events_dropped.inc,
                                   busy=self._binder.busy)
        self._informers = self._make_informers(api)
        self._thread = threading.Thread(target=self._run, name="coach-scheduler-loop", daemon=True)

    def _make_informers(self, api: client.ApiClient) -> list[Informer]:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        ns = self.config.namespace
        pods = partial(core.list_pod_for_all_namespaces, field_selector=LIVE_PODS)  # every node's pods count
        if ns is None:
            groups = partial(custom.list_cluster_custom_object, PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL)
        else:
            groups = partial(custom.list_namespaced_custom_object, PODGROUP_GROUP, PODGROUP_VERSION, ns,
                             PODGROUP_PLURAL)
        relisted = lambda kind: self.metrics.relists.labels(resource=kind).inc()  # noqa: E731
        return [Informer("nodes", core.list_node, self._queue.put, relisted),
                Informer("podgroups", groups, self._queue.put, relisted),
                Informer("pods", pods, self._queue.put, relisted)]

    def _leadership_changed(self, leader: bool) -> None:
        self._binder.leadership_changed()
        self._queue.put(("leader", leader))  # wakes the loop

    # ---- life --------------------------------------------------------------------------------------------------

    @property
    def metrics_port(self) -> int:
        return self._server.port

    def start(self) -> KubeScheduler:
        self._server.start()
        self._binder.start()
        self._poster.start()
        self._group_status.start()
        for informer in self._informers:
            informer.start()
        self._thread.start()
        self._elector.start()
        return self

    def wait_synced(self, timeout_s: float) -> bool:
        """True once every informer has listed (within `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        return all(informer.synced.wait(max(0.0, deadline - time.monotonic())) for informer in self._informers)

    def informer(self, kind: str) -> Informer:
        """The list+watch of "nodes", "podgroups" or "pods"."""
        return next(informer for informer in self._informers if informer.kind == kind)

    def is_leader(self) -> bool:
        return self._elector.is_leader()

    @property
    def binder_pid(self) -> int | None:
        """The child process that sends the bindings (None: this process's threads do)."""
        return self._binder.pid

    @property
    def events_written(self) -> int:
        """Events (and pending-pod conditions) written so far."""
        return self._poster.posted

    def health(self) -> str | None:
        """None when every watch is alive, else what is not (for /healthz)."""
        down = [informer.kind for informer in self._informers if not informer.healthy()]
        if not self._thread.is_alive() and not self._stopping.is_set():
            down.append("scheduling loop")
        if not self._binder.healthy():
            down.append("binder")
        return None if not down else "not watching: " + ", ".join(down)

    def stop(self) -> None:
        """Stop scheduling, finish the bindings in flight, give the Lease up, then stop watching and serving.
        Safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join()
        self._binder.stop()
        self._elector.stop(release=True)
        self.metrics.is_leader.set(0)
        self._drain_outcomes()
        self._poster.stop()
        self._group_status.stop()
        for informer in self._informers:
            informer.stop()
        self._server.stop()

    def _drain_outcomes(self) -> None:
        """Apply the binding outcomes that arrived after the loop stopped (for the counts)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, BindOutcome):
                self._outcome(item, time.time())

    # ---- the loop ----------------------------------------------------------------------------------------------

    def _run(self) -> None:
        get = self._queue.get
        while not self._stopping.is_set():
            tick = PENDING_TICK_S if self.mirror.has_pending() else IDLE_TICK_S
            try:
                items = [get(timeout=tick)]
            except queue.Empty:
                items = []
            while len(items) < 20000:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            now_s = self._now_s()
            for item in items:  # a bug must not silently stop scheduling, nor lose the other items: log, go on
                try:
                    self._apply(item, now_s)
                except Exception:
                    log.exception("could not apply %s", type(item).__name__)
            try:
                self._pass(self._now_s())
            except Exception:
                log.exception("scheduling pass failed")

    def _now_s(self) -> float:
        """The wall clock, never going backwards (scheduler_fork refuses time that does)."""
        self._last_now_s = max(self._last_now_s, time.time())
        return self._last_now_s

    def _apply(self, item, now_s: float) -> None:
        """One item of the informers' or the binder's queue, into the mirror."""
        if isinstance(item, Change):
            self._apply_change(item)
        elif isinstance(item, Replace):
            self._apply_replace(item)
        elif isinstance(item, BindOutcome):
            self._outcome(item, now_s)

    def _apply_change(self, item: Change) -> None:
        """A watch event: one pod (Coach's or another scheduler's), node or pod group added, modified or deleted."""
        mirror = self.mirror
        deleted = item.type == "DELETED"
        if item.kind == "pods":
            pod = pod_info(item.obj)
            ours = coachs(pod, self.config.namespace)
            if deleted:
                (mirror.delete_pod if ours else mirror.delete_other)(pod.key)
            else:
                (mirror.apply_pod if ours else mirror.apply_other)(pod)
        elif item.kind == "nodes":
            node = node_info(item.obj)
            if deleted:
                mirror.delete_node(node.name)
            else:
                self._warn_node(node)
                mirror.apply_node(node)
        elif deleted:
            mirror.delete_group(group_info(item.obj).key)
        else:
            mirror.apply_group(group_info(item.obj))

    def _apply_replace(self, item: Replace) -> None:
        """A fresh list of one kind (after a watch's 410 Gone, or at start): the mirror's view of it replaced."""
        mirror = self.mirror
        if item.kind == "pods":
            pods = [pod_info(obj) for obj in item.items]
            ns = self.config.namespace
            mirror.replace_pods(pod for pod in pods if coachs(pod, ns))
            mirror.replace_others(pod for pod in pods if not coachs(pod, ns))
        elif item.kind == "nodes":
            nodes = [node_info(obj) for obj in item.items]
            for node in nodes:
                self._warn_node(node)
            mirror.replace_nodes(nodes)
        else:
            mirror.replace_groups(group_info(obj) for obj in item.items)

    def _warn_node(self, node) -> None:
        old = self.mirror.nodes.get(node.name)
        if node.problem and (old is None or old.problem != node.problem):
            log.warning("node %s: %s", node.name, node.problem)

    def _outcome(self, outcome: BindOutcome, now_s: float) -> None:
        pod, mirror, metrics = outcome.pod, self.mirror, self.metrics
        if outcome.result == BOUND:
            metrics.pods_bound.inc()
            metrics.bind_latency.observe(outcome.answered_s - outcome.decided_s)
            self.bound_total += 1
            self.bound[pod.key] = outcome.node
            if len(self.bound) > RECORDED:  # a long-lived scheduler keeps the latest only
                del self.bound[next(iter(self.bound))]
            if self.config.scheduled_events:
                self._poster.scheduled(PodRef(pod.namespace, pod.name, pod.uid), outcome.node)
            if self._on_bound is not None:
                self._on_bound(outcome)
        elif outcome.result == CONFLICT:
            metrics.binding_conflicts.inc()
            self.conflicts.append(pod.key)
            del self.conflicts[:-RECORDED]
            mirror.bind_conflict(pod.key, None if outcome.current is None else pod_info(outcome.current))
        elif outcome.result == GONE:
            mirror.bind_conflict(pod.key, None)
        elif outcome.result == FAILED:
            metrics.binding_errors.inc()
            log.warning("binding %s to %s failed: %s", pod.key, outcome.node, outcome.detail)
            mirror.bind_failed(pod.key, now_s + self.config.bind_retry_s, f"binding failed: {outcome.detail}")
        elif outcome.result == NOT_LEADER:
            mirror.bind_failed(pod.key, None, "")

    def _write_group_status(self) -> None:
        mirror = self.mirror
        self._group_status.update({
            key: group_status(group, (mirror.pods[k] for k in mirror.members.get(key, ()) if k in mirror.pods),
                              QUORUM_PODS)
            for key, group in mirror.groups.items()})

    def _pass(self, now_s: float) -> None:
        if not all(informer.synced.is_set() for informer in self._informers):
            return
        leader = self._elector.is_leader()
        if leader != self._was_leader:
            self._was_leader = leader
            self.metrics.is_leader.set(1 if leader else 0)
        mirror = self.mirror
        if leader:
            self.passes += 1
            cycle = mirror.schedule(now_s)
            for pod, node in cycle.binds:
                self._binder.bind(pod, node)
            for key, reason in self.tracker.update(cycle.pending, now_s):
                pod = mirror.pods[key]
                log.info("pod %s pending: %s", key, reason)  # told once per reason, as the Event
                self._poster.pending(PodRef(pod.namespace, pod.name, pod.uid), reason)
            for key, message in mirror.warnings:
                warned = mirror.pods.get(key)
                if warned is not None:
                    self._poster.warning(PodRef(warned.namespace, warned.name, warned.uid), "PodGroupMismatch",
                                         message)
            if now_s >= self._group_status_at_s + GROUP_STATUS_EVERY_S:
                self._group_status_at_s = now_s
                self._write_group_status()
        mirror.warnings.clear()
        counts = mirror.counts()
        self.metrics.pods_pending.set(counts.pending)
        self.metrics.nodes.set(counts.nodes)
