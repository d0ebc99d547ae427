"""Leader election over a coordination.k8s.io/v1 Lease on the suite's real kube-apiserver: never two leaders at once."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from coach.domain.kube import LEASE_NAME
from coach.kube_scheduler.leader import LeaseElector
from tests.contract.kube_scheduler_support import wait_for


@pytest.fixture
def api(control_plane):
    with control_plane.client() as api:
        yield api


@pytest.fixture
def ns(kube_namespace):
    return kube_namespace


@pytest.fixture
def electors(api, ns):
    made = []

    def make(identity: str, lease_duration_s: float = 1.0) -> LeaseElector:
        elector = LeaseElector(api, ns, identity, lease_duration_s)
        made.append(elector)
        return elector

    yield make
    for elector in made:
        elector.stop(release=False)


def lease(api, ns) -> client.V1Lease:
    return client.CoordinationV1Api(api).read_namespaced_lease(LEASE_NAME, ns)


def test_a_crashed_leaders_lease_is_taken_only_after_it_expired_and_never_by_two_at_once(api, electors, ns):
    first = electors("first").start()
    wait_for("the first to lead", first.is_leader)
    second = electors("second").start()
    deadline = time.monotonic() + 1.5  # several renewals and several tries of the second
    while time.monotonic() < deadline:
        assert first.is_leader() and not second.is_leader()
        time.sleep(0.01)
    renewed_s = lease(api, ns).spec.renew_time.timestamp()
    first.stop(release=False)  # a crash: the Lease stays as it was
    assert not first.is_leader()
    wait_for("the second to lead", second.is_leader, timeout_s=5)
    taken = lease(api, ns).spec
    assert taken.holder_identity == "second"
    assert taken.acquire_time.timestamp() >= renewed_s + 1.0  # not before renewTime + leaseDurationSeconds
    assert taken.lease_transitions == 1


def test_a_leader_whose_lease_was_taken_stops_leading_at_its_next_renewal(api, electors, ns):
    leader = electors("leader", lease_duration_s=1.5).start()
    wait_for("it to lead", leader.is_leader)
    current = lease(api, ns)
    current.spec.holder_identity = "intruder"
    current.spec.renew_time = current.spec.renew_time.replace(year=2099)
    client.CoordinationV1Api(api).replace_namespaced_lease(LEASE_NAME, ns, current)
    wait_for("it to stop leading", lambda: not leader.is_leader(), timeout_s=1.5)


def test_stopping_releases_the_lease_so_that_a_follower_takes_it_at_once(api, electors, ns):
    one = electors("one", lease_duration_s=30.0).start()
    wait_for("it to lead", one.is_leader)
    two = electors("two", lease_duration_s=30.0).start()
    one.stop(release=True)
    assert lease(api, ns).spec.holder_identity == ""
    wait_for("the follower to lead", two.is_leader, timeout_s=3)  # far sooner than the 30 s duration
