"""`coach scheduler`'s node fitness from Kubernetes JSON: quantities, requests, taints, tolerations, node affinity,
and every bound pod counting against its node, whichever scheduler bound it.

Objects are the dicts the apiserver sends; the Mirror is driven as the watch would drive it.
"""

from __future__ import annotations

import itertools

import pytest

from coach.domain.identity import FunctionId, Role, functions_for
from coach.domain.kube import POD_GROUP_LABEL, SCHEDULER_NAME, SLOTS_LABEL
from coach.kube_scheduler.events import ReasonTracker
from coach.kube_scheduler.mirror import Mirror
from coach.kube_scheduler.objects import coachs, group_info, node_info, parse_quantity, pod_info, pod_requests
from scheduler_fork import Requirement, Taint, Term, Toleration

_uids = itertools.count()
NO_CPU = "0/1 nodes are available: 1 Insufficient cpu."


def node(name: str, cpu: str = "4", memory: str = "16Gi", pods: str = "110", slots: int | None = None,
         taints: list | None = None, labels: dict | None = None, unschedulable: bool = False) -> dict:
    labels = {**(labels or {}), **({} if slots is None else {SLOTS_LABEL: str(slots)})}
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"unschedulable": unschedulable, "taints": taints or []},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}}}


def pod(fid: FunctionId | str, cpu: str | None = None, node_name: str | None = None, phase: str = "Pending",
        scheduler: str = SCHEDULER_NAME, ns: str = "default", deleting: bool = False, **spec) -> dict:
    if isinstance(fid, FunctionId):
        name, labels = fid.name, {**fid.labels, POD_GROUP_LABEL: fid.job}
    else:
        name, labels = fid, {}
    container = {"name": "c", "image": "x"}
    if cpu is not None:
        container["resources"] = {"requests": {"cpu": cpu}}
    body_spec = {"schedulerName": scheduler, "containers": [container], **spec}
    if node_name:
        body_spec["nodeName"] = node_name
    meta = {"name": name, "namespace": ns, "uid": f"uid-{next(_uids)}", "labels": labels, "resourceVersion": "1",
            "creationTimestamp": "2026-11-23T10:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T10:05:00Z"
    return {"metadata": meta, "spec": body_spec, "status": {"phase": phase}}


def mirror_on(*nodes: dict, profile: str = "default") -> Mirror:
    mirror = Mirror(profile, seed=0)
    mirror.replace_nodes([node_info(n) for n in nodes])
    mirror.replace_groups([])
    mirror.replace_pods([])
    mirror.replace_others([])
    return mirror


def submit(mirror: Mirror, job: str, cpu: str | None = None, workers: int = 1) -> list[dict]:
    mirror.apply_group(group_info({"metadata": {"name": job, "namespace": "default"}, "spec": {"minMember": 3}}))
    objs = [pod(fid, cpu=cpu) for fid in functions_for(job, workers, 1)]
    for obj in objs:
        mirror.apply_pod(pod_info(obj))
    return objs


# ---- quantities and requests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, milli, amount", [
    ("100m", True, 100), ("0.5", True, 500), ("1", True, 1000), ("2", True, 2000), (".5", True, 500),
    ("1e-3", True, 1), ("0.0001", True, 1),  # rounded up, as kube's MilliValue rounds
    ("2Gi", False, 2 * 2**30), ("512Mi", False, 512 * 2**20), ("1Ki", False, 1024), ("1e3", False, 1000),
    ("1E3", False, 1000), ("1k", False, 1000), ("1M", False, 10**6), ("1G", False, 10**9), ("1E", False, 10**18),
    ("1.5", False, 2), ("100m", False, 1), ("+3", False, 3), ("0", False, 0), (110, False, 110),
])
def test_quantities_become_whole_amounts_rounded_up(text, milli, amount):
    assert parse_quantity(text, milli) == (amount, None)


@pytest.mark.parametrize("text, why", [
    ("", "'' is not a quantity"), ("1x", "'1x' is not a quantity"), ("1 Gi", "'1 Gi' is not a quantity"),
    ("1e", "'1e' is not a quantity"), ("-1", "'-1' is negative"), ("1e99", "'1e99' is out of range"),
    ("99999999999999999999", "'99999999999999999999' is out of range"), (True, "True is not a quantity"),
    (None, "None is not a quantity"),
])
def test_a_malformed_quantity_is_a_problem_never_an_exception(text, why):
    assert parse_quantity(text) == (None, why)


def test_a_pods_requests_are_the_larger_of_its_containers_sum_and_its_largest_init_container_plus_overhead():
    spec = {"containers": [{"resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
                           {"resources": {"requests": {"cpu": "500m"}}}, {"name": "no-requests"}],
            "initContainers": [{"resources": {"requests": {"cpu": "1", "memory": "256Mi"}}},
                               {"resources": {"requests": {"nvidia.com/gpu": "1"}}}],
            "overhead": {"cpu": "100m"}}
    assert pod_requests(spec) == ((("cpu", 1100), ("memory", 2**30), ("nvidia.com/gpu", 1)), None)


def test_a_pod_with_a_malformed_request_is_held_with_the_reason():
    mirror = mirror_on(node("n1"))
    mirror.apply_group(group_info({"metadata": {"name": "a", "namespace": "default"}, "spec": {"minMember": 3}}))
    bad = pod(FunctionId("a", Role.WORKER, 0), cpu="lots")
    assert pod_info(bad).problem == "spec.containers[0].resources.requests.cpu: 'lots' is not a quantity"
    mirror.apply_pod(pod_info(bad))
    assert mirror.schedule(0.0).pending == {
        "default/a-worker-0": "spec.containers[0].resources.requests.cpu: 'lots' is not a quantity"}


# ---- nodes and pods: what placement reads --------------------------------------------------------------------


def test_a_node_brings_its_allocatable_labels_taints_cordon_and_slot_cap():
    info = node_info(node("n1", cpu="3500m", memory="8Gi", pods="30", slots=4, labels={"zone": "a"},
                          taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}], unschedulable=True))
    assert (info.slots, info.schedulable, info.problem) == (4, False, None)
    assert info.allocatable == (("cpu", 3500), ("memory", 8 * 2**30), ("pods", 30))
    assert info.labels == (("coach.io/slots", "4"), ("zone", "a"))
    assert info.taints == (Taint("node.kubernetes.io/not-ready", "", "NoSchedule"),)
    odd = node_info(node("n2", cpu="many", taints=[{"key": "k", "effect": "Sometimes"}]))
    assert odd.problem == ("status.allocatable.cpu: 'many' is not a quantity; spec.taints: taint k: effect must be "
                           "one of NoSchedule, PreferNoSchedule, NoExecute, got 'Sometimes'")
    assert (odd.allocatable, odd.taints) == ((("memory", 16 * 2**30), ("pods", 110)), ())


def test_a_node_whose_kubelet_has_not_reported_yet_takes_no_pod():
    bare = {"metadata": {"name": "new", "labels": {SLOTS_LABEL: "4"}}, "spec": {}}
    info = node_info(bare)
    assert (info.slots, info.allocatable, info.problem) == (
        4, (), "no status.allocatable yet: no pod fits until its kubelet reports it")
    mirror = mirror_on(bare)
    submit(mirror, "a")
    assert set(mirror.schedule(0.0).pending.values()) == {"0/1 nodes are available: 1 Too many pods."}


def test_a_pod_brings_its_tolerations_node_selector_and_required_node_affinity():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
         "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]}]}}}
    info = pod_info(pod("p", tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                                          {"key": "team", "value": "ml"}],
                        nodeSelector={"disk": "ssd"}, affinity=affinity))
    assert info.problem == "missing label coach.io/job: Coach places only pods that carry a function's labels"
    assert info.tolerations == (Toleration("gpu", "Exists", "", "NoSchedule"), Toleration("team", "Equal", "ml", ""))
    assert info.node_selector == (("disk", "ssd"),)
    assert info.node_affinity == (Term((Requirement("zone", "In", ("a", "b")),),
                                       (Requirement("metadata.name", "NotIn", ("n9",)),)),)
    broken = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]}}}
    fid = FunctionId("a", Role.WORKER, 0)
    assert pod_info(pod(fid, affinity=broken)).problem == (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: requirement zone: operator must be "
        "one of In, NotIn, Exists, DoesNotExist, Gt, Lt, got 'Near'")


def test_a_pod_is_coachs_to_place_only_with_coachs_scheduler_name_in_coachs_namespace():
    mine = pod_info(pod("p", ns="nuclio"))
    theirs = pod_info(pod("q", ns="nuclio", scheduler="default-scheduler"))
    assert (coachs(mine, "nuclio"), coachs(mine, "other"), coachs(mine, None)) == (True, False, True)
    assert (coachs(theirs, "nuclio"), coachs(theirs, None)) == (False, False)


# ---- every bound pod counts against its node ---------------------------------------------------------------


def test_another_schedulers_pod_holds_its_cpu_while_running_or_terminating_and_frees_it_when_terminated():
    mirror = mirror_on(node("n1", cpu="2"))
    web = pod("web", cpu="1500m", node_name="n1", phase="Running", scheduler="default-scheduler")
    mirror.apply_other(pod_info(web))
    submit(mirror, "a", cpu="200m")  # three pods of 200m: 600m, and 500m are free

    assert mirror.schedule(0.0).pending == {"default/a-worker-0": NO_CPU}  # the scheduler and server took 400m
    assert mirror.fork.state.used == [{"cpu": 1900, "pods": 3}]
    mirror.apply_other(pod_info({**web, "metadata": {**web["metadata"], "deletionTimestamp": "2026-11-23T10:05:00Z"}}))
    cycle = mirror.schedule(1.0)  # Terminating: it still holds its cpu; the worker waits for it, no deadlock
    assert (cycle.binds, cycle.pending) == ((), {"default/a-worker-0": NO_CPU})
    assert mirror.fork.state.used == [{"cpu": 1900, "pods": 3}]
    mirror.apply_other(pod_info({**web, "status": {"phase": "Succeeded"}}))  # terminated: holds nothing
    assert mirror.fork.state.used == [{"cpu": 400, "pods": 2}]
    assert [(p.name, n) for p, n in mirror.schedule(3.0).binds] == [("a-worker-0", "n1")]
    mirror.fork.state.check()


def test_a_deleted_or_relisted_away_pod_of_another_scheduler_frees_its_node():
    mirror = mirror_on(node("n1", cpu="1"))
    mirror.replace_others([pod_info(pod("web", cpu="1", node_name="n1", scheduler="other"))])
    submit(mirror, "a", cpu="100m")
    assert set(mirror.schedule(0.0).pending.values()) == {NO_CPU}
    mirror.replace_others([])  # a relist no longer shows it
    assert mirror.others == {} and mirror.fork.state.used == [{}]
    assert len(mirror.schedule(1.0).binds) == 3
    mirror.apply_other(pod_info(pod("db", cpu="1", node_name="n1", scheduler="other")))
    mirror.delete_other("default/db")  # deleted: gone from the watch
    assert mirror.fork.state.used == [{"cpu": 300, "pods": 3}]


def test_another_schedulers_pod_on_a_node_not_seen_yet_counts_once_the_node_arrives():
    mirror = mirror_on()
    mirror.apply_other(pod_info(pod("web", cpu="3", node_name="late", scheduler="other")))
    assert mirror.parked == {"late": {"default/web"}}
    mirror.apply_node(node_info(node("late", cpu="4")))
    assert mirror.parked == {} and mirror.fork.state.used == [{"cpu": 3000, "pods": 1}]
    assert mirror.fork.state.free == [None]  # it takes no Coach slot


def test_only_coachs_functions_bound_for_another_namespace_take_a_slot_among_the_pods_not_placed_here():
    mirror = mirror_on(node("n1", slots=3))
    mirror.apply_other(pod_info(pod(FunctionId("b", Role.WORKER, 0), node_name="n1", ns="elsewhere")))
    mirror.apply_other(pod_info(pod("web", node_name="n1", scheduler="default-scheduler")))
    mirror.apply_other(pod_info(pod("stray", node_name="n1", ns="elsewhere")))  # Coach's name, no function labels
    assert (mirror.fork.state.free, mirror.fork.state.used) == ([2], [{"pods": 3}])


def test_a_node_without_the_slots_label_takes_as_many_pods_as_its_resources_allow():
    mirror = mirror_on(node("plain", cpu="4", pods="110"))  # the old fallback gave it 110 slots
    submit(mirror, "a", cpu="1", workers=4)  # six pods of one cpu

    cycle = mirror.schedule(0.0)

    assert len(cycle.binds) == 4
    assert sorted(cycle.pending.values()) == [NO_CPU, NO_CPU]


def test_the_slots_label_caps_coachs_pods_on_a_node_that_has_room_for_more():
    mirror = mirror_on(node("labelled", cpu="64", pods="110", slots=2))
    submit(mirror, "a")
    cycle = mirror.schedule(0.0)
    assert (len(cycle.binds), set(cycle.pending.values())) == (2, {"0/1 nodes are available: 1 Insufficient slots."})


def test_a_not_ready_node_is_reported_by_its_taint_and_the_reason_reaches_the_tracker():
    not_ready = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                 {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]
    tolerations = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                    "tolerationSeconds": 300},
                   {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                    "tolerationSeconds": 300}]
    reason = ("0/3 nodes are available: 1 Insufficient cpu, "
              "2 node(s) had untolerated taint {node.kubernetes.io/not-ready: }.")
    default = mirror_on(node("ready", cpu="1"), node("new-1", taints=not_ready), node("new-2", taints=not_ready))
    default.apply_other(pod_info(pod("web", cpu="1", node_name="ready", scheduler="other", phase="Running")))
    default.apply_group(group_info({"metadata": {"name": "a", "namespace": "default"}, "spec": {"minMember": 3}}))
    default.apply_pod(pod_info(pod(FunctionId("a", Role.WORKER, 0), cpu="500m", tolerations=tolerations)))

    pending = default.schedule(0.0).pending

    assert pending == {"default/a-worker-0": reason}
    tracker = ReasonTracker(delay_s=0.5)
    assert tracker.update(pending, 0.0) == []
    assert tracker.update(default.schedule(0.5).pending, 0.5) == [("default/a-worker-0", reason)]
