"""What the kube scheduler's tests share: a client of the suite's real kube-apiserver that makes nodes, PodGroups and
pods the way Coach's other parts do (labels, schedulerName), reads back what became of them, and waits.

Each test gets its own namespace; its nodes get a per-test prefix that `Kube` adds and strips, so a test reads
`kube.node("n1")` and `nodes_of(...) == {"a-worker-0": "n1"}` while the cluster holds `3f9a1c-n1`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import pytest
from kubernetes import client

from coach.domain.identity import FunctionId, functions_for
from coach.domain.kube import (PODGROUP_GROUP, PODGROUP_KIND, PODGROUP_PLURAL, PODGROUP_VERSION, POD_GROUP_LABEL,
                               SCHEDULER_NAME, SLOTS_LABEL)
from coach.kube_scheduler.loop import Config, KubeScheduler
from coach.kube_scheduler.rest import finish
from coach.placement.kube_connect import connect
from tests import support
from tests.controlplane.cluster import ControlPlane


LEASE_S = 2.0  # short, so that a follower takes over within a second or two


def wait_for(what: str, condition: Callable[[], object], timeout_s: float = 10.0) -> object:
    """tests.support.wait_for, with what is awaited named first (as these tests read best)."""
    return support.wait_for(condition, timeout_s, what)


class Kube:
    """The test's own view of the control plane, through the official client: one namespace, prefixed nodes."""

    def __init__(self, plane: ControlPlane, namespace: str, prefix: str):
        self.plane = plane
        self.ns = namespace
        self.prefix = prefix
        self.api = plane.client()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.leases = client.CoordinationV1Api(self.api)
        self.made_nodes: list[str] = []

    # ---- nodes -----------------------------------------------------------------------------------------------

    def node_name(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def short(self, node: str | None) -> str | None:
        """A node's name as the test wrote it (the prefix taken off)."""
        return node[len(self.prefix) + 1:] if node and node.startswith(f"{self.prefix}-") else node

    def node(self, name: str, slots: int | None = None, pods: str = "110", unschedulable: bool = False,
             cpu: str = "4", memory: str = "8Gi", labels: Mapping[str, str] | None = None,
             taints: Iterable[Mapping[str, Any]] = (), ready: bool = True) -> str:
        """A Ready node (or the node changed: labels, cordon), `slots` as Coach's optional cap."""
        full = self.node_name(name)
        all_labels = {**({} if slots is None else {SLOTS_LABEL: str(slots)}), **dict(labels or {})}
        if full not in self.made_nodes:
            self.plane.add_node(full, cpu=cpu, memory=memory, pods=pods, labels=all_labels, taints=taints,
                                unschedulable=unschedulable, ready=ready)
            self.made_nodes.append(full)
            return full
        labels_patch: dict[str, str | None] = {SLOTS_LABEL: None, **all_labels}  # None: the label goes
        self.core.patch_node(full, {"metadata": {"labels": labels_patch}, "spec": {"unschedulable": unschedulable}})
        return full

    # ---- PodGroups and pods ----------------------------------------------------------------------------------

    def group(self, name: str, min_member: int = 3) -> None:
        self.custom.create_namespaced_custom_object(
            PODGROUP_GROUP, PODGROUP_VERSION, self.ns, PODGROUP_PLURAL,
            {"apiVersion": f"{PODGROUP_GROUP}/{PODGROUP_VERSION}", "kind": PODGROUP_KIND, "metadata": {"name": name},
             "spec": {"minMember": min_member}})

    def pod(self, fid: FunctionId | str, group: str | None = None, labels: dict | None = None,
            scheduler: str = SCHEDULER_NAME, requests: Mapping[str, str] | None = None,
            spec: Mapping[str, Any] | None = None) -> str:
        """A pod for Coach's scheduler: a function's labels and its job's PodGroup label, or `labels` as given."""
        if isinstance(fid, FunctionId):
            name, labels = fid.name, {**fid.labels, POD_GROUP_LABEL: group or fid.job, **(labels or {})}
        else:
            name, labels = fid, labels or {}
        container = {"name": "f", "image": "coach:test"}
        if requests:
            container["resources"] = {"requests": dict(requests)}
        self.core.create_namespaced_pod(self.ns, {
            "metadata": {"name": name, "labels": labels},
            "spec": {"schedulerName": scheduler, "containers": [container], **dict(spec or {})}})
        return name

    def job(self, job: str, workers: int = 1, servers: int = 1, group: bool = True, **pod) -> list[str]:
        """A PodGroup and the pods of one scheduler, `servers` servers and `workers` workers; their names."""
        if group:
            self.group(job)
        return [self.pod(fid, **pod) for fid in functions_for(job, workers, servers)]

    def nodes_of(self, names: Iterable[str] | None = None) -> dict[str, str | None]:
        """Pod name -> its node as the test named it (None while pending)."""
        pods = {p.metadata.name: self.short(p.spec.node_name) for p in self.core.list_namespaced_pod(self.ns).items}
        return pods if names is None else {name: pods.get(name) for name in names}

    def bound(self, names: Iterable[str]) -> bool:
        return all(self.nodes_of(names).values())

    def events(self, pod: str, reason: str | None = None) -> list:
        found = [e for e in self.core.list_namespaced_event(self.ns).items
                 if e.involved_object.name == pod and (reason is None or e.reason == reason)]
        return sorted(found, key=lambda e: e.metadata.name)

    def scheduled_condition(self, pod: str):
        conditions = self.core.read_namespaced_pod_status(pod, self.ns).status.conditions or []
        return next((c for c in conditions if c.type == "PodScheduled"), None)

    def delete(self, names: Iterable[str], grace_s: int | None = 0) -> None:
        """Delete pods; grace 0 by default, as the kubelet confirms a pod's end (a bound pod deleted with a grace
        period stays Terminating until a kubelet does; none runs here)."""
        for name in names:
            self.core.delete_namespaced_pod(name, self.ns, grace_period_seconds=grace_s)

    def bind(self, pod: str, node: str) -> None:
        """Bind a pod as another scheduler would."""
        finish(self.core.create_namespaced_pod_binding(pod, self.ns, {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
            "target": {"kind": "Node", "name": self.node_name(node)}}, _preload_content=False))

    def close(self) -> None:
        self.plane.delete_nodes(self.made_nodes)
        self.api.close()


@pytest.fixture
def kube(control_plane, kube_namespace, podgroup_crd) -> Kube:
    """The test's namespace and nodes on the real control plane (nodes deleted at the end)."""
    import uuid

    view = Kube(control_plane, kube_namespace, uuid.uuid4().hex[:6])
    yield view
    view.close()


@pytest.fixture
def kubeconfig(control_plane, kube, tmp_path):
    return str(control_plane.write_kubeconfig(tmp_path / "kubeconfig", namespace=kube.ns))


@pytest.fixture
def start(kubeconfig, kube):
    """start(profile, **config) -> a running KubeScheduler with its own client; all are stopped at the end."""
    running = []

    def start(profile: str = "gang", identity: str = "", kubeconfig: str = kubeconfig, **config) -> KubeScheduler:
        api, _ = connect(kubeconfig)
        options = dict(profile=profile, namespace=kube.ns, lease_namespace=kube.ns, identity=identity, metrics_host="127.0.0.1",
                       metrics_port=0, lease_duration_s=LEASE_S, report_after_s=0.1, bind_retry_s=0.2)
        options.update(config)
        scheduler = KubeScheduler(api, Config(**options))
        running.append((scheduler, api))
        return scheduler.start()

    yield start
    for scheduler, api in running:
        scheduler.stop()
        api.close()


def leader(scheduler: KubeScheduler) -> KubeScheduler:
    wait_for("the scheduler to lead", lambda: scheduler.wait_synced(0.1) and scheduler.is_leader())
    return scheduler
