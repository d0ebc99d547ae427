"""Round robin (schedulearn): jobs take turns at their requested GPUs. Pure apart from its queue.

Waiting jobs stand in a queue (newcomers join the back in arrival order). Each round, jobs whose turn has not
ended keep their GPUs; then the jobs at the front of the queue start a turn at their requested GPUs, in queue
order, until the next one does not fit (it stays first: strict turns, so a large job is not overtaken forever by
small ones). A job whose turn has ended is preempted and goes to the back of the queue.

A turn lasts `quantum_s`, 10 minutes by default (our choice: schedulearn's simulator hands out one turn per
scheduling event; with a 60-s round a one-round turn would be half restart, as every (re)start costs 30 s).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from coach.simulator.grants import requested_grant, requested_gpus
from coach.simulator.view import ClusterSnapshot, Grant

QUANTUM_S = 600.0


@dataclass
class RoundRobin:
    quantum_s: float = QUANTUM_S
    elastic: bool = True
    queue: list[str] = field(default_factory=list)  # waiting job names, front first
    turn_ends_s: dict[str, float] = field(default_factory=dict)  # running job -> when its turn ends

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        jobs = {job.name: job for job in snapshot.jobs}
        now_s, total = snapshot.now_s, snapshot.total_gpus
        self.turn_ends_s = {name: end for name, end in self.turn_ends_s.items() if name in jobs}
        ended = [name for name, end in self.turn_ends_s.items() if end <= now_s]
        for name in ended:
            del self.turn_ends_s[name]
        known = set(self.queue) | set(self.turn_ends_s) | set(ended)
        self.queue = [name for name in self.queue if name in jobs]
        self.queue += ended + [job.name for job in snapshot.jobs if job.name not in known]
        grants: dict[str, Grant] = {}
        free = total
        for name in list(self.turn_ends_s):  # in their turn: they keep their GPUs (while the cluster holds them)
            need = requested_gpus(jobs[name], total)
            if need > free:
                del self.turn_ends_s[name]
                self.queue.insert(0, name)
                continue
            grants[name] = requested_grant(jobs[name], need)
            free -= need
        started = []
        for name in self.queue:
            need = requested_gpus(jobs[name], total)
            if need > free:
                break
            grants[name] = requested_grant(jobs[name], need)
            free -= need
            started.append(name)
            self.turn_ends_s[name] = now_s + self.quantum_s
        self.queue = self.queue[len(started):]
        return grants


def round_robin(seed: int) -> RoundRobin:
    return RoundRobin()
