"""Placement on Kubernetes: the controller's side of `coach scheduler`. The Placement port for Nuclio runs.

On Kubernetes, Coach does not place pods itself: it creates each job's PodGroup (the quorum the gang profiles
wait for), has the pods' owner create them (the Nuclio dashboard, through the `Workloads` port: a function's
Deployment makes its pod, with Coach's schedulerName from Nuclio's platform config), and watches the pods until
`coach scheduler`, a separate process, binds them. So `poll` only reads: the bindings come from one list+watch
of the namespace's Coach pods (resourceVersion kept, relist after 410 Gone), and `explain` repeats what the
scheduler wrote on the pods (their PodScheduled condition), or why the pods do not exist.

Side effects: HTTP to the kube-apiserver (official `kubernetes` client) and, through `Workloads`, to the
dashboard; one watch thread. The driver calls every method from its one loop thread.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Iterable, Mapping

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from coach.domain.identity import JOB_LABEL, QUORUM, FunctionId
from coach.domain.kube import (
    NUCLIO_DASHBOARD_POD_LABEL, PODGROUP_GROUP, PODGROUP_KIND, PODGROUP_PLURAL, PODGROUP_VERSION, SCHEDULER_NAME,
)
from coach.ports import Workloads

log = logging.getLogger(__name__)

#: (connect, read) seconds of every non-watch call to the apiserver. The kubernetes client sets no byte cap on an
#: answer: a create, delete or patch answers with one object; the relist's size is bounded by the pods its label
#: selector matches (this run's namespace's Coach pods), not by a byte limit.
API_TIMEOUT_S = (5.0, 30.0)
WATCH_TIMEOUT_S = 5  # a watch request ends this often so that close() is noticed; the next resumes at its version
RETRY_S = 1.0  # after a failed list or watch (the apiserver is restarting): try again this much later
GONE = 410


@dataclass(frozen=True)
class PodSeen:
    """What the controller knows of one Coach pod."""

    fid: FunctionId  # from the pod's labels
    node: str  # spec.nodeName; "" while pending
    why_pending: str  # the scheduler's message on PodScheduled=False, or ""


def pod_seen(pod: Mapping) -> PodSeen | None:
    """The pod as plain data; None for a pod whose labels do not name a Coach function."""
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    try:
        fid = FunctionId.from_labels(metadata.get("labels") or {})
    except (KeyError, ValueError):
        return None
    why = ""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            why = condition.get("message") or condition.get("reason") or ""
    return PodSeen(fid, spec.get("nodeName") or "", why)


#: The port of a Nuclio function's HTTP trigger inside its pod (Nuclio's processor listens there); invocations from
#: the dashboard come to it, and the functions check the run's token themselves (coach_functions/auth.py).
HTTP_TRIGGER_PORT = 8080


def network_policy(job: str, namespace: str) -> dict:
    """The job's NetworkPolicy: its function pods admit only the job's own pods (ps-lite, any port) and Nuclio's
    dashboard pods, in any namespace, on the HTTP trigger's port (the invocations, which Coach asks the dashboard to
    send through the function's Service: NUCLIO_INVOKE_VIA). ps-lite aborts on any message that is not its own, so
    without it any pod could fail the job's epochs. Enforced only by a CNI that implements NetworkPolicy; the
    kubelet's probes come from the node, which NetworkPolicy always admits."""
    own = {"matchLabels": {JOB_LABEL: job}}
    key, value = NUCLIO_DASHBOARD_POD_LABEL
    dashboard = {"namespaceSelector": {}, "podSelector": {"matchLabels": {key: value}}}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": job, "namespace": namespace, "labels": {JOB_LABEL: job}},
            "spec": {"podSelector": own, "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": own}]},
                                 {"from": [dashboard], "ports": [{"protocol": "TCP", "port": HTTP_TRIGGER_PORT}]}]}}


def podgroup(job: str, namespace: str) -> dict:
    """The job's PodGroup: the quorum (one PS scheduler, one server, one worker) the gang profiles wait for."""
    return {"apiVersion": f"{PODGROUP_GROUP}/{PODGROUP_VERSION}", "kind": PODGROUP_KIND,
            "metadata": {"name": job, "namespace": namespace, "labels": {JOB_LABEL: job}},
            "spec": {"minMember": sum(QUORUM.values())}}


class KubePlacement:
    """PodGroups created here, pods created by `workloads`, bindings read from the apiserver."""

    def __init__(self, api: client.ApiClient, namespace: str, workloads: Workloads,
                 scheduler_name: str = SCHEDULER_NAME):
        self.namespace = namespace
        self.workloads = workloads
        self.scheduler_name = scheduler_name  # who binds the pods: coach-scheduler, or default-scheduler
        self._core = client.CoreV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._networking = client.NetworkingV1Api(api)
        self._lock = threading.Lock()
        self._pods: dict[str, PodSeen] = {}  # pod name -> what it is, for every Coach pod in the namespace
        self._version = 0  # bumped on every change the watch sees and every submit or release
        self._groups: set[str] = set()  # PodGroups this run created (deleted by close)
        self._submitted: dict[str, set[FunctionId]] = {}  # job -> functions asked for and not released
        self._failed: dict[str, str] = {}  # job -> why its pods could not be created
        self.relists = 0  # lists of the namespace's pods: the first, and one after every 410 Gone or broken watch
        self._closed = threading.Event()
        self._synced = threading.Event()
        self._watching: watch.Watch | None = None  # the open watch request, which close() cuts
        self._watcher = threading.Thread(target=self._watch, name="coach-kube-placement", daemon=True)
        self._watcher.start()

    # -- the Placement port -------------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self._version

    def register(self, jobs: Iterable[str]) -> None:
        """Create the jobs' PodGroups in submission order: their creation order is the gang profiles' FIFO."""
        for job in jobs:
            self._ensure_group(job)

    def submit(self, job: str, ids: Iterable[FunctionId]) -> None:
        """The PodGroup, then each function's workload (its pod appears when the dashboard creates it)."""
        problem = self._ensure_group(job)
        for fid in ids:
            self._submitted.setdefault(job, set()).add(fid)
            failure = problem or self.workloads.create(fid, self.scheduler_name)
            if failure is not None:
                problem = problem or failure
        with self._lock:
            if problem is None:
                self._failed.pop(job, None)
            else:
                self._failed[job] = problem if isinstance(problem, str) else problem.describe()
            self._version += 1

    def poll(self, job: str, now_s: float) -> Mapping[FunctionId, str]:
        """Every bound function of `job` that this run asked for, and its node (as the watch last saw them)."""
        wanted = self._submitted.get(job, set())
        with self._lock:
            return {seen.fid: seen.node for seen in self._pods.values() if seen.node and seen.fid in wanted}

    def explain(self, job: str, now_s: float) -> str:
        """Why `job` has no quorum: its pods could not be created, or the scheduler's reasons on its pods."""
        wanted = self._submitted.get(job, set())
        with self._lock:
            if job in self._failed:
                return f"pods not created: {self._failed[job]}"
            seen = [pod for pod in self._pods.values() if pod.fid in wanted]
        reasons = sorted({pod.why_pending for pod in seen if not pod.node and pod.why_pending})
        if reasons:
            return "; ".join(reasons)
        missing = len(wanted) - len(seen)
        if missing > 0:
            return f"{missing} pods not created yet"
        return f"waiting for {self.scheduler_name}"

    def release(self, ids: Iterable[FunctionId]) -> None:
        """Delete the functions' workloads (their pods go with them); the scheduler frees their slots."""
        for fid in ids:
            self._submitted.get(fid.job, set()).discard(fid)
            self.workloads.delete(fid)  # 404 is fine: remove() may have deleted it already
        with self._lock:
            self._version += 1

    # -- lifetime -----------------------------------------------------------------------------------------------
    def wait_synced(self, timeout_s: float) -> bool:
        """True once the first list of the namespace's pods has arrived."""
        return self._synced.wait(timeout_s)

    def close(self) -> None:
        """Stop watching and delete the PodGroups this run created."""
        self._closed.set()
        watcher = self._watching
        if watcher is not None:  # end the open watch request now rather than at its timeout
            watcher.stop()
            response = getattr(watcher, "_resp", None)
            if response is not None:
                try:
                    response.shutdown()
                except (ValueError, OSError):  # urllib3 already released the connection: the watch has ended
                    pass
        for job in sorted(self._groups):
            for what, delete, args in (
                    ("PodGroup", self._custom.delete_namespaced_custom_object,
                     (PODGROUP_GROUP, PODGROUP_VERSION, self.namespace, PODGROUP_PLURAL, job)),
                    ("NetworkPolicy", self._networking.delete_namespaced_network_policy, (job, self.namespace))):
                try:
                    delete(*args, _request_timeout=API_TIMEOUT_S)
                except ApiException as error:
                    if error.status != 404:
                        log.warning("%s %s not deleted: HTTP %s", what, job, error.status)
                except OSError as error:
                    log.warning("%s %s not deleted: %s", what, job, error)
        self._watcher.join(timeout=WATCH_TIMEOUT_S + 5)

    # -- inside -------------------------------------------------------------------------------------------------
    def _ensure_group(self, job: str) -> str | None:
        """Create `job`'s PodGroup and NetworkPolicy once, before its pods; a reason string when the apiserver
        refused."""
        if job in self._groups:
            return None
        for what, create in (("PodGroup", lambda: self._custom.create_namespaced_custom_object(
                PODGROUP_GROUP, PODGROUP_VERSION, self.namespace, PODGROUP_PLURAL, podgroup(job, self.namespace),
                _request_timeout=API_TIMEOUT_S)),
                             ("NetworkPolicy", lambda: self._networking.create_namespaced_network_policy(
                                 self.namespace, network_policy(job, self.namespace), _request_timeout=API_TIMEOUT_S))):
            try:
                create()
            except ApiException as error:
                if error.status != 409:  # 409: it exists already (a resumed run): it is ours to use
                    return f"{what} {self.namespace}/{job}: kube-apiserver answered HTTP {error.status} {error.reason}"
            except OSError as error:
                return f"{what} {self.namespace}/{job}: kube-apiserver unreachable ({type(error).__name__})"
        self._groups.add(job)
        return None

    def _watch(self) -> None:
        """List, then watch from the list's resourceVersion; relist after 410 Gone or a broken connection."""
        version: str | None = None
        while not self._closed.is_set():
            try:
                if version is None:
                    version = self._relist()
                version = self._follow(version)
            except ApiException as error:
                if error.status == GONE:
                    version = None  # too old: list again
                    continue
                log.warning("watching pods: HTTP %s; retrying", error.status)
                version = None
                self._closed.wait(RETRY_S)
            except Exception as error:  # noqa: BLE001 - a broken connection or a restarting apiserver
                if self._closed.is_set():
                    return  # close() cut the open watch
                log.warning("watching pods: %s; retrying", type(error).__name__)
                version = None
                self._closed.wait(RETRY_S)

    def _relist(self) -> str:
        listed = self._core.list_namespaced_pod(self.namespace, label_selector=JOB_LABEL, _preload_content=False,
                                                _request_timeout=API_TIMEOUT_S)
        body = _json(listed)
        pods = {}
        for item in body.get("items") or ():
            seen = pod_seen(item)
            if seen is not None:
                pods[item["metadata"]["name"]] = seen
        with self._lock:
            if pods != self._pods:
                self._pods = pods
                self._version += 1
        self.relists += 1
        self._synced.set()
        return body["metadata"]["resourceVersion"]

    def _follow(self, version: str) -> str:
        """One watch request from `version`; the newest version seen (bookmarks included)."""
        watcher = self._watching = watch.Watch()
        if self._closed.is_set():
            return version
        for event in watcher.stream(self._core.list_namespaced_pod, self.namespace, label_selector=JOB_LABEL,
                                    resource_version=version, allow_watch_bookmarks=True,
                                    timeout_seconds=WATCH_TIMEOUT_S):
            if not event:
                continue
            kind, obj = event["type"], event["raw_object"]
            version = (obj.get("metadata") or {}).get("resourceVersion") or version
            if kind == "BOOKMARK":
                continue
            name = (obj.get("metadata") or {}).get("name")
            seen = pod_seen(obj)
            with self._lock:
                if kind == "DELETED" or seen is None:
                    changed = self._pods.pop(name, None) is not None
                else:
                    changed = self._pods.get(name) != seen
                    self._pods[name] = seen
                if changed:
                    self._version += 1
            if self._closed.is_set():
                watcher.stop()
        return version


def _json(response) -> dict:
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()
