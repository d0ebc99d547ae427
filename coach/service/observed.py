"""The ports of a served run, seen on their way: the placement and the logs tell the board and the metrics.

Decorators over the real ports (the driver cannot tell them apart), so the page shows what the scheduler did
and what the logs hold, not a second account of it.
"""

from __future__ import annotations

import json
import time
from typing import Iterable, Mapping

from coach.domain.identity import FunctionId
from coach.domain.records import EpochRecord
from coach.domain.status import JobStatus
from coach.ports import Placement, RecordSink
from coach.service.board import Board
from coach.service.metrics import ServiceMetrics


class BoardView:
    """The run's View: every status goes to the board."""

    def __init__(self, board: Board):
        self.board = board

    def update(self, status: JobStatus) -> None:
        self.board.show(status)

    def final(self) -> None:
        pass


class ObservedPlacement:
    """A placement whose submissions, bindings and releases reach the board; placement latency to metrics."""

    def __init__(self, inner: Placement, board: Board, metrics: ServiceMetrics):
        self.inner, self.board, self.metrics = inner, board, metrics
        self._waiting: dict[str, tuple[float, set[FunctionId]]] = {}  # job -> (first submit, pending functions)

    def register(self, jobs: Iterable[str]) -> None:
        self.inner.register(jobs)

    def submit(self, job: str, ids: Iterable[FunctionId]) -> None:
        ids = list(ids)
        self.inner.submit(job, ids)
        self.board.pending(job, ids)
        since_s, pending = self._waiting.get(job, (time.monotonic(), set()))
        self._waiting[job] = (since_s, pending | set(ids))

    def poll(self, job: str, now_s: float) -> Mapping[FunctionId, str]:
        bound = self.inner.poll(job, now_s)
        self.board.bound(bound)
        waiting = self._waiting.get(job)
        if waiting is not None and waiting[1] <= set(bound):
            del self._waiting[job]
            self.metrics.placement_seconds.observe(time.monotonic() - waiting[0])
        return bound

    def release(self, ids: Iterable[FunctionId]) -> None:
        ids = list(ids)
        self.inner.release(ids)
        self.board.released(ids)
        for job, (since_s, pending) in list(self._waiting.items()):
            if pending & set(ids):
                rest = pending - set(ids)
                if rest:
                    self._waiting[job] = (since_s, rest)
                else:
                    del self._waiting[job]

    def explain(self, job: str, now_s: float) -> str:
        return self.inner.explain(job, now_s)

    @property
    def version(self) -> int:
        return self.inner.version

    def close(self) -> None:
        self.inner.close()


class ObservedLog:
    """A job's log whose lines reach the board and whose training epochs are counted in the metrics, once written."""

    def __init__(self, inner: RecordSink, metrics: ServiceMetrics, board: Board):
        self.inner, self.metrics, self.board = inner, metrics, board

    def append(self, record: EpochRecord) -> None:
        self.inner.append(record)
        self.board.recorded(json.loads(record.to_json()))
        if record.phase == "training":
            self.metrics.epoch(record.job, record.epoch_time_s)

    def close(self) -> None:
        self.inner.close()
