"""scheduler_fork plugins, each alone on a hand-made SchedulingState: what every extension point decides."""

from __future__ import annotations

import pytest

from scheduler_fork import PLUGINS, Node, Pod, PodGroup
from scheduler_fork.framework import Allow, Wait, job_pods, normalize_to_max
from scheduler_fork.state import SchedulingState


def make_state(nodes, *jobs, permit_timeout_s=30.0):
    """A state with the given nodes; each job is (pods, group or None), all pods pending."""
    state = SchedulingState(nodes, permit_timeout_s=permit_timeout_s)
    for pods, group in jobs:
        for pod in pods:
            state.add(pod, group)
    return state


def place(state, name, node_name):
    """Reserve and bind a pending pod on a node, as the scheduler would."""
    state.reserve(name, state.node_index[node_name])
    state.bind(name)


def pod(state, name):
    return state.pods[name]


# ---- QueueSort ---------------------------------------------------------------------------------------------------


def test_job_creation_order_puts_every_pod_of_an_earlier_job_first_then_sorts_by_name():
    pods = [
        Pod("b-worker-0", "b", "worker", seq=0, job_seq=1),
        Pod("a-worker-0", "a", "worker", seq=1, job_seq=0),
        Pod("b-scheduler", "b", "scheduler", seq=2, job_seq=1),
        Pod("a-scheduler", "a", "scheduler", seq=3, job_seq=0),
        Pod("a-server-0", "a", "server", seq=4, job_seq=0),
    ]

    ordered = sorted(pods, key=PLUGINS["JobCreationOrder"].key)

    assert [p.name for p in ordered] == ["a-scheduler", "a-server-0", "a-worker-0", "b-scheduler", "b-worker-0"]


def test_priority_sort_puts_higher_priority_first_then_earlier_arrival():
    pods = [
        Pod("x", "a", "worker", seq=0, job_seq=0, priority=0),
        Pod("y", "b", "worker", seq=1, job_seq=1, priority=5),
        Pod("z", "c", "worker", seq=2, job_seq=2, priority=0),
        Pod("w", "d", "worker", seq=3, job_seq=3, priority=5),
    ]

    assert [p.name for p in sorted(pods, key=PLUGINS["PrioritySort"].key)] == ["y", "w", "x", "z"]


# ---- PreFilter: PodGroupRoles ------------------------------------------------------------------------------------


def test_pod_group_roles_holds_a_job_until_a_scheduler_a_server_and_a_worker_exist():
    plugin = PLUGINS["PodGroupRoles"]
    scheduler, server, worker = job_pods("a", 0)
    state = make_state([Node("n1", 4)], ([scheduler, worker], None))

    assert plugin.pre_filter(state, scheduler) == "waiting for roles: server"
    assert plugin.pre_filter(state, worker) == "waiting for roles: server"

    state.add(server)

    assert plugin.pre_filter(state, scheduler) is None
    assert plugin.pre_filter(state, worker) is None


def test_pod_group_roles_names_every_missing_role_and_counts_when_more_than_one_is_needed():
    plugin = PLUGINS["PodGroupRoles"]
    worker = Pod("a-worker-0", "a", "worker", seq=0, job_seq=0)
    state = make_state([Node("n1", 4)], ([worker], PodGroup("a", {"scheduler": 1, "server": 1, "worker": 2})))

    assert plugin.pre_filter(state, worker) == "waiting for roles: scheduler, server, worker 1 of 2"


def test_pod_group_roles_counts_bound_pods_as_present():
    plugin = PLUGINS["PodGroupRoles"]
    scheduler, server, worker = job_pods("a", 0)
    state = make_state([Node("n1", 4)], ([scheduler, server], None))
    place(state, "a-scheduler", "n1")
    place(state, "a-server-0", "n1")
    state.add(worker)

    assert plugin.pre_filter(state, worker) is None


def test_pod_group_roles_waits_for_the_whole_set_when_the_group_requires_it():
    plugin = PLUGINS["PodGroupRoles"]
    pods = job_pods("a", 0, workers=2)
    state = make_state([Node("n1", 4)], (pods[:3], PodGroup("a", whole=4)))

    assert plugin.pre_filter(state, pods[0]) == "waiting for pods: 3 of 4 present"

    state.add(pods[3])

    assert plugin.pre_filter(state, pods[0]) is None


# ---- PreFilter: HeadOfLine ---------------------------------------------------------------------------------------


def test_head_of_line_lets_only_the_earliest_ready_job_start():
    plugin = PLUGINS["HeadOfLine"]
    a, b = job_pods("a", 0), job_pods("b", 1, first_seq=3)
    state = make_state([Node("n1", 6)], (a, None), (b, None))

    assert plugin.pre_filter(state, a[0]) is None
    assert plugin.pre_filter(state, b[0]) == "behind job a, first in line"


def test_head_of_line_holds_every_new_job_while_a_started_job_still_has_pods_to_place():
    plugin = PLUGINS["HeadOfLine"]
    a, b = job_pods("a", 1, first_seq=3), job_pods("b", 2, first_seq=6)
    state = make_state([Node("n1", 6)], (a, None), (b, None))
    place(state, "a-scheduler", "n1")  # a has started, server and worker still pending

    assert plugin.pre_filter(state, a[1]) is None  # a started: its pods pass
    assert plugin.pre_filter(state, b[0]) == "behind job a, which is still placing its pods"

    # An earlier job whose roles arrive now does not jump ahead of a job that has started.
    early = job_pods("e", 0)
    for p in early:
        state.add(p)
    assert plugin.pre_filter(state, early[0]) == "behind job a, which is still placing its pods"

    place(state, "a-server-0", "n1")
    place(state, "a-worker-0", "n1")  # a is fully placed: the earliest ready job goes next

    assert plugin.pre_filter(state, early[0]) is None
    assert plugin.pre_filter(state, b[0]) == "behind job e, first in line"


def test_head_of_line_is_not_held_by_a_job_still_waiting_for_roles():
    plugin = PLUGINS["HeadOfLine"]
    early_scheduler = Pod("e-scheduler", "e", "scheduler", seq=0, job_seq=0)  # e has no server or worker yet
    b = job_pods("b", 1, first_seq=1)
    state = make_state([Node("n1", 6)], ([early_scheduler], None), (b, None))

    assert plugin.pre_filter(state, b[0]) is None
    assert plugin.pre_filter(state, early_scheduler) == "job e is not ready: server, worker missing"


def test_head_of_line_never_starts_a_job_larger_than_the_cluster():
    plugin = PLUGINS["HeadOfLine"]
    big = job_pods("big", 0, servers=2, workers=3)
    state = make_state([Node("n1", 4)], (big, PodGroup("big", whole=6)))

    assert plugin.pre_filter(state, big[0]) == "job big needs 6 slots, the cluster has 4"


# ---- PreFilter: QuorumFirst --------------------------------------------------------------------------------------


def test_quorum_first_keeps_the_last_free_slot_for_the_role_the_quorum_still_lacks():
    plugin = PLUGINS["QuorumFirst"]
    pods = job_pods("a", 0, servers=2, workers=1)  # scheduler, server-0, server-1, worker-0
    state = make_state([Node("n1", 4), Node("other", 0)], (pods, None))
    place(state, "a-scheduler", "n1")
    place(state, "a-server-0", "n1")
    busy = Pod("z-worker-0", "z", "worker", seq=9, job_seq=9)
    state.add(busy)
    place(state, "z-worker-0", "n1")  # one free slot left; a still needs its worker

    assert plugin.pre_filter(state, pod(state, "a-server-1")) == "keeping 1 free slot for job a's quorum (worker)"
    assert plugin.pre_filter(state, pod(state, "a-worker-0")) is None

    place(state, "a-worker-0", "n1")  # quorum met: extra pods may take any slot

    assert plugin.pre_filter(state, pod(state, "a-server-1")) is None


def test_quorum_first_lets_extra_pods_in_while_enough_slots_stay_free():
    plugin = PLUGINS["QuorumFirst"]
    pods = job_pods("a", 0, servers=2, workers=1)
    state = make_state([Node("n1", 4)], (pods, None))  # nothing placed: 4 free, quorum needs 3

    assert plugin.pre_filter(state, pod(state, "a-server-1")) is None


# ---- Filter: NodeSlotsFit ----------------------------------------------------------------------------------------


def test_node_slots_fit_passes_nodes_with_enough_free_slots_and_says_why_others_fail():
    plugin = PLUGINS["NodeSlotsFit"]
    a = job_pods("a", 0)
    big = Pod("big", "b", "worker", seq=9, job_seq=9, slots=2)
    state = make_state([Node("full", 1), Node("one", 2), Node("empty", 2)], (a, None), ([big], None))
    place(state, "a-scheduler", "full")
    place(state, "a-server-0", "one")
    full, one, empty = (state.node_index[n] for n in ("full", "one", "empty"))

    assert plugin.filter(state, a[2], full) == "Insufficient slots"
    assert plugin.filter(state, a[2], one) is None
    assert plugin.filter(state, big, one) == "Insufficient slots"
    assert plugin.filter(state, big, empty) is None
    # The bucket form gives the same answers from the node's shape alone.
    for node in (full, one, empty):
        for p in (a[2], big):
            assert plugin.bucket_filter(state, p, state.shape[node]) == plugin.filter(state, p, node)


# ---- Score + NormalizeScore: JobIsolation, LeastAllocated -------------------------------------------------------


def test_job_isolation_scores_100_on_nodes_without_other_jobs_and_0_elsewhere():
    plugin = PLUGINS["JobIsolation"]
    a, b = job_pods("a", 0, workers=2), job_pods("b", 1, first_seq=4)
    state = make_state(
        [Node("empty", 2), Node("only-a", 2), Node("only-b", 2), Node("mixed", 2)], (a, None), (b, None)
    )
    place(state, "a-scheduler", "only-a")
    place(state, "b-scheduler", "only-b")
    place(state, "a-server-0", "mixed")
    place(state, "b-server-0", "mixed")
    a_worker = pod(state, "a-worker-0")

    scores = {node.name: plugin.score(state, a_worker, i) for i, node in enumerate(state.nodes)}

    assert scores == {"empty": 100, "only-a": 100, "only-b": 0, "mixed": 0}
    assert plugin.normalize(scores) == scores
    assert plugin.node_overrides(state, a_worker) == {state.node_index["only-a"]: 100}


def test_job_isolation_normalises_all_zero_scores_to_zero():
    plugin = PLUGINS["JobIsolation"]

    assert plugin.normalize({"n1": 0, "n2": 0}) == {"n1": 0, "n2": 0}


def test_default_normalize_scales_the_best_score_to_100():
    assert normalize_to_max({"a": 3, "b": 6, "c": 0}) == {"a": 50, "b": 100, "c": 0}


def test_least_allocated_prefers_nodes_with_more_free_slots_after_placing_the_pod():
    plugin = PLUGINS["LeastAllocated"]
    a = job_pods("a", 0, workers=3)
    state = make_state([Node("free4", 4), Node("free2", 4), Node("free1", 4), Node("small", 2)], (a, None))
    place(state, "a-scheduler", "free2")
    place(state, "a-server-0", "free2")
    for name in ("a-worker-0", "a-worker-1", "a-worker-2"):
        place(state, name, "free1")
    probe = Pod("p", "p", "worker", seq=9, job_seq=9)
    state.add(probe)

    scores = {node.name: plugin.score(state, probe, i) for i, node in enumerate(state.nodes)}

    assert scores == {"free4": 75, "free2": 25, "free1": 0, "small": 50}  # (free - 1) * 100 // capacity
    assert plugin.normalize(scores) == scores  # already on 0..100, as in kube


# ---- Reserve/Permit: Coscheduling; Bind ------------------------------------------------------------------------


def test_coscheduling_makes_pods_wait_until_the_quorum_is_reserved_then_allows_the_group():
    plugin = PLUGINS["Coscheduling"]
    pods = job_pods("a", 0, workers=2)
    state = make_state([Node("n1", 4)], (pods, None), permit_timeout_s=12.5)
    n1 = state.node_index["n1"]

    state.reserve("a-scheduler", n1)
    assert plugin.permit(state, pod(state, "a-scheduler"), n1) == Wait(timeout_s=12.5)
    state.reserve("a-server-0", n1)
    assert plugin.permit(state, pod(state, "a-server-0"), n1) == Wait(timeout_s=12.5)
    assert plugin.unreserve(state, pod(state, "a-scheduler")) == ("a-server-0",)  # rejected together

    state.reserve("a-worker-0", n1)  # the quorum is reserved: this pod and the waiting ones go together
    assert plugin.permit(state, pod(state, "a-worker-0"), n1) == Allow(also=("a-scheduler", "a-server-0"))

    for name in ("a-scheduler", "a-server-0", "a-worker-0"):
        state.bind(name)
    state.reserve("a-worker-1", n1)  # the job already runs: an extra worker is allowed alone
    assert plugin.permit(state, pod(state, "a-worker-1"), n1) == Allow(also=())


def test_coscheduling_requires_the_whole_set_when_the_group_sets_it():
    plugin = PLUGINS["Coscheduling"]
    pods = job_pods("a", 0, workers=2)
    state = make_state([Node("n1", 4)], (pods, PodGroup("a", whole=4)))
    n1 = state.node_index["n1"]
    for p in pods[:3]:
        state.reserve(p.name, n1)

    assert plugin.permit(state, pods[2], n1) == Wait(timeout_s=30.0)

    state.reserve("a-worker-1", n1)
    assert plugin.permit(state, pods[3], n1) == Allow(also=("a-scheduler", "a-server-0", "a-worker-0"))


def test_default_binder_accepts_every_binding():
    a = job_pods("a", 0)
    state = make_state([Node("n1", 4)], (a, None))

    assert PLUGINS["DefaultBinder"].bind(state, a[0], 0) is None


@pytest.mark.parametrize("name", sorted(PLUGINS))
def test_every_registered_plugin_is_registered_under_its_own_name(name):
    assert PLUGINS[name].name == name
