"""Tiresias's discretised two-dimensional least-attained-service scheduler (Gu et al., NSDI'19). Pure.

A job's attained service is GPUs x seconds held (job.attained_gpu_s, both dimensions at once). Jobs sit in
priority queues by attained service: queue k holds jobs with thresholds[k-1] <= attained < thresholds[k]. Lower
queues go first, FIFO (arrival order) within a queue; each job gets exactly its requested GPUs (it is not elastic
in size) and jobs that do not fit are skipped for smaller ones behind them; jobs left out are preempted.
Defaults follow the Pollux artifact's Tiresias baseline (simulator/tiresias.py of petuum/adaptdl, osdi21-artifact):
two queues, one threshold of 16 GPU-hours, starvation guard off. The optional guard (the paper's STARVELIMIT
knob) moves a waiting job back to the top queue once it has waited `starve_factor` times its last run time;
its attained service is then counted from the promotion on.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from coach.simulator.grants import requested_grant, requested_gpus
from coach.simulator.view import ClusterSnapshot, Grant

#: Queue thresholds in GPU-seconds of attained service: 16 GPU-hours, as in the Pollux artifact's Tiresias.
DEFAULT_THRESHOLDS_GPU_S = (3600.0 * 16,)


@dataclass
class _Clock:
    """What the starvation guard needs per job: when it last ran, for how long, and its service at promotion."""

    ran_s: float = 0.0  # length of the job's last uninterrupted run
    waited_s: float = 0.0  # time waited since it last ran
    offset_gpu_s: float = 0.0  # attained service when last promoted (subtracted to place it in a queue)


@dataclass
class Tiresias:
    thresholds_gpu_s: Sequence[float] = DEFAULT_THRESHOLDS_GPU_S  # ascending; len + 1 queues
    starve_factor: float | None = None  # promote after waiting this many times the last run; None: off
    elastic: bool = True
    clocks: dict[str, _Clock] = field(default_factory=dict)

    def queue_of(self, name: str, attained_gpu_s: float) -> int:
        """Index of the job's queue (0 = highest priority)."""
        offset = self.clocks[name].offset_gpu_s if name in self.clocks else 0.0
        return bisect.bisect_right(self.thresholds_gpu_s, attained_gpu_s - offset)

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        active = {job.name for job in snapshot.jobs}
        self.clocks = {name: clock for name, clock in self.clocks.items() if name in active}
        if self.starve_factor is not None:
            self._guard(snapshot)
        order = sorted(range(len(snapshot.jobs)),
                       key=lambda i: (self.queue_of(snapshot.jobs[i].name, snapshot.jobs[i].attained_gpu_s), i))
        total = free = snapshot.total_gpus
        grants: dict[str, Grant] = {}
        for index in order:
            job = snapshot.jobs[index]
            need = requested_gpus(job, total)
            if need <= free:
                grants[job.name] = requested_grant(job, need)
                free -= need
        return grants

    def _guard(self, snapshot: ClusterSnapshot) -> None:
        """Update run/wait clocks from what jobs held last round; promote jobs that waited too long."""
        for job in snapshot.jobs:
            clock = self.clocks.setdefault(job.name, _Clock())
            if job.gpus > 0:
                clock.ran_s = (clock.ran_s if clock.waited_s == 0 else 0.0) + snapshot.interval_s
                clock.waited_s = 0.0
            elif clock.ran_s > 0:
                clock.waited_s += snapshot.interval_s
                if clock.waited_s >= self.starve_factor * clock.ran_s:
                    clock.offset_gpu_s = job.attained_gpu_s
                    clock.ran_s = clock.waited_s = 0.0


def tiresias(seed: int) -> Tiresias:
    return Tiresias()
