"""PodGroup status, as `kubectl get podgroups` shows it: phase, scheduled and running, written by `coach scheduler`.

The phases are the coscheduling plugin's (scheduler-plugins, PodGroupPhase): Pending while fewer pods exist than
the group's minMember, Scheduling while they exist but fewer are bound, Scheduled once that many are bound,
Running once that many run. `status.scheduled` (bound members) is Coach's addition; `status.running` is the
plugin's. `group_status` is pure; `GroupStatusWriter` sends merge patches of the status subresource from one
thread, only for groups whose status changed, and never blocks the scheduling loop.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Iterable, Mapping

from kubernetes import client

from coach.domain.kube import PODGROUP_GROUP, PODGROUP_PLURAL, PODGROUP_VERSION
from coach.kube_scheduler.objects import GroupInfo, PodInfo
from coach.kube_scheduler.rest import finish

log = logging.getLogger(__name__)

PENDING, SCHEDULING, SCHEDULED, RUNNING = "Pending", "Scheduling", "Scheduled", "Running"
#: Patches waiting to be sent; beyond this a group's newest status replaces its queued one only.
MAX_QUEUED = 10_000


def group_status(group: GroupInfo, members: Iterable[PodInfo], quorum_pods: int) -> dict:
    """The status of `group` with these live member pods; `quorum_pods` when its minMember is missing."""
    pods = [pod for pod in members if not pod.deleting]
    need = group.min_member or quorum_pods
    scheduled = sum(1 for pod in pods if pod.node is not None)
    running = sum(1 for pod in pods if pod.node is not None and pod.phase == "Running")
    if running >= need:
        phase = RUNNING
    elif scheduled >= need:
        phase = SCHEDULED
    elif len(pods) >= need:
        phase = SCHEDULING
    else:
        phase = PENDING
    return {"phase": phase, "scheduled": scheduled, "running": running}


class GroupStatusWriter:
    """Writes each PodGroup's status when it changes (merge patch of the status subresource), from a thread."""

    def __init__(self, api: client.ApiClient):
        self._custom = client.CustomObjectsApi(api)
        self._written: dict[str, dict] = {}  # group key -> the status last queued
        self._queue: queue.Queue = queue.Queue()
        self._latest: dict[str, dict] = {}  # group key -> the newest status not yet sent
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="coach-scheduler-podgroups", daemon=True)
        self.written = 0  # patches sent

    def start(self) -> GroupStatusWriter:
        self._thread.start()
        return self

    def update(self, statuses: Mapping[str, dict]) -> None:
        """Queue the statuses that differ from the last ones queued; `statuses` holds every group there is
        (keys: namespace/name), so a group missing from it is gone and forgotten."""
        for key in set(self._written) - set(statuses):
            del self._written[key]
        for key, status in statuses.items():
            if self._written.get(key) == status:
                continue
            self._written[key] = status
            with self._lock:
                fresh = key not in self._latest
                self._latest[key] = status
            if fresh and self._queue.qsize() < MAX_QUEUED:
                self._queue.put(key)

    def stop(self) -> None:
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            key = self._queue.get()
            if key is None:
                return
            with self._lock:
                status = self._latest.pop(key, None)
            if status is None:
                continue
            namespace, name = key.split("/", 1)
            try:
                finish(self._custom.patch_namespaced_custom_object_status(
                    PODGROUP_GROUP, PODGROUP_VERSION, namespace, PODGROUP_PLURAL, name, {"status": status},
                    _preload_content=False, _request_timeout=(5, 30)))
                self.written += 1
            except client.ApiException as error:
                if error.status != 404:  # a group deleted meanwhile needs no status
                    log.warning("could not write the status of PodGroup %s: HTTP %s", key, error.status)
            except Exception as error:  # the network: written again with its next change
                log.warning("could not write the status of PodGroup %s: %s", key, type(error).__name__)
