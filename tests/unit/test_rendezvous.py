"""The driver's choice of each epoch's ps-lite rendezvous, and the next one announced (coach/drivers/rendezvous.py)."""

from __future__ import annotations

import itertools

from coach.domain.identity import FunctionId, Role
from coach.domain.invocation import FunctionRef
from coach.drivers.rendezvous import Rendezvous
from coach.platforms.local import free_port


class Ports:
    """A platform's rendezvous_address: ports counted up from 9000, never the one to avoid."""

    def __init__(self):
        self.counter = itertools.count(9000)
        self.asked: list[int | None] = []

    def rendezvous_address(self, scheduler: FunctionRef, avoid_port: int | None = None) -> tuple[str, int]:
        self.asked.append(avoid_port)
        port = next(self.counter)
        return scheduler.host, next(self.counter) if port == avoid_port else port


def refs(job: str, workers: int, servers: int, instance: str = "a") -> list[FunctionRef]:
    ids = [FunctionId(job, Role.SCHEDULER, 0), *(FunctionId(job, Role.SERVER, i) for i in range(servers)),
           *(FunctionId(job, Role.WORKER, i) for i in range(workers))]
    return [FunctionRef(fid, "node", f"http://{fid.name}", "10.0.0.1", instance) for fid in ids]


def test_the_next_epoch_at_the_same_functions_and_counts_meets_where_and_as_it_was_announced():
    platform, rendezvous = Ports(), Rendezvous()

    first = rendezvous.meeting(platform, "lenet", refs("lenet", 2, 1), 2, 1)
    second = rendezvous.meeting(platform, "lenet", refs("lenet", 2, 1), 2, 1)

    assert (first.address, first.id, first.next_address) == (("10.0.0.1", 9000), None, ("10.0.0.1", 9001))
    assert (second.address, second.id, second.next_address) == (("10.0.0.1", 9001), first.next_id,
                                                                 ("10.0.0.1", 9002))
    assert first.next_id != second.next_id  # every announcement has its own id
    assert platform.asked == [None, 9000, 9001]  # the next one is never this one's port


def test_other_functions_or_counts_meet_at_a_fresh_address():
    platform, rendezvous = Ports(), Rendezvous()
    rendezvous.meeting(platform, "lenet", refs("lenet", 2, 1), 2, 1)

    def met(job, functions, workers, servers):
        meeting = rendezvous.meeting(platform, job, functions, workers, servers)
        return meeting.address, meeting.id is None

    assert met("lenet", refs("lenet", 1, 1), 1, 1) == (("10.0.0.1", 9002), True)  # chosen now: no id
    assert met("lenet", refs("lenet", 1, 1, instance="b"), 1, 1) == (("10.0.0.1", 9004), True)  # another function
    assert met("resnet", refs("resnet", 1, 1), 1, 1) == (("10.0.0.1", 9006), True)  # another job's is its own
    assert met("lenet", refs("lenet", 1, 1, instance="b"), 1, 1) == (("10.0.0.1", 9005), False)


def test_a_finished_job_keeps_no_address_ahead():
    platform, rendezvous = Ports(), Rendezvous()
    rendezvous.meeting(platform, "lenet", refs("lenet", 2, 1), 2, 1)
    rendezvous.forget("lenet")

    meeting = rendezvous.meeting(platform, "lenet", refs("lenet", 2, 1), 2, 1)
    assert (meeting.address, meeting.id) == (("10.0.0.1", 9002), None)


def test_a_free_port_is_never_the_one_to_avoid():
    taken = free_port()
    assert all(free_port(avoid=taken) != taken for _ in range(50))
