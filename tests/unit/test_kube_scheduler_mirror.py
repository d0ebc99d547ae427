"""The kube scheduler's pure core: Kubernetes objects (JSON) -> scheduler_fork, and what to tell about pending pods.

Objects are the dicts the apiserver sends; every test drives `Mirror` as the watch would and checks what it
decides to bind, why the others are pending, and that nothing is ever decided twice.
"""

from __future__ import annotations

import itertools

import pytest

from coach.domain.identity import FunctionId, Role, functions_for
from coach.domain.kube import POD_GROUP_LABEL, SLOTS_LABEL
from coach.kube_scheduler.events import ReasonTracker
from coach.kube_scheduler.mirror import Mirror
from coach.kube_scheduler.objects import group_info, node_info, parse_time_s, pod_info, rfc3339

_uids = itertools.count()


def node(name: str, slots: int | None = None, allocatable: str = "110", unschedulable: bool = False) -> dict:
    labels = {} if slots is None else {SLOTS_LABEL: str(slots)}
    return {"metadata": {"name": name, "labels": labels}, "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"pods": allocatable}}}


def pod(fid: FunctionId | str, node_name: str | None = None, group: str | None = None, uid: str | None = None,
        phase: str = "Pending", ns: str = "default") -> dict:
    if isinstance(fid, FunctionId):
        name, labels = fid.name, {**fid.labels, POD_GROUP_LABEL: group or fid.job}
    else:
        name, labels = fid, {}
    spec = {"schedulerName": "coach-scheduler"}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{next(_uids)}", "labels": labels,
                         "resourceVersion": "1", "creationTimestamp": "2026-11-23T10:00:00Z"},
            "spec": spec, "status": {"phase": phase}}


def group(name: str, min_member: int = 3, ns: str = "default") -> dict:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"minMember": min_member}}


def mirror_with(profile: str = "gang", nodes=(("n1", 4),)) -> Mirror:
    mirror = Mirror(profile, seed=0)
    mirror.replace_nodes([node_info(node(name, slots)) for name, slots in nodes])
    mirror.replace_groups([])
    mirror.replace_pods([])
    return mirror


def add_job(mirror: Mirror, job: str, workers: int = 1, servers: int = 1) -> list[dict]:
    mirror.apply_group(group_info(group(job)))
    objs = [pod(fid) for fid in functions_for(job, workers, servers)]
    for obj in objs:
        mirror.apply_pod(pod_info(obj))
    return objs


def bound_copy(obj: dict, node_name: str) -> dict:
    out = {**obj, "spec": {**obj["spec"], "nodeName": node_name}}
    return out


def test_a_job_is_bound_once_its_roles_exist_and_the_binding_seen_in_the_watch_confirms_it():
    mirror = mirror_with()
    objs = add_job(mirror, "a")
    cycle = mirror.schedule(0.0)
    assert sorted(p.name for p, _ in cycle.binds) == ["a-scheduler-0", "a-server-0", "a-worker-0"]
    assert {n for _, n in cycle.binds} == {"n1"}
    assert cycle.pending == {}
    assert mirror.counts().assumed == 3
    for obj in objs:  # the watch shows the bindings
        mirror.apply_pod(pod_info(bound_copy(obj, "n1")))
    assert mirror.assumed == {}
    assert mirror.schedule(1.0).binds == ()
    assert mirror.fork.state.free == [1]


def test_a_relist_that_still_shows_decided_pods_pending_does_not_decide_them_again():
    mirror = mirror_with()
    objs = add_job(mirror, "a")
    assert len(mirror.schedule(0.0).binds) == 3
    mirror.replace_pods([pod_info(obj) for obj in objs])  # after a 410, before the bindings are seen
    assert mirror.schedule(1.0).binds == ()
    assert mirror.fork.state.free == [1]
    mirror.replace_pods([pod_info(bound_copy(obj, "n1")) for obj in objs])
    assert mirror.assumed == {} and mirror.schedule(2.0).binds == ()


def test_gang_holds_a_job_until_its_roles_exist_then_binds_it_in_one_pass():
    mirror = mirror_with()
    mirror.apply_group(group_info(group("a")))
    fids = functions_for("a", 1, 1)
    for fid in fids[:2]:
        mirror.apply_pod(pod_info(pod(fid)))
    cycle = mirror.schedule(0.0)
    assert cycle.binds == ()
    assert cycle.pending == {"default/a-scheduler-0": "PodGroupRoles: waiting for roles: worker",
                             "default/a-server-0": "PodGroupRoles: waiting for roles: worker"}
    mirror.apply_pod(pod_info(pod(fids[2])))
    assert len(mirror.schedule(0.1).binds) == 3


def test_default_places_each_pod_as_it_comes():
    mirror = mirror_with("default")
    mirror.apply_group(group_info(group("a")))
    mirror.apply_pod(pod_info(pod(FunctionId("a", Role.SCHEDULER, 0))))
    assert [(p.name, n) for p, n in mirror.schedule(0.0).binds] == [("a-scheduler-0", "n1")]


def test_pods_that_cannot_be_placed_at_all_are_held_with_the_reason():
    mirror = mirror_with()
    mirror.apply_pod(pod_info(pod("stray")))
    mirror.apply_pod(pod_info(pod(FunctionId("b", Role.WORKER, 0), group="b-group")))
    pending = mirror.schedule(0.0).pending
    assert pending["default/stray"].startswith("missing label coach.io/job")
    assert pending["default/b-worker-0"] == "waiting for PodGroup b-group"
    mirror.apply_group(group_info(group("b-group")))  # its roles are still missing
    assert mirror.schedule(0.1).pending["default/b-worker-0"] == "PodGroupRoles: waiting for roles: scheduler, server"


def test_a_conflict_adopts_the_node_the_pod_is_bound_to():
    mirror = mirror_with(nodes=(("n1", 3), ("n2", 3)))
    objs = add_job(mirror, "a")
    decided = dict((p.key, n) for p, n in mirror.schedule(0.0).binds)
    key = "default/a-worker-0"
    elsewhere = "n2" if decided[key] == "n1" else "n1"
    mirror.bind_conflict(key, pod_info(bound_copy(objs[2], elsewhere)))
    assert mirror.fork.bound[key] == elsewhere
    assert key not in mirror.assumed
    assert mirror.schedule(1.0).binds == ()
    mirror.fork.state.check()


def test_a_failed_binding_is_retried_after_the_pause():
    mirror = mirror_with()
    add_job(mirror, "a")
    mirror.schedule(0.0)
    mirror.bind_failed("default/a-worker-0", 5.0, "binding failed: HTTP 500")
    assert mirror.fork.state.free == [2]
    early = mirror.schedule(1.0)
    assert early.binds == () and early.pending == {"default/a-worker-0": "binding failed: HTTP 500"}
    assert [p.name for p, _ in mirror.schedule(5.0).binds] == ["a-worker-0"]


def test_a_binding_not_sent_because_leadership_was_lost_is_pending_again_at_once():
    mirror = mirror_with()
    add_job(mirror, "a")
    mirror.schedule(0.0)
    mirror.bind_failed("default/a-server-0", None, "")
    assert mirror.fork.pending == {"default/a-server-0": "queued"}


def test_bound_pods_take_their_slots_also_on_a_node_seen_after_them():
    mirror = mirror_with(nodes=())
    mirror.replace_pods([pod_info(pod(fid, node_name="late")) for fid in functions_for("a", 1, 1)])
    assert mirror.parked == {"late": {"default/a-scheduler-0", "default/a-server-0", "default/a-worker-0"}}
    mirror.apply_node(node_info(node("late", 4)))
    assert mirror.fork.state.free == [1] and mirror.parked == {}


def test_a_cordoned_node_takes_no_pod_and_a_deleted_one_leaves_placement():
    mirror = mirror_with(nodes=(("n1", 3), ("n2", 3)))
    mirror.apply_node(node_info(node("n1", 3, unschedulable=True)))
    mirror.delete_node("n2")
    add_job(mirror, "a")
    cycle = mirror.schedule(0.0)
    assert cycle.binds == ()
    assert set(cycle.pending.values()) == {
        "HeadOfLine: job default/a needs 3 pods at once and they do not fit the nodes even empty: "
        "default/a-scheduler-0: 0/1 nodes are available: 1 node(s) were unschedulable."}
    assert mirror.counts().nodes == 1  # the cordoned node is counted, as kube-scheduler counts it
    mirror.apply_node(node_info(node("n1", 3)))
    assert len(mirror.schedule(20.0).binds) == 3


def test_the_slots_label_is_only_a_cap_and_allocatable_pods_stays_a_resource():
    assert node_info(node("a", 2, allocatable="110")).slots == 2
    plain = node_info(node("b", None, allocatable="7"))
    assert (plain.slots, plain.allocatable) == (None, (("pods", 7),))  # no cap: allocatable alone limits it
    odd = node_info(node("c", None, allocatable="7") | {"metadata": {"name": "c", "labels": {SLOTS_LABEL: "x"}}})
    assert (odd.slots, odd.problem) == (None, "label coach.io/slots='x' is not a whole number >= 0; no slot cap")


def test_a_deleted_or_finished_pod_frees_its_slot_and_a_new_uid_is_a_new_pod():
    mirror = mirror_with(nodes=(("n1", 3),))
    objs = add_job(mirror, "a")
    mirror.schedule(0.0)
    for obj in objs:
        mirror.apply_pod(pod_info(bound_copy(obj, "n1")))
    mirror.apply_pod(pod_info({**bound_copy(objs[2], "n1"), "status": {"phase": "Succeeded"}}))
    assert mirror.fork.state.free == [1]
    again = pod(FunctionId("a", Role.WORKER, 0), uid="another")  # same name, new pod, pending
    mirror.apply_pod(pod_info(again))
    assert [(p.uid, n) for p, n in mirror.schedule(1.0).binds] == [("another", "n1")]


def test_a_podgroup_whose_min_member_differs_from_the_quorum_is_warned_about_once_per_pod():
    mirror = mirror_with()
    mirror.apply_group(group_info(group("a", min_member=5)))
    for fid in functions_for("a", 1, 1):
        mirror.apply_pod(pod_info(pod(fid)))
    assert len(mirror.warnings) == 3
    assert mirror.warnings[0][1] == ("PodGroup a: spec.minMember is 5, Coach's quorum is 3 (scheduler 1, server 1, "
                                     "worker 1); placing with Coach's quorum")
    assert len(mirror.schedule(0.0).binds) == 3


def test_the_reason_tracker_tells_a_reason_once_after_it_held():
    tracker = ReasonTracker(delay_s=1.0)
    assert tracker.update({"p": "queued"}, 0.0) == []
    assert tracker.update({"p": "A"}, 0.0) == []
    assert tracker.update({"p": "A"}, 0.5) == []
    assert tracker.update({"p": "A"}, 1.0) == [("p", "A")]
    assert tracker.update({"p": "A"}, 9.0) == []  # not on every cycle
    assert tracker.update({"p": "B"}, 9.5) == []
    assert tracker.update({"p": "B"}, 10.5) == [("p", "B")]
    assert tracker.update({}, 11.0) == []  # bound: forgotten
    assert tracker.update({"p": "B"}, 11.0) == []
    assert tracker.update({"p": "B"}, 12.0) == [("p", "B")]  # pending again later: told again


def test_kubernetes_times_round_trip():
    assert rfc3339(0.0) == "1970-01-01T00:00:00Z"
    assert rfc3339(1.5, micro=True) == "1970-01-01T00:00:01.500000Z"
    assert parse_time_s("1970-01-01T00:00:01.500000Z") == pytest.approx(1.5)
    assert parse_time_s("not a time") is None
