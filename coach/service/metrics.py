"""Prometheus metrics of `coach serve`, in a registry of their own (one server, one registry; tests start many).

Counted as things happen: epochs, epoch seconds, placement latency. Read from the board when scraped: jobs by
phase, money spent and pods pending, so a scrape always agrees with the page.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from coach.service.board import Board

EPOCH_BUCKETS_S = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
PLACEMENT_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)


class _FromBoard:
    def __init__(self, board: Board):
        self.board = board

    def collect(self):
        jobs = self.board.jobs()
        phases = GaugeMetricFamily("coach_jobs", "Jobs of this server by phase", labels=["phase"])
        counts: dict[str, int] = {}
        for job in jobs:
            counts[job["phase"]] = counts.get(job["phase"], 0) + 1
        for phase, count in sorted(counts.items()):
            phases.add_metric([phase], count)
        yield phases
        spent = GaugeMetricFamily("coach_cost_spent", "Money each job has spent so far", labels=["job"])
        for job in jobs:
            spent.add_metric([job["job"]], job["cost"])
        yield spent
        yield GaugeMetricFamily("coach_pods_pending", "Functions waiting for a node", value=self.board.pods_pending())


class ServiceMetrics:
    def __init__(self, board: Board):
        self.registry = CollectorRegistry()
        self.epochs = Counter("coach_epochs", "Training epochs finished", ["job"], registry=self.registry)
        self.epoch_seconds = Histogram("coach_epoch_seconds", "Wall seconds of a training epoch",
                                       buckets=EPOCH_BUCKETS_S, registry=self.registry)
        self.placement_seconds = Histogram("coach_placement_latency_seconds",
                                           "Seconds from a job's functions being submitted to all of them bound",
                                           buckets=PLACEMENT_BUCKETS_S, registry=self.registry)
        self.registry.register(_FromBoard(board))

    def epoch(self, job: str, seconds: float) -> None:
        self.epochs.labels(job).inc()
        self.epoch_seconds.observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
