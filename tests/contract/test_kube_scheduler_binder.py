"""The kube scheduler's Binder against the fake kube-apiserver: every HTTP outcome of a binding becomes a value.

The binder POSTs through the official client's connection pool (rest.JsonPoster), not the generated API, so
these pin what that path must still do: 201 -> bound, 409 -> conflict with the pod as it is now, 404 -> gone,
anything else (a 422, no apiserver) -> failed with a one-line detail; a follower sends nothing.
"""

from __future__ import annotations

import queue

import pytest

from coach.domain.identity import FunctionId, Role
from coach.fakes.kube_apiserver import FakeApiServer
from coach.kube_scheduler.binder import BOUND, CONFLICT, FAILED, GONE, NOT_LEADER, Binder
from coach.kube_scheduler.objects import pod_info
from coach.kube_scheduler.rest import read_json
from coach.placement.kube_connect import connect
from tests.contract.kube_scheduler_support import NS, Kube


@pytest.fixture
def fake():
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def kube(fake, tmp_path):
    api, _ = connect(str(fake.write_kubeconfig(tmp_path / "kubeconfig")))
    yield Kube(api)
    api.close()


def pending(kube: Kube, index: int):
    name = kube.pod(FunctionId("job", Role.WORKER, index))
    return pod_info(read_json(kube.core.read_namespaced_pod(name, NS, _preload_content=False)))


def outcomes(kube: Kube, binds, leader: bool = True, timeout_s: float = 5.0) -> list:
    got: queue.SimpleQueue = queue.SimpleQueue()
    binder = Binder(kube.api, lambda: leader, got.put, threads=2, timeout_s=timeout_s).start()
    try:
        for pod, node in binds:
            binder.bind(pod, node)
        return [got.get(timeout=20) for _ in binds]
    finally:
        binder.stop()


def test_a_binding_is_bound_then_a_second_one_conflicts_and_adopts_the_node(kube, fake):
    kube.node("n1", slots=4)
    pod = pending(kube, 0)
    [first] = outcomes(kube, [(pod, "n1")])
    assert (first.result, first.node, kube.nodes_of([pod.name])) == (BOUND, "n1", {pod.name: "n1"})
    assert first.answered_s >= first.decided_s > 0
    [second] = outcomes(kube, [(pod, "n2")])
    assert second.result == CONFLICT and second.current["spec"]["nodeName"] == "n1"
    assert fake.binding_attempts == [(NS, pod.name, 201), (NS, pod.name, 409)]


def test_a_pod_that_is_gone_and_a_refused_binding_are_told_apart(kube, fake):
    pod = pending(kube, 0)
    kube.core.delete_namespaced_pod(pod.name, NS)
    other = pending(kube, 1)
    gone, refused = outcomes(kube, [(pod, "n1"), (other, "")])  # "": the apiserver answers 422
    by_pod = {gone.pod.name: gone, refused.pod.name: refused}
    assert by_pod[pod.name].result == GONE
    assert (by_pod[other.name].result, by_pod[other.name].detail) == (FAILED, "HTTP 422 Unprocessable Entity")


def test_no_apiserver_is_a_failure_and_a_follower_sends_nothing(kube, fake):
    pod = pending(kube, 0)
    [not_leader] = outcomes(kube, [(pod, "n1")], leader=False)
    assert (not_leader.result, not_leader.answered_s, fake.binding_attempts) == (NOT_LEADER, 0.0, [])
    fake.stop()
    [failed] = outcomes(kube, [(pod, "n1")], timeout_s=2.0)
    assert failed.result == FAILED and failed.detail and "\n" not in failed.detail
