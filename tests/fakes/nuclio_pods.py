"""The fake Nuclio dashboard's cluster side for one function: its Deployment, the one pod its ReplicaSet keeps, and
the kubelet that runs that pod's processes. Only standard Kubernetes API calls, through the official client, so the
same code runs against the suite's fake kube-apiserver and a real one (where no controller-manager and no kubelet
run: nothing but this makes pods, finishes a graceful deletion or sets a pod's status).

- Deployment: `nuclio-<function>` (apps/v1), one replica; its pods carry an ownerReference to it. An apiserver that
  does not serve apps/v1 (the suite's fake) gets no Deployment: the pods then name one the dashboard holds itself.
- ReplicaSet: a pod named `nuclio-<function>-<template hash>-<random>`. When the pod fails or is deleted while the
  function lives, a new one, under a new name, which a scheduler must bind again. A failed pod stays, as on a
  cluster; it holds no slot (its phase is Failed).
- kubelet: once a scheduler binds the pod, it starts the pod's container, the processor of
  tests/fakes/nuclio_processor.py (one wrapper process per worker of the HTTP trigger), forked from Coach's warm
  template with the container's env (the pod IP is 127.0.0.1) and a temp dir of the pod's own (a container's /tmp
  is its own); then it patches the pod's status Running (status subresource). A processor that ends on its own
  (a wrapper died) makes the pod Failed. A pod with a deletionTimestamp (or gone, on an apiserver that deletes at
  once) has its processes stopped: SIGTERM, up to the grace period, SIGKILL to the pod's every process, then the
  pod deleted with gracePeriodSeconds=0 (uid precondition), which on a real apiserver is what ends a bound pod's
  Terminating: its slot stays taken until then.
- garbage collector: the function deleted, the Deployment is deleted (propagation Background) and so is every pod
  of the function (with its own grace period).

A real cluster would restart the container in place (restartPolicy Always) when Nuclio's processor panics on a dead
wrapper; this fake fails the pod instead, so that the replacement path (a new pod, scheduled again) is exercised.

Side effects: Kubernetes API calls, processes, a temp dir per pod, appends to the function's log file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from coach.platforms.template import IMPORT_VARIABLE_PREFIXES, HostProcess, TemplateError, ready_line, template_for
from tests.fakes import nuclio_config as cfg

REPO = Path(__file__).resolve().parents[2]
PROCESSOR_MODULE = "tests.fakes.nuclio_processor"
LOOPBACK = "127.0.0.1"  # every pod's IP: they all run on this machine
DEFAULT_READINESS_TIMEOUT_S = 120  # platformconfig.DefaultFunctionReadinessTimeoutSeconds
READY_TIMEOUT_S = 120.0  # for a processor's wrappers to run init_context (two shared cores can be slow)
WATCH_TIMEOUT_S = 1  # a pod watch ends this often, so a deleted function's thread notices
PROCESS_POLL_S = 0.1  # how often the kubelet looks at the pod's processor
POD_POLL_S = 0.5  # how often it reads the pod (a deletionTimestamp, or the pod gone)
UNHEALTHY_MESSAGE = "Function is not healthy"  # common.FunctionStateMessageUnhealthy
TIMEOUT_S = 10  # of one API call
DEPLOYMENT_GONE_TIMEOUT_S = 30.0  # how long a Deployment of the same name may take to go before it is replaced
RESTART_BACKOFF_S = 1.0  # before the next replacement of a pod whose processor did not start


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def status_message(error: ApiException) -> str:
    try:
        return json.loads(error.body or "{}").get("message") or str(error.reason)
    except (ValueError, AttributeError):
        return str(error.reason)


@dataclass
class RunningPod:
    """The pod of the function the kubelet runs now."""

    name: str
    uid: str
    node: str = ""
    process: HostProcess | None = None  # the pod's processor
    port: int = 0
    wrappers: list[int] = field(default_factory=list)  # the wrapper processes' pids
    tmpdir: Path | None = None


class FunctionPods:
    """One function's Deployment, pods and processes; `run()` is its thread. `function` is the dashboard's record:
    meta, spec, name, namespace, `deleted` (an Event), `set_state(state, message="", **extra)`."""

    def __init__(self, function, api_client: client.ApiClient, augmented: list[dict], log_dir: Path,
                 pods_dir: Path, stopping: threading.Event, on_ready: Callable[[int], None]):
        self.function = function
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.augmented = augmented
        self.log_dir = log_dir
        self.pods_dir = pods_dir
        self.stopping = stopping
        self.on_ready = on_ready  # told the port of each pod that comes up (the function's invocation URL)
        self.template = cfg.pod_template(function.meta, function.spec, augmented)
        self.owner: dict | None = None  # the Deployment: name and uid
        self.deployment_served = False
        self._lock = threading.Lock()
        self._pod: RunningPod | None = None
        self._pods: list[str] = []  # every pod made for the function, for the garbage collector

    @property
    def namespace(self) -> str:
        return self.function.namespace

    # -- for the dashboard and tests ----------------------------------------------------------------------------
    def processes(self) -> dict | None:
        """The running pod's name, node, processor pid, wrapper pids and temp dir (for tests), or None."""
        with self._lock:
            pod = self._pod
            if pod is None or pod.process is None:
                return None
            return {"pod": pod.name, "node": pod.node, "processor": pod.process.pid, "wrappers": list(pod.wrappers),
                    "tmpdir": pod.tmpdir}

    def kill(self) -> None:
        """SIGKILL the running pod's processes now (the dashboard stops; pods are left to the apiserver)."""
        with self._lock:
            pod = self._pod
        if pod is not None and pod.process is not None:
            _kill_group(pod.process)

    # -- the function's life ------------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except Exception as error:  # noqa: BLE001 - becomes the function's state, as a controller error would
            self.function.set_state("error", f"Failed to deploy function: {type(error).__name__}: {error}")
        while not self.function.deleted.is_set() and not self.stopping.is_set():
            self.function.deleted.wait(0.5)  # a failed function keeps its resources until it is deleted
        if not self.stopping.is_set():
            self._collect()

    def _run(self) -> None:
        if not self._ensure_deployment():
            return
        first = True
        while not self.function.deleted.is_set() and not self.stopping.is_set():  # a stopped dashboard makes no pod
            pod = self._create_pod()
            if pod is None:
                return
            if first:
                self.function.set_state("configuringResources")
            node = self._wait_bound(pod, readiness=first)
            if node is None:
                if first and not self.function.deleted.is_set():
                    return  # failed (its state says why); the Deployment and pods stay until it is deleted
                continue  # a replacement deleted before it was bound: the next one
            pod.node = node
            if not self._start(pod, first):
                if first:
                    return
                self.function.deleted.wait(RESTART_BACKOFF_S)  # as the kubelet backs off a crashing container
                continue
            first = False
            if not self._keep_running(pod):
                return

    def _ensure_deployment(self) -> bool:
        """Create the function's Deployment. One of that name still there (an earlier function of that name, its
        pods still stopping) is waited for, then replaced: Nuclio updates it in place."""
        body = cfg.deployment(self.function.meta, self.template)
        deadline = time.monotonic() + DEPLOYMENT_GONE_TIMEOUT_S
        while not self.function.deleted.is_set() and not self.stopping.is_set():
            try:
                response = self.apps.create_namespaced_deployment(self.namespace, body, _preload_content=False,
                                                                  _request_timeout=TIMEOUT_S)
                created = json.loads(response.data)
                self.owner = {"name": created["metadata"]["name"], "uid": created["metadata"]["uid"]}
                self.deployment_served = True
                return True
            except ApiException as error:
                if error.status == 404:  # no apps/v1 here: the pods name a Deployment the dashboard holds
                    self.owner = {"name": body["metadata"]["name"], "uid": str(uuid.uuid4())}
                    return True
                if error.status != 409:
                    self.function.set_state("error", f"Failed to create/update function: deployment: HTTP "
                                                     f"{error.status}: {status_message(error)}")
                    return False
            except (urllib3.exceptions.HTTPError, OSError) as error:
                self.function.set_state("error", f"Failed to create/update function: deployment: "
                                                 f"{type(error).__name__}")
                return False
            if time.monotonic() >= deadline:  # nobody is deleting it: replace it
                try:
                    _done(self.apps.delete_namespaced_deployment(
                        body["metadata"]["name"], self.namespace,
                        body=client.V1DeleteOptions(propagation_policy="Background"), _preload_content=False,
                        _request_timeout=TIMEOUT_S))
                except (ApiException, urllib3.exceptions.HTTPError, OSError):
                    pass
            self.stopping.wait(0.2)
        return False

    def _create_pod(self) -> RunningPod | None:
        try:
            response = self.core.create_namespaced_pod(self.namespace, cfg.pod(self.function.meta, self.template,
                                                                                self.owner),
                                                       _preload_content=False, _request_timeout=TIMEOUT_S)
            created = json.loads(response.data)
        except ApiException as error:
            self.function.set_state("error", f"Failed to create/update function: pod: HTTP {error.status}: "
                                             f"{status_message(error)}")
            return None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            self.function.set_state("error", f"Failed to create/update function: pod: {type(error).__name__}")
            return None
        pod = RunningPod(created["metadata"]["name"], created["metadata"]["uid"])
        with self._lock:
            self._pods.append(pod.name)
        return pod

    def _wait_bound(self, pod: RunningPod, readiness: bool) -> str | None:
        """The pod's node once a scheduler binds it, from a read then watches of the pod; None when the function is
        deleted or the pod is gone first, or (the first pod, `readiness`) the function failed (its state says)."""
        spec = self.function.spec
        readiness_s = float(spec.get("readinessTimeoutSeconds") or DEFAULT_READINESS_TIMEOUT_S)
        fail_fast = readiness and not spec.get("waitReadinessTimeoutBeforeFailure", False)
        deadline = time.monotonic() + readiness_s if readiness else float("inf")
        version = None
        while not self.function.deleted.is_set() and not self.stopping.is_set():
            if time.monotonic() >= deadline:
                self.function.set_state("unhealthy", "Failed to wait for function resources to be available: "
                                                     f"pod {pod.name} not scheduled within {readiness_s:g} s")
                return None
            watcher = watch.Watch()
            try:
                if version is None:
                    response = self.core.read_namespaced_pod(pod.name, self.namespace, _preload_content=False,
                                                             _request_timeout=TIMEOUT_S)
                    current = json.loads(response.data)
                    version = current["metadata"].get("resourceVersion")
                    events = iter([{"type": "MODIFIED", "raw_object": current}])
                else:
                    events = watcher.stream(self.core.list_namespaced_pod, self.namespace,
                                            field_selector=f"metadata.name={pod.name}", resource_version=version,
                                            timeout_seconds=WATCH_TIMEOUT_S, allow_watch_bookmarks=True,
                                            _request_timeout=WATCH_TIMEOUT_S + 5)
                for event in events:
                    current = event["raw_object"]
                    version = (current.get("metadata") or {}).get("resourceVersion") or version
                    if event["type"] == "BOOKMARK":
                        continue
                    outcome = self._judge(pod, event["type"], current, readiness, fail_fast)
                    if outcome is not None or self.function.deleted.is_set():
                        watcher.stop()
                        return outcome or None
            except ApiException as error:
                if error.status == 404:
                    return self._judge(pod, "DELETED", {}, readiness, fail_fast) or None
                version = None  # 410 Gone or a broken watch: read the pod again
                self.stopping.wait(0.1)
            except (urllib3.exceptions.HTTPError, OSError, ValueError):
                version = None
                self.stopping.wait(0.2)
        return None

    def _judge(self, pod: RunningPod, kind: str, current: dict, readiness: bool, fail_fast: bool) -> str | None:
        """The node of a bound pod; "" when waiting is over without one; None to keep waiting."""
        if kind == "DELETED" or (current.get("metadata") or {}).get("deletionTimestamp"):
            if readiness:
                self.function.set_state("error", f"Failed to wait for function resources: pod {pod.name} is gone")
            self._finish_deletion(pod)
            return ""
        node = (current.get("spec") or {}).get("nodeName")
        if node:
            return node
        if fail_fast and cfg.unschedulable(current):
            self.function.set_state("unhealthy", "Failed to verify at least one pod schedulability: "
                                                 f"NuclioFunction pod ({pod.name}) is unschedulable")
            return ""
        return None

    # -- the kubelet --------------------------------------------------------------------------------------------
    def _start(self, pod: RunningPod, first: bool) -> bool:
        """Start the pod's container; on success the pod is Running and the function ready."""
        current = self._read(pod)
        if current is None or current["metadata"].get("deletionTimestamp"):
            if current is not None:
                self._finish_deletion(pod)
            return False
        fid = cfg.function_id(self.function.meta["labels"], self.function.name)
        pod.tmpdir = Path(tempfile.mkdtemp(prefix=f"{pod.name}-", dir=self.pods_dir))
        function_env = cfg.container_env(current, LOOPBACK)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **function_env, "TMPDIR": str(pod.tmpdir)}
        shared = {key: value for key, value in env.items()  # the template never holds the function's own env
                  if key not in function_env or key.startswith(IMPORT_VARIABLE_PREFIXES)}
        argv = ["--handler", self.function.spec["handler"], "--name", fid.name,
                "--workers", str(cfg.trigger_workers(self.function.spec)),
                "--availability-timeout-ms", str(cfg.availability_timeout_ms(self.function.spec))]
        log_path = self.log_dir / f"{fid.name}.log"
        problem = ""
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            template = template_for(shared)
            with open(log_path, "ab") as log:
                process = template.fork_host([*argv, "--parent-pid", str(template.pid)], env, str(REPO),
                                             log.fileno(), module=PROCESSOR_MODULE)
        except (TemplateError, OSError) as error:
            process, problem = None, f"could not start the processor: {error}"
        if process is not None:
            with self._lock:
                pod.process = process
                self._pod = pod
            ready = _await_ready(process, time.monotonic() + READY_TIMEOUT_S,
                                 lambda: self.function.deleted.is_set() or self.stopping.is_set())
            if ready is None:
                problem = f"processor did not become ready (see {log_path})"
            else:
                pod.port, pod.wrappers = ready
        if problem:
            self._failed(pod, problem if first else UNHEALTHY_MESSAGE, first)
            return False
        self._patch_status(pod, running=True)
        self._deployment_status(ready=True)
        self.on_ready(pod.port)
        return True

    def _keep_running(self, pod: RunningPod) -> bool:
        """Watch the running pod until it ends; True when a replacement is due, False when the function is gone."""
        next_read = time.monotonic() + POD_POLL_S
        while True:
            if self.function.deleted.is_set() or self.stopping.is_set():
                return False
            if pod.process.exited(PROCESS_POLL_S):
                self._failed(pod, UNHEALTHY_MESSAGE, first=False)
                return True
            if time.monotonic() >= next_read:
                next_read = time.monotonic() + POD_POLL_S
                current = self._read(pod)
                if current is None or current["metadata"].get("deletionTimestamp"):
                    self.function.set_state("unhealthy", UNHEALTHY_MESSAGE)
                    self._deployment_status(ready=False)
                    self._finish_deletion(pod, current)
                    return True

    def _failed(self, pod: RunningPod, message: str, first: bool) -> None:
        """The container ended on its own, or never started: the pod Failed, its processes gone, the function
        in error (its first pod) or unhealthy (a replacement follows)."""
        self.function.set_state("error" if first else "unhealthy",
                                f"Failed to start the function: {message}" if first else message)
        if pod.process is not None:
            _kill_group(pod.process)
            pod.process.exited(5.0)
        self._patch_status(pod, running=False)
        self._deployment_status(ready=False)
        self._release(pod)

    def _finish_deletion(self, pod: RunningPod, current: dict | None = None) -> None:
        """What the kubelet does for a pod being deleted: stop its processes within the grace period, then delete
        it with gracePeriodSeconds=0."""
        if pod.process is not None:
            grace_s = cfg.grace_period_s(current or self.template)
            pod.process.signal(signal.SIGTERM)
            if not pod.process.exited(grace_s):
                _kill_group(pod.process)
                pod.process.exited(5.0)
        self._release(pod)
        self._delete_pod(pod.name, grace_s=0, uid=pod.uid)

    def _release(self, pod: RunningPod) -> None:
        with self._lock:
            if self._pod is pod:
                self._pod = None
        if pod.process is not None:
            pod.process.close()
        if pod.tmpdir is not None:
            shutil.rmtree(pod.tmpdir, ignore_errors=True)

    # -- the garbage collector ----------------------------------------------------------------------------------
    def _collect(self) -> None:
        """The function is gone: its Deployment, and every pod of it, each stopped as the kubelet stops it."""
        if self.deployment_served and self.owner is not None:
            try:
                _done(self.apps.delete_namespaced_deployment(
                    self.owner["name"], self.namespace, body=client.V1DeleteOptions(
                        propagation_policy="Background", preconditions=client.V1Preconditions(uid=self.owner["uid"])),
                    _preload_content=False, _request_timeout=TIMEOUT_S))  # this one: a new one may have its name
            except (ApiException, urllib3.exceptions.HTTPError, OSError):
                pass
        with self._lock:
            names, running = list(self._pods), self._pod
        for name in names:
            try:
                self._delete_pod(name)  # with the pod's own grace period: a bound, running one stays Terminating
            except ApiException:
                pass
        if running is not None:
            self._finish_deletion(running, self._read(running))

    # -- API calls ----------------------------------------------------------------------------------------------
    def _read(self, pod: RunningPod) -> dict | None:
        """The pod as the apiserver holds it now, None when it is gone (or is another pod of that name)."""
        try:
            response = self.core.read_namespaced_pod(pod.name, self.namespace, _preload_content=False,
                                                     _request_timeout=TIMEOUT_S)
            current = json.loads(response.data)
        except ApiException as error:
            if error.status == 404:
                return None
            return {"metadata": {"uid": pod.uid}}  # unknown: taken as unchanged
        except (urllib3.exceptions.HTTPError, OSError, ValueError):
            return {"metadata": {"uid": pod.uid}}
        return current if current["metadata"].get("uid") == pod.uid else None

    def _delete_pod(self, name: str, grace_s: int | None = None, uid: str | None = None) -> None:
        options = client.V1DeleteOptions(grace_period_seconds=grace_s,
                                         preconditions=client.V1Preconditions(uid=uid) if uid else None)
        try:
            _done(self.core.delete_namespaced_pod(name, self.namespace, body=options, _preload_content=False,
                                                  _request_timeout=TIMEOUT_S))
        except ApiException as error:
            if error.status not in (404, 409):  # gone already, or another pod of that name now
                raise
        except (urllib3.exceptions.HTTPError, OSError):
            pass

    def _patch_status(self, pod: RunningPod, running: bool) -> None:
        """The pod's status as the kubelet reports it: Running and Ready at 127.0.0.1, or Failed."""
        now = now_rfc3339()
        ready = "True" if running else "False"
        state = {"running": {"startedAt": now}} if running else \
            {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}}
        status = {"phase": "Running" if running else "Failed", "podIP": LOOPBACK, "podIPs": [{"ip": LOOPBACK}],
                  "hostIP": LOOPBACK, "startTime": now,
                  "conditions": [{"type": "Initialized", "status": "True", "lastTransitionTime": now},
                                 {"type": "Ready", "status": ready, "lastTransitionTime": now},
                                 {"type": "ContainersReady", "status": ready, "lastTransitionTime": now}],
                  "containerStatuses": [{"name": cfg.CONTAINER_NAME, "ready": running, "restartCount": 0,
                                         "started": running, "image": self.function.spec["image"], "imageID": "",
                                         "state": state}]}
        try:
            _done(self.core.patch_namespaced_pod_status(pod.name, self.namespace, {"status": status},
                                                        _content_type="application/strategic-merge-patch+json",
                                                        _preload_content=False, _request_timeout=TIMEOUT_S))
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            pass  # the pod's status is for people and schedulers; the function's state is what Coach reads

    def _deployment_status(self, ready: bool) -> None:
        if not self.deployment_served or self.owner is None:
            return
        count = 1 if ready else 0
        status = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": count,
                  "availableReplicas": count, "unavailableReplicas": 1 - count}
        try:
            _done(self.apps.patch_namespaced_deployment_status(
                self.owner["name"], self.namespace, {"status": status},
                _content_type="application/merge-patch+json", _preload_content=False,
                _request_timeout=TIMEOUT_S))
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            pass


def _await_ready(process: HostProcess, deadline: float, gone: Callable[[], bool]) -> tuple[int, list[int]] | None:
    """(port, wrapper pids) from the processor's `READY <port> <pid,pid>` line; None when it ends first, the
    deadline passes or the function is `gone()`."""
    words = ready_line(process, deadline, gone)
    if words is None or len(words) != 3:
        return None
    return int(words[1]), [int(pid) for pid in words[2].split(",")]


def _done(response) -> None:
    """Read a raw response to its end, then give its connection back: one given back unread breaks the next request
    on it (ResponseNotReady)."""
    response.data  # noqa: B018 - reads the body
    response.release_conn()


def _kill_group(process: HostProcess) -> None:
    """SIGKILL the pod's every process: the processor leads its own process group (tests/fakes/nuclio_processor.py).
    Only while it runs, so that its group id cannot name anything else; once it has ended, its wrappers and their
    children end with it (PR_SET_PDEATHSIG)."""
    if process.exited():
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.signal(signal.SIGKILL)
