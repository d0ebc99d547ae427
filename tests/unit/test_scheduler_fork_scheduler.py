"""scheduler_fork.Scheduler: the queue, backoff, Permit waiting and timeouts, deletes, determinism, the index."""

from __future__ import annotations

import random

import pytest

from scheduler_fork import PROFILES, Node, Pod, PodGroup, Scheduler
from scheduler_fork.framework import backoff_s, job_pods
from scheduler_fork.scheduler import feasible_nodes_to_find


def test_backoff_starts_at_1_s_doubles_and_stops_at_10_s():
    assert [backoff_s(n) for n in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


def test_a_pod_that_does_not_fit_is_tried_again_only_after_its_backoff():
    scheduler = Scheduler([Node("n1", 3)], profile="default")
    scheduler.submit(job_pods("a", 0) + [Pod("extra", "a", "worker", seq=3, job_seq=0)])

    first = scheduler.schedule(0.0)

    assert set(first.bound) == {"a-scheduler", "a-server-0", "a-worker-0"}
    assert first.pending == {"extra": "0/1 nodes are available: 1 Insufficient slots."}
    assert scheduler.queue.backoff_until("extra") == 1.0
    assert scheduler.schedule(0.5).attempts == 0  # still backing off
    assert scheduler.schedule(1.0).attempts == 1  # tried again, failed again
    assert scheduler.queue.backoff_until("extra") == 3.0  # 1.0 + 2 s
    assert scheduler.schedule(2.9).attempts == 0

    scheduler.delete(["a-worker-0"])
    assert scheduler.schedule(3.0).bound == {"extra": "n1"}


def test_schedule_returns_what_it_bound_and_every_pending_pod_with_its_reason():
    scheduler = Scheduler([Node("n1", 4)], profile="gang")
    scheduler.submit([Pod("a-scheduler", "a", "scheduler", seq=0, job_seq=0)])
    scheduler.submit(job_pods("b", 1, first_seq=1))

    result = scheduler.schedule(0.0)

    assert dict(result.bound) == {"b-scheduler": "n1", "b-server-0": "n1", "b-worker-0": "n1"}
    assert dict(result.pending) == {"a-scheduler": "PodGroupRoles: waiting for roles: server, worker"}
    assert dict(scheduler.pending) == dict(result.pending)
    assert dict(scheduler.bound) == dict(result.bound)
    assert (dict(result.waiting), dict(result.rejected), result.attempts) == ({}, {}, 4)


def test_max_attempts_caps_the_scheduling_cycles_of_one_call():
    scheduler = Scheduler([Node("n1", 4)], profile="default")
    scheduler.submit(job_pods("a", 0, workers=2))

    assert list(scheduler.schedule(0.0, max_attempts=2).bound) == ["a-scheduler", "a-server-0"]
    assert list(scheduler.schedule(0.0).bound) == ["a-worker-0", "a-worker-1"]


# ---- Permit: wait, allow, timeout (gang-strict) ----------------------------------------------------------------


def strict_with_one_free_slot(permit_timeout_s=30.0):
    """Four slots; job z (3 pods) runs on three of them; job a (3 pods) arrives."""
    scheduler = Scheduler([Node("n1", 2), Node("n2", 2)], profile="gang-strict", permit_timeout_s=permit_timeout_s)
    scheduler.submit(job_pods("z", 0))
    assert len(scheduler.schedule(0.0).bound) == 3
    scheduler.submit(job_pods("a", 1, first_seq=3))
    return scheduler


def test_a_pod_waits_at_permit_holding_its_slot_and_the_group_binds_once_the_quorum_is_reserved():
    scheduler = strict_with_one_free_slot()

    waiting = scheduler.schedule(0.0)

    assert list(waiting.waiting) == ["a-scheduler"]  # holds the last free slot, not bound
    assert dict(waiting.bound) == {}
    assert scheduler.state.total_free == 0
    assert waiting.pending["a-server-0"] == "0/2 nodes are available: 2 Insufficient slots."

    scheduler.delete(["z-scheduler", "z-server-0", "z-worker-0"])  # z finishes
    allowed = scheduler.schedule(5.0)

    assert sorted(allowed.bound) == ["a-scheduler", "a-server-0", "a-worker-0"]
    assert dict(allowed.waiting) == {} and dict(allowed.pending) == {}


def test_a_group_that_waits_past_the_permit_timeout_gives_back_every_reservation_and_backs_off():
    scheduler = Scheduler([Node("n1", 2), Node("n2", 2)], profile="gang-strict", permit_timeout_s=30.0)
    scheduler.submit(job_pods("z", 0))
    scheduler.schedule(0.0)
    scheduler.delete(["z-worker-0"])  # z shrinks to 2 pods: 2 free slots, not enough for a's quorum of 3
    scheduler.submit(job_pods("a", 1, first_seq=3))

    first = scheduler.schedule(1.0)
    assert list(first.waiting) == ["a-scheduler", "a-server-0"]
    assert scheduler.schedule(30.9).rejected == {}  # deadline is 1.0 + 30 s

    timed_out = scheduler.schedule(31.0)

    reason = (
        "Coscheduling: timed out after 30 s at Permit: job a held 2 of 3 pods it needs (short of worker)"
    )
    assert dict(timed_out.rejected) == {"a-scheduler": reason, "a-server-0": reason}
    assert dict(timed_out.waiting) == {} and sorted(scheduler.bound) == ["z-scheduler", "z-server-0"]
    assert scheduler.state.total_free == 2  # reservations released
    assert scheduler.pending["a-scheduler"] == reason
    assert scheduler.queue.backoff_until("a-scheduler") == 32.0  # requeued with backoff


def test_gang_strict_never_binds_part_of_a_quorum():
    scheduler = strict_with_one_free_slot()
    for now in range(0, 100, 3):
        scheduler.schedule(float(now))
        a = scheduler.state.jobs["a"]
        assert a.n_bound == 0  # a waits, holding at most its reservation, until z goes
    assert scheduler.deadlock(100.0) is None


# ---- submit and delete -------------------------------------------------------------------------------------------


def test_delete_frees_the_slots_of_bound_waiting_and_pending_pods():
    scheduler = strict_with_one_free_slot()
    scheduler.schedule(0.0)  # a-scheduler waits, a-server-0 and a-worker-0 pending

    scheduler.delete(["z-worker-0", "a-scheduler", "a-server-0", "nobody"])  # unknown names are ignored

    assert sorted(scheduler.bound) == ["z-scheduler", "z-server-0"]
    assert dict(scheduler.waiting) == {} and list(scheduler.pending) == ["a-worker-0"]
    assert scheduler.state.total_free == 2
    scheduler.state.check()


def test_submit_rejects_bad_input_and_changes_nothing():
    scheduler = Scheduler([Node("n1", 4)])
    scheduler.submit(job_pods("a", 0))

    with pytest.raises(ValueError, match="already submitted"):
        scheduler.submit([Pod("a-scheduler", "a", "scheduler", seq=9, job_seq=0)])
    with pytest.raises(ValueError, match="duplicate pod names"):
        scheduler.submit([Pod("x", "b", "worker", 5, 1), Pod("x", "b", "worker", 6, 1)])
    with pytest.raises(ValueError, match="group is for job 'c'"):
        scheduler.submit(job_pods("b", 1), PodGroup("c"))
    with pytest.raises(ValueError, match="job_seq 7 differs from job a's 0"):
        scheduler.submit([Pod("a-worker-9", "a", "worker", seq=9, job_seq=7)])

    assert sorted(scheduler.pending) == ["a-scheduler", "a-server-0", "a-worker-0"]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown profile 'fifo'; known: default, gang, gang-pack, gang-strict, gang-thesis"):
        Scheduler([Node("n1", 1)], profile="fifo")
    with pytest.raises(ValueError, match="duplicate node name"):
        Scheduler([Node("n1", 1), Node("n1", 2)])
    with pytest.raises(ValueError, match="role must be one of"):
        Pod("p", "a", "chief", 0, 0)
    with pytest.raises(ValueError, match="unknown roles"):
        PodGroup("a", {"chief": 1})
    scheduler = Scheduler([Node("n1", 1)])
    scheduler.schedule(5.0)
    with pytest.raises(ValueError, match="time went backwards"):
        scheduler.schedule(4.0)


# ---- determinism -------------------------------------------------------------------------------------------------


def run_mixed_workload(profile, seed):
    scheduler = Scheduler([Node(f"n{i}", 3) for i in range(6)], profile=profile, seed=seed)
    placements = []
    rng = random.Random(7)  # the workload is fixed; only the scheduler's seed varies
    for j in range(8):
        scheduler.submit(job_pods(f"j{j}", j, servers=rng.randint(1, 2), workers=rng.randint(1, 3), first_seq=10 * j))
        placements.append(dict(scheduler.schedule(float(j)).bound))
        if j % 3 == 2:
            scheduler.delete([name for name in scheduler.bound if name.startswith(f"j{j - 2}-")])
    return placements


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_same_seed_gives_the_same_placements(profile):
    assert run_mixed_workload(profile, seed=3) == run_mixed_workload(profile, seed=3)


def test_the_seed_only_breaks_ties_between_equally_good_nodes():
    choices = set()
    for seed in range(20):
        scheduler = Scheduler([Node("n1", 4), Node("n2", 4), Node("n3", 4)], profile="default", seed=seed)
        scheduler.submit([Pod("p", "a", "worker", 0, 0)])
        choices.add(scheduler.schedule(0.0).bound["p"])
    assert choices == {"n1", "n2", "n3"}  # three equal nodes: every one gets picked by some seed

    for seed in range(20):
        scheduler = Scheduler([Node("n1", 4), Node("n2", 5), Node("n3", 4)], profile="default", seed=seed)
        scheduler.submit([Pod("p", "a", "worker", 0, 0)])
        assert scheduler.schedule(0.0).bound == {"p": "n2"}  # least allocated: (5-1)*100//5 = 80 > 75


# ---- the index is exact ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["default", "gang"])
def test_the_bucket_index_picks_a_node_among_the_best_of_all_nodes(profile):
    """The indexed Filter/Score gives the same best nodes as scoring every node one by one."""
    rng = random.Random(11)
    for trial in range(60):
        nodes = [Node(f"n{i}", rng.randint(0, 5)) for i in range(rng.randint(1, 12))]
        scheduler = Scheduler(nodes, profile=profile, seed=trial)
        assert scheduler.indexed
        occupants = [Pod(f"o{k}", f"job{rng.randint(0, 3)}", "worker", k, 100) for k in range(rng.randint(0, 20))]
        for pod in occupants:
            scheduler.state.add(pod)
            free = [i for i, f in enumerate(scheduler.state.free) if f > 0]
            if free:
                node = rng.choice(free)
                scheduler.state.reserve(pod.name, node)
                scheduler.state.bind(pod.name)
        probe = Pod("probe", f"job{rng.randint(0, 4)}", "worker", 999, 100, slots=rng.randint(1, 2))
        scheduler.state.add(probe)

        best = scheduler.best_nodes(probe)
        node, _ = scheduler._select_indexed(probe)

        assert (scheduler.state.nodes[node].name in best) if node is not None else not best


def test_the_per_node_path_samples_like_kube_scheduler_and_places_the_same_pods():
    assert [feasible_nodes_to_find(n) for n in (5, 99, 100, 1000, 5000, 7500)] == [5, 99, 100, 420, 500, 375]
    results = {}
    for indexed in (True, False):
        scheduler = Scheduler([Node(f"n{i}", 2) for i in range(5)], profile="gang", indexed=indexed)
        for j in range(4):
            scheduler.submit(job_pods(f"j{j}", j, first_seq=3 * j))
        result = scheduler.schedule(0.0)
        assert scheduler.indexed is indexed
        results[indexed] = (sorted(result.bound), dict(result.pending))
    assert results[True] == results[False]
