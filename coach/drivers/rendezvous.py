"""Where each epoch's ps-lite nodes meet, and where the next epoch of the same functions will, announced ahead.

Why ahead: ps-lite's rendezvous takes at least 0.1 s (its readiness poll), on the critical path of every stateless
epoch. So each request also announces where the next epoch at the same functions and counts will meet
(`EpochRequest.next`, with an id of its own): the function hosts' spare children join there while this epoch runs
(functions/runtime.py), and the next epoch, if it comes at those functions and counts, meets there already joined;
its requests carry the id (`rendezvous_id`). Any other next epoch meets at an address chosen then, without an id,
and the hosts drop the spares that joined ahead. Nothing of an epoch goes with it.

Why an id: an address comes back. Ports are reused, and on a cluster the scheduler's pod alternates between two,
so a function left out of an epoch may still hold a spare that joined an announcement which never came true, at
the very address a later epoch is given.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from typing import Sequence

from coach.domain.identity import Role
from coach.domain.invocation import FunctionRef
from coach.ports import Platform

Address = tuple[str, int]


@dataclass(frozen=True)
class Meeting:
    """Where one epoch meets and where the next one is announced."""

    address: Address
    id: str | None  # the announcement this address was chosen under; None: chosen now
    next_address: Address
    next_id: str


class Rendezvous:
    """Per job: the announced next meeting, and which functions and counts it is for."""

    def __init__(self):
        self._ahead: dict[str, tuple[tuple, Address, str]] = {}  # job -> ((functions, workers, servers), address, id)
        self._lock = threading.Lock()

    def meeting(self, platform: Platform, job: str, refs: Sequence[FunctionRef], workers: int,
                servers: int) -> Meeting:
        """This epoch's meeting: the one announced when the functions and counts are those it was announced for."""
        scheduler = next(ref for ref in refs if ref.fid.role == Role.SCHEDULER)
        key = (frozenset(refs), workers, servers)
        with self._lock:
            ahead = self._ahead.pop(job, None)
        if ahead is not None and ahead[0] == key:
            address, announced = ahead[1], ahead[2]
        else:
            address, announced = platform.rendezvous_address(scheduler), None
        following = platform.rendezvous_address(scheduler, avoid_port=address[1])
        next_id = uuid.uuid4().hex
        with self._lock:
            self._ahead[job] = (key, following, next_id)
        return Meeting(address, announced, following, next_id)

    def forget(self, job: str) -> None:
        """The job ended: no epoch of it comes again."""
        with self._lock:
            self._ahead.pop(job, None)
