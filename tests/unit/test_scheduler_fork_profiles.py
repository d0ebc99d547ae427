"""scheduler_fork profiles: the thesis's deadlock under `default`, and why `gang` and `gang-strict` avoid it.

The thesis's scenario: two jobs, each a PS scheduler, a server and two workers, whose pods arrive interleaved
(a-scheduler, b-scheduler, a-server-0, b-server-0, a-worker-0, b-worker-0, a-worker-1, b-worker-1) on a
cluster where either job fits alone but both do not.
"""

from __future__ import annotations

import pytest

from scheduler_fork import PLUGINS, PROFILES, Node, Pod, PodGroup, Scheduler
from scheduler_fork.framework import job_pods

ONE_NODE = [Node("n1", 4)]  # 4 slots: the jobs need 3 each to run (scheduler, server, worker)
THREE_NODES = [Node("n1", 2), Node("n2", 2), Node("n3", 2)]  # 6 slots: the jobs need all 4 pods each


def interleaved():
    """The two jobs' pods in arrival order, seq = arrival; a is created first."""
    a, b = job_pods("a", 0, workers=2), job_pods("b", 1, workers=2)
    pods = [p for pair in zip(a, b) for p in pair]
    return [Pod(p.name, p.job, p.role, seq, p.job_seq) for seq, p in enumerate(pods)]


def arrive_one_by_one(scheduler, whole=None, settle_until=30):
    """Submit the pods one per second, scheduling after each, then keep scheduling every second."""
    now = 0.0
    for pod in interleaved():
        scheduler.submit([pod], PodGroup(pod.job, whole=whole))
        scheduler.schedule(now)
        now += 1.0
    while now <= settle_until:
        scheduler.schedule(now)
        now += 1.0
    return now


def pods_of(scheduler, job):
    return sorted(name for name in scheduler.bound if name.startswith(f"{job}-"))


ALL_A = ["a-scheduler", "a-server-0", "a-worker-0", "a-worker-1"]
ALL_B = ["b-scheduler", "b-server-0", "b-worker-0", "b-worker-1"]


# ---- the deadlock, under kube's default behaviour --------------------------------------------------------------


def test_default_deadlocks_one_node_with_both_jobs_holding_a_scheduler_and_a_server():
    scheduler = Scheduler(ONE_NODE, profile="default")
    now = arrive_one_by_one(scheduler)

    assert dict(scheduler.bound) == {"a-scheduler": "n1", "b-scheduler": "n1", "a-server-0": "n1", "b-server-0": "n1"}
    deadlock = scheduler.deadlock(now)
    assert deadlock is not None
    assert deadlock.jobs == ("a", "b")
    assert deadlock.reason == (
        "4 pending pods fit nowhere and no job can run: "
        "a 2/3 needed pods bound, short of worker; b 2/3 needed pods bound, short of worker"
    )


def test_default_deadlocks_three_nodes_when_each_job_needs_its_whole_set():
    scheduler = Scheduler(THREE_NODES, profile="default")
    now = arrive_one_by_one(scheduler, whole=4)

    assert pods_of(scheduler, "a") == ["a-scheduler", "a-server-0", "a-worker-0"]
    assert pods_of(scheduler, "b") == ["b-scheduler", "b-server-0", "b-worker-0"]
    assert sorted(scheduler.pending) == ["a-worker-1", "b-worker-1"]
    assert scheduler.state.total_free == 0
    deadlock = scheduler.deadlock(now)
    assert deadlock is not None and deadlock.jobs == ("a", "b")
    assert deadlock.reason == (
        "2 pending pods fit nowhere and no job can run: "
        "a 3/4 needed pods bound, short of 1 more pod; b 3/4 needed pods bound, short of 1 more pod"
    )


def test_default_deadlocks_the_same_way_when_all_pods_are_submitted_at_once():
    scheduler = Scheduler(THREE_NODES, profile="default")
    for pod in interleaved():
        scheduler.submit([pod], PodGroup(pod.job, whole=4))

    scheduler.schedule(0.0)  # PrioritySort follows arrival order: the same interleaving

    assert sorted(scheduler.pending) == ["a-worker-1", "b-worker-1"]
    assert scheduler.deadlock(0.0).jobs == ("a", "b")


def test_a_job_that_can_run_is_not_a_deadlock_even_when_other_pods_fit_nowhere():
    scheduler = Scheduler(ONE_NODE, profile="default")
    scheduler.submit(job_pods("a", 0, workers=2))
    scheduler.submit(job_pods("b", 1, first_seq=4))
    scheduler.schedule(0.0)  # a takes all 4 slots and runs; b waits

    assert scheduler.deadlock(0.0) is None


# ---- gang and gang-strict on the same arrival ------------------------------------------------------------------


@pytest.mark.parametrize("nodes, whole", [(ONE_NODE, None), (THREE_NODES, 4)], ids=["one-node", "three-nodes-whole"])
@pytest.mark.parametrize("profile", ["gang", "gang-strict"])
def test_gang_profiles_complete_the_first_job_on_the_same_arrival_and_never_deadlock(profile, nodes, whole):
    scheduler = Scheduler(nodes, profile=profile)
    now = arrive_one_by_one(scheduler, whole=whole)

    assert pods_of(scheduler, "a") == ALL_A
    assert scheduler.deadlock(now) is None

    scheduler.delete(ALL_A)  # a finishes
    scheduler.schedule(now + 10.0)  # past every backoff

    assert pods_of(scheduler, "b") == ALL_B
    assert scheduler.deadlock(now + 10.0) is None


def test_gang_strict_binds_nothing_of_the_second_job_while_it_cannot_have_its_whole_set():
    scheduler = Scheduler(THREE_NODES, profile="gang-strict")
    arrive_one_by_one(scheduler, whole=4)

    assert pods_of(scheduler, "b") == []  # 2 slots are free, b needs 4: it holds none


# ---- the thesis's fork as it was deadlocks too -----------------------------------------------------------------


def test_the_thesis_gang_without_head_of_line_deadlocks_on_the_same_arrival():
    """Job order alone is not enough: a pod that failed 'waiting for roles' backs off, so a later pod of its
    job, or a pod of the next job, arriving meanwhile is bound first, and both jobs end up holding slots."""
    scheduler = Scheduler(ONE_NODE, profile="gang-thesis")
    now = arrive_one_by_one(scheduler)

    assert sorted(scheduler.bound) == ["a-server-0", "a-worker-0", "a-worker-1", "b-worker-0"]
    deadlock = scheduler.deadlock(now)
    assert deadlock is not None and deadlock.jobs == ("a", "b")
    assert deadlock.reason == (
        "4 pending pods fit nowhere and no job can run: a 2/3 needed pods bound (+1 more), short of scheduler; "
        "b 1/3 needed pods bound, short of scheduler, server"
    )


def test_the_thesis_gang_lets_an_earlier_job_whose_roles_arrive_late_split_the_cluster():
    """c runs; b starts and holds one slot; a (created before b) gets its last role; c finishes. The thesis's
    queue puts a first, so a takes the 3 slots c freed: a holds 3 of the 4 pods it needs (its scheduler,
    backing off, comes too late), b holds 1 of 3, and neither can run."""
    results = {}
    for profile in ("gang-thesis", "gang"):
        scheduler = Scheduler(ONE_NODE, profile=profile)
        scheduler.submit(job_pods("c", 0, first_seq=0))
        scheduler.schedule(0.0)  # c runs on 3 of the 4 slots
        a = job_pods("a", 1, workers=2, first_seq=3)
        scheduler.submit(a[:1], PodGroup("a", whole=4))  # a is created: its scheduler only
        scheduler.submit(job_pods("b", 2, first_seq=4))
        scheduler.schedule(1.0)  # b starts on the free slot
        scheduler.submit(a[1:], PodGroup("a", whole=4))
        scheduler.schedule(2.0)
        scheduler.delete(["c-scheduler", "c-server-0", "c-worker-0"])  # c finishes
        for now in range(3, 40):
            scheduler.schedule(float(now))
        results[profile] = (sorted(scheduler.bound), scheduler.deadlock(40.0))

    bound, deadlock = results["gang-thesis"]
    assert bound == ["a-server-0", "a-worker-0", "a-worker-1", "b-scheduler"]
    assert deadlock is not None and deadlock.jobs == ("a", "b")
    assert deadlock.reason == (
        "3 pending pods fit nowhere and no job can run: a 3/4 needed pods bound, short of scheduler; "
        "b 1/3 needed pods bound, short of server, worker"
    )

    # Head of line: b, which has started, is placed before a may start; then a, next in line, takes the last slot.
    bound, deadlock = results["gang"]
    assert bound == ["a-server-0", "b-scheduler", "b-server-0", "b-worker-0"]
    assert deadlock is None


# ---- FIFO --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("whole", [False, True], ids=["min-set", "whole-set"])
@pytest.mark.parametrize("profile", ["gang", "gang-strict"])
def test_jobs_complete_in_submission_order_when_the_cluster_fits_one_job_at_a_time(profile, whole):
    shapes = [(1, 2), (2, 2), (1, 3), (2, 3), (1, 2), (3, 1)]  # (servers, workers): 4 to 6 pods per job
    scheduler = Scheduler([Node("n1", 3), Node("n2", 2), Node("n3", 2)], profile=profile)  # 7 slots
    submitted, seq = [], 0
    for j, (servers, workers) in enumerate(shapes):
        job = f"j{j}"
        pods = job_pods(job, j, servers=servers, workers=workers, first_seq=seq)
        seq += len(pods)
        scheduler.submit(pods, PodGroup(job, whole=len(pods) if whole else None))
        submitted.append((job, [p.name for p in pods]))
    sizes = [len(names) for _, names in submitted]
    assert all(x + y > 7 for i, x in enumerate(sizes) for y in sizes[i + 1:])  # no two jobs fit together

    completed = []
    now = 0.0
    while len(completed) < len(submitted) and now < 500:
        scheduler.schedule(now)
        assert scheduler.deadlock(now) is None
        for job, names in submitted:
            if job not in completed and all(name in scheduler.bound for name in names):
                completed.append(job)
                scheduler.delete(names)  # the job ran and finished
        now += 1.0

    assert completed == [job for job, _ in submitted]


# ---- registries --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_names_registered_plugins_that_implement_their_extension_point(name):
    profile = PROFILES[name]
    points = [(profile.queue_sort, "key"), (profile.bind, "bind")]
    points += [(p, "pre_filter") for p in profile.pre_filter] + [(p, "filter") for p in profile.filter]
    points += [(p, "score") for p, _ in profile.score] + [(p, "unreserve") for p in profile.reserve]
    points += [(p, "permit") for p in profile.permit]
    for plugin, method in points:
        assert callable(getattr(PLUGINS[plugin], method))
    assert profile.name == name and profile.summary
    assert Scheduler([Node("n1", 1)], profile=name).indexed  # every shipped plugin has the bucket fast path
