"""What `coach serve` shows: every job's latest status, its functions and where they run. Thread-safe.

The driver's loop thread writes (through the view, the observed placement and the logs); HTTP handlers read
snapshots. `version` grows with every change, so an event stream sends news only when there is some. Each job's
row carries the run it belongs to, the counts of its last finished step (not what is deployed), its money, why it
waits and why it ended, in words (coach.service.money, waiting, ending).
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping

from coach.domain.cluster import ClusterSpec
from coach.domain.identity import FunctionId
from coach.domain.status import JobStatus
from coach.service.ending import EndFigures, ending_view
from coach.service.money import money_view
from coach.service.waiting import waiting_view

FINISHED_STEPS = ("training", "calibration")  # the phases of a log line that is a finished step


@dataclass
class JobFacts:
    """What the board keeps of a job besides its status: its spec's limits and what its log's lines said."""

    max_epochs: int
    target_loss: float
    stop_reason: str | None = None
    step_workers: int | None = None  # counts of the last finished step
    step_servers: int | None = None
    epoch_costs: list[float] = field(default_factory=list)  # of each training epoch
    epoch_times_s: list[float] = field(default_factory=list)
    best_val_loss: float | None = None
    best_loss: float | None = None
    shown_at_s: float = 0.0  # when the status last changed

class Board:
    def __init__(self, cluster: ClusterSpec, run_id: str = "", placement_timeout_s: float = 30.0):
        self.cluster, self.run_id, self.placement_timeout_s = cluster, run_id, placement_timeout_s
        self._facts: dict[str, JobFacts] = {}
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
            facts = self._facts.get(status.job)
            if facts is not None:
                facts.shown_at_s = time.time()
            self._bump()

    def admit(self, job: str, max_epochs: int, target_loss: float) -> None:
        """A job's limits, before its first status: what its row's money and ending are measured against."""
        with self._lock:
            self._facts.setdefault(job, JobFacts(max_epochs, target_loss, shown_at_s=time.time()))

    def recorded(self, record: Mapping) -> None:
        """A line of a job's log (as written, or read back on a restart): counts, money and best losses."""
        with self._lock:
            facts = self._facts.get(record["job"])
            if facts is None:
                return
            if record.get("stop_reason"):
                facts.stop_reason = record["stop_reason"]
            if record["phase"] in FINISHED_STEPS:
                facts.step_workers, facts.step_servers = record["workers"], record["servers"]
            if record["phase"] == "training":
                facts.epoch_costs.append(record["cost"])
                facts.epoch_times_s.append(record["epoch_time_s"])
                for key, name in (("best_val_loss", "val_loss"), ("best_loss", "loss")):
                    value, best = record.get(name), getattr(facts, key)
                    if value is not None and (best is None or value < best):
                        setattr(facts, key, value)
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
            queue = self._queue()
            return [self._row(job, queue) for job in self._jobs.values()]

    def job(self, name: str) -> dict | None:
        with self._lock:
            job = self._jobs.get(name)
            return None if job is None else self._row(job, self._queue())

    def _queue(self) -> list[str]:
        """The jobs with functions waiting for a node, in submission order."""
        waiting = {f["job"] for f in self._functions.values() if f["node"] is None}
        return [name for name in self._jobs if name in waiting]

    def ending(self, name: str, reason: str) -> dict | None:
        """Why the job ended, in words, as its row will say once its last status arrives."""
        with self._lock:
            job, facts = self._jobs.get(name), self._facts.get(name)
            if job is None or facts is None:
                return None
            return ending_view(reason, self._figures(job, facts))

    def _figures(self, job: dict, facts: JobFacts) -> EndFigures:
        loss_name, best = ("val loss", facts.best_val_loss) if facts.best_val_loss is not None else \
            ("loss", facts.best_loss)
        return EndFigures(job["cost"], job["budget"], facts.epoch_costs[-1] if facts.epoch_costs else None, best,
                          loss_name, facts.target_loss, job["epoch"], facts.max_epochs)

    def _row(self, job: dict, queue: list[str]) -> dict:
        """A job's status with what the page shows of it (under the lock)."""
        row = {**job, "run_id": self.run_id}
        facts = self._facts.get(job["job"])
        if facts is None:
            return row
        row["step_workers"], row["step_servers"] = facts.step_workers, facts.step_servers
        row["max_epochs"], row["target_loss"] = facts.max_epochs, facts.target_loss
        row["money"] = money_view(job["cost"], job["budget"], facts.epoch_costs, facts.epoch_times_s, job["epoch"],
                                  facts.max_epochs)
        figures = self._figures(job, facts)
        ended = job["phase"] in ("done", "failed", "stopped_by_user", "interrupted")
        row["ending"] = ending_view((facts.stop_reason or job["message"]) if ended else None, figures)
        functions = [{"name": name, **entry} for name, entry in self._functions.items()]
        row["waiting"] = None if ended else waiting_view(
            job["job"], job["phase"], job["message"], facts.shown_at_s, functions, self.cluster.total_slots, queue,
            self.placement_timeout_s)
        row["shown_at_s"] = facts.shown_at_s
        return row

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
