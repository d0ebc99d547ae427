"""scheduler_fork's node fitness, as kube-scheduler has it: resources, taints, cordon, node affinity, the slot cap.

Each Filter plugin alone on a hand-made state, then the Scheduler: the pending reason that counts nodes per cause
in kube's words, pods of other schedulers holding resources, the slot cap as a cap only, gangs that fit only when
every member fits at once, and the bucket index agreeing with kube's node-by-node loop on random clusters.
"""

from __future__ import annotations

import random

import pytest

from scheduler_fork import PLUGINS, Node, Pod, PodGroup, Requirement, Scheduler, Taint, Term, Toleration
from scheduler_fork.fit import fit_error
from scheduler_fork.framework import job_pods
from scheduler_fork.state import SchedulingState

GI = 2**30
NOT_READY, UNREACHABLE = "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"
#: What the DefaultTolerationSeconds admission plugin gives every pod.
DEFAULT_TOLERATIONS = (Toleration(NOT_READY, "Exists", "", "NoExecute"),
                       Toleration(UNREACHABLE, "Exists", "", "NoExecute"))
#: What a not-ready node carries (TaintNodesByCondition's NoSchedule, the lifecycle controller's NoExecute).
NOT_READY_TAINTS = (Taint(NOT_READY, "", "NoSchedule"), Taint(NOT_READY, "", "NoExecute"))


def machine(name: str, cpu_m: int = 4000, memory: int = 16 * GI, pods: int = 110, **more) -> Node:
    """A kubelet's node: allocatable cpu (millicores), memory (bytes) and pods."""
    return Node(name, allocatable={"cpu": cpu_m, "memory": memory, "pods": pods}, **more)


def other(name: str, cpu_m: int = 0, memory: int = 0, seq: int = 0) -> Pod:
    """A pod of another scheduler: it holds its requests, and no Coach slot."""
    return Pod(name, name, "worker", seq, seq, slots=0, requests={"cpu": cpu_m, "memory": memory})


def restore_other(scheduler: Scheduler, pod: Pod, node: str) -> None:
    scheduler.restore([pod], PodGroup(pod.job, min_member={}), {pod.name: node})


def verdicts(plugin_name: str, state: SchedulingState, pod: Pod) -> dict:
    """Node name -> the plugin's answer, node by node; the bucket form must agree on every node."""
    plugin = PLUGINS[plugin_name]
    out = {}
    for i, node in enumerate(state.nodes):
        out[node.name] = plugin.filter(state, pod, i)
        assert plugin.bucket_filter(state, pod, state.shape[i]) == out[node.name]
    return out


def state_with(nodes, *pods) -> SchedulingState:
    state = SchedulingState(nodes)
    for pod in pods:
        state.add(pod)
    return state


# ---- TaintToleration, NodeUnschedulable ----------------------------------------------------------------------


def test_a_taint_keeps_off_the_pods_that_do_not_tolerate_it_and_the_first_untolerated_one_is_the_reason():
    nodes = [Node("clean"), Node("gpu", taints=(Taint("gpu", "yes", "NoSchedule"),)),
             Node("two", taints=(Taint("a", "1", "NoExecute"), Taint("b", "2", "NoSchedule"))),
             Node("soft", taints=(Taint("gpu", "yes", "PreferNoSchedule"),))]
    plain = Pod("plain", "j", "worker", 0, 0)
    state = state_with(nodes, plain)

    assert verdicts("TaintToleration", state, plain) == {
        "clean": None, "gpu": "node(s) had untolerated taint {gpu: yes}",
        "two": "node(s) had untolerated taint {a: 1}", "soft": None}  # PreferNoSchedule is not a filter


@pytest.mark.parametrize("toleration, tolerated", [
    (Toleration("gpu", "Equal", "yes", "NoSchedule"), True),
    (Toleration("gpu", "Equal", "no", "NoSchedule"), False),  # Equal compares values
    (Toleration("gpu", "Exists", "", "NoSchedule"), True),  # Exists: any value
    (Toleration("gpu", "Equal", "yes", ""), True),  # an empty effect matches every effect
    (Toleration("gpu", "Equal", "yes", "NoExecute"), False),  # another effect
    (Toleration("other", "Exists", "", ""), False),  # another key
    (Toleration("", "Exists", "", ""), True),  # an empty key with Exists tolerates everything
    (Toleration("", "Exists", "", "NoExecute"), False),  # ... of its effect only
])
def test_toleration_matching_follows_kube(toleration, tolerated):
    assert toleration.tolerates(Taint("gpu", "yes", "NoSchedule")) is tolerated


def test_a_not_ready_node_is_kept_out_by_its_no_schedule_taint_although_pods_tolerate_no_execute():
    pod = Pod("p", "j", "worker", 0, 0, tolerations=DEFAULT_TOLERATIONS)
    state = state_with([Node("ready"), Node("new", taints=NOT_READY_TAINTS)], pod)

    assert verdicts("TaintToleration", state, pod) == {
        "ready": None, "new": "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"}


def test_a_cordoned_node_takes_only_pods_that_tolerate_the_unschedulable_taint():
    plain = Pod("plain", "j", "worker", 0, 0)
    tolerant = Pod("tolerant", "k", "worker", 1, 1,
                   tolerations=(Toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule"),))
    state = state_with([Node("open"), Node("cordoned", unschedulable=True)], plain, tolerant)

    assert verdicts("NodeUnschedulable", state, plain) == {"open": None, "cordoned": "node(s) were unschedulable"}
    assert verdicts("NodeUnschedulable", state, tolerant) == {"open": None, "cordoned": None}


# ---- NodeAffinity ---------------------------------------------------------------------------------------------


ZONES = [Node("a1", labels={"zone": "a", "cores": "8", "gpu": "t4"}), Node("a2", labels={"zone": "a", "cores": "32"}),
         Node("b1", labels={"zone": "b", "cores": "16"}), Node("bare")]


def matching(pod: Pod) -> list[str]:
    state = state_with(ZONES, pod)
    return [name for name, why in verdicts("NodeAffinity", state, pod).items() if why is None]


def test_the_node_selector_must_match_the_nodes_labels():
    assert matching(Pod("p", "j", "worker", 0, 0, node_selector={"zone": "a"})) == ["a1", "a2"]
    assert matching(Pod("p", "j", "worker", 0, 0, node_selector={"zone": "a", "gpu": "t4"})) == ["a1"]
    assert matching(Pod("p", "j", "worker", 0, 0)) == ["a1", "a2", "b1", "bare"]


@pytest.mark.parametrize("requirement, nodes", [
    (Requirement("zone", "In", ("a", "c")), ["a1", "a2"]),
    (Requirement("zone", "NotIn", ("a",)), ["b1", "bare"]),  # a node without the label is not in
    (Requirement("gpu", "Exists"), ["a1"]),
    (Requirement("gpu", "DoesNotExist"), ["a2", "b1", "bare"]),
    (Requirement("cores", "Gt", ("8",)), ["a2", "b1"]),
    (Requirement("cores", "Lt", ("16",)), ["a1"]),
])
def test_each_operator_of_a_required_term(requirement, nodes):
    assert matching(Pod("p", "j", "worker", 0, 0, node_affinity=(Term((requirement,)),))) == nodes


def test_terms_are_ored_expressions_anded_and_match_fields_read_the_nodes_name():
    zone_a_small = Term((Requirement("zone", "In", ("a",)), Requirement("cores", "Lt", ("10",))))
    by_name = Term(fields=(Requirement("metadata.name", "In", ("b1",)),))
    assert matching(Pod("p", "j", "worker", 0, 0, node_affinity=(zone_a_small, by_name))) == ["a1", "b1"]
    assert matching(Pod("p", "j", "worker", 0, 0, node_affinity=(Term(),))) == []  # an empty term matches nothing
    both = Pod("p", "j", "worker", 0, 0, node_selector={"zone": "b"}, node_affinity=(zone_a_small, by_name))
    assert matching(both) == ["b1"]  # the selector and the affinity must both hold


def test_a_malformed_requirement_is_refused_when_built():
    with pytest.raises(ValueError, match="needs one integer value"):
        Requirement("cores", "Gt", ("many",))
    with pytest.raises(ValueError, match="operator must be one of"):
        Requirement("zone", "Near", ("a",))


def test_labels_no_pod_reads_do_not_split_buckets_and_a_selector_splits_them_while_its_pod_is_known():
    nodes = [Node(f"n{i}", 2, labels={"kubernetes.io/hostname": f"n{i}", "zone": "ab"[i % 2]}) for i in range(6)]
    scheduler = Scheduler(nodes, profile="default")
    assert len(scheduler.state.buckets) == 1  # hostnames differ, and no pod reads them
    picky = Pod("picky", "picky", "worker", 0, 0, node_selector={"zone": "b"})
    scheduler.submit([picky])
    assert len(scheduler.state.buckets) == 2  # zone a, zone b
    assert scheduler.schedule(0.0).bound == {"picky": scheduler.bound["picky"]}
    assert scheduler.bound["picky"] in {"n1", "n3", "n5"}
    scheduler.delete(["picky"])
    assert len(scheduler.state.buckets) == 1
    scheduler.state.check()


# ---- NodeResourcesFit ----------------------------------------------------------------------------------------


def test_resources_every_insufficient_one_is_a_reason_and_a_bare_node_has_no_limit():
    full = machine("full", cpu_m=1000, memory=GI, pods=1)
    roomy = machine("roomy")
    heavy = Pod("heavy", "j", "worker", 0, 0, requests={"cpu": 2000, "memory": 2 * GI})
    gpu = Pod("gpu", "k", "worker", 1, 1, requests={"nvidia.com/gpu": 1})
    state = state_with([full, roomy, Node("bare")], heavy, gpu, other("there"))
    state.reserve("there", state.node_index["full"])  # full now holds its one pod

    assert verdicts("NodeResourcesFit", state, heavy) == {
        "full": ("Too many pods", "Insufficient cpu", "Insufficient memory"), "roomy": None, "bare": None}
    assert verdicts("NodeResourcesFit", state, gpu) == {
        "full": ("Too many pods", "Insufficient nvidia.com/gpu"), "roomy": "Insufficient nvidia.com/gpu", "bare": None}


def test_a_pod_that_requests_nothing_fits_any_node_with_room_for_one_more_pod():
    state = state_with([machine("zero-cpu", cpu_m=0, memory=0, pods=1)], Pod("p", "j", "worker", 0, 0))
    assert verdicts("NodeResourcesFit", state, state.pods["p"]) == {"zero-cpu": None}


# ---- the reason, counted per cause -------------------------------------------------------------------------


def test_the_pending_reason_counts_nodes_per_cause_in_kubes_words():
    nodes = [machine("busy-1"), machine("busy-2")] + [machine(f"new-{i}", taints=NOT_READY_TAINTS) for i in range(3)]
    scheduler = Scheduler(nodes, profile="default")
    restore_other(scheduler, other("web-1", cpu_m=3500), "busy-1")
    restore_other(scheduler, other("web-2", cpu_m=3500, seq=1), "busy-2")
    scheduler.submit([Pod("p", "p", "worker", 2, 2, requests={"cpu": 1000}, tolerations=DEFAULT_TOLERATIONS)])

    result = scheduler.schedule(0.0)

    assert result.pending == {"p": "0/5 nodes are available: 2 Insufficient cpu, "
                                    "3 node(s) had untolerated taint {node.kubernetes.io/not-ready: }."}
    assert scheduler.deadlock(0.0) is None  # other schedulers' pods neither make nor break a deadlock


def test_the_reason_sorts_its_parts_as_kube_does_and_says_when_there_is_no_node():
    assert fit_error(7, {"node(s) were unschedulable": 1, "Insufficient cpu": 2, "Too many pods": 4}) == (
        "0/7 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu, 4 Too many pods.")
    scheduler = Scheduler([], profile="default")
    scheduler.submit([Pod("p", "p", "worker", 0, 0)])
    assert scheduler.schedule(0.0).pending == {"p": "no nodes available to schedule pods"}


def test_a_cordoned_node_counts_among_the_nodes_and_reports_only_its_first_failing_filter():
    scheduler = Scheduler([machine("cordoned", cpu_m=0, unschedulable=True), machine("small", cpu_m=500)],
                          profile="default")
    scheduler.submit([Pod("p", "p", "worker", 0, 0, requests={"cpu": 1000})])
    assert scheduler.schedule(0.0).pending == {
        "p": "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable."}


# ---- other schedulers' pods, the slot cap ------------------------------------------------------------------


def test_other_schedulers_pods_hold_their_requests_but_no_slot_and_do_not_keep_jobs_apart():
    scheduler = Scheduler([machine("n1", cpu_m=2000, pods=3, slots=2)], profile="gang")
    restore_other(scheduler, other("daemon", cpu_m=500), "n1")
    state = scheduler.state
    assert (state.free, state.used) == ([2], [{"cpu": 500, "pods": 1}])
    assert PLUGINS["JobIsolation"].score(state, Pod("x", "x", "worker", 9, 9), 0) == 100  # no Coach pod there
    scheduler.submit([Pod("v", "v", "worker", 1, 1, requests={"cpu": 1600})], PodGroup("v", min_member={"worker": 1}))
    assert scheduler.schedule(0.0).pending == {"v": (  # it does not start before its whole quorum fits beside them
        "HeadOfLine: job v needs 1 pods at once and they do not fit what other schedulers' pods leave of the nodes: "
        "v: 0/1 nodes are available: 1 Insufficient cpu.")}
    scheduler.delete(["daemon"])  # the other pod goes: its cpu is free again
    assert scheduler.schedule(1.0).bound == {"v": "n1"}
    state.check()


def test_waiting_for_other_schedulers_pods_is_no_deadlock_but_coachs_own_deadlock_still_is():
    waiting = Scheduler([machine("n1", cpu_m=2000)], profile="default")
    restore_other(waiting, other("web", cpu_m=1500), "n1")
    waiting.submit(cpu_job("a", 0, cpu_m=200))
    assert waiting.schedule(0.0).pending == {"a-worker-0": "0/1 nodes are available: 1 Insufficient cpu."}
    assert waiting.deadlock(0.0) is None  # it fits once web ends

    stuck = Scheduler([machine("n1", cpu_m=2000, slots=4)], profile="default")  # the thesis's observation, with a
    restore_other(stuck, other("daemon", cpu_m=100), "n1")  # daemon pod beside it
    for j, job in enumerate("ab"):
        stuck.submit([Pod(f"{job}-{role}", job, role, 3 * j + k, j) for k, role in enumerate(("scheduler", "server"))])
    stuck.submit([Pod(f"{job}-worker", job, "worker", 6 + j, j) for j, job in enumerate("ab")])
    stuck.schedule(0.0)
    assert stuck.deadlock(0.0).reason == (
        "2 pending pods fit nowhere and no job can run: "
        "a 2/3 needed pods bound, short of worker; b 2/3 needed pods bound, short of worker")


def test_the_slot_label_only_caps_a_node_allocatable_limits_every_node():
    capped = machine("capped", pods=110, slots=2)
    plain = machine("plain", cpu_m=4000, pods=3)  # no slot cap: 110 pods would not fit its 4 cpus anyway
    scheduler = Scheduler([capped, plain], profile="default")
    scheduler.submit([Pod(f"p{i}", f"p{i}", "worker", i, i, requests={"cpu": 1000}) for i in range(7)])

    result = scheduler.schedule(0.0)

    assert sorted(result.bound.values()) == ["capped", "capped", "plain", "plain", "plain"]
    assert set(result.pending.values()) == {"0/2 nodes are available: 1 Insufficient slots, 1 Too many pods."}
    scheduler.state.check()


def test_a_bare_node_keeps_its_old_meaning_slots_and_nothing_else():
    scheduler = Scheduler([Node("n1", 2)], profile="default")
    scheduler.submit([Pod(f"p{i}", f"p{i}", "worker", i, i, requests={"cpu": 10**9}) for i in range(3)])
    assert sorted(scheduler.schedule(0.0).bound) == ["p0", "p1"]


# ---- gangs fit only when every member fits at once -----------------------------------------------------------


def cpu_job(job: str, job_seq: int, cpu_m: int, first_seq: int = 0, workers: int = 1) -> list[Pod]:
    return [Pod(p.name, p.job, p.role, p.seq, p.job_seq, requests={"cpu": cpu_m})
            for p in job_pods(job, job_seq, workers=workers, first_seq=first_seq)]


@pytest.mark.parametrize("profile", ["gang", "gang-strict"])
def test_a_gang_whose_members_each_fit_but_not_all_at_once_takes_nothing(profile):
    scheduler = Scheduler([machine("n1"), machine("n2")], profile=profile)  # 4 cpus each
    scheduler.submit(cpu_job("a", 0, cpu_m=3000), PodGroup("a"))  # three pods of 3 cpus: one per node at most

    result = scheduler.schedule(0.0)

    assert result.bound == {} and result.waiting == {}
    assert set(result.pending.values()) == {
        "HeadOfLine: job a needs 3 pods at once and they do not fit the nodes even empty: "
        "a-worker-0: 0/2 nodes are available: 2 Insufficient cpu."}
    scheduler.set_node(machine("n3"))  # a third node: now all three fit at once
    assert sorted(scheduler.schedule(10.0).bound.values()) == ["n1", "n2", "n3"]
    scheduler.state.check()


@pytest.mark.parametrize("profile, holds", [("gang", "bound"), ("gang-strict", "waiting")])
def test_memory_hungry_jobs_never_overcommit_a_node_and_the_next_job_waits_for_room(profile, holds):
    scheduler = Scheduler([machine("n1", memory=4 * GI), machine("n2", memory=4 * GI)], profile=profile)
    for j in range(3):
        pods = [Pod(p.name, p.job, p.role, p.seq, p.job_seq, requests={"memory": 2 * GI})
                for p in job_pods(f"j{j}", j, first_seq=3 * j)]
        scheduler.submit(pods, PodGroup(f"j{j}"))

    result = scheduler.schedule(0.0)

    # j0 takes 6 of the 8 GiB; j1 starts on the last 2 (gang binds it, gang-strict holds it at Permit)
    j0 = ["j0-scheduler", "j0-server-0", "j0-worker-0"]
    assert sorted(result.bound) == (j0 + ["j1-scheduler"] if holds == "bound" else j0)
    assert list(result.waiting) == ([] if holds == "bound" else ["j1-scheduler"])
    no_room = "0/2 nodes are available: 2 Insufficient memory."
    assert {name: why for name, why in result.pending.items()} == {
        "j1-server-0": no_room, "j1-worker-0": no_room,
        "j2-scheduler": "HeadOfLine: behind job j1, which is still placing its pods",
        "j2-server-0": "HeadOfLine: behind job j1, which is still placing its pods",
        "j2-worker-0": "HeadOfLine: behind job j1, which is still placing its pods"}
    scheduler.state.check()  # no node holds more memory than it has
    scheduler.delete(j0)  # j0 finishes: j1 completes and j2 starts on the 2 GiB left
    later = scheduler.schedule(20.0)
    assert sorted(later.bound) == (["j1-server-0", "j1-worker-0", "j2-scheduler"] if holds == "bound"
                                   else ["j1-scheduler", "j1-server-0", "j1-worker-0"])
    assert list(later.waiting) == ([] if holds == "bound" else ["j2-scheduler"])
    scheduler.state.check()


def test_a_job_starts_only_once_its_whole_quorum_fits_beside_other_schedulers_pods():
    scheduler = Scheduler([machine("n1", cpu_m=3000)], profile="gang")
    restore_other(scheduler, other("web", cpu_m=1000), "n1")  # 2 of 3 cpus free: the quorum needs 3
    extra = Pod("a-server-1", "a", "server", 3, 0, requests={"cpu": 1000})
    scheduler.submit(cpu_job("a", 0, cpu_m=1000) + [extra], PodGroup("a"))

    first = scheduler.schedule(0.0)

    assert dict(first.bound) == {}  # no pod holds a part of the node it could not use
    assert set(first.pending.values()) == {
        "HeadOfLine: job a needs 3 pods at once and they do not fit what other schedulers' pods leave of the "
        "nodes: a-worker-0: 0/1 nodes are available: 1 Insufficient cpu."}
    scheduler.delete(["web"])  # its cpu frees: the quorum goes in whole, the extra server finds no room
    second = scheduler.schedule(1.0)
    assert dict(second.bound) == {"a-scheduler": "n1", "a-server-0": "n1", "a-worker-0": "n1"}
    assert second.pending == {"a-server-1": "QuorumFirst: keeping room for job a's quorum (worker)"}
    scheduler.state.check()


# ---- the bucket index is exact with resources, taints and labels --------------------------------------------


@pytest.mark.parametrize("profile", ["default", "gang"])
def test_the_bucket_index_picks_among_the_best_of_all_nodes_on_mixed_clusters(profile):
    rng = random.Random(7)
    shapes = [dict(allocatable={"cpu": 2000, "memory": 4 * GI, "pods": 4}), dict(allocatable={"cpu": 4000, "pods": 8}),
              dict(slots=3), dict(allocatable={"cpu": 2000, "pods": 4}, taints=(Taint("dedicated", "x"),)),
              dict(allocatable={"cpu": 2000, "pods": 4}, unschedulable=True), dict()]
    for trial in range(40):
        nodes = [Node(f"n{i}", labels={"zone": rng.choice("ab"), "kubernetes.io/hostname": f"n{i}"},
                      **rng.choice(shapes)) for i in range(rng.randint(1, 10))]
        scheduler = Scheduler(nodes, profile=profile, seed=trial)
        state = scheduler.state
        for k in range(rng.randint(0, 16)):
            pod = Pod(f"o{k}", f"job{rng.randint(0, 3)}", "worker", k, 100, slots=rng.choice([0, 1]),
                      requests={"cpu": rng.choice([0, 500, 1000])})
            state.add(pod)
            fits = [i for i in range(len(nodes)) if state.room_for(i, pod) is None]
            if fits:
                state.reserve(pod.name, rng.choice(fits))
                state.bind(pod.name)
        probe = Pod("probe", f"job{rng.randint(0, 4)}", "worker", 999, 100, requests={"cpu": rng.choice([0, 700])},
                    node_selector=rng.choice([{}, {"zone": "a"}]),
                    tolerations=rng.choice([(), (Toleration("dedicated", "Exists"),)]))
        state.add(probe)

        best = scheduler.best_nodes(probe)
        node, _ = scheduler._select_indexed(probe)

        assert (state.nodes[node].name in best) if node is not None else not best
        state.check()
