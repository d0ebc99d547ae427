"""The kube scheduler's Binder against the suite's real kube-apiserver: every HTTP outcome of a binding becomes a value.

The binder POSTs through the official client's connection pool (rest.JsonPoster), not the generated API, so
these pin what that path must still do: 201 -> bound, 409 -> conflict with the pod as it is now, 404 -> gone,
anything else (a 422, no apiserver) -> failed with a one-line detail; a follower sends nothing. Every binder
of the registry (threads in this process, threads of a child process) passes the same tests. What reached the
apiserver is read from its audit log.
"""

from __future__ import annotations

import http.server
import math
import os
import queue
import signal
import threading
import time

import pytest

from coach.domain.identity import FunctionId, Role
from coach.kube_scheduler.binder import BOUND, CONFLICT, FAILED, GONE, NOT_LEADER
from coach.kube_scheduler.loop import BINDERS
from coach.kube_scheduler.objects import pod_info
from coach.kube_scheduler.rest import read_json
from tests.contract.kube_scheduler_support import Kube, kube, wait_for  # noqa: F401 (a fixture)
from tests.controlplane.proxy import Relay


@pytest.fixture
def attempts(kube):
    """`attempts()`: (pod, HTTP status) of every binding of the test's namespace that reached the apiserver."""
    start = kube.plane.audit_lines()

    def read() -> list[tuple[str, int]]:
        return [(event["objectRef"]["name"], event["responseStatus"]["code"])
                for event in kube.plane.audit(start)
                if event.get("objectRef", {}).get("subresource") == "binding"
                and event["objectRef"].get("namespace") == kube.ns]

    return read


@pytest.fixture(params=sorted(BINDERS))
def binder_kind(request):
    return BINDERS[request.param]


def pending(kube: Kube, index: int):
    name = kube.pod(FunctionId("job", Role.WORKER, index))
    return pod_info(read_json(kube.core.read_namespaced_pod(name, kube.ns, _preload_content=False)))


def outcomes(binder_kind, kube: Kube, binds, leader: bool = True, timeout_s: float = 5.0, api=None) -> list:
    got: queue.SimpleQueue = queue.SimpleQueue()
    leads_until_s = math.inf if leader else 0.0
    binder = binder_kind(api or kube.api, lambda: leads_until_s, got.put, threads=2, timeout_s=timeout_s).start()
    try:
        for pod, node in binds:
            binder.bind(pod, node)
        return [got.get(timeout=20) for _ in binds]
    finally:
        binder.stop()


def test_a_binding_is_bound_then_a_second_one_conflicts_and_adopts_the_node(binder_kind, kube, attempts):
    n1 = kube.node("n1", slots=4)
    pod = pending(kube, 0)
    [first] = outcomes(binder_kind, kube, [(pod, n1)])
    assert (first.result, first.node, kube.nodes_of([pod.name])) == (BOUND, n1, {pod.name: "n1"})
    assert first.answered_s >= first.decided_s > 0
    [second] = outcomes(binder_kind, kube, [(pod, kube.node_name("n2"))])
    assert second.result == CONFLICT and second.current["spec"]["nodeName"] == n1
    wait_for("both in the audit log", lambda: len(attempts()) == 2)
    assert attempts() == [(pod.name, 201), (pod.name, 409)]


def test_a_pod_that_is_gone_and_a_refused_binding_are_told_apart(binder_kind, kube):
    pod = pending(kube, 0)
    kube.core.delete_namespaced_pod(pod.name, kube.ns)
    other = pending(kube, 1)
    gone, refused = outcomes(binder_kind, kube, [(pod, "n1"), (other, "")])  # "": kube-apiserver answers 500
    by_pod = {gone.pod.name: gone, refused.pod.name: refused}
    assert by_pod[pod.name].result == GONE
    assert (by_pod[other.name].result, by_pod[other.name].detail) == (FAILED, "HTTP 500 Internal Server Error")


def test_no_apiserver_is_a_failure_and_a_follower_sends_nothing(binder_kind, kube, attempts):
    pod = pending(kube, 0)
    [not_leader] = outcomes(binder_kind, kube, [(pod, "n1")], leader=False)
    assert (not_leader.result, not_leader.answered_s) == (NOT_LEADER, 0.0)
    relay = Relay(kube.plane.url).start()
    relay.cut()  # an apiserver that cannot be reached
    try:
        with kube.plane.client() as unreachable:
            unreachable.configuration.host = relay.url
            [failed] = outcomes(binder_kind, kube, [(pod, "n1")], timeout_s=2.0, api=unreachable)
    finally:
        relay.stop()
    assert failed.result == FAILED and failed.detail and "\n" not in failed.detail
    assert attempts() == []


def test_a_lost_leadership_stops_the_next_bindings_and_every_binding_gets_an_outcome(binder_kind, kube, attempts):
    n1 = kube.node("n1", slots=8)
    pods = [pending(kube, index) for index in range(4)]
    got: queue.SimpleQueue = queue.SimpleQueue()
    leads = {"until_s": math.inf}
    binder = binder_kind(kube.api, lambda: leads["until_s"], got.put, threads=2).start()
    try:
        binder.bind(pods[0], n1)
        assert got.get(timeout=20).result == BOUND
        leads["until_s"] = 0.0
        binder.leadership_changed()
        for pod in pods[1:]:
            binder.bind(pod, n1)
        later = [got.get(timeout=20) for _ in pods[1:]]
    finally:
        binder.stop()
    assert [o.result for o in later] == [NOT_LEADER] * 3
    assert [name for name, _ in attempts()] == [pods[0].name]
    assert binder.healthy()


def test_a_binding_process_that_dies_fails_later_bindings_and_turns_unhealthy(kube, attempts):
    n1 = kube.node("n1", slots=4)
    pod = pending(kube, 0)
    got: queue.SimpleQueue = queue.SimpleQueue()
    binder = BINDERS["process"](kube.api, lambda: math.inf, got.put, threads=2).start()
    try:
        os.kill(binder.pid, signal.SIGKILL)
        wait_for("the binder to see its process gone", lambda: not binder.healthy(), timeout_s=10)
        binder.bind(pod, n1)
        failed = got.get(timeout=20)
    finally:
        binder.stop()
    assert (failed.result, failed.detail) == (FAILED, "the binding process ended (exit code -9)")
    assert attempts() == []


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every POST 201 and records (path, Authorization) of each."""

    seen: list = []

    def do_POST(self):  # noqa: N802 - the base class's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append((self.path, self.headers.get("Authorization")))
        body = b'{"kind":"Status","apiVersion":"v1","status":"Success","code":201}'
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_the_binding_process_gets_the_credentials_a_kubeconfigs_refresh_hook_renews():
    """A kubeconfig with a token gives the client a refresh hook, a closure no pickle carries to the child: the
    child starts without it and the parent passes on every change of the credentials."""
    from kubernetes import client

    from coach.kube_scheduler.objects import PodInfo

    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = {"now": "Bearer one"}
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    configuration.api_key = {"BearerToken": token["now"]}

    def refresh(config):  # what the kubeconfig loader installs: a closure over the loader
        config.api_key["BearerToken"] = token["now"]

    configuration.refresh_api_key_hook = refresh
    api = client.ApiClient(configuration)
    got: queue.SimpleQueue = queue.SimpleQueue()
    binder = BINDERS["process"](api, lambda: math.inf, got.put, threads=1).start()
    try:
        def bind(index: int):
            binder.bind(PodInfo("ns", f"p{index}", f"uid{index}", None, None, None, None, False, False, "1"), "n1")
            return got.get(timeout=20)

        assert bind(0).result == BOUND
        token["now"] = "Bearer two"
        index = 1
        while _Recorder.seen[-1][1] != "Bearer two" and index < 60:
            time.sleep(0.2)
            assert bind(index).result == BOUND
            index += 1
    finally:
        binder.stop()
        server.shutdown()
        server.server_close()
        api.close()
    assert _Recorder.seen[0] == ("/api/v1/namespaces/ns/pods/p0/binding", "Bearer one")
    assert _Recorder.seen[-1][1] == "Bearer two"
