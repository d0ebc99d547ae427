"""scheduler_fork with a changing cluster: nodes that join, change or leave, and pods found already bound.

This is what a scheduler fed by a Kubernetes watch needs (coach.kube_scheduler): the library stays pure, and
every change is checked against a recount of the state (`SchedulingState.check`).
"""

from __future__ import annotations

import pytest

from scheduler_fork import Node, Pod, PodGroup, Scheduler
from scheduler_fork.framework import job_pods


def pods_of(job: str, job_seq: int, servers: int = 1, workers: int = 1, first_seq: int = 0) -> list[Pod]:
    return job_pods(job, job_seq, servers=servers, workers=workers, first_seq=first_seq)


def test_a_node_added_later_takes_the_pods_that_found_no_node():
    scheduler = Scheduler([], profile="gang", seed=0)
    scheduler.submit(pods_of("a", 0), PodGroup("a"))
    result = scheduler.schedule(0.0)
    assert result.bound == {}
    assert set(result.pending.values()) == {"HeadOfLine: job a needs 3 slots, the cluster has 0"}
    scheduler.set_node(Node("n1", 3))
    result = scheduler.schedule(10.0)  # after the pods' backoff
    assert dict(result.bound) == {"a-scheduler": "n1", "a-server-0": "n1", "a-worker-0": "n1"}
    scheduler.state.check()


def test_a_removed_node_keeps_its_pods_but_takes_no_new_one():
    scheduler = Scheduler([Node("n1", 3), Node("n2", 3)], profile="default", seed=0)
    scheduler.submit(pods_of("a", 0))
    first = dict(scheduler.schedule(0.0).bound)
    on_n1 = sorted(pod for pod, node in first.items() if node == "n1")
    assert on_n1  # least-allocated spreads the three pods over both nodes
    scheduler.remove_node("n1")
    assert scheduler.state.total_slots == 3 and scheduler.state.active_nodes == 1
    assert scheduler.bound == first  # still bound where they are
    scheduler.submit(pods_of("b", 1, first_seq=3))
    later = dict(scheduler.schedule(1.0).bound)
    assert set(later.values()) <= {"n2"}
    assert len(later) == 3 - (3 - len(on_n1))  # n2 had 3 - (pods of a on n2) free slots
    scheduler.state.check()
    scheduler.delete(on_n1)  # pods leaving a removed node free nothing that placement could use
    assert scheduler.state.total_free == 0
    scheduler.state.check()


def test_a_node_back_in_placement_counts_the_pods_it_still_holds():
    scheduler = Scheduler([Node("n1", 4)], profile="default", seed=0)
    scheduler.submit(pods_of("a", 0))
    assert len(scheduler.schedule(0.0).bound) == 3
    scheduler.remove_node("n1")
    scheduler.set_node(Node("n1", 4))  # uncordoned
    assert scheduler.state.free == [1] and scheduler.state.total_free == 1
    scheduler.state.check()


def test_a_capacity_below_the_pods_a_node_holds_leaves_it_full():
    scheduler = Scheduler([Node("n1", 4)], profile="default", seed=0)
    scheduler.submit(pods_of("a", 0))
    scheduler.schedule(0.0)
    scheduler.set_node(Node("n1", 2))  # the label changed under three pods
    assert scheduler.state.free == [-1]
    scheduler.submit([Pod("x", "x", "worker", 10, 10)])
    result = scheduler.schedule(1.0)
    assert result.bound == {}
    assert result.pending["x"] == "0/1 nodes are available: 1 Insufficient slots."
    scheduler.state.check(overcommit=True)
    with pytest.raises(AssertionError):
        scheduler.state.check()


def test_restored_pods_take_their_slots_even_beyond_capacity_and_count_toward_their_quorum():
    scheduler = Scheduler([Node("n1", 2), Node("n2", 2)], profile="gang", seed=0)
    found = pods_of("a", 0, workers=2)  # scheduler, server, two workers
    scheduler.restore(found[:3], PodGroup("a"), {"a-scheduler": "n1", "a-server-0": "n1", "a-worker-0": "n1"})
    assert scheduler.state.free == [-1, 2]
    assert scheduler.bound == {"a-scheduler": "n1", "a-server-0": "n1", "a-worker-0": "n1"}
    assert scheduler.state.jobs["a"].runnable  # its quorum is bound
    scheduler.submit(found[3:], PodGroup("a"))  # the job's second worker arrives later
    assert dict(scheduler.schedule(0.0).bound) == {"a-worker-1": "n2"}
    scheduler.state.check(overcommit=True)


def test_restore_refuses_an_unknown_node_and_changes_nothing():
    scheduler = Scheduler([Node("n1", 2)], profile="gang", seed=0)
    with pytest.raises(ValueError, match="unknown node 'n9'"):
        scheduler.restore(pods_of("a", 0), PodGroup("a"), {"a-scheduler": "n9"})
    assert scheduler.state.pods == {} and scheduler.state.free == [2]


def test_the_per_node_path_skips_removed_nodes():
    scheduler = Scheduler([Node("n1", 1), Node("n2", 1), Node("n3", 1)], profile="default", seed=0, indexed=False)
    scheduler.remove_node("n2")
    scheduler.submit([Pod(f"p{i}", f"p{i}", "worker", i, i) for i in range(3)])
    result = scheduler.schedule(0.0)
    assert sorted(result.bound.values()) == ["n1", "n3"]
    assert result.pending == {"p2": "0/2 nodes are available: 2 Insufficient slots."}
    scheduler.state.check()
