"""What `coach serve` shows: every job's latest status, its functions and where they run. Thread-safe.

The driver's loop thread writes (through the view, the observed placement and the logs); HTTP handlers read
snapshots. `version` grows with every change, so an event stream sends news only when there is some.
"""

from __future__ import annotations

import threading
from dataclasses import asdict
from typing import Iterable, Mapping

from coach.domain.cluster import ClusterSpec
from coach.domain.identity import FunctionId
from coach.domain.status import JobStatus


class Board:
    def __init__(self, cluster: ClusterSpec):
        self.cluster = cluster
        self._lock = threading.Lock()
        self._version = 0
        self._jobs: dict[str, dict] = {}  # job -> its latest status as plain data, in submission order
        self._functions: dict[str, dict] = {}  # function name -> {"job", "role", "node" (None while pending)}

    @property
    def version(self) -> int:
        with self._lock:
            return self._version

    def _bump(self) -> None:
        self._version += 1

    def show(self, status: JobStatus) -> None:
        with self._lock:
            self._jobs[status.job] = asdict(status)
            self._bump()

    def pending(self, job: str, ids: Iterable[FunctionId]) -> None:
        with self._lock:
            for fid in ids:
                self._functions[fid.name] = {"job": job, "role": fid.role.value, "node": None}
            self._bump()

    def bound(self, bound: Mapping[FunctionId, str]) -> None:
        with self._lock:
            changed = False
            for fid, node in bound.items():
                entry = self._functions.get(fid.name)
                if entry is not None and entry["node"] != node:
                    entry["node"], changed = node, True
            if changed:
                self._bump()

    def released(self, ids: Iterable[FunctionId]) -> None:
        with self._lock:
            for fid in ids:
                self._functions.pop(fid.name, None)
            self._bump()

    def jobs(self) -> list[dict]:
        with self._lock:
            return [dict(job) for job in self._jobs.values()]

    def job(self, name: str) -> dict | None:
        with self._lock:
            job = self._jobs.get(name)
            return None if job is None else dict(job)

    def pods_pending(self) -> int:
        with self._lock:
            return sum(1 for f in self._functions.values() if f["node"] is None)

    def nodes(self) -> list[dict]:
        """The cluster's nodes, each with its slots and the functions bound to it; then the pending ones."""
        with self._lock:
            functions = [{"name": name, **entry} for name, entry in self._functions.items()]
        nodes = [{"name": n.name, "slots": n.slots, "price_per_slot_s": n.price_per_slot_s,
                  "functions": [f for f in functions if f["node"] == n.name]} for n in self.cluster.nodes]
        return nodes + [{"name": None, "slots": 0, "price_per_slot_s": None,
                         "functions": [f for f in functions if f["node"] is None]}]
