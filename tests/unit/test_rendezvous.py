"""The driver's choice of each epoch's ps-lite rendezvous, and the next one announced (coach/drivers/rendezvous.py)."""

from __future__ import annotations

import itertools

from coach.domain.identity import FunctionId, Role
from coach.domain.invocation import FunctionRef
from coach.drivers.rendezvous import Rendezvous
from coach.platforms.local import free_port


class Ports:
    """A platform's rendezvous_address: ports counted up from 9000, never one to avoid."""

    def __init__(self, joins_ahead: bool = True):
        self.counter = itertools.count(9000)
        self.asked: list[set[int]] = []
        self.joins = joins_ahead

    def joins_ahead(self, scheduler: FunctionRef) -> bool:
        return self.joins

    def rendezvous_address(self, scheduler: FunctionRef, avoid_ports: frozenset[int] = frozenset()) -> tuple[str, int]:
        self.asked.append(set(avoid_ports))
        port = next(self.counter)
        return scheduler.host, next(self.counter) if port in avoid_ports else port


class PodPorts:
    """A cluster's rendezvous_address: the scheduler pod's three ports (coach/platforms/nuclio.py's PS_PORTS)."""

    def joins_ahead(self, scheduler: FunctionRef) -> bool:
        return True

    def rendezvous_address(self, scheduler: FunctionRef, avoid_ports: frozenset[int] = frozenset()) -> tuple[str, int]:
        return scheduler.host, next(port for port in (9091, 9092, 9093) if port not in avoid_ports)


def refs(job: str, workers: int, servers: int, instance: str = "a") -> list[FunctionRef]:
    ids = [FunctionId(job, Role.SCHEDULER, 0), *(FunctionId(job, Role.SERVER, i) for i in range(servers)),
           *(FunctionId(job, Role.WORKER, i) for i in range(workers))]
    return [FunctionRef(fid, "node", f"http://{fid.name}", "10.0.0.1", instance) for fid in ids]


def same(job: str, workers: int, servers: int, instance: str = "a") -> tuple[list, list]:
    """An epoch on these functions, expecting the next one on them too."""
    functions = refs(job, workers, servers, instance)
    return functions, functions


def test_the_next_epoch_on_the_expected_functions_meets_where_and_as_it_was_announced():
    platform, rendezvous = Ports(), Rendezvous()

    first = rendezvous.meeting(platform, "lenet", *same("lenet", 2, 1))
    second = rendezvous.meeting(platform, "lenet", *same("lenet", 2, 1))

    assert (first.address, first.id, first.next_address) == (("10.0.0.1", 9000), None, ("10.0.0.1", 9001))
    assert (second.address, second.id, second.next_address) == (("10.0.0.1", 9001), first.next_id,
                                                                 ("10.0.0.1", 9002))
    assert first.next_id != second.next_id  # every announcement has its own id
    assert platform.asked == [set(), {9000}, {9001}]  # the next one is never this one's port


def test_a_calibration_step_announces_the_next_points_functions_with_its_counts_and_only_to_them():
    platform, rendezvous = Ports(), Rendezvous()
    now, expected = refs("lenet", 1, 2), refs("lenet", 2, 1)  # (1,2) now, (2,1) next

    meeting = rendezvous.meeting(platform, "lenet", now, expected)

    scheduler, server0, server1, worker0 = now
    announced = meeting.next_of(worker0)
    assert (announced.id, announced.ps.root_port) == (meeting.next_id, 9001)
    assert (announced.ps.num_workers, announced.ps.num_servers, announced.ps.node_host) == (2, 1, "10.0.0.1")
    assert meeting.next_of(server1) is None  # not in the next step
    assert rendezvous.meeting(platform, "lenet", expected, expected).id == meeting.next_id


def test_other_functions_meet_at_a_fresh_address_and_nothing_expected_announces_nothing():
    platform, rendezvous = Ports(), Rendezvous()
    rendezvous.meeting(platform, "lenet", *same("lenet", 2, 1))

    def met(job, functions, following):
        meeting = rendezvous.meeting(platform, job, functions, following)
        return meeting.address, meeting.id is None

    assert met("lenet", *same("lenet", 1, 1)) == (("10.0.0.1", 9002), True)  # chosen now: no id
    assert met("lenet", *same("lenet", 1, 1, instance="b")) == (("10.0.0.1", 9004), True)  # another function
    assert met("resnet", *same("resnet", 1, 1)) == (("10.0.0.1", 9006), True)  # another job's is its own
    assert met("lenet", *same("lenet", 1, 1, instance="b")) == (("10.0.0.1", 9005), False)
    functions = refs("lenet", 1, 1, instance="b")
    silent = rendezvous.meeting(platform, "lenet", functions, [])
    assert silent.next_address is None and silent.next_of(functions[0]) is None
    assert rendezvous.meeting(platform, "lenet", *same("lenet", 1, 1, instance="b")).id is None


def test_a_finished_job_keeps_no_address_ahead():
    platform, rendezvous = Ports(), Rendezvous()
    rendezvous.meeting(platform, "lenet", *same("lenet", 2, 1))
    rendezvous.forget("lenet")

    meeting = rendezvous.meeting(platform, "lenet", *same("lenet", 2, 1))
    assert (meeting.address, meeting.id) == (("10.0.0.1", 9002), None)


def test_a_free_port_is_never_one_to_avoid():
    taken = frozenset({free_port(), free_port()})
    assert all(free_port(avoid=taken) not in taken for _ in range(50))


def test_on_a_pod_no_epoch_meets_where_an_announcement_that_did_not_come_true_may_still_listen():
    platform, rendezvous = PodPorts(), Rendezvous()
    two, one = refs("lenet", 2, 1), refs("lenet", 1, 1)

    first = rendezvous.meeting(platform, "lenet", two, two)
    second = rendezvous.meeting(platform, "lenet", two, two)
    third = rendezvous.meeting(platform, "lenet", one, one)  # second's announcement (9091) never comes true
    fourth = rendezvous.meeting(platform, "lenet", one, one)

    assert [m.address[1] for m in (first, second, third, fourth)] == [9091, 9092, 9092, 9093]
    assert [m.next_address[1] for m in (first, second, third, fourth)] == [9092, 9091, 9093, 9091]
    assert (third.id, fourth.id) == (None, third.next_id)


def test_a_platform_whose_functions_are_not_one_process_each_is_announced_nothing():
    platform, rendezvous = Ports(joins_ahead=False), Rendezvous()

    first = rendezvous.meeting(platform, "lenet", *same("lenet", 2, 1))
    second = rendezvous.meeting(platform, "lenet", *same("lenet", 2, 1))

    assert first.next_address is None and first.next_of(refs("lenet", 2, 1)[0]) is None
    assert (second.address, second.id) == (("10.0.0.1", 9001), None)  # chosen then, every time
