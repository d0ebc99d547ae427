"""Prometheus metrics of `coach serve`, in a registry of their own (one server, one registry; tests start many).

Counted as things happen: epochs, epoch seconds, placement latency, webhook deliveries. Read from the board when
scraped: jobs by phase (every phase, 0 included, so a series never vanishes), each job's money, budget and last
losses, and pods pending, so a scrape always agrees with the page.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from coach.service.board import Board

EPOCH_BUCKETS_S = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
PLACEMENT_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
#: every phase a job shows (coach.lifecycle.job): each is exported, 0 when no job is in it
PHASES = ("waiting", "calibration", "deploying", "training", "requeued", "retrying", "done", "failed",
          "interrupted", "stopped_by_user")


class _FromBoard:
    def __init__(self, board: Board):
        self.board = board

    def collect(self):
        jobs = self.board.jobs()
        phases = GaugeMetricFamily("coach_jobs", "Jobs of this server by phase", labels=["phase"])
        counts = dict.fromkeys(PHASES, 0)
        for job in jobs:
            counts[job["phase"]] = counts.get(job["phase"], 0) + 1
        for phase, count in counts.items():
            phases.add_metric([phase], count)
        yield phases
        families = {
            "cost": GaugeMetricFamily("coach_cost_spent", "Money each job has spent so far", labels=["job"]),
            "budget": GaugeMetricFamily("coach_job_budget", "Each job's budget", labels=["job"]),
            "loss": GaugeMetricFamily("coach_job_loss", "Each job's last training loss", labels=["job"]),
            "val_loss": GaugeMetricFamily("coach_job_val_loss", "Each job's last validation loss", labels=["job"]),
            "epoch": GaugeMetricFamily("coach_job_epochs", "Epochs each job has finished", labels=["job"]),
        }
        for job in jobs:
            for key, family in families.items():
                if job.get(key) is not None:
                    family.add_metric([job["job"]], job[key])
        yield from families.values()
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
        self.notifications = Counter("coach_notifications", "Webhook deliveries by outcome (delivered, failed "
                                     "after every try, dropped from a full queue)", ["outcome"],
                                     registry=self.registry)
        self.registry.register(_FromBoard(board))

    def epoch(self, job: str, seconds: float) -> None:
        self.epochs.labels(job).inc()
        self.epoch_seconds.observe(seconds)

    def notified(self, outcome: str) -> None:
        self.notifications.labels(outcome).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
