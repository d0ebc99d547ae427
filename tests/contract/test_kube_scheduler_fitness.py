"""Node fitness on the suite's real control plane: `coach scheduler` beside the real kube-scheduler.

Each rule of kube-scheduler's filters that Coach's pods meet, with a pod of the default scheduler on the same node
where it matters: allocatable cpu, memory and pods taken by any scheduler's pods (Terminating ones too), taints and
tolerations (the admission's not-ready taint included), cordoned nodes, nodeSelector and required node affinity,
`coach.io/slots` as a cap only, and a gang that fits only if all its pods fit at once. The reason a job waits is
kube-scheduler's, counted per cause, in the Event and the PodScheduled condition.
"""

from __future__ import annotations

import logging

import pytest

from coach.domain.kube import FAILED_SCHEDULING
from tests.contract.kube_scheduler_support import kube, kubeconfig, leader, start, wait_for  # noqa: F401 (fixtures)

NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
GPU_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


@pytest.fixture
def default_pod(kube, control_plane):
    """default_pod(name, **spec): a pod of kube-scheduler's, waited for until it is bound; its node's short name."""
    control_plane.start_kube_scheduler()

    def make(name: str, requests: dict | None = None, spec: dict | None = None, bound: bool = True) -> str | None:
        kube.pod(name, labels={"app": "other"}, scheduler="default-scheduler", requests=requests, spec=spec)
        if not bound:
            return None
        return wait_for(f"kube-scheduler to bind {name}", lambda: kube.nodes_of([name])[name], timeout_s=20)

    return make


def why(kube, pod: str) -> str:
    """The reason Coach's scheduler gave: the Event's message, which the PodScheduled condition repeats."""
    events = wait_for(f"a FailedScheduling Event on {pod}", lambda: kube.events(pod, FAILED_SCHEDULING))
    condition = wait_for(f"the condition on {pod}", lambda: kube.scheduled_condition(pod))
    assert (condition.status, condition.reason, condition.message) == ("False", "Unschedulable", events[-1].message)
    return events[-1].message


@pytest.mark.parametrize("resource, node_has, other_takes, each_needs, word", [
    ("cpu", {"cpu": "2"}, "1500m", "250m", "Insufficient cpu"),
    ("memory", {"memory": "2Gi"}, "1536Mi", "256Mi", "Insufficient memory"),
])
def test_another_schedulers_pod_takes_its_requests_off_the_node(kube, start, default_pod, resource, node_has,
                                                                 other_takes, each_needs, word):
    kube.node("n1", **node_has)
    assert default_pod("theirs", requests={resource: other_takes}) == "n1"
    leader(start("gang"))
    names = kube.job("a", requests={resource: each_needs})  # 3 x each_needs > what is left
    assert why(kube, "a-worker-0").endswith(f"0/1 nodes are available: 1 {word}.")
    assert kube.nodes_of(names) == dict.fromkeys(names)
    kube.delete(["theirs"])
    wait_for("the job bound once the other pod is gone", lambda: kube.bound(names), timeout_s=20)


def test_a_terminating_pod_holds_its_room_until_it_is_gone(kube, start, default_pod):
    kube.node("n1", cpu="1")
    assert default_pod("theirs", requests={"cpu": "800m"}) == "n1"
    kube.delete(["theirs"], grace_s=30)  # Terminating: no kubelet here confirms its end
    leader(start("gang"))
    names = kube.job("a", requests={"cpu": "100m"})
    assert why(kube, "a-worker-0").endswith("0/1 nodes are available: 1 Insufficient cpu.")
    kube.delete(["theirs"], grace_s=0)  # the kubelet's confirmation
    wait_for("the job bound", lambda: kube.bound(names), timeout_s=20)


def test_allocatable_pods_count_every_schedulers_pods(kube, start, default_pod):
    kube.node("n1", pods="3")
    assert default_pod("theirs") == "n1"
    leader(start("gang"))
    names = kube.job("a")
    assert why(kube, "a-worker-0").endswith("0/1 nodes are available: 1 Too many pods.")
    kube.delete(["theirs"])
    wait_for("the job bound", lambda: kube.bound(names), timeout_s=20)


def test_taints_keep_out_pods_that_do_not_tolerate_them(kube, start, default_pod):
    kube.node("gpu", taints=[GPU_TAINT])
    kube.node("down", ready=False)
    assert default_pod("theirs", spec={"tolerations": [GPU_TOLERATION]}) == "gpu"
    default_pod("not-ready-too", bound=False)  # kube-scheduler keeps it off both nodes as well
    leader(start("gang"))
    plain = kube.job("plain")
    reason = why(kube, "plain-worker-0")
    assert reason.endswith("0/2 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, "
                           "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }."), reason
    tolerant = kube.job("tolerant", spec={"tolerations": [GPU_TOLERATION]})
    wait_for("the tolerating job bound", lambda: kube.bound(tolerant), timeout_s=20)
    assert set(kube.nodes_of(tolerant).values()) == {"gpu"}
    assert kube.nodes_of(plain + ["not-ready-too"]) == dict.fromkeys(plain + ["not-ready-too"])


def test_a_cordoned_node_takes_no_pod(kube, start):
    kube.node("n1", unschedulable=True)
    leader(start("gang"))
    names = kube.job("a")
    assert why(kube, "a-worker-0").endswith("0/1 nodes are available: 1 node(s) were unschedulable.")
    kube.node("n1", unschedulable=False)
    wait_for("the job bound once uncordoned", lambda: kube.bound(names), timeout_s=20)


def test_node_selector_and_required_affinity_choose_the_nodes(kube, start):
    kube.node("a1", labels={"zone": "a"})
    kube.node("b1", labels={"zone": "b"})
    leader(start("gang"))
    selected = kube.job("sel", spec={"nodeSelector": {"zone": "b"}})
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}]}}}
    avoiding = kube.job("aff", spec={"affinity": affinity})
    nowhere = kube.job("none", spec={"nodeSelector": {"zone": "c"}})
    wait_for("both jobs bound", lambda: kube.bound(selected + avoiding), timeout_s=20)
    assert set(kube.nodes_of(selected).values()) == {"b1"} and set(kube.nodes_of(avoiding).values()) == {"a1"}
    assert why(kube, "none-worker-0").endswith(
        "0/2 nodes are available: 2 node(s) didn't match Node's node affinity/selector.")
    assert kube.nodes_of(nowhere) == dict.fromkeys(nowhere)


def test_the_slots_label_only_caps_coachs_pods(kube, start, default_pod):
    kube.node("n1", slots=3, cpu="8")
    assert default_pod("theirs") == "n1"  # not Coach's: takes no slot
    leader(start("gang"))
    first = kube.job("a")
    wait_for("three of Coach's pods bound beside it", lambda: kube.bound(first), timeout_s=20)
    second = kube.job("b")
    assert "nodes are available" in why(kube, "b-worker-0") or "HeadOfLine" in why(kube, "b-worker-0")
    assert kube.nodes_of(second) == dict.fromkeys(second)


def test_a_gang_is_bound_only_when_all_its_pods_fit_at_once(kube, start, caplog):
    kube.node("n1", cpu="1")
    kube.node("n2", cpu="1")
    caplog.set_level(logging.INFO, logger="coach.kube_scheduler.loop")
    leader(start("gang"))
    names = kube.job("big", requests={"cpu": "600m"})  # one pod per node: three never fit at once
    reason = why(kube, "big-scheduler-0")
    assert kube.nodes_of(names) == dict.fromkeys(names)  # none holds a node it cannot use
    assert "big" in reason and ("fit" in reason or "nodes are available" in reason), reason
    assert any(reason in record.getMessage() for record in caplog.records)  # Coach's log says it too
    kube.node("n3", cpu="1")
    wait_for("the gang bound once a third node joins", lambda: kube.bound(names), timeout_s=20)
    assert sorted(kube.nodes_of(names).values()) == ["n1", "n2", "n3"]
