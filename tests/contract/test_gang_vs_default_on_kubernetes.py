"""The thesis's comparison on the suite's real control plane: two jobs whose pods arrive interleaved on a node too
small for both, placed by `coach scheduler`'s gang profile or by kube-scheduler itself (`--scheduler default` on
Kubernetes).

The pods reach the apiserver through the controller's KubePlacement, which names the scheduler that binds them
(`kube_scheduler_name`): gang binds one whole job, then the other once the first is released; the default
scheduler binds pod by pod and leaves both jobs short of their quorum, until the controller gives one job's pods
back (what its placement timeout and requeue do), after which the other completes.
"""

from __future__ import annotations

import time

from kubernetes import client

from coach.domain.identity import FunctionId, functions_for
from coach.domain.kube import DEFAULT_SCHEDULER_NAME, POD_GROUP_LABEL, SCHEDULER_NAME, kube_scheduler_name
from coach.placement.kube import KubePlacement
from tests.contract.kube_scheduler_support import kube, kubeconfig, leader, start, wait_for  # noqa: F401 (fixtures)


ARRIVAL_GAP_S = 2.0  # at most this long between two pods' arrivals (less once the last one is bound)


class Pods:
    """What Nuclio's Deployments do for the controller: one pod per function, with the scheduler it was asked for
    (and the requests every Coach function makes)."""

    def __init__(self, kube):
        self.kube = kube

    def create(self, fid: FunctionId, scheduler_name: str):
        self.kube.core.create_namespaced_pod(self.kube.ns, {
            "metadata": {"name": fid.name, "labels": {**fid.labels, POD_GROUP_LABEL: fid.job}},
            "spec": {"schedulerName": scheduler_name,
                     "containers": [{"name": "f", "image": "x:1", "resources": {"requests": {"cpu": "1"}}}]}})

    def delete(self, fid: FunctionId):
        try:
            self.kube.core.delete_namespaced_pod(fid.name, self.kube.ns, grace_period_seconds=0)
        except client.ApiException as error:
            if error.status != 404:
                raise


def interleaved(placement: KubePlacement) -> dict[str, list[FunctionId]]:
    """Jobs a and b (a PS scheduler, a server, a worker each) submitted role by role, a's pod then b's, each given
    a moment to be bound before the next arrives (as functions deployed one by one arrive)."""
    jobs = {job: list(functions_for(job, workers=1, servers=1)) for job in ("a", "b")}
    placement.register(list(jobs))
    for k in range(3):
        for job, ids in jobs.items():
            placement.submit(job, [ids[k]])
            deadline = time.monotonic() + ARRIVAL_GAP_S
            while ids[k] not in placement.poll(job, 0.0) and time.monotonic() < deadline:
                time.sleep(0.05)
    return jobs


def test_the_default_profile_means_kube_scheduler_on_kubernetes():
    assert kube_scheduler_name("default") == DEFAULT_SCHEDULER_NAME
    assert {kube_scheduler_name(p) for p in ("gang", "gang-strict", "gang-thesis")} == {SCHEDULER_NAME}


def test_gang_places_one_whole_job_then_the_other(kube, start):
    kube.node("n1", cpu="4")  # four of the six pods fit
    leader(start("gang"))
    placement = KubePlacement(kube.api, kube.ns, Pods(kube), scheduler_name=kube_scheduler_name("gang"))
    try:
        assert placement.wait_synced(10)
        jobs = interleaved(placement)
        wait_for("job a bound whole", lambda: len(placement.poll("a", 0.0)) == 3, timeout_s=20)
        assert len(placement.poll("b", 0.0)) <= 1  # b, next in line, may take what is left, never its quorum
        placement.release(jobs["a"])  # a ran and ended
        wait_for("job b bound whole", lambda: len(placement.poll("b", 0.0)) == 3, timeout_s=20)
    finally:
        placement.close()


def test_kube_scheduler_may_deadlock_both_and_a_requeue_recovers(kube, control_plane):
    control_plane.start_kube_scheduler()
    kube.node("n1", cpu="4")
    placement = KubePlacement(kube.api, kube.ns, Pods(kube), scheduler_name=kube_scheduler_name("default"))
    try:
        assert placement.wait_synced(10)
        jobs = interleaved(placement)
        wait_for("four pods bound", lambda: len(placement.poll("a", 0.0)) + len(placement.poll("b", 0.0)) == 4,
                 timeout_s=20)
        # each job holds its PS scheduler and its server, neither has a worker: no quorum, and none can come
        assert {job: sorted(fid.role.value for fid in placement.poll(job, 0.0)) for job in jobs} == {
            "a": ["scheduler", "server"], "b": ["scheduler", "server"]}
        wait_for("kube-scheduler's reason", lambda: "Insufficient cpu" in placement.explain("a", 0.0), timeout_s=20)
        assert "Insufficient cpu" in placement.explain("b", 0.0)
        placement.release(jobs["b"])  # b's placement timed out: the controller gives its pods back and requeues it
        wait_for("job a bound whole", lambda: len(placement.poll("a", 0.0)) == 3, timeout_s=20)
        placement.release(jobs["a"])  # a ran and ended; b, submitted again after its backoff, gets the node
        placement.submit("b", jobs["b"])
        wait_for("job b bound whole", lambda: len(placement.poll("b", 0.0)) == 3, timeout_s=20)
    finally:
        placement.close()
