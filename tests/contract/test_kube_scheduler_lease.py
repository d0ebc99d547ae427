"""Leader election over a coordination.k8s.io/v1 Lease on the suite's real kube-apiserver: never two leaders at once."""

from __future__ import annotations

import datetime
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


def test_expiry_is_judged_by_this_replicas_clock_not_by_the_holders_renew_time(api, electors, ns):
    """As client-go: a holder whose clock runs a day behind still holds the Lease while it renews, and one whose
    clock runs a day ahead loses it a lease duration after its last renewal was seen."""
    leases = client.CoordinationV1Api(api)
    day_s = 86400.0

    def write(holder: str, renewed_s: float, create: bool = False) -> None:
        stamp = datetime.datetime.fromtimestamp(renewed_s, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = {"metadata": {"name": LEASE_NAME}, "spec": {"holderIdentity": holder, "leaseDurationSeconds": 2,
                                                           "renewTime": stamp, "acquireTime": stamp}}
        if create:
            leases.create_namespaced_lease(ns, body)
        else:
            leases.patch_namespaced_lease(LEASE_NAME, ns, body)

    write("behind", time.time() - day_s, create=True)
    follower = electors("follower", lease_duration_s=2.0).start()
    deadline = time.monotonic() + 4.0  # twice the duration: a renewTime-based check would have taken it at once
    while time.monotonic() < deadline:
        write("behind", time.time() - day_s)  # a renewal, by a clock a day late
        assert not follower.is_leader()
        time.sleep(0.3)
    write("ahead", time.time() + day_s)  # another holder, a day early; it then dies without renewing again
    seen_s = time.monotonic()
    wait_for("the follower to lead", follower.is_leader, timeout_s=8)
    assert time.monotonic() - seen_s >= 2.0  # not before a lease duration of this replica's clock
    assert lease(api, ns).spec.holder_identity == "follower"
