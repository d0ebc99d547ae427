"""A fake Nuclio dashboard on loopback: the REST API Coach's Nuclio platform uses, over real HTTP, for tests and demos.

What it does, as the real dashboard and controller do (nuclio/nuclio pkg/dashboard/resource/function.go,
invocation.go, project.go; pkg/platform/kube): `POST /api/functions` checks the body (400), the name (409 when
it exists) and the project (412 when it does not), answers 202 at once and deploys in the background: it creates
the function's pod in a kube-apiserver with the official `kubernetes` client (labels = the function's labels,
Nuclio's class labels and `nuclio.io/function-name`; `spec.schedulerName` and the rest from the platform
config's `functionAugmentedConfigs` whose label selector matches), reports `building` then `configuringResources`
while it watches the pod until a scheduler binds it, then starts the function's real warm host
(coach.platforms.local, the function's own `spec.handler` and env; the run's token from COACH_FUNCTION_TOKEN),
marks the pod Running at 127.0.0.1 and reports `ready` with its invocation URL. A host that fails to start makes
the function `error`; a host that dies makes it `unhealthy` ("Function is not healthy"), as Nuclio's function
monitor does; a pod still unbound after `spec.readinessTimeoutSeconds` (default 120) makes it `unhealthy`, and so
does a pod a scheduler marked Unschedulable unless `spec.waitReadinessTimeoutBeforeFailure` is true.

`DELETE /api/functions` (body `{"metadata": {"name", "namespace"}}`) kills the host and deletes the pod; it
answers 204, also for a function that does not exist (the real one is idempotent), and 412 for a function still
being provisioned unless `X-Nuclio-Delete-Function-Ignore-State-Validation: true`. `POST
/api/function_invocations` sends the request to the host (the caller's headers but Nuclio's own, plus
`X-Nuclio-Target`; `X-Nuclio-Invoke-Timeout` as a Go duration, default 1 minute) and passes its status and body
back; its own failures are the real dashboard's: 404 `Function not found`, 500 `Invocation URL is required` for a
function not ready yet, 500 with Go's client error for a timeout or a refused connection.

Test hooks (`dash.faults`): `fail_next(path_prefix, status=500, times=1)` answers the next requests with that
status; `hang(path_prefix, seconds, times=1)` holds them that long, then drops the connection.

Side effects: an HTTP server thread, one deploy thread per function, one health-check thread, warm host processes,
pods in the kube-apiserver, one log file per function under `log_dir`.
Run alone: `python -m tests.fakes.nuclio_dashboard --kubeconfig PATH --port P --logs DIR` (prints `READY <url>`).
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Mapping
from urllib.parse import unquote, urlsplit

import requests
import urllib3
import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from coach.domain.identity import FunctionId, Role
from coach.domain.invocation import Failure, FunctionRef
from coach.domain.kube import NUCLIO_FUNCTION_LABEL
from coach.platforms.host import TOKEN_ENV, TOKEN_HEADER
from coach.platforms.local import LOOPBACK, LocalPlatform

#: Nuclio's platform config as deploy/ ships it (functionAugmentedConfigs set Coach's schedulerName).
PLATFORM_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "nuclio" / "platform.yaml"

#: Labels Nuclio's controller adds to every function's resources (pkg/platform/kube/functionres/lazy.go).
CLASS_LABELS = {"nuclio.io/class": "function", "nuclio.io/app": "functionres", "nuclio.io/function-version": "latest"}
PROJECT_LABEL = "nuclio.io/project-name"
DEFAULT_PROJECT = "default"
CONTAINER_NAME = "nuclio"  # the function container's name in Nuclio's pods
HTTP_PORT = 8080  # the container port of Nuclio's HTTP trigger

DEFAULT_INVOKE_TIMEOUT_S = 60.0  # platform.FunctionInvocationDefaultTimeout
DEFAULT_READINESS_TIMEOUT_S = 120  # platformconfig.DefaultFunctionReadinessTimeoutSeconds
HEALTH_INTERVAL_S = 0.3
WATCH_TIMEOUT_S = 1  # a pod watch ends this often, so a deleted function's thread notices
MAX_BODY_BYTES = 16 * 1024 * 1024
UNHEALTHY_MESSAGE = "Function is not healthy"  # common.FunctionStateMessageUnhealthy
PROVISIONED = frozenset({"ready", "error", "unhealthy", "scaledToZero", "imported"})

_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_GO_DURATION = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_HOP_BY_HOP = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te",
                         "upgrade", "proxy-authorization", "proxy-authenticate", "trailer"})


class ApiError(Exception):
    """A request the dashboard refuses; `status` and the one-line `message` become its JSON error body."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


# --------------------------------------------------------------------------- pure helpers


def go_duration_s(text: str) -> float:
    """Seconds of a Go duration ("30s", "1m30s", "1500ms"), or ValueError, as Go's time.ParseDuration reads it."""
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-")
    if body == "0":
        return 0.0
    if not body or _GO_DURATION.sub("", body):
        raise ValueError(f"time: invalid duration {text!r}")
    return sign * sum(float(number) * _GO_UNITS_S[unit] for number, unit in _GO_DURATION.findall(body))


def selector_matches(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against labels; an empty selector matches everything (as LabelSelectorAsSelector)."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or ()
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"label selector: unknown operator {operator!r}")
    return True


def deep_merge(base: dict, overlay: Mapping) -> dict:
    """`overlay` over `base`: mappings merge key by key, anything else replaces."""
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def fill_empty(base: dict, overlay: Mapping) -> dict:
    """`overlay` into the fields of `base` that are missing or empty, as mergo.Merge without override does (how
    Nuclio merges an augmented config's `kubernetes.deployment` into the Deployment it generates)."""
    for key, value in overlay.items():
        current = base.get(key)
        if isinstance(value, Mapping) and isinstance(current, dict):
            fill_empty(current, value)
        elif current in (None, "", 0, False, [], {}):
            base[key] = copy.deepcopy(value)
    return base


def load_platform_config(path: Path) -> list[dict]:
    """The `functionAugmentedConfigs` of a Nuclio platform config: the file itself, or a ConfigMap holding it
    under `platform.yaml`. ValueError (one line naming the file) when it is neither."""
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as error:
        raise ValueError(f"{path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not YAML ({getattr(error, 'problem', error)})") from None
    if isinstance(document, Mapping) and document.get("kind") == "ConfigMap":
        text = (document.get("data") or {}).get("platform.yaml")
        if not isinstance(text, str):
            raise ValueError(f"{path}: ConfigMap without data.platform.yaml")
        document = yaml.safe_load(text)
    if not isinstance(document, Mapping):
        raise ValueError(f"{path}: expected a Nuclio platform config (a mapping)")
    augmented = document.get("functionAugmentedConfigs") or []
    if not isinstance(augmented, list) or not all(isinstance(entry, Mapping) for entry in augmented):
        raise ValueError(f"{path}: functionAugmentedConfigs: expected a list of mappings")
    return [dict(entry) for entry in augmented]


def function_id(labels: Mapping[str, str], name: str) -> FunctionId:
    """The Coach identity in the labels; a function without one is served as a worker named after itself."""
    try:
        return FunctionId.from_labels(labels)
    except (KeyError, ValueError):
        return FunctionId(name, Role.WORKER, 0)


def host_env(spec: Mapping) -> dict[str, str]:
    """The function's env as its host sees it: plain values, and the pod IP (127.0.0.1) for fieldRef status.podIP."""
    env: dict[str, str] = {}
    for entry in spec.get("env") or ():
        if "value" in entry:
            env[entry["name"]] = str(entry["value"])
        elif ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") == "status.podIP":
            env[entry["name"]] = LOOPBACK
    return env


# --------------------------------------------------------------------------- state


@dataclass
class _Function:
    """One function the dashboard holds; `lock` guards status, platform and ref."""

    meta: dict
    spec: dict
    status: dict = field(default_factory=lambda: {"state": "waitingForResourceConfiguration"})
    lock: threading.Lock = field(default_factory=threading.Lock)
    deleted: threading.Event = field(default_factory=threading.Event)
    pod: str | None = None
    platform: LocalPlatform | None = None
    ref: FunctionRef | None = None
    thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self.meta["name"]

    @property
    def namespace(self) -> str:
        return self.meta["namespace"]

    def attributes(self) -> dict:
        with self.lock:
            return {"metadata": copy.deepcopy(self.meta), "spec": copy.deepcopy(self.spec),
                    "status": copy.deepcopy(self.status)}

    def set_state(self, state: str, message: str = "", **extra) -> None:
        with self.lock:
            if not self.deleted.is_set():
                self.status = {"state": state, **({"message": message} if message else {}), **extra}


class Faults:
    """Test hooks: the next requests under a path prefix fail with a status, or hang."""

    def __init__(self, stopping: threading.Event):
        self._lock = threading.Lock()
        self._rules: list[dict] = []
        self._stopping = stopping

    def fail_next(self, path_prefix: str, status: int = 500, times: int = 1,
                  message: str = "injected failure") -> None:
        with self._lock:
            self._rules.append({"prefix": path_prefix, "status": status, "left": times, "message": message})

    def hang(self, path_prefix: str, seconds: float, times: int = 1) -> None:
        with self._lock:
            self._rules.append({"prefix": path_prefix, "hang_s": seconds, "left": times})

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def take(self, path: str) -> dict | None:
        """The first rule for `path` that has uses left, used once."""
        with self._lock:
            for rule in self._rules:
                if rule["left"] > 0 and path.startswith(rule["prefix"]):
                    rule["left"] -= 1
                    return dict(rule)
        return None

    def wait(self, seconds: float) -> None:
        self._stopping.wait(seconds)


# --------------------------------------------------------------------------- the dashboard


class FakeDashboard:
    """The fake dashboard; `start()` serves on host:port, `stop()` kills every host it started."""

    def __init__(self, kubeconfig: Path, namespace: str = "default", *, log_dir: Path,
                 platform_config: Path = PLATFORM_CONFIG, host: str = "127.0.0.1", port: int = 0):
        self.namespace = namespace
        self.log_dir = Path(log_dir)
        self.augmented = load_platform_config(Path(platform_config))
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        self._api = client.ApiClient(configuration)
        self._core = client.CoreV1Api(self._api)
        self._lock = threading.Lock()
        self._functions: dict[tuple[str, str], _Function] = {}
        self._projects: set[tuple[str, str]] = {(namespace, DEFAULT_PROJECT)}
        self._version = 0
        self._stopping = threading.Event()
        self.faults = Faults(self._stopping)
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._threads: list[threading.Thread] = []

    # -- lifetime -----------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeDashboard":
        for target, name in ((self._server.serve_forever, "fake-nuclio-http"),
                             (self._monitor, "fake-nuclio-health")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop serving, stop every deploy, kill every host; pods are left to the apiserver's owner."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            functions, self._functions = list(self._functions.values()), {}
        for function in functions:
            self._halt(function)
        for function in functions:
            if function.thread is not None:
                function.thread.join(timeout=10)
        for thread in self._threads:
            thread.join(timeout=10)
        self._api.close()

    def __enter__(self) -> "FakeDashboard":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # test hooks, also on `faults`
    def fail_next(self, path_prefix: str, status: int = 500, times: int = 1) -> None:
        self.faults.fail_next(path_prefix, status, times)

    def hang(self, path_prefix: str, seconds: float, times: int = 1) -> None:
        self.faults.hang(path_prefix, seconds, times)

    def state(self, name: str, namespace: str | None = None) -> str | None:
        """A function's state, or None when the dashboard does not hold it (for tests)."""
        with self._lock:
            function = self._functions.get((namespace or self.namespace, name))
        return None if function is None else function.attributes()["status"].get("state")

    # -- functions ----------------------------------------------------------------------------------------------
    def _namespace(self, headers) -> str:
        return headers.get("X-Nuclio-Function-Namespace") or self.namespace

    def create_function(self, body: object, headers) -> None:
        """Validate, store and start deploying (the caller answers 202); ApiError when refused."""
        if not isinstance(body, Mapping):
            raise ApiError(400, "Failed to parse JSON body: expected a JSON object")
        meta, spec = body.get("metadata") or {}, body.get("spec") or {}
        if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
            raise ApiError(400, "Failed to parse JSON body: metadata and spec must be JSON objects")
        meta, spec = copy.deepcopy(dict(meta)), copy.deepcopy(dict(spec))
        labels = meta.get("labels") or {}
        if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
            raise ApiError(400, "Failed to parse JSON body: metadata.labels must map strings to strings")
        meta["labels"] = dict(labels)
        meta["namespace"] = meta.get("namespace") or self._namespace(headers)
        project = headers.get("X-Nuclio-Project-Name")
        if project:
            meta["labels"][PROJECT_LABEL] = project
        meta["labels"].setdefault(PROJECT_LABEL, DEFAULT_PROJECT)
        name = meta.get("name")
        if not name:
            raise ApiError(400, "Function name must be provided in metadata")
        if not isinstance(name, str) or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
            raise ApiError(400, "Function name doesn't conform to k8s naming convention. Errors: name part must "
                                "consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                                "with an alphanumeric character, at most 63 characters")
        if not isinstance(spec.get("image"), str) or not spec["image"]:
            raise ApiError(400, "Function must have either spec.build.path,spec.build.functionSourceCode, "
                                "spec.build.image or spec.image set in order to create")
        env = spec.get("env") or []
        if not isinstance(env, list) or not all(isinstance(e, Mapping) and isinstance(e.get("name"), str)
                                                for e in env):
            raise ApiError(400, "Failed to parse JSON body: spec.env must be a list of {name, value}")
        if not isinstance(spec.get("handler"), str) or ":" not in spec["handler"]:
            raise ApiError(400, "Failed to parse JSON body: spec.handler must name module:function")
        key = (meta["namespace"], name)
        function_labels = {**meta["labels"], **CLASS_LABELS, NUCLIO_FUNCTION_LABEL: name}
        for augmented in self.augmented:
            if selector_matches(augmented.get("labelSelector"), function_labels):
                overlay = augmented.get("functionConfig") or {}
                deep_merge(spec, overlay.get("spec") or {})
        with self._lock:
            if key in self._functions:
                raise ApiError(409, "Cannot create two functions with the same name")
            if (meta["namespace"], meta["labels"][PROJECT_LABEL]) not in self._projects:
                raise ApiError(412, "Project does not exist")
            self._version += 1
            meta["resourceVersion"] = str(self._version)
            function = _Function(meta, spec, {"state": "building"})
            self._functions[key] = function
        function.thread = threading.Thread(target=self._deploy, args=(function,), name=f"fake-nuclio-{name}",
                                           daemon=True)
        function.thread.start()

    def get_function(self, name: str, namespace: str) -> dict:
        with self._lock:
            function = self._functions.get((namespace, name))
        if function is None:
            raise ApiError(404, "Function not found")
        return function.attributes()

    def list_functions(self, namespace: str, project: str | None, name: str | None) -> dict:
        with self._lock:
            held = [f for (ns, _), f in self._functions.items() if ns == namespace]
        return {f.name: f.attributes() for f in held
                if (not project or f.meta["labels"].get(PROJECT_LABEL) == project) and (not name or f.name == name)}

    def delete_function(self, body: object, headers) -> None:
        if not isinstance(body, Mapping) or not isinstance(body.get("metadata"), Mapping):
            raise ApiError(400, "Failed to parse JSON body: expected {\"metadata\": {\"name\", \"namespace\"}}")
        meta = body["metadata"]
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "Function name must be provided in metadata")
        key = (meta.get("namespace") or self._namespace(headers), name)
        ignore_state = (headers.get("X-Nuclio-Delete-Function-Ignore-State-Validation") or "").lower() == "true"
        with self._lock:
            function = self._functions.get(key)
            if function is None:
                return  # nothing to delete: the real dashboard answers 204 too
            if not ignore_state and function.attributes()["status"].get("state") not in PROVISIONED:
                raise ApiError(412, "Function is being provisioned and cannot be deleted")
            del self._functions[key]
        self._halt(function)
        self._delete_pod(function)

    def _halt(self, function: _Function) -> None:
        with function.lock:
            function.deleted.set()
            platform, function.platform = function.platform, None
        if platform is not None:
            platform.close()

    # -- deploying ----------------------------------------------------------------------------------------------
    def _deploy(self, function: _Function) -> None:
        try:
            self._deploy_steps(function)
        except Exception as error:  # noqa: BLE001 - becomes the function's state, as a controller error would
            function.set_state("error", f"Failed to deploy function: {type(error).__name__}: {error}")

    def _deploy_steps(self, function: _Function) -> None:
        pod_name = self._create_pod(function)
        if pod_name is None:
            return
        function.set_state("configuringResources")
        node = self._wait_bound(function, pod_name)
        if node is None:
            return
        ref = self._start_host(function, node)
        if ref is None:
            return
        self._mark_running(function, pod_name)
        function.set_state("ready", httpPort=int(ref.url.rsplit(":", 1)[1].strip("/")),
                           internalInvocationUrls=[ref.url.removeprefix("http://").rstrip("/")],
                           externalInvocationUrls=[])

    def _pod(self, function: _Function) -> dict:
        labels = {**function.meta["labels"], **CLASS_LABELS, NUCLIO_FUNCTION_LABEL: function.name}
        spec = function.spec
        container = {"name": CONTAINER_NAME, "image": spec["image"], "env": list(spec.get("env") or []),
                     "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}]}
        if spec.get("resources"):
            container["resources"] = spec["resources"]
        template = {"metadata": {"generateName": f"nuclio-{function.name}-", "namespace": function.namespace,
                                 "labels": labels, "annotations": {"nuclio.io/function-name": function.name}},
                    "spec": {"containers": [container], "restartPolicy": "Always"}}
        for augmented in self.augmented:
            if selector_matches(augmented.get("labelSelector"), labels):
                deployment = (augmented.get("kubernetes") or {}).get("deployment") or {}
                fill_empty(template, ((deployment.get("spec") or {}).get("template") or {}))
        return {"apiVersion": "v1", "kind": "Pod", **template}

    def _create_pod(self, function: _Function) -> str | None:
        try:
            response = self._core.create_namespaced_pod(function.namespace, self._pod(function),
                                                        _preload_content=False, _request_timeout=10)
            created = json.loads(response.data)
        except ApiException as error:
            function.set_state("error", f"Failed to create/update function: pod: HTTP {error.status}: "
                                        f"{_status_message(error)}")
            return None
        pod_name = created["metadata"]["name"]
        with function.lock:
            function.pod = pod_name
            deleted = function.deleted.is_set()
        if deleted:  # deleted while the pod was being created
            self._delete_pod(function)
            return None
        return pod_name

    def _wait_bound(self, function: _Function, pod_name: str) -> str | None:
        """The pod's node once a scheduler binds it, from a read then watches of the pod; None when the function is
        deleted or has failed first (its state then says why)."""
        readiness_s = float(function.spec.get("readinessTimeoutSeconds") or DEFAULT_READINESS_TIMEOUT_S)
        fail_fast = not function.spec.get("waitReadinessTimeoutBeforeFailure", False)
        deadline = time.monotonic() + readiness_s
        version = None
        while not function.deleted.is_set():
            if time.monotonic() >= deadline:
                function.set_state("unhealthy", "Failed to wait for function resources to be available: "
                                                f"pod {pod_name} not scheduled within {readiness_s:g} s")
                return None
            watcher = watch.Watch()
            try:
                if version is None:
                    response = self._core.read_namespaced_pod(pod_name, function.namespace,
                                                              _preload_content=False, _request_timeout=10)
                    pod = json.loads(response.data)
                    version = pod["metadata"].get("resourceVersion")
                    events = iter([{"type": "MODIFIED", "raw_object": pod}])
                else:
                    events = watcher.stream(self._core.list_namespaced_pod, function.namespace,
                                            field_selector=f"metadata.name={pod_name}", resource_version=version,
                                            timeout_seconds=WATCH_TIMEOUT_S, allow_watch_bookmarks=True,
                                            _request_timeout=WATCH_TIMEOUT_S + 5)
                for event in events:
                    pod = event["raw_object"]
                    version = (pod.get("metadata") or {}).get("resourceVersion") or version
                    if event["type"] == "BOOKMARK":
                        continue
                    outcome = self._judge(function, pod_name, event["type"], pod, fail_fast)
                    if outcome is not None or function.deleted.is_set():
                        watcher.stop()
                        return outcome or None
            except ApiException as error:
                if error.status == 404:
                    function.set_state("error", f"Failed to wait for function resources: pod {pod_name} is gone")
                    return None
                version = None  # 410 Gone or a broken watch: read the pod again
                self._stopping.wait(0.1)
            except (urllib3.exceptions.HTTPError, OSError, ValueError):
                version = None
                self._stopping.wait(0.2)
        return None

    @staticmethod
    def _judge(function: _Function, pod_name: str, kind: str, pod: Mapping, fail_fast: bool) -> str | None:
        """The node of a bound pod; "" when the function has failed (its state set); None to keep waiting."""
        if kind == "DELETED":
            function.set_state("error", f"Failed to wait for function resources: pod {pod_name} is gone")
            return ""
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            return node
        if fail_fast and _unschedulable(pod):
            function.set_state("unhealthy", "Failed to verify at least one pod schedulability: "
                                            f"NuclioFunction pod ({pod_name}) is unschedulable")
            return ""
        return None

    def _start_host(self, function: _Function, node: str) -> FunctionRef | None:
        env = host_env(function.spec)
        token = env.pop(TOKEN_ENV, "")
        fid = function_id(function.meta["labels"], function.name)
        platform = LocalPlatform(self.log_dir, token, env=env, handlers={fid.role: function.spec["handler"]})
        with function.lock:
            if function.deleted.is_set():
                platform.close()
                return None
            function.platform = platform
        if not token:  # the host refuses to serve without one; say so rather than wait for it to exit
            function.set_state("error", f"Failed to start the function: {TOKEN_ENV} is not set")
            return None
        result = platform.deploy(fid, node)
        if isinstance(result, Failure):
            function.set_state("error", f"Failed to start the function: {result.message}")
            return None
        with function.lock:
            if function.deleted.is_set():
                return None  # _halt closed the platform, which killed the host
            function.ref = result
        return result

    def _mark_running(self, function: _Function, pod_name: str) -> None:
        """The pod as the kubelet would report it: Running at 127.0.0.1, Ready."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {"status": {
            "phase": "Running", "podIP": LOOPBACK, "podIPs": [{"ip": LOOPBACK}], "hostIP": LOOPBACK,
            "startTime": now,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now},
                           {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                           {"type": "Initialized", "status": "True", "lastTransitionTime": now}],
            "containerStatuses": [{"name": CONTAINER_NAME, "ready": True, "restartCount": 0, "started": True,
                                   "image": function.spec["image"], "imageID": "",
                                   "state": {"running": {"startedAt": now}}}],
        }}
        try:
            response = self._core.patch_namespaced_pod_status(
                pod_name, function.namespace, body, _content_type="application/strategic-merge-patch+json",
                _preload_content=False, _request_timeout=10)
            response.release_conn()
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            pass  # the pod's status is for people; the function's state is what Coach reads

    def _delete_pod(self, function: _Function) -> None:
        with function.lock:
            pod_name = function.pod
        if pod_name is None:
            return
        try:
            response = self._core.delete_namespaced_pod(pod_name, function.namespace, _preload_content=False,
                                                        _request_timeout=10)
            response.release_conn()
        except ApiException as error:
            if error.status != 404:
                raise ApiError(500, f"Failed to delete function: pod {pod_name}: HTTP {error.status}") from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise ApiError(500, f"Failed to delete function: pod {pod_name}: {type(error).__name__}") from None

    # -- health -------------------------------------------------------------------------------------------------
    def _monitor(self) -> None:
        """Ready functions whose host stops answering become unhealthy, and ready again when it answers."""
        with requests.Session() as session:
            while not self._stopping.wait(HEALTH_INTERVAL_S):
                with self._lock:
                    functions = list(self._functions.values())
                for function in functions:
                    with function.lock:
                        ref, state = function.ref, function.status.get("state")
                    if ref is None or state not in ("ready", "unhealthy"):
                        continue
                    token = host_env(function.spec).get(TOKEN_ENV, "")
                    try:
                        session.get(ref.url, headers={TOKEN_HEADER: token}, timeout=1.0).close()
                        healthy = True
                    except requests.RequestException:
                        healthy = False
                    if healthy and state == "unhealthy":
                        with function.lock:
                            function.status = {**function.status, "state": "ready"}
                            function.status.pop("message", None)
                    elif not healthy and state == "ready":
                        with function.lock:
                            function.status = {**function.status, "state": "unhealthy",
                                               "message": UNHEALTHY_MESSAGE}

    # -- invocations --------------------------------------------------------------------------------------------
    def invoke(self, method: str, headers, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of one invocation, as the real dashboard passes it back."""
        name = headers.get("X-Nuclio-Function-Name")
        if not name:
            raise ApiError(400, "Function name must be provided")
        namespace = self._namespace(headers)
        try:
            timeout_s = go_duration_s(headers.get("X-Nuclio-Invoke-Timeout") or "") \
                if headers.get("X-Nuclio-Invoke-Timeout") else DEFAULT_INVOKE_TIMEOUT_S
        except ValueError:
            raise ApiError(400, "Invalid invoke timeout") from None
        with self._lock:
            function = self._functions.get((namespace, name))
        if function is None:
            raise ApiError(404, f"Failed to invoke function: Function not found: {name} @ {namespace}")
        urls = function.attributes()["status"].get("internalInvocationUrls") or []
        if not urls:
            raise ApiError(500, "Failed to invoke function: Invocation URL is required")
        path = (headers.get("X-Nuclio-Path") or "").lstrip("/")
        url = f"http://{urls[0]}/{path}" if path else f"http://{urls[0]}"
        forward = {key: value for key, value in headers.items()
                   if not key.lower().startswith("x-nuclio") and key.lower() not in _HOP_BY_HOP}
        forward["X-Nuclio-Target"] = name
        try:
            response = requests.request(method, url, data=body if method != "GET" else None, headers=forward,
                                        timeout=(min(timeout_s, 5.0), timeout_s))
        except requests.Timeout:
            raise ApiError(500, f"Failed to invoke function: {method.capitalize()} '{url}': context deadline "
                                f"exceeded (Client.Timeout exceeded while awaiting headers)") from None
        except requests.ConnectionError as error:
            refused = isinstance(error.args[0] if error.args else None, urllib3.exceptions.MaxRetryError) and \
                isinstance(error.args[0].reason, urllib3.exceptions.NewConnectionError)
            cause = f"dial tcp {urls[0]}: connect: connection refused" if refused else "EOF"  # as Go's client says
            raise ApiError(500, f"Failed to invoke function: {method.capitalize()} '{url}': {cause}") from None
        passed = {key: value for key, value in response.headers.items()
                  if not key.lower().startswith("x-nuclio") and key.lower() not in _HOP_BY_HOP
                  and key.lower() not in ("date", "server")}
        return response.status_code, passed, response.content

    # -- projects -----------------------------------------------------------------------------------------------
    def create_project(self, body: object, headers) -> dict:
        if not isinstance(body, Mapping) or not isinstance(body.get("metadata"), Mapping):
            raise ApiError(400, "Failed to parse JSON body: expected {\"metadata\": {\"name\"}}")
        meta = dict(body["metadata"])
        name = meta.get("name")
        if not isinstance(name, str) or len(name) > 63 or not _DNS1123_LABEL.fullmatch(name):
            raise ApiError(400, "Project name doesn't conform to k8s naming convention")
        meta["namespace"] = meta.get("namespace") or headers.get("X-Nuclio-Project-Namespace") or self.namespace
        with self._lock:
            if (meta["namespace"], name) in self._projects:
                raise ApiError(409, f"Project already exists: {name}")
            self._projects.add((meta["namespace"], name))
        return {"metadata": meta, "spec": dict(body.get("spec") or {})}

    def list_projects(self, namespace: str) -> dict:
        with self._lock:
            names = sorted(name for ns, name in self._projects if ns == namespace)
        return {name: {"metadata": {"name": name, "namespace": namespace}, "spec": {}} for name in names}

    # -- HTTP ---------------------------------------------------------------------------------------------------
    def _handler_class(self):
        dashboard = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):  # quiet; tests read outcomes, not logs
                pass

            def _send(self, status: int, body: bytes = b"", headers: Mapping[str, str] | None = None) -> None:
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                if status not in (204, 304):
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body and status not in (204, 304):
                    self.wfile.write(body)

            def _json(self, status: int, value: object) -> None:
                self._send(status, (json.dumps(value) + "\n").encode(), {"Content-Type": "application/json"})

            def _error(self, error: ApiError) -> None:
                self._json(error.status, {"error": error.message.replace('"', "'"), "errorStackTrace": ""})

            def _body(self) -> bytes:
                length = self.headers.get("Content-Length") or "0"
                if not length.isdigit() or int(length) > MAX_BODY_BYTES:
                    self.close_connection = True
                    raise ApiError(413 if length.isdigit() else 400, "Failed to read body")
                return self.rfile.read(int(length))

            def _json_body(self) -> object:
                raw = self._body()
                try:
                    return json.loads(raw.decode("utf-8") or "null")
                except (UnicodeDecodeError, json.JSONDecodeError) as error:
                    raise ApiError(400, f"Failed to parse JSON body: {error}") from None

            def _fault(self, path: str) -> bool:
                rule = dashboard.faults.take(path)
                if rule is None:
                    return False
                if "hang_s" in rule:
                    dashboard.faults.wait(rule["hang_s"])
                    self.close_connection = True  # drop it unanswered, as a hung dashboard would
                    return True
                self._body()
                self._json(rule["status"], {"error": rule["message"], "errorStackTrace": ""})
                return True

            def _route(self, method: str) -> None:
                path = urlsplit(self.path).path.rstrip("/") or "/"
                if self._fault(path):
                    return
                try:
                    self._dispatch(method, path)
                except ApiError as error:
                    self._error(error)
                except Exception as error:  # noqa: BLE001 - a fake's bug is a 500 for the caller, not a traceback
                    self.close_connection = True
                    self._error(ApiError(500, f"{type(error).__name__}: {error}"))

            def _dispatch(self, method: str, path: str) -> None:
                namespace = dashboard._namespace(self.headers)
                if path == "/api/function_invocations" or path.startswith("/api/function_invocations/"):
                    body = self._body()
                    status, headers, content = dashboard.invoke(method, self.headers, body)
                    self._send(status, content, headers)
                elif path == "/api/functions":
                    if method == "GET":
                        self._json(200, dashboard.list_functions(namespace, self.headers.get("X-Nuclio-Project-Name"),
                                                                 self.headers.get("X-Nuclio-Function-Name")))
                    elif method == "POST":
                        dashboard.create_function(self._json_body(), self.headers)
                        self._send(202)
                    elif method == "DELETE":
                        dashboard.delete_function(self._json_body(), self.headers)
                        self._send(204)
                    else:
                        raise ApiError(405, f"Method {method} is not allowed on {path}")
                elif path.startswith("/api/functions/") and path.count("/") == 3:
                    if method != "GET":
                        raise ApiError(405, f"Method {method} is not allowed on {path}")
                    self._json(200, dashboard.get_function(unquote(path.rsplit("/", 1)[1]), namespace))
                elif path == "/api/projects":
                    if method == "GET":
                        self._json(200, dashboard.list_projects(self.headers.get("X-Nuclio-Project-Namespace")
                                                                or dashboard.namespace))
                    elif method == "POST":
                        self._json(201, dashboard.create_project(self._json_body(), self.headers))
                    else:
                        raise ApiError(405, f"Method {method} is not allowed on {path}")
                else:
                    raise ApiError(404, f"Not found: {path}")

            def do_GET(self):
                self._route("GET")

            def do_POST(self):
                self._route("POST")

            def do_PUT(self):
                self._route("PUT")

            def do_DELETE(self):
                self._route("DELETE")

            def do_PATCH(self):
                self._route("PATCH")

        return Handler


def _status_message(error: ApiException) -> str:
    try:
        return json.loads(error.body or "{}").get("message") or str(error.reason)
    except (ValueError, AttributeError):
        return str(error.reason)


def _unschedulable(pod: Mapping) -> bool:
    """Pending with PodScheduled=False for reason Unschedulable: what Nuclio's controller fails fast on."""
    status = pod.get("status") or {}
    return (status.get("phase", "Pending") == "Pending"
            and any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") ==
                    "Unschedulable" for c in status.get("conditions") or ()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.nuclio_dashboard",
                                     description="A fake Nuclio dashboard on loopback, backed by a kube-apiserver.")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--logs", type=Path, required=True, help="folder for the functions' host logs")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--platform-config", type=Path, default=PLATFORM_CONFIG)
    args = parser.parse_args(argv)
    if not args.kubeconfig.is_file():
        parser.error(f"--kubeconfig {args.kubeconfig}: no such file")
    try:
        dashboard = FakeDashboard(args.kubeconfig, args.namespace, log_dir=args.logs,
                                  platform_config=args.platform_config, host=args.host, port=args.port)
    except (ValueError, OSError, config.ConfigException) as error:
        print(f"nuclio_dashboard: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
              file=sys.stderr)
        return 2
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    dashboard.start()
    print(f"READY {dashboard.url}", flush=True)
    done.wait()
    dashboard.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
