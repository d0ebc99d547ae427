"""Why a pod is pending, told where `kubectl describe pod` looks: a core/v1 Event and the PodScheduled condition.

`ReasonTracker` (pure) decides which pods to tell: a pod is told once per reason, when its reason changes
and has held for `delay_s` (so a job whose pods arrive over two watch batches does not produce an Event for
the instant its second half was missing). `EventPoster` (a thread) writes the Events and the conditions.
Like kube-scheduler's event broadcaster it does not hold binding back: while bindings queue up (more than the
binder's threads can send at once) each Event waits up to MAX_YIELD_S, so a burst of bindings goes first and
its Events trail it; what does not fit the queue, or is still queued when the scheduler stops, is dropped and
counted.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from kubernetes import client

from coach.domain.kube import FAILED_SCHEDULING, SCHEDULER_NAME
from coach.kube_scheduler.mirror import QUEUED
from coach.kube_scheduler.objects import rfc3339
from coach.kube_scheduler.rest import JsonPoster, finish, path_segment

log = logging.getLogger(__name__)

#: Longest Event message, as kube's recorder cuts it.
MAX_MESSAGE_CHARS = 1024
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
#: While bindings queue up an Event waits, in steps of YIELD_S, at most MAX_YIELD_S.
YIELD_S, MAX_YIELD_S = 0.01, 0.1


class ReasonTracker:
    """Which pending pods to tell about their reason now (see the module docstring). Pure."""

    def __init__(self, delay_s: float = 0.5):
        self.delay_s = delay_s  # how long a reason must hold before it is told
        self._seen: dict[str, tuple[str, float]] = {}  # pod key -> (reason, since when)
        self._told: dict[str, str] = {}  # pod key -> the reason last told

    def update(self, pending: Mapping[str, str], now_s: float) -> list[tuple[str, str]]:
        """The (pod key, reason) pairs to tell now; pods no longer pending are forgotten."""
        out = []
        seen, told = self._seen, self._told
        for key, reason in pending.items():
            if reason == QUEUED:
                continue
            since = seen.get(key)
            if since is None or since[0] != reason:
                since = seen[key] = (reason, now_s)
            if told.get(key) != reason and now_s - since[1] >= self.delay_s:
                told[key] = reason
                out.append((key, reason))
        if len(seen) > len(pending) or len(told) > len(pending):
            for key in [key for key in seen if key not in pending]:
                del seen[key]
            for key in [key for key in told if key not in pending]:
                del told[key]
        return out


@dataclass(frozen=True)
class PodRef:
    """The pod an Event is about."""

    namespace: str
    name: str
    uid: str


def event_body(pod: PodRef, reason: str, message: str, warning: bool, now_s: float, instance: str,
               serial: int) -> dict:
    """A core/v1 Event about `pod`, from Coach's scheduler."""
    stamp = rfc3339(now_s)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{pod.name}.{int(now_s * 1e9):x}{serial:x}", "namespace": pod.namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                           "uid": pod.uid},
        "reason": reason, "message": message[:MAX_MESSAGE_CHARS], "type": "Warning" if warning else "Normal",
        "source": {"component": SCHEDULER_NAME}, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        "reportingComponent": SCHEDULER_NAME, "reportingInstance": instance,
    }


def unschedulable_patch(message: str, now_s: float) -> dict:
    """A pods/status strategic merge patch: PodScheduled=False, reason Unschedulable, with the message."""
    return {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                       "message": message[:MAX_MESSAGE_CHARS], "lastProbeTime": None,
                                       "lastTransitionTime": rfc3339(now_s)}]}}


class EventPoster:
    """A thread that writes Events and PodScheduled conditions; see the module docstring."""

    def __init__(self, api: client.ApiClient, instance: str, max_queued: int = 100_000,
                 on_drop: Callable[[], None] = lambda: None, on_error: Callable[[], None] = lambda: None,
                 busy: Callable[[], bool] = lambda: False):
        self._core = client.CoreV1Api(api)
        self._json = JsonPoster(api)  # Events are written for every bound pod: the lean path (see rest.py)
        self._instance = instance  # reportingInstance: this replica's identity
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._max_queued = max_queued  # beyond this, new items are dropped (counted)
        self._serial = itertools.count()
        self._on_drop, self._on_error = on_drop, on_error
        self._busy = busy  # True while bindings queue up: Events yield the CPU to them (see the module docstring)
        self._give_up_at = float("inf")  # after stop(): monotonic time after which queued items are dropped
        self._thread = threading.Thread(target=self._run, name="coach-scheduler-events", daemon=True)
        self.posted = 0  # Events and patches written

    def start(self) -> EventPoster:
        self._thread.start()
        return self

    def pending(self, pod: PodRef, message: str) -> None:
        """Tell why `pod` is pending: a FailedScheduling Warning and its PodScheduled condition."""
        self._put(("pending", pod, message))

    def scheduled(self, pod: PodRef, node: str) -> None:
        """Tell that `pod` is bound: a Scheduled Event (Normal)."""
        self._put(("scheduled", pod, node))

    def warning(self, pod: PodRef, reason: str, message: str) -> None:
        self._put(("warning", pod, (reason, message)))

    def _put(self, item) -> None:
        if self._queue.qsize() >= self._max_queued:
            self._on_drop()
        else:
            self._queue.put(item)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Write what is queued for at most `timeout_s`, drop the rest (counted), and end the thread."""
        self._give_up_at = time.monotonic() + timeout_s
        self._queue.put(None)  # unbounded put: the sentinel always fits behind what is queued
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if time.monotonic() > self._give_up_at:
                self._on_drop()
                continue
            waited_s = 0.0
            while self._busy() and waited_s < MAX_YIELD_S:
                time.sleep(YIELD_S)
                waited_s += YIELD_S
            kind, pod, what = item
            now_s = time.time()
            try:
                if kind == "pending":
                    self._event(pod, FAILED_SCHEDULING, what, True, now_s)
                    finish(self._core.patch_namespaced_pod_status(
                        pod.name, pod.namespace, unschedulable_patch(what, now_s), _content_type=STRATEGIC_MERGE,
                        _preload_content=False, _request_timeout=(5, 30)))
                elif kind == "scheduled":
                    self._event(pod, "Scheduled", f"Successfully assigned {pod.namespace}/{pod.name} to {what}",
                                False, now_s)
                else:
                    self._event(pod, what[0], what[1], True, now_s)
                self.posted += 1
            except client.ApiException as error:
                if error.status != 404:  # a pod deleted meanwhile needs no Event
                    log.warning("could not write an Event about pod %s/%s: HTTP %s", pod.namespace, pod.name,
                                error.status)
                    self._on_error()
            except Exception as error:  # the network: the next Event may get through; the scheduler goes on
                log.warning("could not write an Event about pod %s/%s: %s", pod.namespace, pod.name,
                            type(error).__name__)
                self._on_error()

    def _event(self, pod: PodRef, reason: str, message: str, warning: bool, now_s: float) -> None:
        body = event_body(pod, reason, message, warning, now_s, self._instance, next(self._serial))
        status, why, _ = self._json.post(f"/api/v1/namespaces/{path_segment(pod.namespace)}/events", body)
        if not 200 <= status < 300:
            raise client.ApiException(status=status, reason=why)
