"""The controller's Placement on Kubernetes, against the suite's real kube-apiserver.

A tiny Workloads stands in for the Nuclio dashboard (it creates each function's pod with Coach's labels and
schedulerName), and the tests bind pods through the binding subresource as `coach scheduler` would.
"""

from __future__ import annotations


import pytest
from kubernetes import client

from coach.domain.identity import FunctionId, Role, functions_for
from coach.domain.invocation import DEPLOY, Failure
from coach.domain.kube import PODGROUP_GROUP, PODGROUP_PLURAL, PODGROUP_VERSION, POD_GROUP_LABEL
from coach.placement import kube
from coach.placement.kube import KubePlacement
from tests.support import wait_for


def pod_name(fid: FunctionId) -> str:
    return f"nuclio-{fid.name}"


class PodWorkloads:
    """Creates and deletes one pod per function, as the dashboard's Deployments would."""

    def __init__(self, core: client.CoreV1Api, namespace: str, refuse: bool = False):
        self.core, self.ns, self.refuse = core, namespace, refuse
        self.created: list[FunctionId] = []

    def create(self, fid: FunctionId, scheduler_name: str) -> Failure | None:
        if self.refuse:
            return Failure(fid.name, DEPLOY, "nuclio dashboard answered HTTP 500")
        self.created.append(fid)
        labels = {**fid.labels, POD_GROUP_LABEL: fid.job}
        self.core.create_namespaced_pod(self.ns, client.V1Pod(
            metadata=client.V1ObjectMeta(name=pod_name(fid), labels=labels),
            spec=client.V1PodSpec(scheduler_name=scheduler_name,
                                  containers=[client.V1Container(name="f", image="coach-functions:test")])))
        return None

    def delete(self, fid: FunctionId) -> Failure | None:
        try:
            self.core.delete_namespaced_pod(pod_name(fid), self.ns, grace_period_seconds=0)
        except client.ApiException as error:
            if error.status != 404:
                raise
        return None


@pytest.fixture
def api(control_plane, podgroup_crd):
    with control_plane.client() as api_client:
        yield api_client


@pytest.fixture
def ns(kube_namespace):
    return kube_namespace


def bind(core: client.CoreV1Api, fid: FunctionId, node: str, ns: str) -> None:
    body = client.V1Binding(metadata=client.V1ObjectMeta(name=pod_name(fid)),
                            target=client.V1ObjectReference(kind="Node", name=node))
    response = core.create_namespaced_pod_binding(pod_name(fid), ns, body, _preload_content=False)
    response.read()  # a pooled connection is reusable only once its response is read
    response.release_conn()


def eventually(predicate, timeout_s: float = 10.0):
    return wait_for(predicate, timeout_s, "placement")


def test_submit_creates_the_podgroup_then_the_pods_and_poll_sees_the_scheduler_bindings(api, ns):
    core = client.CoreV1Api(api)
    placement = KubePlacement(api, ns, PodWorkloads(core, ns))
    try:
        assert placement.wait_synced(10)
        ids = functions_for("lenet", workers=1, servers=1)
        placement.register(["lenet"])
        placement.submit("lenet", ids)
        group = client.CustomObjectsApi(api).get_namespaced_custom_object(
            PODGROUP_GROUP, PODGROUP_VERSION, ns, PODGROUP_PLURAL, "lenet")
        assert group["spec"]["minMember"] == 3
        assert eventually(lambda: placement.explain("lenet", 0.0) == "waiting for coach-scheduler")
        assert placement.poll("lenet", 0.0) == {}
        before = placement.version
        bind(core, ids[0], "node-1", ns)
        bind(core, ids[1], "node-2", ns)
        assert eventually(lambda: len(placement.poll("lenet", 0.0)) == 2)
        assert placement.poll("lenet", 0.0) == {ids[0]: "node-1", ids[1]: "node-2"}
        assert placement.version > before
    finally:
        placement.close()


def test_explain_repeats_the_reason_the_scheduler_wrote_on_the_pending_pods(api, ns):
    core = client.CoreV1Api(api)
    placement = KubePlacement(api, ns, PodWorkloads(core, ns))
    try:
        worker = FunctionId("big", Role.WORKER, 0)
        placement.submit("big", [worker])
        assert eventually(lambda: placement.explain("big", 0.0) == "waiting for coach-scheduler")
        core.patch_namespaced_pod_status(pod_name(worker), ns, {"status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "gang: 1/3 members of PodGroup big"}]}})
        assert eventually(lambda: placement.explain("big", 0.0) == "gang: 1/3 members of PodGroup big")
    finally:
        placement.close()


def test_release_deletes_the_pods_and_the_job_no_longer_sees_them(api, ns):
    core = client.CoreV1Api(api)
    placement = KubePlacement(api, ns, PodWorkloads(core, ns))
    try:
        ids = functions_for("short", workers=1, servers=1)
        placement.submit("short", ids)
        for fid in ids:
            bind(core, fid, "node-1", ns)
        assert eventually(lambda: len(placement.poll("short", 0.0)) == 3)
        placement.release(ids)
        assert placement.poll("short", 0.0) == {}
        assert eventually(lambda: core.list_namespaced_pod(ns, label_selector="coach.io/job=short").items == [])
    finally:
        placement.close()


def test_a_refused_workload_is_the_reason_the_job_waits(api, ns):
    placement = KubePlacement(api, ns, PodWorkloads(client.CoreV1Api(api), ns, refuse=True))
    try:
        placement.submit("refused", functions_for("refused", workers=1, servers=1))
        assert placement.explain("refused", 0.0) == (
            "pods not created: lenet-scheduler-0: deploy: nuclio dashboard answered HTTP 500".replace(
                "lenet", "refused"))
        assert placement.poll("refused", 0.0) == {}
    finally:
        placement.close()


def test_the_watch_relists_after_410_gone_and_still_sees_new_bindings(api, ns, control_plane, monkeypatch):
    monkeypatch.setattr(kube, "WATCH_TIMEOUT_S", 1)  # watch requests end every second and resume at their version
    follow, fell_behind = KubePlacement._follow, []

    def follow_then_fall_behind(self, version):
        """The first watch request ends while the apiserver restarts: its new watch cache starts after the version
        the watch resumes from."""
        newest = follow(self, version)
        if fell_behind:
            return newest
        fell_behind.append(newest)
        client.CoreV1Api(self._core.api_client).create_namespaced_pod(ns, {  # history the old version lacks
            "metadata": {"name": "unrelated"}, "spec": {"containers": [{"name": "f", "image": "x:1"}]}})
        control_plane.restart_apiserver()
        return newest

    monkeypatch.setattr(KubePlacement, "_follow", follow_then_fall_behind)
    core = client.CoreV1Api(api)
    placement = KubePlacement(api, ns, PodWorkloads(core, ns))
    try:
        ids = functions_for("gone", workers=1, servers=1)
        placement.submit("gone", ids)
        bind(core, ids[0], "node-3", ns)
        assert eventually(lambda: placement.relists == 2)  # the first list, and one after the 410
        bind(core, ids[1], "node-2", ns)
        assert eventually(lambda: placement.poll("gone", 0.0) == {ids[0]: "node-3", ids[1]: "node-2"})
        assert placement.relists == 2
    finally:
        placement.close()
