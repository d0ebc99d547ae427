"""deploy/ on the suite's real kube-apiserver: `kubectl apply -k` (server-side dry run, then for real), the PodGroup
CRD as scheduler-plugins' users write PodGroups, and RBAC as it is enforced: `coach scheduler` and the controller
run with their own ServiceAccounts' tokens, and the audit log shows that every call they make is granted (no 403)
and every verb granted is one they make.
"""

from __future__ import annotations

import math
import queue
import subprocess
from pathlib import Path

import pytest
from kubernetes import client

from coach.domain.identity import JOB_LABEL, FunctionId, Role, functions_for
from coach.domain.kube import (
    NUCLIO_DASHBOARD_POD_LABEL, POD_GROUP_LABEL, PODGROUP_GROUP, PODGROUP_KIND, PODGROUP_PLURAL, PODGROUP_VERSION,
)
from coach.kube_scheduler.binder import CONFLICT, Binder
from coach.kube_scheduler.loop import Config, KubeScheduler
from coach.kube_scheduler.objects import pod_info
from coach.kube_scheduler.rest import read_json
from coach.placement.kube import HTTP_TRIGGER_PORT, KubePlacement
from tests.contract.kube_scheduler_support import wait_for
from tests.unit.test_deploy_manifests import ANY, COACH_NS, EXPECTED_GRANTS, FUNCTIONS_NS

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@pytest.fixture(scope="module")
def deployed(control_plane, kubectl_binary, tmp_path_factory):
    """deploy/crds/ and deploy/ applied with kubectl as a cluster admin would, after a server-side dry run."""
    kubeconfig = control_plane.write_kubeconfig(tmp_path_factory.mktemp("deploy") / "admin")
    control_plane.ensure_namespace(FUNCTIONS_NS)  # Nuclio's namespace exists before Coach is deployed

    def kubectl(*args: str) -> str:
        done = subprocess.run([kubectl_binary, "--kubeconfig", str(kubeconfig), *args], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    # a server-side dry run checks each object against the namespaces that exist: Coach's namespace first
    for step, folder in (("-k", DEPLOY / "crds"), ("-f", DEPLOY / "namespace.yaml"), ("-k", DEPLOY)):
        dry = kubectl("apply", step, str(folder), "--server-side", "--dry-run=server")
        assert "serverside-applied (server dry run)" in dry, dry
        kubectl("apply", step, str(folder), "--server-side")
    control_plane.ensure_namespace(COACH_NS)  # its default ServiceAccount, which kube-controller-manager would make
    yield kubectl


def account_user(account: str) -> str:
    namespace, name = account.split("/")
    return f"system:serviceaccount:{namespace}:{name}"


def calls(plane, since: int, account: str) -> list[tuple[str, str, str, str, str, int]]:
    """(namespace, apiGroup, resource[/subresource], verb, name, status) of every request the account made."""
    found = []
    for event in plane.audit(since):
        if event["user"]["username"] != account_user(account):
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        found.append((ref.get("namespace", ANY), ref.get("apiGroup", ""), resource, event["verb"],
                      ref.get("name", ANY), event["responseStatus"]["code"]))
    return found


def covers(grant: tuple, call: tuple) -> bool:
    namespace, group, resource, verb, name = grant
    return (namespace in (ANY, call[0]) and group == call[1] and resource == call[2] and verb == call[3]
            and name in (ANY, call[4]))


def compare(account: str, made: list[tuple]) -> tuple[list, list]:
    """The calls no grant covers, and the grants no call used."""
    granted = EXPECTED_GRANTS[account]
    uncovered = sorted({call[:5] for call in made if not any(covers(grant, call) for grant in granted)})
    unused = sorted(grant for grant in granted if not any(covers(grant, call) for call in made))
    return uncovered, unused


def test_the_podgroup_crd_takes_what_scheduler_plugins_users_write(deployed, control_plane):
    from tests.unit.test_deploy_manifests import ACCEPTED_BY_SCHEDULER_PLUGINS

    with control_plane.client() as api:
        custom = client.CustomObjectsApi(api)
        for i, spec in enumerate(ACCEPTED_BY_SCHEDULER_PLUGINS):
            custom.create_namespaced_custom_object(PODGROUP_GROUP, PODGROUP_VERSION, FUNCTIONS_NS, PODGROUP_PLURAL, {
                "apiVersion": f"{PODGROUP_GROUP}/{PODGROUP_VERSION}", "kind": PODGROUP_KIND,
                "metadata": {"name": f"plugins-{i}"}, "spec": spec})
        with pytest.raises(client.ApiException) as refused:
            custom.create_namespaced_custom_object(PODGROUP_GROUP, PODGROUP_VERSION, FUNCTIONS_NS, PODGROUP_PLURAL, {
                "apiVersion": f"{PODGROUP_GROUP}/{PODGROUP_VERSION}", "kind": PODGROUP_KIND,
                "metadata": {"name": "not-a-number"}, "spec": {"minMember": "three"}})
        assert refused.value.status == 422


def test_coach_scheduler_with_its_service_account_makes_only_granted_calls_and_uses_every_grant(
        deployed, control_plane, kube_nodes):
    account = f"{COACH_NS}/coach-scheduler"
    token = control_plane.service_account_token(COACH_NS, "coach-scheduler")
    node = kube_nodes("n1", labels={"coach.io/slots": "4"})
    since = control_plane.audit_lines()
    with control_plane.client() as admin, control_plane.client(token=token) as api:
        core, custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
        scheduler = KubeScheduler(api, Config(profile="gang", namespace=FUNCTIONS_NS, lease_namespace=FUNCTIONS_NS,
                                              identity="rbac", metrics_host="127.0.0.1", metrics_port=0,
                                              lease_duration_s=3.0, report_after_s=0.1)).start()
        try:
            wait_for("the scheduler to lead", lambda: scheduler.wait_synced(0.1) and scheduler.is_leader(), 20)
            for job, workers in (("rbac-a", 1), ("rbac-big", 4)):  # the second cannot fit: told why, in Events
                custom.create_namespaced_custom_object(PODGROUP_GROUP, PODGROUP_VERSION, FUNCTIONS_NS, PODGROUP_PLURAL, {
                    "apiVersion": f"{PODGROUP_GROUP}/{PODGROUP_VERSION}", "kind": PODGROUP_KIND,
                    "metadata": {"name": job}, "spec": {"minMember": 3}})
                for fid in functions_for(job, workers, 1):
                    core.create_namespaced_pod(FUNCTIONS_NS, {
                        "metadata": {"name": fid.name, "labels": {**fid.labels, POD_GROUP_LABEL: job}},
                        "spec": {"schedulerName": "coach-scheduler", "containers": [{"name": "f", "image": "x:1"}]}})
            names = [fid.name for fid in functions_for("rbac-a", 1, 1)]
            wait_for("the first job bound", lambda: all(
                core.read_namespaced_pod(name, FUNCTIONS_NS).spec.node_name for name in names), 20)
            wait_for("the second job told why", lambda: any(
                c.type == "PodScheduled" and c.status == "False"
                for c in core.read_namespaced_pod_status("rbac-big-worker-0", FUNCTIONS_NS).status.conditions or []), 20)
            # a binding that meets a pod bound meanwhile reads the pod to adopt its node
            stray = FunctionId("rbac-a", Role.WORKER, 7)
            core.create_namespaced_pod(FUNCTIONS_NS, {
                "metadata": {"name": stray.name, "labels": {"app": "elsewhere"}},
                "spec": {"nodeName": node, "containers": [{"name": "f", "image": "x:1"}]}})
            got: queue.SimpleQueue = queue.SimpleQueue()
            binder = Binder(api, lambda: math.inf, got.put, threads=1).start()
            try:
                bound = read_json(core.read_namespaced_pod(stray.name, FUNCTIONS_NS, _preload_content=False))
                binder.bind(pod_info({**bound, "spec": {**bound["spec"], "nodeName": None}}), node)
                assert got.get(timeout=20).result == CONFLICT
            finally:
                binder.stop()
        finally:
            scheduler.stop()
            control_plane.force_delete_pods(FUNCTIONS_NS)
    made = calls(control_plane, since, account)
    assert made and [call for call in made if call[5] == 403] == []
    assert compare(account, made) == ([], [])


def test_the_controller_with_its_service_account_makes_only_granted_calls_and_uses_every_grant(
        deployed, control_plane):
    account = f"{COACH_NS}/coach-controller"
    token = control_plane.service_account_token(COACH_NS, "coach-controller")
    since = control_plane.audit_lines()

    class Workloads:  # what Nuclio's dashboard does with its own account: the pods are not the controller's
        def __init__(self, core):
            self.core = core

        def create(self, fid: FunctionId, scheduler_name: str):
            self.core.create_namespaced_pod(FUNCTIONS_NS, {
                "metadata": {"name": fid.name, "labels": {**fid.labels, POD_GROUP_LABEL: fid.job}},
                "spec": {"schedulerName": scheduler_name, "containers": [{"name": "f", "image": "x:1"}]}})

        def delete(self, fid: FunctionId):
            try:
                self.core.delete_namespaced_pod(fid.name, FUNCTIONS_NS, grace_period_seconds=0)
            except client.ApiException as error:
                if error.status != 404:
                    raise

    with control_plane.client() as admin, control_plane.client(token=token) as api:
        networking = client.NetworkingV1Api(admin)
        placement = KubePlacement(api, FUNCTIONS_NS, Workloads(client.CoreV1Api(admin)))
        try:
            assert placement.wait_synced(10)
            ids = functions_for("ctl", workers=1, servers=1)
            placement.register(["ctl"])
            # the job's pods admit only the job's own pods, and Nuclio's dashboard pods (any namespace) on the HTTP
            # trigger's port (stored here; enforcing it takes a CNI that implements NetworkPolicy, which this
            # control plane has not)
            policy = networking.read_namespaced_network_policy("ctl", FUNCTIONS_NS).spec
            assert policy.pod_selector.match_labels == {JOB_LABEL: "ctl"} and policy.policy_types == ["Ingress"]
            peers = [[(peer.pod_selector.match_labels, peer.namespace_selector) for peer in r._from]
                     for r in policy.ingress]
            key, value = NUCLIO_DASHBOARD_POD_LABEL
            assert peers[0] == [({JOB_LABEL: "ctl"}, None)] and policy.ingress[0].ports is None
            assert len(peers) == 2 and len(peers[1]) == 1 and peers[1][0][0] == {key: value}
            everywhere = peers[1][0][1]  # an empty namespace selector: the dashboard's pods in any namespace
            assert everywhere is not None and not everywhere.match_labels and not everywhere.match_expressions
            assert [(p.protocol, p.port) for p in policy.ingress[1].ports] == [("TCP", HTTP_TRIGGER_PORT)]
            placement.submit("ctl", ids)
            wait_for("the pods seen", lambda: placement.explain("ctl", 0.0) == "waiting for coach-scheduler")
            placement.release([*ids, FunctionId("ctl", Role.WORKER, 9)])
        finally:
            placement.close()
        with pytest.raises(client.ApiException) as gone:
            networking.read_namespaced_network_policy("ctl", FUNCTIONS_NS)
        assert gone.value.status == 404  # deleted with the run
    made = calls(control_plane, since, account)
    assert made and [call for call in made if call[5] == 403] == []
    assert compare(account, made) == ([], [])
