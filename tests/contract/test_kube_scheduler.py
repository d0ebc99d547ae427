"""`coach scheduler` against the suite's real kube-apiserver, over TLS with the official client.

Each test makes nodes, PodGroups and pods in a namespace of its own as Coach's controller and Nuclio would, runs one or two
KubeScheduler replicas in this process, and checks what the apiserver ends up holding: which pod is bound where,
the Events and PodScheduled conditions, the Lease, /metrics and /healthz.
"""

from __future__ import annotations

import subprocess
import threading

import pytest
import requests
import yaml

from coach.domain.identity import FunctionId, Role, functions_for
from coach.domain.kube import FAILED_SCHEDULING, LEASE_NAME, SCHEDULER_NAME
from coach.kube_scheduler import watch
from coach.kube_scheduler.watch import Change
from tests.controlplane.proxy import Relay
from tests.contract.kube_scheduler_support import kube, kubeconfig, leader, start, wait_for  # noqa: F401 (fixtures)

LEASE_S = 2.0  # short, so that a follower takes over within a second or two


def fids(job: str, workers: int = 1, servers: int = 1) -> list[str]:
    return [fid.name for fid in functions_for(job, workers, servers)]


# ---- placement ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["gang", "gang-strict"])
def test_a_gang_of_three_is_bound_only_once_all_three_fit(kube, start, profile):
    kube.node("n1", slots=2)
    leader(start(profile))
    names = kube.job("a")
    reason = f"HeadOfLine: job {kube.ns}/a needs 3 slots, the cluster has 2"
    wait_for("the reason Event", lambda: kube.events("a-worker-0", FAILED_SCHEDULING))
    assert kube.nodes_of(names) == dict.fromkeys(names)
    assert [e.message for e in kube.events("a-worker-0", FAILED_SCHEDULING)] == [reason]
    kube.node("n2", slots=1)
    wait_for("all three bound", lambda: kube.bound(names))
    assert sorted(kube.nodes_of(names).values()) == ["n1", "n1", "n2"]


def test_gang_waits_for_every_role_then_binds_the_job(kube, start):
    kube.node("n1", slots=4)
    leader(start("gang"))
    kube.group("a")
    first = [kube.pod(fid) for fid in functions_for("a", 1, 1)[:2]]
    wait_for("the reason Event", lambda: kube.events("a-server-0", FAILED_SCHEDULING))
    assert kube.events("a-server-0", FAILED_SCHEDULING)[0].message == "PodGroupRoles: waiting for roles: worker"
    assert kube.nodes_of(first) == dict.fromkeys(first)
    last = kube.pod(FunctionId("a", Role.WORKER, 0))
    wait_for("the job bound", lambda: kube.bound(first + [last]))


def test_default_binds_pod_by_pod(kube, start):
    kube.node("n1", slots=2)
    leader(start("default"))
    names = kube.job("a")
    wait_for("two pods bound", lambda: sum(1 for n in kube.nodes_of(names).values() if n) == 2)
    assert kube.nodes_of(names) == {"a-scheduler-0": "n1", "a-server-0": "n1", "a-worker-0": None}
    wait_for("the reason Event", lambda: kube.events("a-worker-0", FAILED_SCHEDULING))
    assert kube.events("a-worker-0", FAILED_SCHEDULING)[0].message == (  # the thesis's observation, told
        f"deadlock: 1 pending pod fit nowhere and no job can run: {kube.ns}/a 2/3 needed pods bound, short of worker")


def test_node_slots_come_from_the_label_else_from_allocatable_pods(kube, start):
    kube.node("labelled", slots=1, pods="110")
    kube.node("plain", pods="2")
    scheduler = leader(start("default"))
    names = kube.job("a")
    wait_for("the job bound", lambda: kube.bound(names))
    placed = sorted(kube.nodes_of(names).values())
    assert placed == ["labelled", "plain", "plain"]
    assert scheduler.metrics.nodes._value.get() == 2


def test_an_unschedulable_node_takes_no_pod(kube, start):
    kube.node("cordoned", slots=4, unschedulable=True)
    kube.node("open", slots=3)
    leader(start("gang"))
    names = kube.job("a")
    wait_for("the job bound", lambda: kube.bound(names))
    assert set(kube.nodes_of(names).values()) == {"open"}
    kube.node("open", slots=3, unschedulable=True)
    more = kube.job("b")
    wait_for("the reason Event", lambda: kube.events("b-worker-0", FAILED_SCHEDULING))
    assert kube.events("b-worker-0", FAILED_SCHEDULING)[0].message == (  # cordoned nodes count, as in kube
        f"HeadOfLine: job {kube.ns}/b needs 3 pods at once and they do not fit the nodes even empty: "
        f"{kube.ns}/b-scheduler-0: 0/2 nodes are available: 2 node(s) were unschedulable.")
    kube.node("cordoned", slots=4)  # uncordoned
    wait_for("the second job bound", lambda: kube.bound(more), timeout_s=15)
    assert set(kube.nodes_of(more).values()) == {"cordoned"}


def test_deleting_a_jobs_pods_frees_their_slots_for_the_job_waiting(kube, start):
    kube.node("n1", slots=3)
    leader(start("gang"))
    first = kube.job("a")
    wait_for("the first job bound", lambda: kube.bound(first))
    second = kube.job("b")
    wait_for("the reason Event", lambda: kube.events("b-worker-0", FAILED_SCHEDULING))
    assert kube.nodes_of(second) == dict.fromkeys(second)
    kube.delete(first)
    wait_for("the second job bound", lambda: kube.bound(second), timeout_s=15)


# ---- bindings: conflicts, relists, restarts, replicas ------------------------------------------------------------


def test_a_binding_answered_409_adopts_the_pods_node_and_is_not_retried(kube, start):
    kube.node("n1", slots=3)
    kube.node("n2", slots=3)
    kube.leases.create_namespaced_lease(kube.ns, {"metadata": {"name": LEASE_NAME}, "spec": {
        "holderIdentity": "someone-else", "leaseDurationSeconds": 3600,
        "renewTime": "2099-01-01T00:00:00.000000Z"}})
    scheduler = start("gang", identity="late")
    assert scheduler.wait_synced(10)
    lagging = f"{kube.ns}/a-worker-0"
    apply = scheduler._apply

    def lagging_watch(item, now_s):  # the watch has not delivered this pod's binding yet
        if isinstance(item, Change) and item.obj["metadata"]["name"] == "a-worker-0" and item.obj["spec"].get(
                "nodeName"):
            return
        apply(item, now_s)

    scheduler._apply = lagging_watch
    names = kube.job("a")
    wait_for("the pods seen", lambda: len(scheduler.mirror.pods) == 3)
    kube.bind("a-worker-0", "n2")  # another scheduler got there first
    kube.leases.patch_namespaced_lease(LEASE_NAME, kube.ns, {"spec": {"holderIdentity": ""}})
    wait_for("the conflict", lambda: scheduler.conflicts)
    wait_for("the job bound", lambda: kube.bound(names))
    assert scheduler.conflicts == [lagging]
    assert kube.short(scheduler.mirror.fork.bound[lagging]) == "n2"
    assert kube.nodes_of(["a-worker-0"]) == {"a-worker-0": "n2"}
    wait_for("its records", lambda: len(scheduler.bound) >= 2)  # recorded a moment after the apiserver has them
    assert sorted(scheduler.bound) == [f"{kube.ns}/a-scheduler-0", f"{kube.ns}/a-server-0"]
    kube.job("b")  # more scheduling passes: the adopted pod is never bound again
    wait_for("the next job bound", lambda: len(scheduler.bound) == 5)
    assert scheduler.conflicts == [lagging]
    assert scheduler.metrics.binding_conflicts._value.get() == 1


def test_a_relist_after_410_gone_binds_nothing_twice(kube, start, control_plane):
    kube.node("n1", slots=100)
    scheduler = leader(start("gang"))
    first = kube.job("a")
    wait_for("the first job bound", lambda: kube.bound(first))
    pods = scheduler.informer("pods")
    resume, watching = threading.Event(), pods._list_call

    def held_back(**kwargs):  # the watch's next request waits until the history it needs is gone
        if kwargs.get("watch"):
            resume.wait(20)
        return watching(**kwargs)

    pods._list_call = held_back
    many = []
    for i in range(5):
        many += kube.job(f"j{i}")
    wait_for("the first of them decided", lambda: scheduler.bound or scheduler.mirror.assumed)
    pods.interrupt()  # the watch drops; bindings are in flight
    for i in range(5, 10):
        many += kube.job(f"j{i}")
    control_plane.restart_apiserver()  # its new watch cache starts after the pods watch's resourceVersion
    resume.set()
    wait_for("a relist of pods", lambda: scheduler.metrics.relists.labels(resource="pods")._value.get() >= 1)
    many += kube.job("after")
    wait_for("every pod bound", lambda: kube.bound(first + many), timeout_s=20)
    wait_for("its records", lambda: len(scheduler.bound) >= len(first + many))
    assert sorted(scheduler.bound) == sorted(f"{kube.ns}/{name}" for name in first + many)
    assert scheduler.conflicts == []
    assert {kube.short(scheduler.bound[f"{kube.ns}/{n}"]) for n in first + many} == {"n1"}


def test_a_restarted_scheduler_keeps_every_binding_and_binds_nothing_twice(kube, start):
    kube.node("n1", slots=3)
    kube.node("n2", slots=9)
    first_life = leader(start("gang", identity="first-life"))
    held = kube.job("a")
    wait_for("the first job bound", lambda: kube.bound(held))
    batch = []
    for i in range(3):
        batch += kube.job(f"j{i}")
    first_life.stop()  # mid-way: some of the batch may be bound, the rest not
    where_before = kube.nodes_of(held + batch)
    second_life = leader(start("gang", identity="second-life"))
    wait_for("every pod bound", lambda: kube.bound(held + batch), timeout_s=20)
    everyone = {f"{kube.ns}/{n}" for n in held + batch}
    # the apiserver answers 201 before the scheduler's loop has applied the outcome: wait for that too
    wait_for("every binding recorded", lambda: set(first_life.bound) | set(second_life.bound) == everyone)
    both = set(first_life.bound) & set(second_life.bound)
    assert both == set()
    assert second_life.conflicts == [] and first_life.conflicts == []
    after = kube.nodes_of(held + batch)
    assert all(after[name] == node for name, node in where_before.items() if node)  # nothing moved
    assert sum(1 for node in after.values() if node == "n1") == 3  # n1's slots were known to be taken


def test_of_two_replicas_only_the_lease_holder_binds_and_the_other_takes_over(kube, start):
    kube.node("n1", slots=200)
    one = start("gang", identity="one", lease_duration_s=6.0)  # a busy machine must not make the leader lapse
    two = start("gang", identity="two", lease_duration_s=6.0)
    wait_for("a leader", lambda: one.is_leader() or two.is_leader())
    names = []
    for i in range(15):
        names += kube.job(f"j{i}")
    wait_for("every pod bound", lambda: kube.bound(names), timeout_s=20)
    boss, other = (one, two) if one.is_leader() else (two, one)
    # the loop records a binding when it handles the binder's outcome, a moment after the apiserver has it
    expected = sorted(f"{kube.ns}/{n}" for n in names)
    wait_for("the holder's records", lambda: len(boss.bound) + len(other.bound) >= len(names))
    assert sorted(boss.bound) == expected  # each pod bound once, by the holder
    assert other.bound == {} and other.conflicts == [] and boss.conflicts == []
    assert kube.leases.read_namespaced_lease(LEASE_NAME, kube.ns).spec.holder_identity == boss.identity
    boss.stop()  # gives the Lease up
    wait_for("the other replica to lead", other.is_leader, timeout_s=5)  # its next try, not the Lease's 6 s
    later = kube.job("later")
    wait_for("the next job bound", lambda: kube.bound(later))
    wait_for("its records", lambda: len(other.bound) >= len(later))
    assert sorted(other.bound) == sorted(f"{kube.ns}/{n}" for n in later)
    assert kube.leases.read_namespaced_lease(LEASE_NAME, kube.ns).spec.holder_identity == other.identity


# ---- telling why: Events, conditions, /metrics, /healthz ----------------------------------------------------------


def test_a_pending_pod_gets_one_event_and_its_condition_per_reason(kube, start):
    kube.node("n1", slots=4)
    scheduler = leader(start("gang"))
    kube.group("a")
    names = [kube.pod(fid) for fid in functions_for("a", 1, 1)[:2]]
    wait_for("the reason Event", lambda: kube.events("a-scheduler-0", FAILED_SCHEDULING))
    event = kube.events("a-scheduler-0", FAILED_SCHEDULING)[0]
    pod = kube.core.read_namespaced_pod("a-scheduler-0", kube.ns)
    assert (event.type, event.source.component, event.involved_object.kind) == ("Warning", SCHEDULER_NAME, "Pod")
    assert event.involved_object.uid == pod.metadata.uid
    assert event.message == "PodGroupRoles: waiting for roles: worker"
    condition = wait_for("the condition", lambda: kube.scheduled_condition("a-scheduler-0"))
    assert (condition.status, condition.reason, condition.message) == (
        "False", "Unschedulable", "PodGroupRoles: waiting for roles: worker")
    passes = scheduler.passes
    wait_for("two more scheduling passes", lambda: scheduler.passes >= passes + 2)
    assert len(kube.events("a-scheduler-0", FAILED_SCHEDULING)) == 1  # not one per pass
    kube.pod(FunctionId("a", Role.WORKER, 0))
    wait_for("Scheduled Events", lambda: all(kube.events(n, "Scheduled") for n in names + ["a-worker-0"]))
    assert kube.events("a-worker-0", "Scheduled")[0].message.startswith(f"Successfully assigned {kube.ns}/a-worker-0 to")


def test_pods_coach_cannot_place_are_told_why(kube, start):
    kube.node("n1", slots=4)
    leader(start("gang"))
    kube.pod("stray", labels={"app": "not-coach"})
    kube.pod(FunctionId("b", Role.WORKER, 0), group="missing-group")
    wait_for("both Events", lambda: kube.events("stray") and kube.events("b-worker-0"))
    assert kube.events("stray")[0].message == (
        "missing label coach.io/job: Coach places only pods that carry a function's labels")
    assert kube.events("b-worker-0")[0].message == "waiting for PodGroup missing-group"
    assert kube.nodes_of(["stray", "b-worker-0"]) == {"stray": None, "b-worker-0": None}


def test_metrics_and_healthz_answer(kube, start, control_plane, tmp_path, monkeypatch):
    kube.node("n1", slots=3)
    relay = Relay(control_plane.url).start()  # this scheduler's way to the apiserver, which the test cuts
    config = control_plane.kubeconfig(control_plane.tokens["admin"], kube.ns)
    config["clusters"][0]["cluster"]["server"] = relay.url
    (tmp_path / "relayed").write_text(yaml.safe_dump(config))
    scheduler = leader(start("gang", kubeconfig=str(tmp_path / "relayed")))
    names = kube.job("a")
    wait_for("the job bound", lambda: kube.bound(names))
    base = f"http://127.0.0.1:{scheduler.metrics_port}"
    expected = {"coach_scheduler_pods_pending 0.0", "coach_scheduler_pods_bound_total 3.0",
                "coach_scheduler_is_leader 1.0", "coach_scheduler_binding_conflicts_total 0.0",
                "coach_scheduler_bind_latency_seconds_count 3.0", "coach_scheduler_nodes 1.0"}
    # the apiserver shows a binding before the scheduler's loop has counted its answer: wait for the counts
    wait_for("the metrics", lambda: expected <= set(requests.get(f"{base}/metrics").text.splitlines()))
    assert expected <= set(requests.get(f"{base}/metrics").text.splitlines())
    health = requests.get(f"{base}/healthz")
    assert (health.status_code, health.text) == (200, "ok")
    monkeypatch.setattr(watch, "STALE_AFTER_S", 0.2)
    relay.cut()  # the watches die with the connection
    # each watch notices on its own clock: wait until all three are reported, then check the answer whole
    wait_for("/healthz to name every watch", lambda: requests.get(f"{base}/healthz").text.endswith("pods")
             and requests.get(f"{base}/healthz").text.count(",") == 2)
    health = requests.get(f"{base}/healthz")
    assert (health.status_code, health.text) == (503, "not watching: nodes, podgroups, pods")
    relay.stop()


def test_the_podgroup_status_says_how_far_the_gang_got(kube, start, control_plane, kubectl_binary, tmp_path):
    kube.node("n1", slots=3)
    leader(start("gang"))
    names = kube.job("a")
    kube.group("big", min_member=5)  # five pods that never come: Pending, with the two that exist
    kube.pod(FunctionId("big", Role.SCHEDULER, 0))
    kube.pod(FunctionId("big", Role.SERVER, 0))
    status = lambda name: kube.custom.get_namespaced_custom_object(  # noqa: E731
        "scheduling.x-k8s.io", "v1alpha1", kube.ns, "podgroups", name).get("status")
    wait_for("a's status", lambda: status("a") == {"phase": "Scheduled", "scheduled": 3, "running": 0})
    wait_for("big's status", lambda: status("big") == {"phase": "Pending", "scheduled": 0, "running": 0})
    for name in names:  # the kubelet starts them
        kube.core.patch_namespaced_pod_status(name, kube.ns, {"status": {"phase": "Running"}})
    wait_for("a running", lambda: status("a") == {"phase": "Running", "scheduled": 3, "running": 3})
    kubeconfig = control_plane.write_kubeconfig(tmp_path / "kubeconfig", namespace=kube.ns)
    table = subprocess.run([kubectl_binary, "--kubeconfig", str(kubeconfig), "get", "podgroups"],
                           capture_output=True, text=True, timeout=60).stdout.splitlines()
    assert table[0].split()[:5] == ["NAME", "PHASE", "MINMEMBER", "SCHEDULED", "RUNNING"]
    assert [row.split()[:5] for row in table[1:]] == [["a", "Running", "3", "3", "3"], ["big", "Pending", "5", "0", "0"]]
