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
Right before each POST the binder asks the leader elector: a replica that is not (or no longer) the leader
sends nothing and reports `not-leader` (as does a binder being stopped, for the bindings still queued).
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


def binding(pod: PodInfo, node: str) -> dict:
    """The V1Binding, as the JSON dict the client sends: the generated model classes copy the client's whole
    configuration on every construction, which measured here doubled the client's cost of a binding."""
    return {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


class Binder:
    """Sends bindings from `threads` threads; every outcome goes to `report`, from those threads.

    The threads take work from one queue (cheaper per binding than an executor's futures, which the loop
    would otherwise pay for on every pod)."""

    def __init__(self, api: client.ApiClient, is_leader: Callable[[], bool], report: Callable[[BindOutcome], None],
                 threads: int = 4, timeout_s: float = 30.0):
        self._core = client.CoreV1Api(api)
        self._poster = JsonPoster(api, (5.0, timeout_s))
        self._is_leader = is_leader
        self._report = report
        self._timeout = (5.0, timeout_s)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._in_flight = 0  # bindings queued or being sent
        self._closing = False  # stop() was called: queued bindings are not sent any more
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._work, name=f"coach-scheduler-bind-{i}", daemon=True)
                         for i in range(threads)]

    def start(self) -> "Binder":
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
                outcome = BindOutcome(pod, node, FAILED, detail=f"{type(error).__name__}: {error}"[:300],
                                      decided_s=decided_s, answered_s=time.monotonic())
            with self._lock:
                self._in_flight -= 1
            self._report(outcome)

    def _send(self, pod: PodInfo, node: str, decided_s: float) -> BindOutcome:
        if self._closing or not self._is_leader():
            return BindOutcome(pod, node, NOT_LEADER, decided_s=decided_s)
        path = f"/api/v1/namespaces/{path_segment(pod.namespace)}/pods/{path_segment(pod.name)}/binding"
        status, reason, _ = self._poster.post(path, binding(pod, node))  # the body: a Status, not needed
        answered_s = time.monotonic()
        if 200 <= status < 300:
            return BindOutcome(pod, node, BOUND, decided_s=decided_s, answered_s=answered_s)
        if status == 409:
            return BindOutcome(pod, node, CONFLICT, current=self._read(pod), decided_s=decided_s,
                               answered_s=answered_s)
        if status == 404:
            return BindOutcome(pod, node, GONE, decided_s=decided_s, answered_s=answered_s)
        return BindOutcome(pod, node, FAILED, detail=f"HTTP {status} {reason}", decided_s=decided_s,
                           answered_s=answered_s)

    def _read(self, pod: PodInfo) -> dict | None:
        """The pod as the apiserver has it now, or None when it is gone."""
        try:
            response = self._core.read_namespaced_pod(pod.name, pod.namespace, _preload_content=False,
                                                      _request_timeout=self._timeout)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return read_json(response)
