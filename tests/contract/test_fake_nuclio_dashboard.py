"""The fake Nuclio dashboard speaks the real dashboard's protocol (read from nuclio/nuclio's pkg/dashboard and
pkg/platform), checked with raw `requests` over loopback: status codes, bodies, headers, function states, the pods
it makes in the fake kube-apiserver, and the processes it runs once a scheduler binds a pod, as Nuclio does: one
wrapper process per worker of the HTTP trigger, each running init_context itself, requests to a free one; a pod
deleted stays Terminating, holding its node, until its processes end (within its grace period); a dead wrapper
fails the pod and a replacement under a new name waits to be scheduled again.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
import yaml

from coach.domain.kube import NUCLIO_FUNCTION_LABEL, POD_GROUP_LABEL, SCHEDULER_LABEL, SCHEDULER_NAME
from tests.fakes.nuclio_dashboard import (
    FakeDashboard, fill_empty, go_duration_s, load_platform_config, selector_matches,
)
from tests.contract.nuclio_support import (  # noqa: F401 - fixtures
    HANDLER, REPO, bind, core, dashboard, kubeconfig, pods_of, the_pod, wait_for,
)
from tests.support import alive, stop_process

TOKEN = "t0ken"
LABELS = {"coach.io/job": "mnist", "coach.io/role": "worker", "coach.io/index": "0", POD_GROUP_LABEL: "mnist",
          SCHEDULER_LABEL: SCHEDULER_NAME}  # as NuclioPlatform labels a function for Coach's scheduler


def function(name: str = "coach-mnist-worker-0", labels=None, workers: int = 2, **spec) -> dict:
    """A function as Coach deploys one: one replica, an HTTP trigger of `workers` workers, the run's token in env."""
    return {"metadata": {"name": name, "labels": dict(LABELS if labels is None else labels)},
            "spec": {"image": "coach:1", "handler": HANDLER, "runtime": "python:3.11",
                     "env": [{"name": "COACH_FUNCTION_TOKEN", "value": TOKEN}, {"name": "A", "value": "1"},
                             {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                     "triggers": {"http": {"kind": "http", "numWorkers": workers}},
                     "minReplicas": 1, "maxReplicas": 1, **spec}}


def post(url: str, body, **headers) -> requests.Response:
    return requests.post(f"{url}/api/functions", data=json.dumps(body), headers=headers, timeout=10)


def delete(url: str, name: str, **headers) -> requests.Response:
    return requests.delete(f"{url}/api/functions", json={"metadata": {"name": name, "namespace": "default"}},
                           headers=headers, timeout=10)


def get(url: str, name: str) -> requests.Response:
    return requests.get(f"{url}/api/functions/{name}", timeout=10)


def invoke(url: str, name: str, body=None, **headers) -> requests.Response:
    return requests.post(f"{url}/api/function_invocations", json=body if body is not None else {"hi": 1},
                         headers={"X-Nuclio-Function-Name": name, "X-Coach-Token": TOKEN, **headers}, timeout=20)


def ready(dash, core, name: str = "coach-mnist-worker-0", node: str = "node-1") -> dict:
    """Create (if needed), bind and wait until the dashboard says ready; the function as GET shows it."""
    if dash.state(name) is None:
        assert post(dash.url, function(name)).status_code == 202
    assert bind(core, the_pod(core, name).metadata.name, node) == 201
    wait_for(lambda: dash.state(name) == "ready", what=f"{name} ready")
    return get(dash.url, name).json()


def parent_of(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rfind(")") + 2:].split()[1])


def init(url: str, name: str = "coach-mnist-worker-0") -> dict:
    """Which wrapper process answered, and which ran its init_context (tests/contract/nuclio_handler.py)."""
    response = invoke(url, name, **{"X-Nuclio-Path": "/init"})
    assert response.status_code == 200, response.text
    return response.json()


# --------------------------------------------------------------------------- pure parts


def test_go_durations_read_as_go_reads_them():
    assert go_duration_s("30s") == 30 and go_duration_s("1m30s") == 90 and go_duration_s("1500ms") == 1.5
    assert go_duration_s("2h") == 7200 and go_duration_s("0") == 0 and go_duration_s("250us") == 0.00025
    for bad in ("", "30", "s", "3x", "1.5.5s"):
        with pytest.raises(ValueError):
            go_duration_s(bad)


def test_label_selectors_and_merges_follow_kubernetes_and_mergo():
    labels = {"coach.io/job": "a", "tier": "x"}
    assert selector_matches({}, labels) and selector_matches(None, {})  # empty selects everything
    assert selector_matches({"matchExpressions": [{"key": "coach.io/job", "operator": "Exists"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "coach.io/job", "operator": "DoesNotExist"}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["x", "y"]}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]}, labels)
    assert not selector_matches({"matchLabels": {"tier": "y"}}, labels)
    filled = fill_empty({"spec": {"schedulerName": "", "a": 1}}, {"spec": {"schedulerName": "s", "a": 2, "b": 3}})
    assert filled == {"spec": {"schedulerName": "s", "a": 1, "b": 3}}  # fills empty fields, keeps set ones


def test_platform_config_is_read_plain_or_from_its_configmap(tmp_path):
    shipped = load_platform_config(REPO / "deploy" / "nuclio" / "platform.yaml")
    configmap = tmp_path / "cm.yaml"
    text = (REPO / "deploy" / "nuclio" / "platform.yaml").read_text()
    configmap.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "n"},
                                         "data": {"platform.yaml": text}}))
    assert load_platform_config(configmap) == shipped
    (scheduler_entry,) = [entry for entry in shipped if "kubernetes" in entry]
    spec = scheduler_entry["kubernetes"]["deployment"]["spec"]["template"]["spec"]
    assert spec["schedulerName"] == SCHEDULER_NAME
    (tmp_path / "bad.yaml").write_text("functionAugmentedConfigs: 3\n")
    with pytest.raises(ValueError, match=r"bad.yaml: functionAugmentedConfigs: expected a list"):
        load_platform_config(tmp_path / "bad.yaml")
    with pytest.raises(ValueError, match=r"none.yaml: No such file"):
        load_platform_config(tmp_path / "none.yaml")


# --------------------------------------------------------------------------- functions


def test_create_answers_202_and_makes_a_pending_pod_for_coachs_scheduler(dashboard, core):
    response = post(dashboard.url, function(), **{"X-Nuclio-Project-Name": "default"})
    assert (response.status_code, response.content) == (202, b"")
    pod = the_pod(core, "coach-mnist-worker-0")
    assert pod.metadata.name.startswith("nuclio-coach-mnist-worker-0-")
    assert pod.spec.scheduler_name == SCHEDULER_NAME and pod.spec.node_name is None
    assert {**LABELS, NUCLIO_FUNCTION_LABEL: "coach-mnist-worker-0", "nuclio.io/class": "function",
            "nuclio.io/project-name": "default"}.items() <= pod.metadata.labels.items()
    assert pod.spec.containers[0].name == "nuclio" and pod.spec.containers[0].image == "coach:1"
    wait_for(lambda: dashboard.state("coach-mnist-worker-0") == "configuringResources")
    held = get(dashboard.url, "coach-mnist-worker-0").json()
    assert held["status"] == {"state": "configuringResources"}
    assert held["spec"]["waitReadinessTimeoutBeforeFailure"] is True  # the platform config's functionConfig
    assert set(requests.get(f"{dashboard.url}/api/functions", timeout=5).json()) == {"coach-mnist-worker-0"}
    listed = requests.get(f"{dashboard.url}/api/functions", headers={"X-Nuclio-Project-Name": "other"}, timeout=5)
    assert listed.json() == {}


def test_ready_once_bound_with_the_invocation_urls_of_its_host(dashboard, core):
    held = ready(dashboard, core)
    status = held["status"]
    assert status["state"] == "ready"
    assert status["internalInvocationUrls"] == [f"127.0.0.1:{status['httpPort']}"]
    assert status["externalInvocationUrls"] == []
    pod = the_pod(core, "coach-mnist-worker-0")
    assert (pod.spec.node_name, pod.status.phase, pod.status.pod_ip) == ("node-1", "Running", "127.0.0.1")

    response = invoke(dashboard.url, "coach-mnist-worker-0", {"x": [1, 2]}, **{"X-Nuclio-Path": "/teapot"})
    assert response.status_code == 418 and response.json() == {"short": "stout"}  # the function's own status
    response = invoke(dashboard.url, "coach-mnist-worker-0", {"x": [1, 2]})
    assert response.status_code == 200
    assert response.json()["body"] == {"x": [1, 2]} and response.json()["path"] == "/"
    for token in ("wrong", TOKEN.upper(), TOKEN[:-1], ""):  # the function's own check (coach_functions/auth.py)
        refused = invoke(dashboard.url, "coach-mnist-worker-0", **{"X-Coach-Token": token})
        assert (refused.status_code, refused.json()) == (401, {"error": "missing or wrong token"}), token


def test_invoke_via_picks_the_address_as_nuclio_does(dashboard, core):
    held = ready(dashboard, core)
    for via in ("domain-name", "", "external-ip", "Domain-Name"):  # no external address here: the Service
        assert invoke(dashboard.url, "coach-mnist-worker-0", **{"X-Nuclio-Invoke-Via": via}).status_code == 200
    assert dashboard.invoked_via == {"domain-name": 4}
    # as a dashboard told its external addresses would see it: a node's address and the NodePort
    function = dashboard._functions[("default", "coach-mnist-worker-0")]
    function.set_state("ready", externalInvocationUrls=held["status"]["internalInvocationUrls"])
    for via in ("", "domain-name"):
        assert invoke(dashboard.url, "coach-mnist-worker-0", **{"X-Nuclio-Invoke-Via": via}).status_code == 200
    assert dashboard.invoked_via == {"domain-name": 5, "external-ip": 1}
    no_ingress = invoke(dashboard.url, "coach-mnist-worker-0", **{"X-Nuclio-Invoke-Via": "loadbalancer"})
    assert no_ingress.status_code == 500
    assert no_ingress.json()["error"] == "Failed to invoke function: Couldn't find address for invoke via type"


def test_the_host_gets_the_functions_env_and_token(dashboard, core, tmp_path):
    ready(dashboard, core)
    log = (tmp_path / "logs" / "mnist-worker-0.log")
    assert log.exists()  # one log per function, named after its identity
    held = get(dashboard.url, "coach-mnist-worker-0").json()
    assert {"name": "COACH_FUNCTION_TOKEN", "value": TOKEN} in held["spec"]["env"]


def test_conflicts_bad_bodies_and_unknown_projects(dashboard):
    assert post(dashboard.url, function()).status_code == 202
    response = post(dashboard.url, function())
    assert response.status_code == 409 and response.json()["error"] == "Cannot create two functions with the same name"
    response = requests.post(f"{dashboard.url}/api/functions", data=b"{not json", timeout=5)
    assert response.status_code == 400 and response.json()["error"].startswith("Failed to parse JSON body")
    assert post(dashboard.url, {"metadata": {}, "spec": {}}).json()["error"] == \
        "Function name must be provided in metadata"
    assert post(dashboard.url, function("Bad name!")).status_code == 400
    no_image = function("f2")
    del no_image["spec"]["image"]
    assert post(dashboard.url, no_image).status_code == 400
    response = post(dashboard.url, function("f3"), **{"X-Nuclio-Project-Name": "nope"})
    assert response.status_code == 412 and response.json()["error"] == "Project does not exist"
    created = requests.post(f"{dashboard.url}/api/projects", json={"metadata": {"name": "nope"}, "spec": {}},
                            timeout=5)
    assert created.status_code == 201
    assert requests.post(f"{dashboard.url}/api/projects", json={"metadata": {"name": "nope"}},
                         timeout=5).status_code == 409
    assert post(dashboard.url, function("f3"), **{"X-Nuclio-Project-Name": "nope"}).status_code == 202


def test_unknown_functions(dashboard):
    response = get(dashboard.url, "nothing")
    assert response.status_code == 404 and response.json()["error"] == "Function not found"
    response = invoke(dashboard.url, "nothing")
    assert response.status_code == 404
    assert response.json()["error"] == "Failed to invoke function: Function not found: nothing @ default"
    assert delete(dashboard.url, "nothing").status_code == 204  # the real dashboard's delete is idempotent


def test_delete_forgets_the_function_at_once_and_stops_its_pod(dashboard, core):
    held = ready(dashboard, core)
    url = f"http://{held['status']['internalInvocationUrls'][0]}/"
    assert requests.get(url, headers={"X-Coach-Token": TOKEN}, timeout=5).status_code == 200
    processes = dashboard.processes("coach-mnist-worker-0")
    response = delete(dashboard.url, "coach-mnist-worker-0")
    assert (response.status_code, response.content) == (204, b"")
    assert get(dashboard.url, "coach-mnist-worker-0").status_code == 404
    wait_for(lambda: not pods_of(core, "coach-mnist-worker-0"), what="pod deleted")
    assert not any(alive(pid) for pid in (processes["processor"], *processes["wrappers"]))
    assert not processes["tmpdir"].exists()  # the pod's own temp dir goes with it
    with pytest.raises(requests.ConnectionError):
        requests.get(url, headers={"X-Coach-Token": TOKEN}, timeout=5)


def test_a_function_being_provisioned_is_deleted_only_when_told_to_ignore_its_state(dashboard, core):
    assert post(dashboard.url, function()).status_code == 202
    response = delete(dashboard.url, "coach-mnist-worker-0")
    assert response.status_code == 412
    assert response.json()["error"] == "Function is being provisioned and cannot be deleted"
    the_pod(core, "coach-mnist-worker-0")
    response = delete(dashboard.url, "coach-mnist-worker-0",
                      **{"X-Nuclio-Delete-Function-Ignore-State-Validation": "true"})
    assert response.status_code == 204
    wait_for(lambda: not pods_of(core, "coach-mnist-worker-0"), what="pod deleted")


def test_invocations_before_ready_and_bad_timeouts(dashboard):
    assert post(dashboard.url, function()).status_code == 202
    response = invoke(dashboard.url, "coach-mnist-worker-0")
    assert response.status_code == 500
    assert response.json() == {"error": "Failed to invoke function: Invocation URL is required", "errorStackTrace": ""}
    response = invoke(dashboard.url, "coach-mnist-worker-0", **{"X-Nuclio-Invoke-Timeout": "ten seconds"})
    assert response.status_code == 400 and response.json()["error"] == "Invalid invoke timeout"
    response = requests.post(f"{dashboard.url}/api/function_invocations", json={}, timeout=5)
    assert response.status_code == 400 and response.json()["error"] == "Function name must be provided"


def test_invoke_timeout_and_a_host_that_dies(dashboard, core):
    ready(dashboard, core)
    response = invoke(dashboard.url, "coach-mnist-worker-0", {"model": {"path": "sleep:3"}},
                      **{"X-Nuclio-Invoke-Timeout": "300ms"})
    assert response.status_code == 500 and "Client.Timeout exceeded while awaiting headers" in response.json()["error"]
    response = invoke(dashboard.url, "coach-mnist-worker-0", {"model": {"path": "exit:"}})
    assert response.status_code == 500 and response.json()["error"].endswith(": EOF")
    wait_for(lambda: dashboard.state("coach-mnist-worker-0") == "unhealthy", what="unhealthy")
    assert get(dashboard.url, "coach-mnist-worker-0").json()["status"]["message"] == "Function is not healthy"
    response = invoke(dashboard.url, "coach-mnist-worker-0")
    assert response.status_code == 500 and "connect: connection refused" in response.json()["error"]


def test_a_host_that_cannot_start_is_an_error(dashboard, core):
    assert post(dashboard.url, function(handler="no_such_module:handler")).status_code == 202
    assert bind(core, the_pod(core, "coach-mnist-worker-0").metadata.name, "node-1") == 201
    wait_for(lambda: dashboard.state("coach-mnist-worker-0") == "error", what="error")
    message = get(dashboard.url, "coach-mnist-worker-0").json()["status"]["message"]
    assert message.startswith("Failed to start the function: processor did not become ready (see ")


def test_a_function_without_a_token_refuses_every_request(dashboard, core, tmp_path):
    body = function()
    body["spec"]["env"] = []
    assert post(dashboard.url, body).status_code == 202
    ready(dashboard, core)  # the dashboard knows nothing of tokens, as Nuclio's
    for token in (TOKEN, ""):
        response = invoke(dashboard.url, "coach-mnist-worker-0", **{"X-Coach-Token": token})
        assert (response.status_code, response.json()) == (401, {"error": "missing or wrong token"})
    log = (tmp_path / "logs" / "mnist-worker-0.log").read_text()
    assert log.count("COACH_FUNCTION_TOKEN is not set: every request is refused with 401") == 2  # each worker


def test_readiness_timeout_makes_a_pending_function_unhealthy(dashboard, core):
    assert post(dashboard.url, function(readinessTimeoutSeconds=1)).status_code == 202
    wait_for(lambda: dashboard.state("coach-mnist-worker-0") == "unhealthy", timeout_s=5, what="unhealthy")
    message = get(dashboard.url, "coach-mnist-worker-0").json()["status"]["message"]
    assert message.startswith("Failed to wait for function resources to be available: pod nuclio-coach-mnist")


def unschedulable(core, pod_name: str) -> None:
    """What a scheduler writes on a pod it cannot place."""
    body = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                       "message": "0/3 nodes are available: gang waits"}]}}
    response = core.patch_namespaced_pod_status(pod_name, "default", body, _preload_content=False,
                                                _content_type="application/strategic-merge-patch+json")
    response.data  # noqa: B018 - read to its end before the connection goes back
    response.release_conn()


def test_unschedulable_fails_fast_unless_the_function_waits(kubeconfig, core, tmp_path):
    plain = tmp_path / "platform.yaml"  # schedulerName only: no waitReadinessTimeoutBeforeFailure
    plain.write_text(yaml.safe_dump({"functionAugmentedConfigs": [{
        "labelSelector": {"matchExpressions": [{"key": "coach.io/job", "operator": "Exists"}]},
        "kubernetes": {"deployment": {"spec": {"template": {"spec": {"schedulerName": SCHEDULER_NAME}}}}}}]}))
    with FakeDashboard(kubeconfig, log_dir=tmp_path / "logs", platform_config=plain) as dash:
        assert post(dash.url, function("waits", waitReadinessTimeoutBeforeFailure=True)).status_code == 202
        assert post(dash.url, function("fails")).status_code == 202
        for name in ("waits", "fails"):
            unschedulable(core, the_pod(core, name).metadata.name)
        wait_for(lambda: dash.state("fails") == "unhealthy", what="fails fast")
        assert get(dash.url, "fails").json()["status"]["message"].endswith("is unschedulable")
        assert dash.state("waits") == "configuringResources"
        assert bind(core, the_pod(core, "waits").metadata.name, "node-1") == 201
        wait_for(lambda: dash.state("waits") == "ready", what="waits, then ready")


def test_fault_hooks(dashboard):
    dashboard.fail_next("/api/functions", status=503, times=1)
    response = post(dashboard.url, function())
    assert response.status_code == 503 and response.json()["error"] == "injected failure"
    assert post(dashboard.url, function()).status_code == 202  # used up
    dashboard.hang("/api/functions", seconds=30)
    with pytest.raises(requests.Timeout):
        requests.get(f"{dashboard.url}/api/functions", timeout=0.3)
    assert requests.get(f"{dashboard.url}/api/functions", timeout=5).status_code == 200


# --------------------------------------------------------------------------- Nuclio's processes


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_each_trigger_worker_is_a_process_of_its_own_that_ran_init_context(dashboard, core, workers):
    assert post(dashboard.url, function(workers=workers)).status_code == 202
    ready(dashboard, core)
    answers = [init(dashboard.url) for _ in range(2 * workers)]
    processes = dashboard.processes("coach-mnist-worker-0")
    wrappers = processes["wrappers"]
    assert len(set(wrappers)) == workers and processes["processor"] not in wrappers
    # the worker free longest takes the next request (Nuclio's worker pool): each in turn, twice round
    assert [answer["pid"] for answer in answers] == wrappers * 2
    assert [answer["worker_id"] for answer in answers] == list(range(workers)) * 2
    assert all(answer["init_pid"] == answer["pid"] for answer in answers)  # init_context ran in that process
    assert {parent_of(pid) for pid in wrappers} == {processes["processor"]}


def test_a_request_goes_to_a_free_worker_while_another_is_busy(dashboard, core):
    ready(dashboard, core)
    first = init(dashboard.url)["pid"]  # worker 0; worker 1 is next
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(invoke, dashboard.url, "coach-mnist-worker-0", {"model": {"path": "sleep:4"}})
        time.sleep(0.5)  # worker 1 is in that event
        others = [init(dashboard.url)["pid"] for _ in range(3)]
        still_busy = not busy.done()
        assert busy.result(timeout=10).status_code == 200
    assert others == [first] * 3  # the free one, each time
    assert still_busy  # none of them waited for the busy worker: all were answered while its event ran


def test_the_pod_belongs_to_a_deployment_and_carries_the_functions_placement(dashboard, core):
    placement = {"nodeSelector": {"disk": "ssd"},
                 "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                     "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In",
                                                                  "values": ["a"]}]}]}}},
                 "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    assert post(dashboard.url, function(**placement)).status_code == 202
    pod = core.api_client.sanitize_for_serialization(the_pod(core, "coach-mnist-worker-0"))
    hashed = pod["metadata"]["labels"]["pod-template-hash"]
    assert re.fullmatch(rf"nuclio-coach-mnist-worker-0-{hashed}-[a-z0-9]{{5}}", pod["metadata"]["name"])
    owner, = pod["metadata"]["ownerReferences"]
    assert (owner["apiVersion"], owner["kind"], owner["name"], owner["controller"]) == \
        ("apps/v1", "Deployment", "nuclio-coach-mnist-worker-0", True)
    assert pod["spec"]["nodeSelector"] == placement["nodeSelector"]
    assert pod["spec"]["affinity"] == placement["affinity"]
    assert placement["tolerations"][0] in pod["spec"]["tolerations"]
    assert pod["spec"]["schedulerName"] == SCHEDULER_NAME  # and the platform config's part
    env = pod["spec"]["containers"][0]["env"]
    assert {"name": "COACH_FUNCTION_TOKEN", "value": TOKEN} in env  # the function's env, as Nuclio passes it


def test_a_deleted_pod_holds_its_node_until_its_processes_end(dashboard, core):
    ready(dashboard, core)
    processes = dashboard.processes("coach-mnist-worker-0")
    answered = {}

    def slow():
        response = invoke(dashboard.url, "coach-mnist-worker-0", {"model": {"path": "sleep:2"}})
        answered["at"], answered["status"] = time.monotonic(), response.status_code

    caller = threading.Thread(target=slow)
    caller.start()
    time.sleep(0.5)  # a wrapper is in its event
    assert delete(dashboard.url, "coach-mnist-worker-0").status_code == 204
    terminating = wait_for(lambda: [p for p in pods_of(core, "coach-mnist-worker-0")
                                    if p.metadata.deletion_timestamp is not None], what="pod Terminating")[0]
    assert terminating.spec.node_name == "node-1" and terminating.metadata.deletion_grace_period_seconds == 30
    while pods_of(core, "coach-mnist-worker-0"):  # the slot stays taken ...
        assert alive(processes["processor"]) or "at" in answered
        time.sleep(0.02)
    gone_at = time.monotonic()
    caller.join(timeout=10)
    assert answered["status"] == 200  # ... while the event finishes: the wrapper drains, then the pod goes
    assert gone_at >= answered["at"]
    assert not any(alive(pid) for pid in (processes["processor"], *processes["wrappers"]))


def test_the_grace_period_bounds_how_long_a_deleted_pod_stays(kubeconfig, core, tmp_path):
    short = tmp_path / "platform.yaml"
    short.write_text(yaml.safe_dump({"functionAugmentedConfigs": [{
        "labelSelector": {"matchExpressions": [{"key": "coach.io/job", "operator": "Exists"}]},
        "kubernetes": {"deployment": {"spec": {"template": {"spec": {
            "schedulerName": SCHEDULER_NAME, "terminationGracePeriodSeconds": 1}}}}}}]}))
    with FakeDashboard(kubeconfig, log_dir=tmp_path / "logs", platform_config=short) as dash:
        ready(dash, core)
        processes = dash.processes("coach-mnist-worker-0")
        with ThreadPoolExecutor(1) as pool:
            stuck = pool.submit(invoke, dash.url, "coach-mnist-worker-0", {"model": {"path": "sleep:30"}})
            time.sleep(0.5)
            assert delete(dash.url, "coach-mnist-worker-0").status_code == 204
            deleted = time.monotonic()
            wait_for(lambda: not pods_of(core, "coach-mnist-worker-0"), what="pod gone")
            took_s = time.monotonic() - deleted
            response = stuck.result(timeout=10)
    assert took_s >= 1.0, took_s  # the grace period first ...
    # ... then SIGKILL: the 30 s event ended with its wrapper, and the pod was deleted
    assert response.status_code == 500 and response.json()["error"].endswith(": EOF")
    assert not any(alive(pid) for pid in (processes["processor"], *processes["wrappers"]))


def test_a_dead_worker_process_fails_the_pod_and_a_new_pod_must_be_scheduled(dashboard, core):
    ready(dashboard, core)
    before = dashboard.processes("coach-mnist-worker-0")
    os.kill(before["wrappers"][1], signal.SIGKILL)
    wait_for(lambda: dashboard.state("coach-mnist-worker-0") == "unhealthy", what="unhealthy")
    assert get(dashboard.url, "coach-mnist-worker-0").json()["status"]["message"] == "Function is not healthy"
    wait_for(lambda: not alive(before["processor"]) and not alive(before["wrappers"][0]),
             what="the pod's processes end")
    pods = wait_for(lambda: len(pods_of(core, "coach-mnist-worker-0")) == 2 and pods_of(core, "coach-mnist-worker-0"),
                    what="a replacement pod")
    by_name = {pod.metadata.name: pod for pod in pods}
    old = by_name.pop(before["pod"])
    new, = by_name.values()
    assert old.status.phase == "Failed" and old.spec.node_name == "node-1"  # stays, as a failed pod does
    assert new.spec.node_name is None and new.status.phase == "Pending"  # to be scheduled again
    assert new.metadata.owner_references[0].uid == old.metadata.owner_references[0].uid
    assert bind(core, new.metadata.name, "node-2") == 201
    wait_for(lambda: dashboard.state("coach-mnist-worker-0") == "ready", what="ready again")
    after = dashboard.processes("coach-mnist-worker-0")
    assert (after["pod"], after["node"]) == (new.metadata.name, "node-2")
    assert not set(after["wrappers"]) & set(before["wrappers"])
    assert init(dashboard.url)["pid"] in after["wrappers"]


def test_a_pod_deleted_under_a_running_function_is_replaced_once_it_is_gone(dashboard, core):
    ready(dashboard, core)
    before = dashboard.processes("coach-mnist-worker-0")
    core.delete_namespaced_pod(before["pod"], "default")  # as `kubectl delete pod` would
    replacement = wait_for(lambda: [p for p in pods_of(core, "coach-mnist-worker-0")
                                    if p.metadata.name != before["pod"]], what="a replacement")[0]
    assert before["pod"] not in [p.metadata.name for p in pods_of(core, "coach-mnist-worker-0")]  # gone first
    assert replacement.spec.node_name is None
    assert get(dashboard.url, "coach-mnist-worker-0").json()["status"]["state"] == "unhealthy", \
        get(dashboard.url, "coach-mnist-worker-0").json()
    assert bind(core, replacement.metadata.name, "node-1") == 201
    wait_for(lambda: dashboard.state("coach-mnist-worker-0") == "ready", what="ready again")


@pytest.mark.slow  # a second Python that imports the kubernetes client: a few seconds
def test_runs_alone_and_stops_on_sigterm(kubeconfig, tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.nuclio_dashboard", "--kubeconfig", str(kubeconfig), "--port", "0",
         "--logs", str(tmp_path / "logs")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        line = process.stdout.readline()
        assert line.startswith("READY http://127.0.0.1:"), line + process.stderr.read()
        url = line.split()[1]
        assert post(url, function()).status_code == 202
        assert requests.get(f"{url}/api/functions/coach-mnist-worker-0", timeout=5).status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        stop_process(process)


def test_bad_command_line_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "tests.fakes.nuclio_dashboard", "--kubeconfig",
                             str(tmp_path / "missing"), "--logs", str(tmp_path)],
                            capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith(f"--kubeconfig {tmp_path / 'missing'}: no such file")
