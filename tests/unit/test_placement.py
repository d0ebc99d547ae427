"""The run's placement: every function placed through a scheduler_fork profile, by identity, never by name."""

from __future__ import annotations

import pytest

from coach.domain.cluster import DEFAULT_CLUSTER, ClusterSpec, NodeSpec
from coach.domain.identity import FunctionId, Role, functions_for, has_quorum, role_counts
from coach.placement.in_process import InProcessPlacement


def test_functions_carry_their_identity_as_labels():
    fid = FunctionId("my-job", Role.WORKER, 3)
    assert fid.name == "my-job-worker-3"
    assert FunctionId.from_labels(fid.labels) == fid
    assert role_counts(functions_for("a", 2, 1)) == {Role.SCHEDULER: 1, Role.SERVER: 1, Role.WORKER: 2}
    assert has_quorum(functions_for("a", 1, 1))
    assert not has_quorum([FunctionId("a", Role.SCHEDULER, 0), FunctionId("a", Role.WORKER, 0)])


def test_a_job_that_fits_is_bound_whole_and_its_release_frees_the_slots():
    placement = InProcessPlacement(DEFAULT_CLUSTER, "gang")
    placement.submit("a", functions_for("a", 2, 1))
    bound = placement.poll("a", 0.0)
    assert sorted(bound, key=FunctionId.sort_key) == list(functions_for("a", 2, 1))
    assert placement.free_slots == 8
    placement.release(bound)
    assert placement.free_slots == 12
    assert placement.poll("a", 0.0) == {}


def test_polling_returns_only_the_jobs_own_pods_even_when_names_share_a_prefix():
    placement = InProcessPlacement(DEFAULT_CLUSTER, "gang")
    placement.submit("a", functions_for("a", 1, 1))
    placement.submit("a-b", functions_for("a-b", 1, 1))
    assert set(placement.poll("a", 0.0)) == set(functions_for("a", 1, 1))
    assert set(placement.poll("a-b", 0.0)) == set(functions_for("a-b", 1, 1))


def test_the_default_profile_deadlocks_on_interleaved_pods_and_says_so():
    one_node = ClusterSpec("one", (NodeSpec("solo", 4, 0.001),))
    placement = InProcessPlacement(one_node, "default")
    a, b = functions_for("a", 2, 1), functions_for("b", 2, 1)  # each needs 4 of the 4 slots
    for pod_a, pod_b in zip(a, b):  # pods arrive interleaved, as two controllers create them
        placement.submit("a", [pod_a])
        placement.submit("b", [pod_b])
    assert not has_quorum(placement.poll("a", 0.0)) and not has_quorum(placement.poll("b", 0.0))
    assert placement.explain("a", 0.0).startswith("deadlock: ")
    assert "a " in placement.explain("a", 0.0) and "b " in placement.explain("a", 0.0)


@pytest.mark.parametrize("profile", ["gang", "gang-strict"])
def test_gang_profiles_place_the_first_job_whole_on_the_same_arrival(profile):
    one_node = ClusterSpec("one", (NodeSpec("solo", 4, 0.001),))
    placement = InProcessPlacement(one_node, profile)
    a, b = functions_for("a", 2, 1), functions_for("b", 2, 1)
    for pod_a, pod_b in zip(a, b):
        placement.submit("a", [pod_a])
        placement.submit("b", [pod_b])
    assert set(placement.poll("a", 0.0)) == set(a)
    assert placement.poll("b", 0.0) == {}
    assert not placement.explain("b", 0.0).startswith("deadlock")


def test_an_unknown_profile_is_refused():
    with pytest.raises(ValueError, match="unknown scheduler profile 'fifo'"):
        InProcessPlacement(DEFAULT_CLUSTER, "fifo")
