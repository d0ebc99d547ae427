"""The run's slot allocator: every function placed through a scheduler_fork profile, shared by job threads."""

from __future__ import annotations

import pytest

from coach.domain.cluster import DEFAULT_CLUSTER, ClusterSpec, NodeSpec
from coach.placement.fork import Allocator, has_quorum, role_counts, role_of


def names(job: str, workers: int, servers: int) -> list[str]:
    return [f"{job}-scheduler-0"] + [f"{job}-server-{i}" for i in range(servers)] + [
        f"{job}-worker-{i}" for i in range(workers)]


class Clock:
    def __init__(self):
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_function_names_carry_their_role():
    assert role_of("my-job-worker-3") == "worker"
    assert role_counts(names("a", 2, 1)) == {"scheduler": 1, "server": 1, "worker": 2}
    assert has_quorum(names("a", 1, 1))
    assert not has_quorum(["a-scheduler-0", "a-worker-0"])


def test_a_job_that_fits_is_bound_whole_and_its_release_frees_the_slots():
    allocator = Allocator(DEFAULT_CLUSTER, "gang", clock=Clock())
    allocator.submit("a", names("a", 2, 1))
    bound = allocator.poll("a")
    assert sorted(bound) == sorted(names("a", 2, 1))
    assert allocator.free_slots == 8
    allocator.release(bound)
    assert allocator.free_slots == 12


def test_polling_returns_only_the_jobs_own_pods_even_when_names_share_a_prefix():
    allocator = Allocator(DEFAULT_CLUSTER, "gang", clock=Clock())
    allocator.submit("a", names("a", 1, 1))
    allocator.submit("a-b", names("a-b", 1, 1))
    assert sorted(allocator.poll("a")) == sorted(names("a", 1, 1))
    assert sorted(allocator.poll("a-b")) == sorted(names("a-b", 1, 1))


def test_the_default_profile_deadlocks_on_interleaved_pods_and_says_so():
    one_node = ClusterSpec("one", (NodeSpec("solo", 4, 0.001),))
    allocator = Allocator(one_node, "default", clock=Clock())
    a, b = names("a", 2, 1), names("b", 2, 1)  # each needs 4 of the 4 slots
    for pod_a, pod_b in zip(a, b):  # pods arrive interleaved, as two controllers create them
        allocator.submit("a", [pod_a])
        allocator.submit("b", [pod_b])
    assert not has_quorum(allocator.poll("a")) and not has_quorum(allocator.poll("b"))
    assert allocator.explain("a").startswith("deadlock: ")
    assert "a " in allocator.explain("a") and "b " in allocator.explain("a")


@pytest.mark.parametrize("profile", ["gang", "gang-strict"])
def test_gang_profiles_place_the_first_job_whole_on_the_same_arrival(profile):
    one_node = ClusterSpec("one", (NodeSpec("solo", 4, 0.001),))
    allocator = Allocator(one_node, profile, clock=Clock())
    a, b = names("a", 2, 1), names("b", 2, 1)
    for pod_a, pod_b in zip(a, b):
        allocator.submit("a", [pod_a])
        allocator.submit("b", [pod_b])
    assert sorted(allocator.poll("a")) == sorted(a)
    assert allocator.poll("b") == {}
    assert not allocator.explain("b").startswith("deadlock")


def test_an_unknown_profile_is_refused():
    with pytest.raises(ValueError, match="unknown scheduler profile 'fifo'"):
        Allocator(DEFAULT_CLUSTER, "fifo")


def test_a_growing_job_leaves_the_slots_that_waiting_jobs_need():
    allocator = Allocator(DEFAULT_CLUSTER, "gang", clock=Clock())
    allocator.submit("a", names("a", 2, 2))
    assert len(allocator.poll("a")) == 5  # job a holds 5 of 12 slots
    assert allocator.slots_for_growth("a", held=5) == 12
    allocator.set_waiting("b", 6)
    assert allocator.slots_for_growth("a", held=5) == 6  # 7 free + 5 held - 6 waited for
    allocator.set_waiting("c", 6)
    assert allocator.slots_for_growth("a", held=5) == 3  # never less than (1,1) of what it holds
    allocator.set_waiting("b", 0)
    allocator.set_waiting("c", 0)
    assert allocator.slots_for_growth("a", held=5) == 12
