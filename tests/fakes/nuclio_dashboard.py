"""A fake Nuclio dashboard on loopback: the REST API Coach's Nuclio platform uses, over real HTTP, for tests and demos.

What it does, as the real dashboard and controller do (nuclio/nuclio pkg/dashboard/resource/function.go,
invocation.go, project.go; pkg/platform/kube): `POST /api/functions` checks the body (400), the name (409 when
it exists) and the project (412 when it does not), answers 202 at once and deploys in the background
(tests/fakes/nuclio_pods.py): the function's Deployment, then its pod, in a kube-apiserver, with the official
`kubernetes` client (labels = the function's labels, Nuclio's class labels and `nuclio.io/function-name`;
`nodeSelector`, `affinity`, `tolerations` from the function spec; `spec.schedulerName` and the rest from the
platform config's `functionAugmentedConfigs` whose label selector matches). It reports `building` then
`configuringResources` while it watches the pod until a scheduler binds it, then runs the pod as Nuclio's processor
does (tests/fakes/nuclio_processor.py: one wrapper process per worker of the function's HTTP trigger, each loading
the handler itself; requests go to a free one), with the function's own env, marks the pod Running at 127.0.0.1
and reports `ready` with its invocation URL. A pod whose processor cannot start makes the function `error`; one
whose processor dies (a wrapper died) or that is deleted makes it `unhealthy` ("Function is not healthy") while a
replacement pod, under a new name, waits for a scheduler, and `ready` again once it runs; a first pod still unbound
after `spec.readinessTimeoutSeconds` (default 120) makes it `unhealthy`, and so does one a scheduler marked
Unschedulable unless `spec.waitReadinessTimeoutBeforeFailure` is true. The dashboard checks no token: the functions
do (coach_functions/auth.py), as on Nuclio.

`DELETE /api/functions` (body `{"metadata": {"name", "namespace"}}`) forgets the function at once and deletes its
Deployment and pods in the background, each pod stopped within its grace period; it answers 204, also for a
function that does not exist (the real one is idempotent), and 412 for a function still being provisioned unless
`X-Nuclio-Delete-Function-Ignore-State-Validation: true`. `POST /api/function_invocations` sends the request to the
function's pod (the caller's headers but Nuclio's own, plus `X-Nuclio-Target`; `X-Nuclio-Invoke-Timeout` as a Go
duration, default 1 minute) and passes its status and body back; its own failures are the real dashboard's: 404
`Function not found`, 500 `Invocation URL is required` for a function not ready yet, 500 with Go's client error for
a timeout or a refused connection. `X-Nuclio-Invoke-Via` picks the address as the real one does (invocation.go,
pkg/platform/kube/function.go): `domain-name` the function's Service (its internal URL), `loadbalancer` an ingress
(none here: 500 `Couldn't find address for invoke via type`), anything else the external URLs first (a node's
address and the NodePort), then the Service; `dash.invoked_via` counts which one each invocation took.

Test hooks (`dash.faults`): `fail_next(path_prefix, status=500, times=1)` answers the next requests with that
status; `hang(path_prefix, seconds, times=1)` holds them that long, then drops the connection. `dash.processes(name)`
tells the running pod's name, node, processor and wrapper pids and temp dir.

Side effects: an HTTP server thread, one thread per function, processes, Deployments and pods in the kube-apiserver,
one log file per function under `log_dir`, a temp dir per pod (in `log_dir` too).
Run alone: `python -m tests.fakes.nuclio_dashboard --kubeconfig PATH --port P --logs DIR` (prints `READY <url>`).
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import re
import shutil
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Mapping
from urllib.parse import unquote, urlsplit

import requests
import urllib3
from kubernetes import client, config

from tests.fakes.nuclio_config import (  # noqa: F401 - the pure parts, also imported from here
    CLASS_LABELS, CONTAINER_NAME, HTTP_PORT, PROJECT_LABEL, deep_merge, fill_empty, function_id, go_duration_s,
    load_platform_config, pod_labels, selector_matches,
)
from tests.fakes.nuclio_pods import LOOPBACK, FunctionPods

#: Nuclio's platform config as deploy/ ships it (functionAugmentedConfigs set Coach's schedulerName).
PLATFORM_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "nuclio" / "platform.yaml"

DEFAULT_PROJECT = "default"
DEFAULT_INVOKE_TIMEOUT_S = 60.0  # platform.FunctionInvocationDefaultTimeout
MAX_BODY_BYTES = 16 * 1024 * 1024
PROVISIONED = frozenset({"ready", "error", "unhealthy", "scaledToZero", "imported"})
JOIN_TIMEOUT_S = 10.0

_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_HOP_BY_HOP = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te",
                         "upgrade", "proxy-authorization", "proxy-authenticate", "trailer"})


class ApiError(Exception):
    """A request the dashboard refuses; `status` and the one-line `message` become its JSON error body."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


# --------------------------------------------------------------------------- state


@dataclass
class _Function:
    """One function the dashboard holds; `lock` guards status."""

    meta: dict
    spec: dict
    status: dict = field(default_factory=lambda: {"state": "waitingForResourceConfiguration"})
    lock: threading.Lock = field(default_factory=threading.Lock)
    deleted: threading.Event = field(default_factory=threading.Event)
    pods: FunctionPods | None = None
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
        """A new state; the invocation URLs of the last pod that ran are kept (a Service keeps its address)."""
        with self.lock:
            if self.deleted.is_set():
                return
            kept = {key: self.status[key] for key in ("httpPort", "internalInvocationUrls", "externalInvocationUrls")
                    if key in self.status}
            self.status = {"state": state, **({"message": message} if message else {}), **kept, **extra}

    def serving(self, port: int) -> None:
        """Its pod runs and answers on `port`: ready, invoked there."""
        self.set_state("ready", httpPort=port, internalInvocationUrls=[f"{LOOPBACK}:{port}"],
                       externalInvocationUrls=[])


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
    """The fake dashboard; `start()` serves on host:port, `stop()` kills every pod's processes it started."""

    def __init__(self, kubeconfig: Path, namespace: str = "default", *, log_dir: Path,
                 platform_config: Path = PLATFORM_CONFIG, host: str = "127.0.0.1", port: int = 0):
        self.namespace = namespace
        self.log_dir = Path(log_dir)
        self.augmented = load_platform_config(Path(platform_config))
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        self._api = client.ApiClient(configuration)
        self._lock = threading.Lock()
        self._functions: dict[tuple[str, str], _Function] = {}
        self._leaving: list[_Function] = []  # deleted, their pods still stopping
        self._projects: set[tuple[str, str]] = {(namespace, DEFAULT_PROJECT)}
        self._version = 0
        self._stopping = threading.Event()
        self.faults = Faults(self._stopping)
        self.invoked_via: collections.Counter[str] = collections.Counter()  # "domain-name", "external-ip", ...
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # each pod's own temp dir is in it: under the log dir, so that a dashboard killed hard leaves none in /tmp
        self._pods_dir = Path(tempfile.mkdtemp(prefix=".pods-", dir=self.log_dir))
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._threads: list[threading.Thread] = []

    # -- lifetime -----------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeDashboard:
        thread = threading.Thread(target=self._server.serve_forever, name="fake-nuclio-http", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop serving, stop every function's thread, kill every pod's processes; pods are left in the apiserver."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            functions, self._functions = [*self._functions.values(), *self._leaving], {}
            self._leaving = []
        for function in functions:
            if function.pods is not None:
                function.pods.kill()
        for function in functions:
            if function.thread is not None:
                function.thread.join(timeout=JOIN_TIMEOUT_S)
            if function.pods is not None:
                function.pods.kill()  # one that started while this stopped
        for thread in self._threads:
            thread.join(timeout=JOIN_TIMEOUT_S)
        self._api.close()
        shutil.rmtree(self._pods_dir, ignore_errors=True)

    def __enter__(self) -> FakeDashboard:
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

    def processes(self, name: str, namespace: str | None = None) -> dict | None:
        """The function's running pod: its name, node, processor pid, wrapper pids, temp dir (for tests)."""
        with self._lock:
            function = self._functions.get((namespace or self.namespace, name))
        return None if function is None or function.pods is None else function.pods.processes()

    def settled(self, timeout_s: float = JOIN_TIMEOUT_S) -> bool:
        """Wait until every deleted function's pods are gone (for tests); whether they are."""
        with self._lock:
            leaving = list(self._leaving)
        for function in leaving:
            if function.thread is not None:
                function.thread.join(timeout=timeout_s)
        return not any(function.thread is not None and function.thread.is_alive() for function in leaving)

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
        function_labels = pod_labels(meta)
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
            function.pods = FunctionPods(function, self._api, self.augmented, self.log_dir, self._pods_dir,
                                         self._stopping, function.serving)
            self._functions[key] = function
        function.thread = threading.Thread(target=function.pods.run, name=f"fake-nuclio-{name}", daemon=True)
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
            self._leaving = [f for f in self._leaving if f.thread is not None and f.thread.is_alive()] + [function]
            function.deleted.set()  # its thread deletes the Deployment and the pods, each within its grace period

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
        urls = self._invocation_urls(function.attributes()["status"], headers.get("X-Nuclio-Invoke-Via") or "")
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

    def _invocation_urls(self, status: Mapping, via: str) -> list[str]:
        """Where the invocation goes, by `X-Nuclio-Invoke-Via` (exact values, as Go's switch compares them)."""
        internal = list(status.get("internalInvocationUrls") or [])
        external = list(status.get("externalInvocationUrls") or [])
        if not internal and not external:
            raise ApiError(500, "Failed to invoke function: Invocation URL is required")
        if via == "loadbalancer":  # no ingress is ever made here
            raise ApiError(500, "Failed to invoke function: Couldn't find address for invoke via type")
        kind, urls = ("domain-name", internal) if via == "domain-name" or not external else ("external-ip", external)
        if not urls:
            raise ApiError(500, "Failed to invoke function: Couldn't find address for invoke via type")
        with self._lock:
            self.invoked_via[kind] += 1
        return urls

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
