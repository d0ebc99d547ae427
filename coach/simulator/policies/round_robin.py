"""Round robin (schedulearn): jobs take turns at their requested GPUs, one scheduling round per turn. Pure.

A rotating queue holds every active job (newcomers join the back in arrival order). Each round the jobs at the
front get their requested GPUs, in queue order, until the next one does not fit; that job stays at the front so
it is first next round (strict turns: a large job is not overtaken forever by small ones). Every job that ran
goes to the back, so the others get the next turn: it preempts. The queue is the policy's only state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from coach.simulator.policies.common import requested_grant, requested_gpus
from coach.simulator.view import ClusterSnapshot, Grant


@dataclass
class RoundRobin:
    elastic: bool = True
    queue: list[str] = field(default_factory=list)  # job names, front first

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        jobs = {job.name: job for job in snapshot.jobs}
        queued = set(self.queue)
        self.queue = [name for name in self.queue if name in jobs]
        self.queue += [job.name for job in snapshot.jobs if job.name not in queued]
        total, free = snapshot.total_gpus, snapshot.total_gpus
        grants: dict[str, Grant] = {}
        for name in self.queue:
            need = requested_gpus(jobs[name], total)
            if need > free:
                break
            grants[name] = requested_grant(jobs[name], need)
            free -= need
        self.queue = [name for name in self.queue if name not in grants] + [n for n in self.queue if n in grants]
        return grants


def round_robin(seed: int) -> RoundRobin:
    return RoundRobin()
