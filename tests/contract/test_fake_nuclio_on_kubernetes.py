"""The fake Nuclio dashboard against the suite's real kube-apiserver (TLS, token authentication, RBAC, the default
admission plugins; no controller-manager, no kubelet): what it plays of them there (the Deployment's ReplicaSet,
the garbage collector, the kubelet) goes through the standard API only, with a ServiceAccount holding exactly the
verbs below. On this apiserver a bound pod deleted with a grace period really stays Terminating until the fake's
kubelet deletes it with gracePeriodSeconds=0, and nothing but the fake sets a pod's status.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
import requests
from kubernetes import client

from coach.domain.kube import SCHEDULER_LABEL, SCHEDULER_NAME
from tests.support import alive
from tests.contract.nuclio_support import HANDLER, PLATFORM_CONFIG, bind, pods_of, wait_for
from tests.fakes.nuclio_dashboard import FakeDashboard

TOKEN = "t0ken-on-kube"
LABELS = {"coach.io/job": "mnist", "coach.io/role": "worker", "coach.io/index": "0", SCHEDULER_LABEL: SCHEDULER_NAME}
NAME = "coach-mnist-worker-0"
#: What the dashboard's ServiceAccount may do: nothing more is needed.
RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create", "delete"]},
    {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["patch"]},
]


@pytest.fixture
def admin(control_plane):
    with control_plane.client() as api:
        yield api


@pytest.fixture
def dashboard(control_plane, kube_namespace, admin, tmp_path):
    """The fake dashboard in a namespace of its own, as a ServiceAccount with RULES only."""
    rbac = client.RbacAuthorizationV1Api(admin)
    client.CoreV1Api(admin).create_namespaced_service_account(kube_namespace, {"metadata": {"name": "nuclio"}})
    rbac.create_namespaced_role(kube_namespace, {"metadata": {"name": "nuclio"}, "rules": RULES})
    rbac.create_namespaced_role_binding(kube_namespace, {
        "metadata": {"name": "nuclio"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                    "name": "nuclio"},
        "subjects": [{"kind": "ServiceAccount", "name": "nuclio", "namespace": kube_namespace}]})
    token = control_plane.service_account_token(kube_namespace, "nuclio")
    kubeconfig = control_plane.write_kubeconfig(tmp_path / "nuclio.kubeconfig", namespace=kube_namespace,
                                                token=token)
    with FakeDashboard(kubeconfig, kube_namespace, log_dir=tmp_path / "logs", platform_config=PLATFORM_CONFIG) as dash:
        yield dash
        for function in list(dash.list_functions(kube_namespace, None, None)):  # their pods go before the namespace's
            dash.delete_function({"metadata": {"name": function, "namespace": kube_namespace}},
                                 {"X-Nuclio-Delete-Function-Ignore-State-Validation": "true"})
        dash.settled()


@pytest.fixture
def core(admin):
    return client.CoreV1Api(admin)


def create(dash, **spec) -> None:
    body = {"metadata": {"name": NAME, "labels": dict(LABELS)},
            "spec": {"image": "coach:1", "handler": HANDLER, "env": [{"name": "COACH_FUNCTION_TOKEN", "value": TOKEN}],
                     "triggers": {"http": {"kind": "http", "numWorkers": 2}}, **spec}}
    response = requests.post(f"{dash.url}/api/functions", data=json.dumps(body), timeout=10)
    assert response.status_code == 202, response.text


def invoke(dash, body=None, **headers) -> requests.Response:
    return requests.post(f"{dash.url}/api/function_invocations", json=body or {}, timeout=30,
                         headers={"X-Nuclio-Function-Name": NAME, "X-Coach-Token": TOKEN, **headers})


def running(dash, core, namespace: str, node: str):
    """Create, bind as a scheduler would, wait until ready: the pod."""
    create(dash)
    pod = wait_for(lambda: (pods_of(core, NAME, namespace) or [None])[0], what="the pod")
    assert bind(core, pod.metadata.name, node, namespace) == 201
    wait_for(lambda: dash.state(NAME) == "ready", timeout_s=30, what="ready")
    return core.read_namespaced_pod(pod.metadata.name, namespace)


def test_a_function_is_a_deployment_whose_pod_runs_once_bound(dashboard, core, admin, kube_namespace, kube_nodes):
    node = kube_nodes("n1")
    create(dashboard, nodeSelector={"disk": "ssd"},
           tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}])
    pending = wait_for(lambda: (pods_of(core, NAME, kube_namespace) or [None])[0], what="the pod")
    deployment = client.AppsV1Api(admin).read_namespaced_deployment(f"nuclio-{NAME}", kube_namespace)
    owner, = pending.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("Deployment", deployment.metadata.name,
                                                                     deployment.metadata.uid, True)
    assert pending.spec.scheduler_name == SCHEDULER_NAME and pending.spec.node_selector == {"disk": "ssd"}
    assert pending.spec.service_account_name == "default"  # the ServiceAccount admission plugin's
    assert {t.key for t in pending.spec.tolerations} >= {"gpu", "node.kubernetes.io/not-ready"}  # and the defaults
    assert bind(core, pending.metadata.name, node, kube_namespace) == 201
    wait_for(lambda: dashboard.state(NAME) == "ready", timeout_s=30, what="ready")
    pod = core.read_namespaced_pod(pending.metadata.name, kube_namespace)
    assert (pod.status.phase, pod.status.pod_ip) == ("Running", "127.0.0.1")
    assert {c.type for c in pod.status.conditions if c.status == "True"} >= {"PodScheduled", "Ready"}
    status = client.AppsV1Api(admin).read_namespaced_deployment_status(deployment.metadata.name, kube_namespace)
    assert status.status.ready_replicas == 1
    assert invoke(dashboard).status_code == 200 and invoke(dashboard, **{"X-Coach-Token": "x"}).status_code == 401


def test_a_deleted_function_keeps_its_pod_terminating_on_its_node_until_its_event_ends(dashboard, core, admin,
                                                                                       kube_namespace, kube_nodes):
    node = kube_nodes("n1")
    pod = running(dashboard, core, kube_namespace, node)
    processes = dashboard.processes(NAME)
    answered = {}

    def slow():
        answered["status"] = invoke(dashboard, {"model": {"path": "sleep:2"}}).status_code
        answered["at"] = time.monotonic()

    caller = threading.Thread(target=slow)
    caller.start()
    time.sleep(0.5)
    assert requests.delete(f"{dashboard.url}/api/functions", timeout=10,
                           json={"metadata": {"name": NAME, "namespace": kube_namespace}}).status_code == 204
    terminating = wait_for(lambda: [p for p in pods_of(core, NAME, kube_namespace) if p.metadata.deletion_timestamp],
                           what="Terminating")[0]
    assert (terminating.metadata.name, terminating.spec.node_name) == (pod.metadata.name, node)
    wait_for(lambda: not pods_of(core, NAME, kube_namespace), what="the pod gone")
    gone_at = time.monotonic()
    caller.join(timeout=10)
    assert answered["status"] == 200 and gone_at >= answered["at"]
    assert not any(alive(pid) for pid in (processes["processor"], *processes["wrappers"]))
    with pytest.raises(client.ApiException) as missing:
        client.AppsV1Api(admin).read_namespaced_deployment(f"nuclio-{NAME}", kube_namespace)
    assert missing.value.status == 404


def test_a_dead_worker_process_fails_the_pod_and_its_replacement_is_scheduled_again(dashboard, core,
                                                                                    kube_namespace, kube_nodes):
    first_node, second_node = kube_nodes("n1"), kube_nodes("n2")
    pod = running(dashboard, core, kube_namespace, first_node)
    os.kill(dashboard.processes(NAME)["wrappers"][0], signal.SIGKILL)
    pods = wait_for(lambda: len(pods_of(core, NAME, kube_namespace)) == 2 and pods_of(core, NAME, kube_namespace),
                    what="a replacement")
    old = next(p for p in pods if p.metadata.name == pod.metadata.name)
    new = next(p for p in pods if p.metadata.name != pod.metadata.name)
    assert (old.status.phase, new.status.phase, new.spec.node_name) == ("Failed", "Pending", None)
    assert dashboard.state(NAME) == "unhealthy"
    assert bind(core, new.metadata.name, second_node, kube_namespace) == 201
    wait_for(lambda: dashboard.state(NAME) == "ready", timeout_s=30, what="ready again")
    assert dashboard.processes(NAME)["node"] == second_node and invoke(dashboard).status_code == 200
