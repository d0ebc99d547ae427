"""The Nuclio platform: Coach's functions as Nuclio functions, through the Nuclio dashboard's REST API.

Side effects: HTTP to the dashboard with `requests` (create, get, delete functions; invocations), and, when a
`pod_address` lookup is given, reads of the functions' pods. Every HTTP outcome becomes a value: a `Failure`
(with the kinds of coach.domain.invocation), a `FunctionRef` or a `Reply`; nothing raises across the port.

What the dashboard does, read from its source (nuclio/nuclio pkg/dashboard/resource/function.go, invocation.go,
pkg/platform/abstract): `POST /api/functions` answers 202 at once (409 for a name that exists, 412 when the
project does not exist) and deploys in the background; `GET /api/functions/<name>` gives `status.state`
(building, configuringResources, ... then ready, or error/unhealthy with `status.message`); `DELETE
/api/functions` takes `{"metadata": {"name", "namespace"}}`, answers 204 also for a function that is gone, and
412 for one still being provisioned unless `X-Nuclio-Delete-Function-Ignore-State-Validation: true` (Coach
releases pending pods, so it sends it). `POST /api/function_invocations` sends the request with all its headers
to the function's address (Coach asks for its Service with `X-Nuclio-Invoke-Via: domain-name`, so that the job's
NetworkPolicy can admit the dashboard's pods by label) and passes the function's status and body back; its own
failures are `{"error": "Failed to invoke function: ..."}`: 404 for an unknown function, 500 with Go's client error
for a timeout (`Client.Timeout exceeded`) or a refused connection. Errors of the other endpoints are
`{"error": ..., "errorStackTrace": ...}`.

Creation does not wait (no `X-Nuclio-Wait-Function-Action`): a function's pod is bound by Coach's gang scheduler
only when the job's other pods exist too, so waiting inside one create would wait for the others' creates.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Mapping
from urllib.parse import quote, urlparse

import requests
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from coach.domain.addresses import is_loopback
from coach.domain.contracts import AheadRequest, EpochRequest, WarmRequest
from coach.domain.identity import FunctionId
from coach.domain.invocation import DEPLOY, ERROR, FOREIGN, REJECTED, TIMEOUT, UNREACHABLE, Failure, FunctionRef, Reply
from coach.domain.kube import NUCLIO_INVOKE_VIA, SCHEDULER_NAME
from coach.net.http import AnswerTooLarge, Limits, bounded_request, new_session, problem
from coach.platforms.host import TOKEN_HEADER
from coach.platforms.local import free_port
from coach.platforms.nuclio_spec import (
    FUNCTIONS_DIR, INSTANCE_ANNOTATION, RUN_ANNOTATION, function_config, function_name, is_ours,
    load_role_configs, run_digest, trigger_workers,
)

#: Nuclio's request headers (pkg/common/headers/headers.go).
NAME_HEADER = "X-Nuclio-Function-Name"
NAMESPACE_HEADER = "X-Nuclio-Function-Namespace"
PROJECT_HEADER = "X-Nuclio-Project-Name"
INVOKE_TIMEOUT_HEADER = "X-Nuclio-Invoke-Timeout"
PATH_HEADER = "X-Nuclio-Path"
INVOKE_VIA_HEADER = "X-Nuclio-Invoke-Via"
IGNORE_STATE_HEADER = "X-Nuclio-Delete-Function-Ignore-State-Validation"

#: Function states (pkg/functionconfig/types.go): ready to invoke, or failed for good.
READY, FAILED_STATES = "ready", frozenset({"error", "unhealthy"})

#: The ps-lite scheduler's port inside its pod. On a cluster every pod has its own IP, so one fixed port serves
#: every job; on loopback (the fakes: every pod is 127.0.0.1) a fixed port would collide, so a free one is picked.
PS_PORT = 9091
PS_PORTS = (PS_PORT, PS_PORT + 1, PS_PORT + 2)  # an epoch's, the next one's, one announced in vain

POLL_S = 0.2  # how often deploy asks the dashboard for a function's state
BACKOFF_S = 0.2  # first pause between tries of an idempotent request; doubles each time
CONNECT_TIMEOUT_S = 5.0  # for invocations, whose read timeout is the invocation's own
INVOKE_MARGIN_S = 2.0  # the client waits this much longer than the dashboard, so the dashboard's answer arrives
CANCEL_TIMEOUT_S = 5.0
GONE_TIMEOUT_S = 30.0  # how long a create waits for a left-over function of an earlier run to be deleted
#: Pods one address lookup lists at most (one function has one pod, and a replacement or two for a while): this,
#: not a byte cap, bounds the apiserver's answer.
POD_LIST_LIMIT = 10
#: Largest dashboard answer read (a function's config and status, an epoch's reply), in bytes.
MAX_ANSWER_BYTES = 16 << 20
#: A dashboard call (not an invocation) ends within this many read timeouts in all (retries aside).
DEADLINE_READS = 3


def go_duration(seconds: float) -> str:
    """`X-Nuclio-Invoke-Timeout` is parsed by Go's time.ParseDuration: whole milliseconds, e.g. "30000ms"."""
    return f"{max(1, round(seconds * 1000))}ms"


def first_line(response: requests.Response) -> str:
    """The dashboard's error message (its JSON `error`), else the body's first line; never empty."""
    try:
        body = response.json()
    except ValueError:
        body = None
    text = body.get("error") if isinstance(body, dict) and body.get("error") else response.text
    lines = str(text).strip().splitlines()
    return lines[0][:300] if lines else f"HTTP {response.status_code}"


def kube_pod_address(api_client, namespace: str) -> Callable[[FunctionId], str | None]:
    """A `pod_address` lookup through the kube-apiserver: the podIP of the function's pod, found by its labels.

    ps-lite needs every role's own address (DMLC_NODE_HOST) and the scheduler's (DMLC_PS_ROOT_URI); the dashboard
    reports only the function's Service, which exposes the HTTP trigger's port and not ps-lite's.
    """
    core = client.CoreV1Api(api_client)

    def lookup(fid: FunctionId) -> str | None:
        selector = ",".join(f"{key}={value}" for key, value in fid.labels.items())
        try:
            pods = core.list_namespaced_pod(namespace, label_selector=selector, limit=POD_LIST_LIMIT,
                                            _request_timeout=(CONNECT_TIMEOUT_S, 10)).items
        except (ApiException, urllib3.exceptions.HTTPError, OSError):  # unknown: the caller falls back
            return None
        running = [pod for pod in pods if pod.status and pod.status.pod_ip and pod.status.phase == "Running"
                   and pod.metadata.deletion_timestamp is None]  # not a failed one its replacement left behind
        return running[0].status.pod_ip if running else None

    return lookup


class NuclioPlatform:
    """Functions deployed through a Nuclio dashboard; implements coach.ports.Platform and Workloads; thread-safe."""

    def __init__(self, dashboard_url: str, namespace: str = "default", *, image: str, token: str,
                 env: Mapping[str, str] | None = None, project: str = "coach", ready_timeout_s: float = 600.0,
                 request_timeout_s: float = 10.0, retries: int = 3, functions_dir: Path = FUNCTIONS_DIR,
                 pod_address: Callable[[FunctionId], str | None] | None = None, poll_s: float = POLL_S):
        """ValueError (one line) for a dashboard URL that is not http(s)://host[:port], an empty image, or a
        function.yaml Nuclio would misread (naming the file and the key)."""
        parsed = urlparse(dashboard_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"nuclio dashboard URL {dashboard_url!r}: expected http://HOST:PORT")
        if not image:
            raise ValueError("nuclio function image: empty (build and push coach_functions/Dockerfile, then name it)")
        self.dashboard_url = dashboard_url.rstrip("/")
        self.namespace = namespace
        self.image = image
        self.token = token
        self.env = dict(env or {})
        self.project = project
        self.ready_timeout_s = ready_timeout_s
        self.request_timeout_s = request_timeout_s
        self.retries = max(1, retries)
        self.poll_s = poll_s
        self.pod_address = pod_address
        self.configs = load_role_configs(functions_dir)
        self._run = run_digest(token)
        self._lock = threading.Lock()
        self._created: set[FunctionId] = set()  # functions this platform created (close() deletes them)
        self._project_ready = False
        self._closing = threading.Event()
        self._local = threading.local()
        self._sessions: list[requests.Session] = []

    # -- HTTP ---------------------------------------------------------------------------------------------------
    def _http(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = new_session()  # one bounded_request can cut at its deadline
            with self._lock:
                self._sessions.append(session)
        return session

    def _call(self, method: str, path: str, *, body: object = None, headers: Mapping[str, str] | None = None,
              tries: int | None = None) -> requests.Response | Failure:
        """An idempotent request, tried again (with backoff) on 5xx, timeouts and refused connections.

        Answers below 500 are returned as they are; the rest becomes a Failure naming the endpoint and the
        last outcome (kind UNREACHABLE when the dashboard could not be reached, else DEPLOY).
        """
        url = f"{self.dashboard_url}{path}"
        tries = tries or self.retries
        what, kind = "", DEPLOY
        for attempt in range(tries):
            if attempt:
                if self._closing.wait(BACKOFF_S * 2 ** (attempt - 1)):
                    break
            limits = Limits(CONNECT_TIMEOUT_S, self.request_timeout_s, self.request_timeout_s * DEADLINE_READS,
                            MAX_ANSWER_BYTES)
            try:
                response = bounded_request(
                    method, url, limits, session=self._http(), data=None if body is None else json.dumps(body),
                    headers={"Content-Type": "application/json", NAMESPACE_HEADER: self.namespace,
                             **(headers or {})})
            except (requests.Timeout, AnswerTooLarge) as error:
                what, kind = problem(error, limits), DEPLOY
                continue
            except requests.ConnectionError as error:
                refused = "refused" in str(error).lower()
                what, kind = ("connection refused" if refused else f"cannot connect ({type(error).__name__})",
                              UNREACHABLE)
                continue
            except requests.RequestException as error:
                what, kind = f"{type(error).__name__}", DEPLOY
                continue
            if response.status_code < 500:
                return response
            what, kind = f"HTTP {response.status_code}", DEPLOY
            what = f"{what}: {first_line(response)}" if response.text.strip() else what
        label = "try" if tries == 1 else "tries"
        head, _, rest = what.partition(": ")
        message = f"nuclio dashboard {self.dashboard_url}: {method} {path}: {head} after {tries} {label}"
        return Failure("", kind, f"{message}: {rest}" if rest else message)

    @staticmethod
    def _named(failure: Failure, fid: FunctionId, duration_s: float = 0.0) -> Failure:
        return Failure(fid.name, failure.kind, failure.message, duration_s, failure.body)

    def _get(self, name: str) -> requests.Response | Failure:
        return self._call("GET", f"/api/functions/{quote(name, safe='')}")

    # -- Workloads: what the kube Placement calls ---------------------------------------------------------------
    def _ensure_project(self) -> Failure | None:
        """Nuclio refuses a function whose project does not exist (412); create ours once (409: it exists)."""
        if self._project_ready:
            return None
        body = {"metadata": {"name": self.project, "namespace": self.namespace},
                "spec": {"description": "Coach training jobs"}}
        response = self._call("POST", "/api/projects", body=body)
        if isinstance(response, Failure):
            return response
        if response.status_code not in (200, 201, 202, 204, 409):
            return Failure("", DEPLOY, f"nuclio dashboard {self.dashboard_url}: POST /api/projects: "
                                       f"HTTP {response.status_code}: {first_line(response)}")
        self._project_ready = True
        return None

    def create(self, fid: FunctionId, scheduler_name: str = SCHEDULER_NAME) -> Failure | None:
        """Ask the dashboard for the function (202: its Deployment and pod follow), its pod bound by the scheduler
        of that name (the platform config reads the function's label); None when it is there."""
        if self._closing.is_set():
            return Failure(fid.name, DEPLOY, "platform is shutting down")
        problem = self._ensure_project()
        if problem is not None:
            return self._named(problem, fid)
        name = function_name(fid)
        config = function_config(fid, self.configs[fid.role], namespace=self.namespace, project=self.project,
                                 image=self.image, token=self.token, env=self.env, instance=uuid.uuid4().hex,
                                 scheduler_name=scheduler_name)
        for _ in range(2):  # the second time after deleting a left-over of an earlier run
            response = self._call("POST", "/api/functions", body=config, headers={PROJECT_HEADER: self.project})
            if isinstance(response, Failure):
                return self._named(response, fid)
            if response.status_code in (200, 201, 202):
                with self._lock:
                    self._created.add(fid)
                return None
            if response.status_code != 409:
                return Failure(fid.name, DEPLOY, f"nuclio dashboard {self.dashboard_url}: POST /api/functions: "
                                                 f"{name}: HTTP {response.status_code}: {first_line(response)}")
            existing = self._get(name)
            if isinstance(existing, Failure):
                return self._named(existing, fid)
            if existing.status_code == 404:
                continue  # deleted in between: create again
            held = existing.json() if existing.status_code == 200 else {}
            if not is_ours(held, fid):
                return Failure(fid.name, DEPLOY, f"nuclio function {name} exists and is not {fid.name}'s "
                                                 f"(labels {(held.get('metadata') or {}).get('labels')})")
            if ((held.get("metadata") or {}).get("annotations") or {}).get(RUN_ANNOTATION) == self._run:
                with self._lock:
                    self._created.add(fid)
                return None  # created by this run already (an earlier try whose answer was lost)
            problem = self._delete_and_wait(fid, name)  # an earlier run's: its token is not this run's
            if problem is not None:
                return problem
        return Failure(fid.name, DEPLOY, f"nuclio function {name}: still exists after it was deleted")

    def _delete_and_wait(self, fid: FunctionId, name: str) -> Failure | None:
        problem = self.delete(fid)
        if problem is not None:
            return problem
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while time.monotonic() < deadline:
            response = self._get(name)
            if isinstance(response, Failure):
                return self._named(response, fid)
            if response.status_code == 404:
                return None
            if self._closing.wait(self.poll_s):
                break
        return Failure(fid.name, DEPLOY, f"nuclio function {name}: left over from an earlier run and not "
                                         f"deleted within {GONE_TIMEOUT_S:g} s")

    def delete(self, fid: FunctionId) -> Failure | None:
        """Delete the function, its Deployment and its pod; one that is gone already is no failure."""
        name = function_name(fid)
        body = {"metadata": {"name": name, "namespace": self.namespace}}
        response = self._call("DELETE", "/api/functions", body=body, headers={IGNORE_STATE_HEADER: "true"})
        with self._lock:
            self._created.discard(fid)
        if isinstance(response, Failure):
            return self._named(response, fid)
        if response.status_code in (200, 202, 204, 404):
            return None
        return Failure(fid.name, DEPLOY, f"nuclio dashboard {self.dashboard_url}: DELETE /api/functions: {name}: "
                                         f"HTTP {response.status_code}: {first_line(response)}")

    # -- the Platform port --------------------------------------------------------------------------------------
    def deploy(self, fid: FunctionId, node: str) -> FunctionRef | Failure:
        """Wait until the dashboard reports the (created, bound) function ready; a Failure on error, unhealthy,
        a function that does not exist, or no readiness within `ready_timeout_s`."""
        name = function_name(fid)
        started = time.monotonic()
        deadline = started + self.ready_timeout_s
        state = "unknown"
        while not self._closing.is_set():
            response = self._get(name)
            took_s = time.monotonic() - started
            if isinstance(response, Failure):
                return Failure(fid.name, DEPLOY, response.message, took_s)
            if response.status_code == 404:
                return Failure(fid.name, DEPLOY, f"nuclio function {name} does not exist", took_s)
            if response.status_code != 200:
                return Failure(fid.name, DEPLOY, f"nuclio dashboard {self.dashboard_url}: GET /api/functions/"
                                                 f"{name}: HTTP {response.status_code}: {first_line(response)}",
                               took_s)
            try:
                held = response.json()
                status = held.get("status") or {}
                state = status.get("state") or "unknown"
            except (ValueError, AttributeError):
                return Failure(fid.name, DEPLOY, f"nuclio function {name}: the dashboard's answer is not a "
                                                 f"function", took_s)
            if state == READY:
                return self._ref(fid, node, name, held)
            if state in FAILED_STATES:
                message = (str(status.get("message") or "").strip().splitlines() or ["no message"])[0]
                return Failure(fid.name, DEPLOY, f"nuclio function {name}: {state}: {message}", took_s)
            if time.monotonic() >= deadline:
                return Failure(fid.name, DEPLOY, f"nuclio function {name} not ready within "
                                                 f"{self.ready_timeout_s:g} s (state {state})", took_s)
            self._closing.wait(min(self.poll_s, max(deadline - time.monotonic(), 0.0)))
        return Failure(fid.name, DEPLOY, "platform is shutting down", time.monotonic() - started)

    def _ref(self, fid: FunctionId, node: str, name: str, held: Mapping) -> FunctionRef:
        status, metadata = held.get("status") or {}, held.get("metadata") or {}
        urls = list(status.get("internalInvocationUrls") or []) + list(status.get("externalInvocationUrls") or [])
        url = f"http://{urls[0]}" if urls else ""
        host = (self.pod_address(fid) if self.pod_address else None) or urlparse(url).hostname or ""
        instance = (metadata.get("annotations") or {}).get(INSTANCE_ANNOTATION) or metadata.get("resourceVersion", "")
        return FunctionRef(fid=fid, node=node, url=url, host=host, instance=str(instance))

    def _invocation_headers(self, ref: FunctionRef, timeout_s: float) -> dict[str, str]:
        return {NAME_HEADER: function_name(ref.fid), NAMESPACE_HEADER: self.namespace,
                INVOKE_TIMEOUT_HEADER: go_duration(timeout_s), PATH_HEADER: "/", TOKEN_HEADER: self.token,
                INVOKE_VIA_HEADER: NUCLIO_INVOKE_VIA,
                "Content-Type": "application/json"}

    def invoke(self, ref: FunctionRef, request: EpochRequest | WarmRequest | AheadRequest,
               timeout_s: float) -> Reply | Failure:
        """One invocation through the dashboard, tried once: an epoch is not idempotent (the lifecycle retries)."""
        started = time.monotonic()
        if self._closing.is_set():
            return Failure(ref.name, UNREACHABLE, "platform closed")
        limits = Limits(CONNECT_TIMEOUT_S, timeout_s + INVOKE_MARGIN_S, timeout_s + 2 * INVOKE_MARGIN_S,
                        MAX_ANSWER_BYTES)
        try:
            response = bounded_request("POST", f"{self.dashboard_url}/api/function_invocations", limits,
                                       session=self._http(), data=json.dumps(request.to_dict()),
                                       headers=self._invocation_headers(ref, timeout_s))
        except requests.Timeout:
            return Failure(ref.name, TIMEOUT, f"no reply within {timeout_s:g} s", time.monotonic() - started)
        except AnswerTooLarge as error:
            return Failure(ref.name, ERROR, f"nuclio dashboard {self.dashboard_url}: {error}",
                           time.monotonic() - started)
        except requests.RequestException as error:
            reason = "connection refused" if "refused" in str(error).lower() else type(error).__name__
            return Failure(ref.name, UNREACHABLE, f"nuclio dashboard {self.dashboard_url}: {reason}",
                           time.monotonic() - started)
        duration_s = time.monotonic() - started
        try:
            body = response.json()
        except ValueError:
            body = {"error": response.text[:200]}
        if not isinstance(body, dict):
            body = {"error": str(body)[:200]}
        if response.status_code == 200:
            return Reply(ref.name, body, duration_s)
        message = (str(body.get("error") or f"HTTP {response.status_code}").splitlines() or [""])[0]
        kind = self._kind(response.status_code, message)
        if kind == ERROR and body.get("foreign") is True:  # ps-lite broken from outside the job
            kind = FOREIGN
        return Failure(ref.name, kind, message, duration_s, body)

    @staticmethod
    def _kind(status: int, message: str) -> str:
        """The function's own status as LocalPlatform maps it, or the dashboard's failure to reach it."""
        if message.startswith("Failed to invoke function"):
            lowered = message.lower()
            if "timeout exceeded" in lowered or "deadline exceeded" in lowered:
                return TIMEOUT
            if status == 404 or lowered.endswith(": eof") or any(
                    sign in lowered for sign in ("connection refused", "connection reset", "no such host",
                                                 "invocation url is required")):
                return UNREACHABLE
            return ERROR
        return {504: TIMEOUT, 400: REJECTED, 401: REJECTED, 403: REJECTED, 422: REJECTED}.get(status, ERROR)

    def cancel(self, ref: FunctionRef) -> None:
        try:
            bounded_request("POST", f"{self.dashboard_url}/api/function_invocations",
                            Limits(CONNECT_TIMEOUT_S, CANCEL_TIMEOUT_S + INVOKE_MARGIN_S,
                                   CANCEL_TIMEOUT_S + 2 * INVOKE_MARGIN_S, MAX_ANSWER_BYTES),
                            session=self._http(), data=json.dumps({"action": "cancel"}),
                            headers=self._invocation_headers(ref, CANCEL_TIMEOUT_S))
        except requests.RequestException:
            pass  # a function that cannot be reached has nothing left to cancel

    def remove(self, ref: FunctionRef) -> None:
        """Delete this creation of the function only: a fresh one of the same function may be coming up."""
        response = self._get(function_name(ref.fid))
        if isinstance(response, Failure) or response.status_code != 200:
            return  # gone, or the dashboard is down: close() and the placement's release try again
        try:
            held = response.json()
        except ValueError:
            return
        current = ((held.get("metadata") or {}).get("annotations") or {}).get(INSTANCE_ANNOTATION)
        if current is None or current == ref.instance:
            self.delete(ref.fid)

    def joins_ahead(self, scheduler: FunctionRef) -> bool:
        """Only when every function runs one worker process. Nuclio's Python runtime runs one wrapper process per
        worker of the HTTP trigger (coach_functions/*/function.yaml has two, so that a cancel reaches a function while its
        epoch runs), each a host of its own, and consecutive events may go to different workers: a step announced
        to one could find its node joined by the other."""
        return all(trigger_workers(config) == 1 for config in self.configs.values())

    def rendezvous_address(self, scheduler: FunctionRef, avoid_ports: frozenset[int] = frozenset()) -> tuple[str, int]:
        """The PS scheduler's pod address and the first of PS_PORTS not to avoid; a free port on loopback, where
        all pods share one IP."""
        if is_loopback(scheduler.host):
            return scheduler.host, free_port(scheduler.host, avoid_ports)
        return scheduler.host, next(port for port in PS_PORTS if port not in avoid_ports)

    def close(self) -> None:
        """Delete every function this platform created (one try each, together), then close the sessions."""
        self._closing.set()
        with self._lock:
            created = sorted(self._created, key=FunctionId.sort_key)
        if created:
            with ThreadPoolExecutor(max_workers=min(8, len(created)), thread_name_prefix="coach-nuclio-close") as pool:
                list(pool.map(self._delete_once, created))
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()

    def _delete_once(self, fid: FunctionId) -> None:
        name = function_name(fid)
        self._call("DELETE", "/api/functions", body={"metadata": {"name": name, "namespace": self.namespace}},
                   headers={IGNORE_STATE_HEADER: "true"}, tries=1)
        with self._lock:
            self._created.discard(fid)

