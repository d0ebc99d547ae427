"""coach.placement: first-fit places a job's functions in cluster-file order, all or nothing."""

from __future__ import annotations

from coach.cluster import ClusterSpec, ClusterState, NodeSpec
from coach.placement import PLACERS, first_fit

# Listed out of alphabetical order on purpose: first-fit follows the file, not the names.
CLUSTER = ClusterSpec(name="three", nodes=(NodeSpec("n2", 2, 0.1), NodeSpec("n1", 2, 0.1), NodeSpec("n3", 1, 0.1)))


def test_first_fit_fills_each_node_before_moving_to_the_next_in_file_order():
    state = ClusterState(CLUSTER)

    placement = first_fit(state, ["s", "w0", "w1", "w2"])

    assert placement == {"s": "n2", "w0": "n2", "w1": "n1", "w2": "n1"}
    assert list(placement) == ["s", "w0", "w1", "w2"]


def test_first_fit_skips_nodes_that_are_already_full():
    state = ClusterState(CLUSTER).bind({"other-0": "n2", "other-1": "n2", "other-2": "n1"})

    assert first_fit(state, ["s", "w0"]) == {"s": "n1", "w0": "n3"}


def test_a_request_that_uses_every_free_slot_fits():
    state = ClusterState(CLUSTER)

    placement = first_fit(state, [f"f{i}" for i in range(5)])

    assert placement == {"f0": "n2", "f1": "n2", "f2": "n1", "f3": "n1", "f4": "n3"}
    assert state.bind(placement).free_slots == 0


def test_a_request_that_does_not_fit_returns_none_and_places_nothing():
    state = ClusterState(CLUSTER).bind({"a-0": "n2", "a-1": "n2", "a-2": "n1"})
    before = dict(state.bound)

    assert first_fit(state, ["s", "w0", "w1"]) is None  # 2 slots free, 3 wanted

    assert dict(state.bound) == before
    assert (state.free("n2"), state.free("n1"), state.free("n3"), state.free_slots) == (0, 1, 1, 2)


def test_slots_freed_by_a_release_are_used_again_first_fit():
    state = ClusterState(CLUSTER).bind(first_fit(ClusterState(CLUSTER), ["a-0", "a-1", "a-2", "a-3", "a-4"]))
    assert first_fit(state, ["b-0", "b-1"]) is None

    state = state.release(["a-0", "a-3"])  # one slot on n2, one on n1

    assert first_fit(state, ["b-0", "b-1"]) == {"b-0": "n2", "b-1": "n1"}


def test_an_empty_request_places_nothing():
    assert first_fit(ClusterState(CLUSTER), []) == {}


def test_the_placer_registry_offers_first_fit_by_name():
    assert PLACERS["first-fit"] is first_fit


def test_a_growing_job_leaves_the_slots_that_waiting_jobs_need():
    from coach.cluster import DEFAULT_CLUSTER
    from coach.controller import Allocator

    allocator = Allocator(DEFAULT_CLUSTER, first_fit)
    assert allocator.place([f"a-{i}" for i in range(5)]) is not None  # job a holds 5 of 12 slots
    assert allocator.slots_for_growth("a", held=5) == 12
    allocator.set_waiting("b", 6)
    assert allocator.slots_for_growth("a", held=5) == 6  # 7 free + 5 held - 6 waited for
    allocator.set_waiting("c", 6)
    assert allocator.slots_for_growth("a", held=5) == 3  # never less than (1,1) of what it holds
    allocator.set_waiting("b", 0)
    allocator.set_waiting("c", 0)
    assert allocator.slots_for_growth("a", held=5) == 12
