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
from coach.simulator.view import ClusterJobView, ClusterSnapshot, Grant

QUANTUM_S = 600.0


@dataclass
class RoundRobin:
    """With thousands of jobs queued (the Philly trace), a round costs what the running jobs and the newcomers do,
    plus one pass over the names when some job has left: newcomers are the last jobs in arrival order, and each
    job's request as a grant is kept while the job's request stays what it was."""

    quantum_s: float = QUANTUM_S
    elastic: bool = True
    queue: list[str] = field(default_factory=list)  # waiting job names, front first
    turn_ends_s: dict[str, float] = field(default_factory=dict)  # running job -> when its turn ends
    known: set[str] = field(default_factory=set)  # the jobs in the queue or in a turn
    requests: dict[str, tuple[tuple, Grant]] = field(default_factory=dict)  # job -> (what its request is of, it)

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        jobs = snapshot.jobs_by_name
        now_s, total = snapshot.now_s, snapshot.total_gpus
        newcomers = self._newcomers(snapshot)
        if len(snapshot.jobs) - len(newcomers) != len(self.known):  # some jobs have left
            self.queue = [name for name in self.queue if name in jobs]
            self.turn_ends_s = {name: end for name, end in self.turn_ends_s.items() if name in jobs}
            self.known &= jobs.keys()
            self.requests = {name: kept for name, kept in self.requests.items() if name in self.known}
            newcomers = [job.name for job in snapshot.jobs if job.name not in self.known]
        ended = [name for name, end in self.turn_ends_s.items() if end <= now_s]
        for name in ended:
            del self.turn_ends_s[name]
        self.queue += ended + newcomers
        self.known.update(newcomers)
        grants: dict[str, Grant] = {}
        free = total
        for name in list(self.turn_ends_s):  # in their turn: they keep their GPUs (while the cluster holds them)
            grant = self._request(jobs[name], total)
            if grant.gpus > free:
                del self.turn_ends_s[name]
                self.queue.insert(0, name)
                continue
            grants[name] = grant
            free -= grant.gpus
        started = 0
        for name in self.queue:
            grant = self._request(jobs[name], total)
            if grant.gpus > free:
                break
            grants[name] = grant
            free -= grant.gpus
            started += 1
            self.turn_ends_s[name] = now_s + self.quantum_s
        del self.queue[:started]
        return grants

    def _newcomers(self, snapshot: ClusterSnapshot) -> list[str]:
        """Jobs seen for the first time: the last ones in arrival order, after every job seen before."""
        fresh = []
        for job in reversed(snapshot.jobs):
            if job.name in self.known:
                break
            fresh.append(job.name)
        return fresh[::-1]

    def _request(self, job: ClusterJobView, total: int) -> Grant:
        """The job's request as a grant, worked out again only when what it depends on has changed."""
        of = (job.app, job.requested_gpus, job.requested_batch, job.max_gpus, total)
        kept = self.requests.get(job.name)
        if kept is None or kept[0] != of:
            kept = self.requests[job.name] = (of, requested_grant(job, requested_gpus(job, total)))
        return kept[1]


def round_robin(seed: int) -> RoundRobin:
    return RoundRobin()
