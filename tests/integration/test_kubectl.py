"""kubectl against the suite's real kube-apiserver: `kubectl get pods`, `kubectl get nodes`, and `kubectl describe
pod` answering "why is it pending" with the Event a scheduler posted on the pod.

kubectl is the one built with the control plane (the same release); set KUBECTL to try another binary.
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest
from kubernetes import client, config

from coach.domain.identity import JOB_LABEL
from coach.domain.kube import FAILED_SCHEDULING, SCHEDULER_NAME, SLOTS_LABEL

KUBECTL_TIMEOUT_S = 60.0
PENDING_MESSAGE = "gang: waiting for quorum: 1 of 3 pods of job lenet can be placed (0/1 nodes have 3 free slots)"


@pytest.fixture
def kubectl(control_plane, kube_namespace, kubectl_binary, tmp_path: Path
            ) -> Iterator[tuple[str, client.ApiClient, Callable[..., str]]]:
    binary = os.environ.get("KUBECTL") or kubectl_binary
    kubeconfig = control_plane.write_kubeconfig(tmp_path / "kubeconfig", namespace=kube_namespace)
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    api_client = client.ApiClient(cfg)

    def run(*args: str) -> str:
        result = subprocess.run([binary, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"),
                                 *args], capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_S,
                                env={**os.environ, "HOME": str(tmp_path)})
        assert result.returncode == 0, f"kubectl {' '.join(args)} failed:\n{result.stderr}"
        return result.stdout

    try:
        yield kube_namespace, api_client, run
    finally:
        api_client.close()
        api_client.rest_client.pool_manager.clear()


def pending_pod(api_client: client.ApiClient, ns: str, name: str) -> client.V1Pod:
    return client.CoreV1Api(api_client).create_namespaced_pod(ns, client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={JOB_LABEL: "lenet"}),
        spec=client.V1PodSpec(scheduler_name=SCHEDULER_NAME,
                              containers=[client.V1Container(name="fn", image="coach/worker:1")])))


def post_core_event(api_client: client.ApiClient, ns: str, pod: client.V1Pod) -> None:
    now = datetime.datetime.now(datetime.UTC)
    client.CoreV1Api(api_client).create_namespaced_event(ns, client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{pod.metadata.name}."), reason=FAILED_SCHEDULING,
        message=PENDING_MESSAGE, type="Warning", count=1, first_timestamp=now, last_timestamp=now,
        source=client.V1EventSource(component=SCHEDULER_NAME),
        involved_object=client.V1ObjectReference(kind="Pod", namespace=ns, name=pod.metadata.name,
                                                 uid=pod.metadata.uid, api_version="v1")))


def post_events_v1_event(api_client: client.ApiClient, ns: str, pod: client.V1Pod) -> None:
    client.EventsV1Api(api_client).create_namespaced_event(ns, client.EventsV1Event(
        metadata=client.V1ObjectMeta(name=f"{pod.metadata.name}.{uuid.uuid4().hex[:16]}"),  # as kube's recorder
        event_time=datetime.datetime.now(datetime.UTC), reason=FAILED_SCHEDULING, note=PENDING_MESSAGE,
        type="Warning", action="Scheduling", reporting_controller=SCHEDULER_NAME, reporting_instance="replica-a",
        regarding=client.V1ObjectReference(kind="Pod", namespace=ns, name=pod.metadata.name, uid=pod.metadata.uid,
                                           api_version="v1")))


def test_kubectl_get_pods_lists_a_pending_pod_and_its_node_once_bound(kubectl):
    ns, api_client, run = kubectl
    pending_pod(api_client, ns, "lenet-worker-0")
    pending_pod(api_client, ns, "lenet-server-0")
    client.CoreV1Api(api_client).create_namespaced_pod_binding(
        "lenet-server-0", ns, client.V1Binding(metadata=client.V1ObjectMeta(name="lenet-server-0"),
                                               target=client.V1ObjectReference(kind="Node", name="node-1")),
        _preload_content=False).release_conn()
    lines = run("get", "pods", "-o", "wide").splitlines()
    header = re.split(r"\s{2,}", lines[0].strip())
    assert header[:3] == ["NAME", "READY", "STATUS"] and "NODE" in header
    rows = {line.split()[0]: re.split(r"\s{2,}", line.strip()) for line in lines[1:]}
    assert set(rows) == {"lenet-worker-0", "lenet-server-0"}
    node = header.index("NODE")
    assert rows["lenet-worker-0"][1:3] == ["0/1", "Pending"] and rows["lenet-worker-0"][node] == "<none>"
    assert rows["lenet-server-0"][node] == "node-1"
    assert run("get", "pods", "-o", "name").split() == ["pod/lenet-server-0", "pod/lenet-worker-0"]


@pytest.mark.parametrize("post", [post_core_event, post_events_v1_event], ids=["core-v1", "events-k8s-io-v1"])
def test_kubectl_describe_pod_says_why_it_is_pending(kubectl, post):
    ns, api_client, run = kubectl
    pod = pending_pod(api_client, ns, "lenet-worker-0")
    other = pending_pod(api_client, ns, "lenet-worker-1")
    post(api_client, ns, pod)
    out = run("describe", "pod", "lenet-worker-0")
    assert "Name:" in out and "lenet-worker-0" in out and "Pending" in out
    events = out.split("Events:", 1)[1]
    assert FAILED_SCHEDULING in events and PENDING_MESSAGE in events
    assert re.search(r"^Events:\s+<none>$", run("describe", "pod", other.metadata.name), re.M)  # only its own events


def test_kubectl_get_nodes(kubectl, control_plane):
    ns, api_client, run = kubectl
    mark = uuid.uuid4().hex[:8]
    names = [f"{mark}-node-1", f"{mark}-node-2"]
    try:
        for name, ready in zip(names, (True, False)):
            control_plane.add_node(name, labels={SLOTS_LABEL: "4", "coach.io/test": mark}, ready=ready)
        lines = run("get", "nodes", "-l", f"coach.io/test={mark}").splitlines()
        assert lines[0].split()[:2] == ["NAME", "STATUS"]
        assert [line.split()[:2] for line in lines[1:]] == [[names[0], "Ready"], [names[1], "NotReady"]]
    finally:
        control_plane.delete_nodes(names)
