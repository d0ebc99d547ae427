"""tests.fakes.kube_apiserver: the fake kube-apiserver, driven by the official `kubernetes` client (and by
`requests` where the client hides the raw protocol) over loopback HTTP.

Each test pins one fact of the real apiserver's protocol that Coach's scheduler, its Nuclio platform and its
controller rely on: a binding is answered 201 with a `Status` (which the client cannot parse as a V1Binding), a
second binding gets 409, a watch from a forgotten revision gets one ERROR event with code 410, bookmarks
arrive, selectors filter lists and watches, a Lease update with a stale resourceVersion gets 409, and so on.
"""

from __future__ import annotations

import datetime
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from coach.domain.identity import JOB_LABEL, ROLE_LABEL
from coach.domain.kube import (LEASE_NAME, PODGROUP_GROUP, PODGROUP_KIND, PODGROUP_PLURAL, PODGROUP_VERSION,
                               POD_GROUP_LABEL, SCHEDULER_NAME)
from tests.fakes.kube_apiserver import FakeApiServer
from tests.support import stop_process

NS = "default"
BOOKMARK_INTERVAL_S = 0.2
HTTP_TIMEOUT_S = 10.0
ROOT = Path(__file__).resolve().parents[2]


# ---- fixtures and helpers --------------------------------------------------------------------------------------

@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval_s=BOOKMARK_INTERVAL_S) as server:
        yield server


@pytest.fixture
def kube(api: FakeApiServer, tmp_path: Path) -> Iterator[client.ApiClient]:
    """The official client, configured from the kubeconfig the fake writes."""
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(api.write_kubeconfig(tmp_path / "kubeconfig")), client_configuration=cfg)
    api_client = client.ApiClient(cfg)
    yield api_client
    api_client.close()
    api_client.rest_client.pool_manager.clear()


@pytest.fixture
def http(api: FakeApiServer) -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


def core(kube: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube)


def make_pod(kube: client.ApiClient, name: str, scheduler: str = SCHEDULER_NAME, labels: dict | None = None,
             namespace: str = NS) -> client.V1Pod:
    body = client.V1Pod(metadata=client.V1ObjectMeta(name=name, labels=labels),
                        spec=client.V1PodSpec(scheduler_name=scheduler,
                                              containers=[client.V1Container(name="fn", image="coach/fn:1")]))
    return core(kube).create_namespaced_pod(namespace, body)


def bind_raw(kube: client.ApiClient, pod: str, node: str, namespace: str = NS) -> tuple[int, dict]:
    """POST pods/<pod>/binding and read the raw answer, as a scheduler must."""
    body = client.V1Binding(metadata=client.V1ObjectMeta(name=pod), target=client.V1ObjectReference(kind="Node",
                                                                                                    name=node))
    try:
        resp = core(kube).create_namespaced_pod_binding(pod, namespace, body, _preload_content=False)
    except ApiException as exc:
        return exc.status, json.loads(exc.body)
    try:
        return resp.status, json.loads(resp.data)
    finally:
        resp.release_conn()


def post_json(http: requests.Session, url: str, body: Any, **kwargs: Any) -> requests.Response:
    return http.post(url, data=json.dumps(body), headers={"Content-Type": "application/json"},
                     timeout=HTTP_TIMEOUT_S, **kwargs)


def watch_lines(http: requests.Session, url: str, max_events: int, timeout_s: float = HTTP_TIMEOUT_S
                ) -> list[dict]:
    """Read up to `max_events` events from a raw watch stream (ends early when the server ends the stream)."""
    events = []
    with http.get(url, stream=True, timeout=timeout_s) as resp:
        assert resp.status_code == 200, resp.text
        assert resp.headers.get("Transfer-Encoding") == "chunked"
        for line in resp.iter_lines():
            if line:
                events.append(json.loads(line))
            if len(events) >= max_events:
                break
    return events


def pod_body(name: str, **spec: Any) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "fn", "image": "coach/fn:1"}], **spec}}


# ---- bindings --------------------------------------------------------------------------------------------------

def test_a_binding_is_answered_201_with_a_status_object_and_binds_the_pod(kube):
    make_pod(kube, "lenet-worker-0")
    code, body = bind_raw(kube, "lenet-worker-0", "node-1")
    assert code == 201
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    pod = core(kube).read_namespaced_pod("lenet-worker-0", NS)
    assert pod.spec.node_name == "node-1"
    scheduled = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert [(c.status, c.last_transition_time is not None) for c in scheduled] == [("True", True)]


def test_the_client_cannot_parse_the_binding_answer_as_a_v1binding(kube):
    """Why Coach's scheduler reads the raw response: the client deserializes the Status into a V1Binding."""
    make_pod(kube, "p")
    body = client.V1Binding(metadata=client.V1ObjectMeta(name="p"),
                            target=client.V1ObjectReference(kind="Node", name="node-1"))
    with pytest.raises(ValueError, match="target"):
        core(kube).create_namespaced_pod_binding("p", NS, body)
    assert core(kube).read_namespaced_pod("p", NS).spec.node_name == "node-1"  # the binding itself took effect


def test_a_second_binding_is_409_conflict_and_leaves_the_first(kube):
    make_pod(kube, "p")
    assert bind_raw(kube, "p", "node-1")[0] == 201
    code, body = bind_raw(kube, "p", "node-2")
    assert (code, body["kind"], body["status"], body["reason"], body["code"]) == (409, "Status", "Failure",
                                                                                  "Conflict", 409)
    assert body["message"] == 'Operation cannot be fulfilled on pods "p": pod p is already assigned to node "node-1"'
    assert core(kube).read_namespaced_pod("p", NS).spec.node_name == "node-1"


def test_binding_a_missing_pod_is_404_not_found(kube):
    code, body = bind_raw(kube, "ghost", "node-1")
    assert (code, body["reason"], body["message"], body["details"]) == (
        404, "NotFound", 'pods "ghost" not found', {"name": "ghost", "kind": "pods"})


def test_the_older_bindings_collection_binds_too(kube, api, http):
    make_pod(kube, "p")
    resp = post_json(http, f"{api.url}/api/v1/namespaces/{NS}/bindings",
                     {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"name": "n9"}})
    assert (resp.status_code, resp.json()["status"]) == (201, "Success")
    assert core(kube).read_namespaced_pod("p", NS).spec.node_name == "n9"


def test_a_binding_with_another_pods_uid_is_a_conflict(kube):
    make_pod(kube, "p")
    body = client.V1Binding(metadata=client.V1ObjectMeta(name="p", uid="not-the-uid"),
                            target=client.V1ObjectReference(kind="Node", name="n"))
    with pytest.raises(ApiException) as err:
        core(kube).create_namespaced_pod_binding("p", NS, body, _preload_content=False)
    assert err.value.status == 409
    assert "Precondition failed: UID in precondition: not-the-uid" in json.loads(err.value.body)["message"]


# ---- objects, errors and validation ----------------------------------------------------------------------------

def test_created_objects_get_uid_timestamp_defaults_and_a_rising_resource_version(kube):
    first = make_pod(kube, "a")
    second = make_pod(kube, "b", scheduler=None)
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)
    assert first.metadata.uid != second.metadata.uid and len(first.metadata.uid) == 36
    assert first.metadata.creation_timestamp is not None
    assert (first.status.phase, first.spec.scheduler_name, second.spec.scheduler_name) == (
        "Pending", SCHEDULER_NAME, "default-scheduler")


def test_generate_name_gives_a_unique_name_with_that_prefix(kube):
    body = client.V1Pod(metadata=client.V1ObjectMeta(generate_name="lenet-worker-"),
                        spec=client.V1PodSpec(containers=[client.V1Container(name="fn", image="i:1")]))
    names = {core(kube).create_namespaced_pod(NS, body).metadata.name for _ in range(20)}
    assert len(names) == 20
    assert all(n.startswith("lenet-worker-") and len(n) == len("lenet-worker-") + 5 for n in names)


def test_a_duplicate_name_is_409_already_exists(kube):
    make_pod(kube, "p")
    with pytest.raises(ApiException) as err:
        make_pod(kube, "p")
    status = json.loads(err.value.body)
    assert (err.value.status, status["reason"], status["message"]) == (409, "AlreadyExists", 'pods "p" already exists')


def test_a_missing_object_is_a_404_status(kube):
    with pytest.raises(ApiException) as err:
        client.CoordinationV1Api(kube).read_namespaced_lease("nobody", NS)
    status = json.loads(err.value.body)
    assert status == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": 'leases.coordination.k8s.io "nobody" not found', "reason": "NotFound",
                      "details": {"name": "nobody", "group": "coordination.k8s.io", "kind": "leases"}, "code": 404}


def test_a_pod_without_name_or_generate_name_is_422_invalid(api, http):
    resp = post_json(http, f"{api.url}/api/v1/namespaces/{NS}/pods",
                     {"metadata": {}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
    status = resp.json()
    assert (resp.status_code, status["reason"], status["details"]["causes"][0]["field"]) == (
        422, "Invalid", "metadata.name")
    assert "name or generateName is required" in status["message"]


@pytest.mark.parametrize("body, why", [
    ({"metadata": {"name": "Bad_Name"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, "metadata.name"),
    ({"metadata": {"name": "nocontainers"}, "spec": {}}, "spec.containers"),
])
def test_invalid_pods_are_422_naming_the_field(api, http, body, why):
    resp = post_json(http, f"{api.url}/api/v1/namespaces/{NS}/pods", body)
    assert resp.status_code == 422
    assert resp.json()["details"]["causes"][0]["field"] == why


@pytest.mark.parametrize("method, path, data, headers, code, reason", [
    ("POST", "/api/v1/namespaces/default/pods", b"{not json", {"Content-Type": "application/json"}, 400, "BadRequest"),
    ("POST", "/api/v1/namespaces/default/pods", b"[1, 2]", {"Content-Type": "application/json"}, 400, "BadRequest"),
    ("POST", "/api/v1/namespaces/default/pods", b'{"kind": "Node", "metadata": {"name": "x"}}',
     {"Content-Type": "application/json"}, 400, "BadRequest"),
    ("GET", "/api/v1/namespaces/default/widgets", None, {}, 404, "NotFound"),
    ("GET", "/apis/nothing.example.com/v1", None, {}, 404, "NotFound"),
    ("GET", "/no/such/path", None, {}, 404, "NotFound"),
    ("PUT", "/api/v1/namespaces/default/pods", b"{}", {"Content-Type": "application/json"}, 405, "MethodNotAllowed"),
    ("POST", "/api/v1/pods", b"{}", {"Content-Type": "application/json"}, 405, "MethodNotAllowed"),
    ("DELETE", "/api/v1/namespaces", None, {}, 405, "MethodNotAllowed"),
    ("POST", "/api/v1/namespaces/default/pods", b"<pod/>", {"Content-Type": "application/xml"}, 415,
     "UnsupportedMediaType"),
    ("GET", "/api/v1/pods?labelSelector=a%20in%20(", None, {}, 400, "BadRequest"),
    ("GET", "/api/v1/pods?fieldSelector=spec.color%3Dred", None, {}, 400, "BadRequest"),
    ("GET", "/api/v1/pods?watch=1&resourceVersion=abc", None, {}, 400, "BadRequest"),
])
def test_bad_requests_get_the_right_status(api, http, method, path, data, headers, code, reason):
    resp = http.request(method, api.url + path, data=data, headers=headers, timeout=HTTP_TIMEOUT_S)
    assert resp.status_code == code, resp.text
    status = resp.json()
    assert (status["kind"], status["status"], status["reason"], status["code"]) == ("Status", "Failure", reason, code)
    assert "\n" not in status["message"] and "Traceback" not in status["message"]


def test_a_body_over_the_limit_is_413_and_the_server_still_serves(api, http):
    resp = http.post(f"{api.url}/api/v1/namespaces/{NS}/pods", data=b"x" * (3 * 1024 * 1024 + 1),
                     headers={"Content-Type": "application/json"}, timeout=HTTP_TIMEOUT_S)
    assert (resp.status_code, resp.json()["reason"]) == (413, "RequestEntityTooLarge")
    assert http.get(f"{api.url}/api/v1/namespaces/{NS}/pods", timeout=HTTP_TIMEOUT_S).status_code == 200


def raw_exchange(api: FakeApiServer, request: bytes, responses: int = 1) -> list[tuple[str, dict]]:
    """Send raw bytes on one connection and read `responses` answers: (status line, JSON body)."""
    answers = []
    with socket.create_connection((api.host, api.port), timeout=HTTP_TIMEOUT_S) as sock, \
            sock.makefile("rb") as stream:
        sock.sendall(request)
        for _ in range(responses):
            status = stream.readline().decode().strip()
            headers = {}
            while (line := stream.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            answers.append((status, json.loads(stream.read(int(headers["content-length"])))))
    return answers


@pytest.mark.parametrize("request_bytes, code, message", [
    (b"GARBAGE\r\n\r\n", 400, "bad request line 'GARBAGE'"),
    (b"GET /api HTTP/1.1\r\nno-colon-here\r\n\r\n", 400, "malformed request header"),
    (b"POST /api/v1/namespaces/default/pods HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400,
     "Content-Length is not a size: '-5'"),
    (b"GET /api HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431, "a request header line is too long"),
])
def test_malformed_http_gets_a_one_line_status(api, request_bytes, code, message):
    [(status_line, status)] = raw_exchange(api, request_bytes)
    assert status_line.startswith(f"HTTP/1.1 {code} ")
    assert status["code"] == code and status["message"].startswith(message) and "\n" not in status["message"]


def test_one_connection_carries_many_requests_and_chunked_bodies(api):
    """Keep-alive (HTTP/1.1) and a chunked request body, as Go's client sends when it does not know the length."""
    body = json.dumps(pod_body("chunked")).encode()
    chunked = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (10, body[:10], len(body) - 10, body[10:])
    answers = raw_exchange(api, b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n"
                                b"POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\n"
                                b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked +
                                b"GET /api/v1/namespaces/default/pods/chunked HTTP/1.1\r\nHost: x\r\n\r\n", 3)
    assert [a[0] for a in answers] == ["HTTP/1.1 200 OK", "HTTP/1.1 201 Created", "HTTP/1.1 200 OK"]
    assert answers[2][1]["metadata"]["name"] == "chunked"


def test_objects_need_an_existing_namespace_and_go_with_it(kube):
    with pytest.raises(ApiException) as err:
        make_pod(kube, "p", namespace="coach")
    assert (err.value.status, json.loads(err.value.body)["message"]) == (404, 'namespaces "coach" not found')
    core(kube).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="coach")))
    make_pod(kube, "p", namespace="coach")
    core(kube).delete_namespace("coach")
    assert core(kube).list_pod_for_all_namespaces().items == []


def test_deleting_a_pod_removes_it_at_once(kube):
    make_pod(kube, "p")
    gone = core(kube).delete_namespaced_pod("p", NS)
    assert gone.metadata.name == "p"
    with pytest.raises(ApiException) as err:
        core(kube).read_namespaced_pod("p", NS)
    assert err.value.status == 404


def test_delete_honours_uid_preconditions(kube):
    make_pod(kube, "p")
    with pytest.raises(ApiException) as err:
        core(kube).delete_namespaced_pod("p", NS, body=client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid="someone-else")))
    assert err.value.status == 409
    assert core(kube).read_namespaced_pod("p", NS).metadata.name == "p"


def test_delete_collection_removes_what_the_selector_picks(kube):
    make_pod(kube, "a", labels={JOB_LABEL: "lenet"})
    make_pod(kube, "b", labels={JOB_LABEL: "resnet"})
    core(kube).delete_collection_namespaced_pod(NS, label_selector=f"{JOB_LABEL}=lenet")
    assert [p.metadata.name for p in core(kube).list_namespaced_pod(NS).items] == ["b"]


# ---- lists and selectors ---------------------------------------------------------------------------------------

def test_lists_carry_the_current_resource_version_and_survive_limit_and_continue(kube):
    make_pod(kube, "a")
    last = make_pod(kube, "b")
    listed = core(kube).list_namespaced_pod(NS, limit=1, _continue="")
    assert listed.metadata.resource_version == last.metadata.resource_version
    assert sorted(p.metadata.name for p in listed.items) == ["a", "b"]  # the fake ignores limit: all in one page


def test_field_selectors_on_scheduler_name_and_node_name(kube):
    make_pod(kube, "mine-bound")
    make_pod(kube, "mine-pending")
    make_pod(kube, "theirs", scheduler="default-scheduler")
    bind_raw(kube, "mine-bound", "node-1")

    def names(selector: str) -> list[str]:
        return [p.metadata.name for p in core(kube).list_pod_for_all_namespaces(field_selector=selector).items]

    assert names(f"spec.schedulerName={SCHEDULER_NAME}") == ["mine-bound", "mine-pending"]
    assert names(f"spec.schedulerName={SCHEDULER_NAME},spec.nodeName=") == ["mine-pending"]
    assert names("spec.nodeName==node-1") == ["mine-bound"]
    assert names("spec.nodeName!=") == ["mine-bound"]
    assert names(f"spec.schedulerName!={SCHEDULER_NAME},status.phase=Pending") == ["theirs"]
    assert names("metadata.name=theirs,metadata.namespace=default") == ["theirs"]


def test_label_selectors_in_every_form(kube):
    make_pod(kube, "s", labels={JOB_LABEL: "lenet", ROLE_LABEL: "scheduler"})
    make_pod(kube, "w", labels={JOB_LABEL: "lenet", ROLE_LABEL: "worker", POD_GROUP_LABEL: "lenet"})
    make_pod(kube, "x", labels={JOB_LABEL: "resnet", ROLE_LABEL: "worker"})
    make_pod(kube, "n")

    def names(selector: str) -> list[str]:
        return [p.metadata.name for p in core(kube).list_namespaced_pod(NS, label_selector=selector).items]

    assert names(f"{JOB_LABEL}=lenet") == ["s", "w"]
    assert names(f"{JOB_LABEL}==lenet,{ROLE_LABEL}=worker") == ["w"]
    assert names(f"{JOB_LABEL}!=lenet") == ["n", "x"]
    assert names(f"{JOB_LABEL} in (lenet, resnet)") == ["s", "w", "x"]
    assert names(f"{ROLE_LABEL} notin (worker)") == ["n", "s"]
    assert names(POD_GROUP_LABEL) == ["w"]
    assert names(f"!{JOB_LABEL}") == ["n"]


def test_events_are_listed_by_involved_object_and_seen_through_both_apis(kube):
    pod = make_pod(kube, "lenet-worker-0")
    other = make_pod(kube, "other")
    now = datetime.datetime.now(datetime.timezone.utc)
    for target, message in ((pod, "gang: waiting for quorum 1/3"), (other, "unrelated")):
        core(kube).create_namespaced_event(NS, client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{target.metadata.name}."), reason="FailedScheduling",
            message=message, type="Warning", first_timestamp=now, last_timestamp=now, count=1, event_time=now,
            source=client.V1EventSource(component=SCHEDULER_NAME),
            involved_object=client.V1ObjectReference(kind="Pod", namespace=NS, name=target.metadata.name,
                                                     uid=target.metadata.uid, api_version="v1")))
    client.EventsV1Api(kube).create_namespaced_event(NS, client.EventsV1Event(
        metadata=client.V1ObjectMeta(generate_name="lenet-worker-0."), event_time=now, reason="FailedScheduling",
        note="gang: still waiting", type="Warning", action="Scheduling", reporting_controller=SCHEDULER_NAME,
        reporting_instance="replica-a",
        regarding=client.V1ObjectReference(kind="Pod", namespace=NS, name=pod.metadata.name, uid=pod.metadata.uid)))

    selector = f"involvedObject.name={pod.metadata.name},involvedObject.namespace={NS},involvedObject.uid={pod.metadata.uid}"
    events = core(kube).list_namespaced_event(NS, field_selector=selector).items
    assert sorted(e.message for e in events) == ["gang: still waiting", "gang: waiting for quorum 1/3"]
    assert {e.reason for e in events} == {"FailedScheduling"}
    # (the client refuses events.k8s.io events without an eventTime, so the core events above carry one too)
    new_api = client.EventsV1Api(kube).list_namespaced_event(NS, field_selector=f"regarding.name={pod.metadata.name}")
    assert sorted(e.note for e in new_api.items) == ["gang: still waiting", "gang: waiting for quorum 1/3"]
    assert {e.deprecated_source.component for e in new_api.items if e.deprecated_source} == {SCHEDULER_NAME}


# ---- watches ---------------------------------------------------------------------------------------------------

def test_a_watch_replays_changes_after_a_resource_version_then_streams_live_ones(kube, api, http):
    start = core(kube).list_namespaced_pod(NS).metadata.resource_version
    make_pod(kube, "p")
    bind_raw(kube, "p", "node-1")

    def later() -> None:
        core(kube).delete_namespaced_pod("p", NS)

    timer = threading.Timer(0.2, later)
    timer.start()
    try:
        events = watch_lines(http, f"{api.url}/api/v1/namespaces/{NS}/pods?watch=true&resourceVersion={start}", 3)
    finally:
        timer.join()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "p"), ("MODIFIED", "p"), ("DELETED", "p")]
    assert events[1]["object"]["spec"]["nodeName"] == "node-1"
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_a_watch_without_a_resource_version_starts_with_the_current_objects(kube):
    make_pod(kube, "a")
    make_pod(kube, "b")
    seen = [(e["type"], e["object"].metadata.name)
            for e in watch.Watch().stream(core(kube).list_namespaced_pod, NS, timeout_seconds=1)]
    assert seen == [("ADDED", "a"), ("ADDED", "b")]


def test_deleted_events_reach_the_client_watch(kube):
    rv = make_pod(kube, "p").metadata.resource_version
    core(kube).delete_namespaced_pod("p", NS)
    seen = [(e["type"], e["object"].metadata.name)
            for e in watch.Watch().stream(core(kube).list_namespaced_pod, NS, resource_version=rv, timeout_seconds=1)]
    assert seen == [("DELETED", "p")]


def test_a_watch_from_a_compacted_revision_gets_one_error_event_410_and_ends(kube, api, http):
    rv = make_pod(kube, "p").metadata.resource_version
    make_pod(kube, "q")
    api.compact()
    events = watch_lines(http, f"{api.url}/api/v1/namespaces/{NS}/pods?watch=1&resourceVersion={rv}", 5)
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith(f"too old resource version: {rv}")


def test_the_client_watch_raises_410_so_the_caller_relists(kube, api):
    rv = make_pod(kube, "p").metadata.resource_version
    make_pod(kube, "q")
    api.compact()
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(core(kube).list_namespaced_pod, NS, resource_version=rv, timeout_seconds=2))
    assert err.value.status == 410
    # the relist that follows gives a revision the watch accepts
    fresh = core(kube).list_namespaced_pod(NS).metadata.resource_version
    assert list(watch.Watch().stream(core(kube).list_namespaced_pod, NS, resource_version=fresh,
                                     timeout_seconds=1)) == []


def test_a_watch_that_falls_behind_the_bounded_history_gets_410(tmp_path):
    with FakeApiServer(watch_history=5) as small, requests.Session() as http:
        rv = small.store.resource_version
        for i in range(6):
            assert post_json(http, f"{small.url}/api/v1/namespaces/{NS}/pods", pod_body(f"p{i}")).status_code == 201
        events = watch_lines(http, f"{small.url}/api/v1/pods?watch=1&resourceVersion={rv}", 5)
        assert [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)]
        newest = small.store.resource_version - 5  # the five kept changes still replay
        events = watch_lines(http, f"{small.url}/api/v1/pods?watch=1&resourceVersion={newest}&timeoutSeconds=1", 9)
        assert [e["object"]["metadata"]["name"] for e in events] == [f"p{i}" for i in range(1, 6)]


def test_bookmarks_arrive_with_only_a_resource_version(kube, api, http):
    rv = make_pod(kube, "p").metadata.resource_version
    started = time.monotonic()
    events = watch_lines(http, f"{api.url}/api/v1/namespaces/{NS}/pods?watch=1&allowWatchBookmarks=true"
                               f"&resourceVersion={rv}", 2)
    assert [e["type"] for e in events] == ["BOOKMARK", "BOOKMARK"]
    assert events[0]["object"] == {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": rv}}
    assert time.monotonic() - started >= BOOKMARK_INTERVAL_S


def test_the_client_watch_follows_bookmarks(kube):
    rv = make_pod(kube, "p").metadata.resource_version
    make_pod(kube, "q")
    w = watch.Watch()
    kinds = [e["type"] for e in w.stream(core(kube).list_namespaced_pod, NS, resource_version=rv,
                                         allow_watch_bookmarks=True, timeout_seconds=1)]
    assert kinds[0] == "ADDED" and "BOOKMARK" in kinds
    assert int(w.resource_version) > int(rv)


def test_no_bookmarks_unless_asked(kube, api, http):
    rv = make_pod(kube, "p").metadata.resource_version
    assert watch_lines(http, f"{api.url}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=1", 10) == []


def test_timeout_seconds_ends_the_stream(kube, api, http):
    make_pod(kube, "p")
    started = time.monotonic()
    events = watch_lines(http, f"{api.url}/api/v1/pods?watch=1&resourceVersion=1&timeoutSeconds=1", 100, timeout_s=5)
    assert [e["object"]["metadata"]["name"] for e in events] == ["p"]  # then the server ended the stream
    assert 1.0 <= time.monotonic() - started < 4.0


def test_a_watch_with_selectors_sees_objects_enter_and_leave_them(kube, api, http):
    """A pending-pods watch (spec.nodeName=) sees a binding as DELETED; a node's watch sees it as ADDED."""
    rv = make_pod(kube, "p").metadata.resource_version
    make_pod(kube, "other", scheduler="default-scheduler")
    bind_raw(kube, "p", "node-1")
    base = f"{api.url}/api/v1/pods?watch=1&resourceVersion={int(rv) - 1}&timeoutSeconds=1&fieldSelector="
    pending = watch_lines(http, base + f"spec.schedulerName%3D{SCHEDULER_NAME},spec.nodeName%3D", 10)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in pending] == [("ADDED", "p"), ("DELETED", "p")]
    on_node = watch_lines(http, base + "spec.nodeName%3Dnode-1", 10)
    assert [(e["type"], e["object"]["spec"]["nodeName"]) for e in on_node] == [("ADDED", "node-1")]


def test_a_watch_filters_by_label_and_namespace(kube, api, http):
    core(kube).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="coach")))
    rv = core(kube).list_namespaced_pod(NS).metadata.resource_version
    make_pod(kube, "mine", labels={JOB_LABEL: "lenet"}, namespace="coach")
    make_pod(kube, "wrong-ns", labels={JOB_LABEL: "lenet"})
    make_pod(kube, "wrong-job", labels={JOB_LABEL: "resnet"}, namespace="coach")
    events = watch_lines(http, f"{api.url}/api/v1/namespaces/coach/pods?watch=1&resourceVersion={rv}"
                               f"&timeoutSeconds=1&labelSelector={JOB_LABEL}%3Dlenet", 10)
    assert [e["object"]["metadata"]["name"] for e in events] == ["mine"]


def test_many_watches_at_once_each_see_every_change(kube, api):
    rv = core(kube).list_namespaced_pod(NS).metadata.resource_version
    results: list[list[str]] = []

    def watcher() -> None:
        with requests.Session() as session:
            events = watch_lines(session, f"{api.url}/api/v1/pods?watch=1&resourceVersion={rv}", 20)
        results.append([e["object"]["metadata"]["name"] for e in events])

    threads = [threading.Thread(target=watcher) for _ in range(8)]
    for t in threads:
        t.start()
    for i in range(20):
        make_pod(kube, f"p{i:02d}")
    for t in threads:
        t.join(timeout=HTTP_TIMEOUT_S)
    assert results == [[f"p{i:02d}" for i in range(20)]] * 8


# ---- updates, patches, status ----------------------------------------------------------------------------------

def test_a_lease_update_with_a_stale_resource_version_is_409(kube):
    leases = client.CoordinationV1Api(kube)
    now = datetime.datetime.now(datetime.timezone.utc)
    created = leases.create_namespaced_lease(NS, client.V1Lease(
        metadata=client.V1ObjectMeta(name=LEASE_NAME),
        spec=client.V1LeaseSpec(holder_identity="replica-a", lease_duration_seconds=15, acquire_time=now,
                                renew_time=now)))
    # replica a renews with the version it read: accepted, new version
    created.spec.renew_time = now + datetime.timedelta(seconds=5)
    renewed = leases.replace_namespaced_lease(LEASE_NAME, NS, created)
    assert int(renewed.metadata.resource_version) > int(created.metadata.resource_version)
    # replica b tries to take over with the version it read before the renewal: refused
    stale = created
    stale.spec.holder_identity = "replica-b"
    with pytest.raises(ApiException) as err:
        leases.replace_namespaced_lease(LEASE_NAME, NS, stale)
    status = json.loads(err.value.body)
    assert (err.value.status, status["reason"]) == (409, "Conflict")
    assert "the object has been modified" in status["message"]
    assert leases.read_namespaced_lease(LEASE_NAME, NS).spec.holder_identity == "replica-a"


def test_a_patch_naming_a_stale_resource_version_is_409(kube):
    leases = client.CoordinationV1Api(kube)
    lease = leases.create_namespaced_lease(NS, client.V1Lease(metadata=client.V1ObjectMeta(name="l"),
                                                              spec=client.V1LeaseSpec(holder_identity="a")))
    leases.patch_namespaced_lease("l", NS, {"spec": {"leaseDurationSeconds": 10}})
    with pytest.raises(ApiException) as err:
        leases.patch_namespaced_lease("l", NS, {"metadata": {"resourceVersion": lease.metadata.resource_version},
                                                "spec": {"holderIdentity": "b"}})
    assert err.value.status == 409
    got = leases.read_namespaced_lease("l", NS).spec
    assert (got.holder_identity, got.lease_duration_seconds) == ("a", 10)


def test_the_client_sends_strategic_merge_for_dicts_and_conditions_merge_by_type(kube, api, http):
    make_pod(kube, "p")
    bind_raw(kube, "p", "node-1")
    patched = core(kube).patch_namespaced_pod_status("p", NS, {"status": {
        "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    assert patched.status.phase == "Running"
    assert sorted((c.type, c.status) for c in patched.status.conditions) == [("PodScheduled", "True"),
                                                                             ("Ready", "True")]
    # the same document as a merge patch replaces the list
    resp = http.patch(f"{api.url}/api/v1/namespaces/{NS}/pods/p/status",
                      data=json.dumps({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
                      headers={"Content-Type": "application/merge-patch+json"}, timeout=HTTP_TIMEOUT_S)
    assert [(c["type"], c["status"]) for c in resp.json()["status"]["conditions"]] == [("Ready", "False")]


def test_a_json_patch_applies_its_operations_and_a_failed_test_is_422(kube):
    make_pod(kube, "p", labels={"a": "1"})
    patched = core(kube).patch_namespaced_pod("p", NS, [{"op": "add", "path": "/metadata/labels/b", "value": "2"},
                                                        {"op": "remove", "path": "/metadata/labels/a"}])
    assert patched.metadata.labels == {"b": "2"}
    with pytest.raises(ApiException) as err:
        core(kube).patch_namespaced_pod("p", NS, [{"op": "test", "path": "/metadata/labels/b", "value": "9"}])
    assert err.value.status == 422


def test_the_status_subresource_and_the_main_resource_each_change_only_their_part(kube):
    pod = make_pod(kube, "p")
    pod.status.phase = "Running"
    pod.metadata.labels = {"changed": "yes"}
    updated = core(kube).replace_namespaced_pod_status("p", NS, pod)
    assert (updated.status.phase, updated.metadata.labels) == ("Running", None)
    updated.status.phase = "Failed"
    updated.metadata.labels = {"changed": "yes"}
    again = core(kube).replace_namespaced_pod("p", NS, updated)
    assert (again.status.phase, again.metadata.labels) == ("Running", {"changed": "yes"})
    assert core(kube).read_namespaced_pod_status("p", NS).status.phase == "Running"


def test_podgroups_through_custom_objects_api(kube, api, http):
    groups = client.CustomObjectsApi(kube)
    args = (PODGROUP_GROUP, PODGROUP_VERSION, NS, PODGROUP_PLURAL)
    body = {"apiVersion": f"{PODGROUP_GROUP}/{PODGROUP_VERSION}", "kind": PODGROUP_KIND,
            "metadata": {"name": "lenet", "labels": {JOB_LABEL: "lenet"}}, "spec": {"minMember": 3},
            "status": {"phase": "Ignored"}}
    created = groups.create_namespaced_custom_object(*args, body)
    assert "status" not in created  # a custom resource with a status subresource ignores status on create
    assert created["metadata"]["generation"] == 1
    assert groups.get_namespaced_custom_object(*args, "lenet")["spec"] == {"minMember": 3}
    assert [g["metadata"]["name"] for g in groups.list_namespaced_custom_object(
        *args, label_selector=f"{JOB_LABEL}=lenet")["items"]] == ["lenet"]
    patched = groups.patch_namespaced_custom_object(*args, "lenet", {"spec": {"minMember": 4}})
    assert (patched["spec"]["minMember"], patched["metadata"]["generation"]) == (4, 2)
    with_status = groups.patch_namespaced_custom_object_status(*args, "lenet", {"status": {"phase": "Running",
                                                                                           "scheduled": 4}})
    assert with_status["status"] == {"phase": "Running", "scheduled": 4}
    assert with_status["metadata"]["generation"] == 2  # status does not bump the generation
    stale = dict(created, spec={"minMember": 9})
    with pytest.raises(ApiException) as err:
        groups.replace_namespaced_custom_object(*args, "lenet", stale)
    assert err.value.status == 409
    no_version = {k: v for k, v in with_status.items() if k != "metadata"} | {"metadata": {"name": "lenet"}}
    with pytest.raises(ApiException) as err:
        groups.replace_namespaced_custom_object(*args, "lenet", no_version)
    assert err.value.status == 422  # custom resources need a resourceVersion on update
    resp = http.patch(f"{api.url}/apis/{PODGROUP_GROUP}/{PODGROUP_VERSION}/namespaces/{NS}/{PODGROUP_PLURAL}/lenet",
                      data="{}", headers={"Content-Type": "application/strategic-merge-patch+json"},
                      timeout=HTTP_TIMEOUT_S)
    assert resp.status_code == 415  # as on the apiserver: no strategic merge for custom resources
    rv = groups.list_namespaced_custom_object(*args)["metadata"]["resourceVersion"]
    groups.delete_namespaced_custom_object(*args, "lenet")
    events = list(watch.Watch().stream(groups.list_namespaced_custom_object, *args, resource_version=rv,
                                       timeout_seconds=1))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("DELETED", "lenet")]
    assert groups.list_namespaced_custom_object(*args)["items"] == []


# ---- discovery, tables, lifecycle ------------------------------------------------------------------------------

def test_discovery_names_every_served_resource(api, http):
    get = lambda path: http.get(api.url + path, timeout=HTTP_TIMEOUT_S).json()  # noqa: E731
    assert get("/version")["major"] == "1"
    assert get("/api")["versions"] == ["v1"]
    assert {g["name"] for g in get("/apis")["groups"]} == {"coordination.k8s.io", "events.k8s.io", PODGROUP_GROUP}
    core_names = {r["name"]: r for r in get("/api/v1")["resources"]}
    assert {"pods", "pods/binding", "pods/status", "nodes", "namespaces", "events"} <= set(core_names)
    assert (core_names["pods"]["shortNames"], core_names["pods"]["namespaced"], core_names["nodes"]["namespaced"]) == (
        ["po"], True, False)
    assert "watch" in core_names["pods"]["verbs"] and core_names["pods/binding"]["verbs"] == ["create"]
    groups = get(f"/apis/{PODGROUP_GROUP}/{PODGROUP_VERSION}")
    assert [r["name"] for r in groups["resources"]] == [PODGROUP_PLURAL, f"{PODGROUP_PLURAL}/status"]


def test_kubectl_style_requests_get_a_server_side_table(kube, api, http):
    make_pod(kube, "lenet-worker-0")
    make_pod(kube, "lenet-server-0")
    bind_raw(kube, "lenet-server-0", "node-1")
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
    table = http.get(f"{api.url}/api/v1/namespaces/{NS}/pods?limit=500", headers={"Accept": accept},
                     timeout=HTTP_TIMEOUT_S).json()
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert columns[:5] == ["Name", "Ready", "Status", "Restarts", "Age"] and "Node" in columns
    rows = {r["cells"][0]: dict(zip(columns, r["cells"])) for r in table["rows"]}
    assert (rows["lenet-server-0"]["Node"], rows["lenet-worker-0"]["Node"]) == ("node-1", "<none>")
    assert rows["lenet-worker-0"]["Status"] == "Pending" and rows["lenet-worker-0"]["Ready"] == "0/1"
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


def test_stop_ends_watches_and_leaves_no_thread(tmp_path):
    before = {t.ident for t in threading.enumerate()}
    server = FakeApiServer().start()
    session = requests.Session()
    with session.get(f"{server.url}/api/v1/pods?watch=1", stream=True, timeout=HTTP_TIMEOUT_S) as resp:
        assert resp.status_code == 200
        assert session.get(f"{server.url}/api/v1/nodes", timeout=HTTP_TIMEOUT_S).status_code == 200  # idle keep-alive
        server.stop()
        assert list(resp.iter_lines()) == []  # the stream ended cleanly
    session.close()
    assert {t.ident for t in threading.enumerate()} == before
    server.stop()  # twice is fine


def test_the_standalone_server_prints_ready_serves_and_stops_on_sigterm(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen([sys.executable, "-m", "tests.fakes.kube_apiserver", "--kubeconfig", str(kubeconfig)],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("READY http://127.0.0.1:"), process.stderr.read()
        url = line.split()[1]
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        assert cfg.host == url
        with requests.get(f"{url}/api/v1/namespaces/default", timeout=HTTP_TIMEOUT_S) as resp:
            assert resp.json()["status"]["phase"] == "Active"
        process.terminate()
        assert process.wait(timeout=HTTP_TIMEOUT_S) == 0
    finally:
        stop_process(process)


def test_the_standalone_server_reports_a_taken_port_in_one_line(api):
    result = subprocess.run([sys.executable, "-m", "tests.fakes.kube_apiserver", "--port", str(api.port)], cwd=ROOT,
                            capture_output=True, text=True, timeout=HTTP_TIMEOUT_S)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: cannot start the fake apiserver")
