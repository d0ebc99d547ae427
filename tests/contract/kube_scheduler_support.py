"""What the kube scheduler's tests share: a client for the fake kube-apiserver that makes nodes, PodGroups and
pods the way Coach's other parts do (labels, schedulerName), reads back what became of them, and waits.
"""

from __future__ import annotations

from typing import Callable, Iterable

from kubernetes import client

from coach.domain.identity import FunctionId, functions_for
from coach.domain.kube import (PODGROUP_GROUP, PODGROUP_KIND, PODGROUP_PLURAL, PODGROUP_VERSION, POD_GROUP_LABEL,
                               SCHEDULER_NAME, SLOTS_LABEL)
from coach.kube_scheduler.rest import finish
from tests import support

NS = "default"


def wait_for(what: str, condition: Callable[[], object], timeout_s: float = 10.0) -> object:
    """tests.support.wait_for, with what is awaited named first (as these tests read best)."""
    return support.wait_for(condition, timeout_s, what)


class Kube:
    """The test's own view of the fake apiserver, through the official client."""

    def __init__(self, api: client.ApiClient):
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.leases = client.CoordinationV1Api(api)

    def node(self, name: str, slots: int | None = None, allocatable: str = "110", unschedulable: bool = False):
        labels = {} if slots is None else {SLOTS_LABEL: str(slots)}
        body = {"metadata": {"name": name, "labels": labels}, "spec": {"unschedulable": unschedulable},
                "status": {"allocatable": {"pods": allocatable}}}
        try:
            current = self.core.read_node(name)
        except client.ApiException as error:
            if error.status != 404:
                raise
            self.core.create_node(body)
            self.core.patch_node_status(name, {"status": body["status"]})
            return
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        self.core.patch_node(name, body)

    def group(self, name: str, min_member: int = 3) -> None:
        self.custom.create_namespaced_custom_object(
            PODGROUP_GROUP, PODGROUP_VERSION, NS, PODGROUP_PLURAL,
            {"apiVersion": f"{PODGROUP_GROUP}/{PODGROUP_VERSION}", "kind": PODGROUP_KIND, "metadata": {"name": name},
             "spec": {"minMember": min_member}})

    def pod(self, fid: FunctionId | str, group: str | None = None, labels: dict | None = None) -> str:
        """A pod for Coach's scheduler: a function's labels and its job's PodGroup label, or `labels` as given."""
        if isinstance(fid, FunctionId):
            name, labels = fid.name, {**fid.labels, POD_GROUP_LABEL: group or fid.job, **(labels or {})}
        else:
            name, labels = fid, labels or {}
        self.core.create_namespaced_pod(NS, {
            "metadata": {"name": name, "labels": labels},
            "spec": {"schedulerName": SCHEDULER_NAME, "containers": [{"name": "f", "image": "coach:test"}]}})
        return name

    def job(self, job: str, workers: int = 1, servers: int = 1, group: bool = True) -> list[str]:
        """A PodGroup and the pods of one scheduler, `servers` servers and `workers` workers; their names."""
        if group:
            self.group(job)
        return [self.pod(fid) for fid in functions_for(job, workers, servers)]

    def nodes_of(self, names: Iterable[str] | None = None) -> dict[str, str | None]:
        """Pod name -> its node (None while pending)."""
        pods = {p.metadata.name: p.spec.node_name for p in self.core.list_namespaced_pod(NS).items}
        return pods if names is None else {name: pods.get(name) for name in names}

    def bound(self, names: Iterable[str]) -> bool:
        return all(self.nodes_of(names).values())

    def events(self, pod: str, reason: str | None = None) -> list:
        found = [e for e in self.core.list_namespaced_event(NS).items
                 if e.involved_object.name == pod and (reason is None or e.reason == reason)]
        return sorted(found, key=lambda e: e.metadata.name)

    def scheduled_condition(self, pod: str):
        conditions = self.core.read_namespaced_pod_status(pod, NS).status.conditions or []
        return next((c for c in conditions if c.type == "PodScheduled"), None)

    def delete(self, names: Iterable[str]) -> None:
        for name in names:
            self.core.delete_namespaced_pod(name, NS)

    def bind(self, pod: str, node: str) -> None:
        """Bind a pod as another scheduler would."""
        finish(self.core.create_namespaced_pod_binding(pod, NS, {"apiVersion": "v1", "kind": "Binding",
                                                                "metadata": {"name": pod},
                                                                "target": {"kind": "Node", "name": node}},
                                                       _preload_content=False))
