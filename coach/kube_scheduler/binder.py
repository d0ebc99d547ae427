"""Bindings, written by a small thread pool as kube-scheduler binds (asynchronously, off the scheduling loop).

A binding is a POST to the pod's `binding` subresource. The apiserver answers 201 with a `Status`, which the
client cannot parse as the V1Binding it expects, so the answer is read raw: the POST goes through the official
client's connection pool with a JSON body (rest.JsonPoster), not its generated layer, as it is made for every pod.
Every outcome becomes a value (`BindOutcome`) that the loop applies:
- 201: bound;
- 409: already bound, by an earlier life of this scheduler or another replica: the pod is read and its node
  adopted; it is never bound again;
- 404: the pod is gone;
- anything else (a 5xx, a timeout, no connection): failed; the loop retries the pod after a pause.
Right before each POST the binder asks the leader elector until when this replica leads (a monotonic time, 0
when it does not): a replica that is not (or no longer) the leader sends nothing and reports `not-leader` (as
does a binder being stopped, for the bindings still queued). Two implementations, one contract
(tests/contract/test_kube_scheduler_binder.py): `Binder`'s threads in the scheduler's own process, and
`bind_process.ProcessBinder`'s threads in a child process, which takes the bindings' HTTP off the scheduler's GIL.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable

from kubernetes import client

from coach.kube_scheduler.objects import PodInfo
from coach.kube_scheduler.rest import JsonPoster, path_segment, read_json

BOUND, CONFLICT, GONE, FAILED, NOT_LEADER = "bound", "conflict", "gone", "failed", "not-leader"


@dataclass(frozen=True)
class BindOutcome:
    """What became of one binding."""

    pod: PodInfo  # the pod as it was when decided
    node: str  # the node it was to be bound to
    result: str  # BOUND, CONFLICT, GONE, FAILED or NOT_LEADER
    current: dict | None = None  # after CONFLICT: the pod as the apiserver has it now (None if it is gone)
    detail: str = ""  # after FAILED: what went wrong, one line
    decided_s: float = 0.0  # monotonic time of the decision
    answered_s: float = 0.0  # monotonic time of the apiserver's answer (0 when nothing was sent)


def post_binding(poster: JsonPoster, core: client.CoreV1Api, namespace: str, name: str, uid: str, node: str
                 ) -> tuple[str, dict | None, str]:
    """One binding POST -> (result, the pod as it is now after a CONFLICT, the detail after a FAILED)."""
    path = f"/api/v1/namespaces/{path_segment(namespace)}/pods/{path_segment(name)}/binding"
    # the V1Binding as a JSON dict: the generated model classes copy the client's whole configuration on every
    # construction, which about doubles the client's cost of a binding
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    status, reason, _ = poster.post(path, body)  # the body (a Status) is not needed
    if 200 <= status < 300:
        return BOUND, None, ""
    if status == 409:
        return CONFLICT, read_pod(core, namespace, name, poster.timeout_s), ""
    if status == 404:
        return GONE, None, ""
    return FAILED, None, f"HTTP {status} {reason}"


def read_pod(core: client.CoreV1Api, namespace: str, name: str, timeout_s: tuple[float, float]) -> dict | None:
    """The pod as the apiserver has it now, or None when it is gone."""
    try:
        response = core.read_namespaced_pod(name, namespace, _preload_content=False, _request_timeout=timeout_s)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return read_json(response)


def failure_detail(error: Exception) -> str:
    """An exception as a one-line FAILED detail."""
    return " ".join(f"{type(error).__name__}: {error}".split())[:300]


class Binder:
    """Sends bindings from `threads` threads; every outcome goes to `report`, from those threads.

    The threads take work from one queue (cheaper per binding than an executor's futures, which the loop
    would otherwise pay for on every pod)."""

    def __init__(self, api: client.ApiClient, leads_until_s: Callable[[], float],
                 report: Callable[[BindOutcome], None], threads: int = 4, timeout_s: float = 30.0):
        self._core = client.CoreV1Api(api)
        self._poster = JsonPoster(api, (5.0, timeout_s))
        self._leads_until_s = leads_until_s  # monotonic time until which this replica leads; 0: it does not
        self._report = report
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._in_flight = 0  # bindings queued or being sent
        self._closing = False  # stop() was called: queued bindings are not sent any more
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._work, name=f"coach-scheduler-bind-{i}", daemon=True)
                         for i in range(threads)]

    def start(self) -> Binder:
        for thread in self._threads:
            thread.start()
        return self

    def bind(self, pod: PodInfo, node: str) -> None:
        """Queue one binding; returns at once."""
        with self._lock:
            self._in_flight += 1
        self._queue.put((pod, node, time.monotonic()))

    def busy(self) -> bool:
        """Bindings are waiting for a thread (more are queued than the threads can send at once)."""
        return self._in_flight > len(self._threads)

    def leadership_changed(self) -> None:
        """Nothing to do: the threads ask the elector before every POST."""

    def healthy(self) -> bool:
        return True

    @property
    def pid(self) -> int | None:
        """The process the bindings are sent from, when it is not this one."""
        return None

    def stop(self) -> None:
        """Finish the bindings being sent, report the queued ones as not sent (the pods stay pending for the next
        leader), then end the threads."""
        self._closing = True
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            if thread.is_alive():
                thread.join()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            pod, node, decided_s = item
            try:
                outcome = self._send(pod, node, decided_s)
            except Exception as error:  # never lose an outcome: the loop must learn that the pod is not bound
                outcome = BindOutcome(pod, node, FAILED, detail=failure_detail(error),
                                      decided_s=decided_s, answered_s=time.monotonic())
            with self._lock:
                self._in_flight -= 1
            self._report(outcome)

    def _send(self, pod: PodInfo, node: str, decided_s: float) -> BindOutcome:
        if self._closing or time.monotonic() >= self._leads_until_s():
            return BindOutcome(pod, node, NOT_LEADER, decided_s=decided_s)
        result, current, detail = post_binding(self._poster, self._core, pod.namespace, pod.name, pod.uid, node)
        return BindOutcome(pod, node, result, current=current, detail=detail, decided_s=decided_s,
                           answered_s=time.monotonic())
