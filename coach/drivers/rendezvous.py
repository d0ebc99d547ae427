"""Where each epoch's ps-lite nodes meet, and where the job's next step will, announced ahead.

Why ahead: ps-lite's rendezvous takes at least 0.1 s (its readiness poll), on the critical path of every stateless
epoch. So each request also announces where the job's next step will meet if it runs on the functions the
lifecycle expects (`InvokeEpoch.following`: this step's, or the next calibration point's), with an id of its own
(`EpochRequest.next`): the hosts' spare children join there while this epoch runs (coach_functions/spares.py), and that
step, when it does run on those functions, meets there already joined; its requests carry the id
(`rendezvous_id`). A function of the next step that this one does not use (a calibration point that adds a worker
or a server) hears the announcement from an `AheadRequest` the driver sends beside the epoch. Any other step meets
at an address chosen then, without an id; each host drops a spare that joined ahead when its next request is not
for that announcement (a function left out keeps it until then). The first step after a deploy is not announced:
it starts as soon as the workers have warmed up, and a node that joins less than ps-lite's 0.1 s poll before its
epoch saves nothing (its rendezvous takes as long with the announcement as without).
Nothing of an epoch goes with it. Only where the platform says each function is one host process
(`Platform.joins_ahead`): two processes of one function could each join the same announcement.

Why an id: an address comes back. Ports are reused, and on a cluster the scheduler's pod has three, so a function
may still hold a spare that joined an announcement which never came true, at the very address a later epoch is
given. Why three: while an epoch runs at one port and announces another, the scheduler's spare of an announcement
that did not come true may listen on a third until the scheduler's host drops it; no address is chosen among
those two.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from typing import Sequence

from coach.domain.contracts import NextEpoch, PsAddress
from coach.domain.identity import Role, role_counts
from coach.domain.invocation import FunctionRef
from coach.ports import Platform

Address = tuple[str, int]


@dataclass(frozen=True)
class Meeting:
    """Where one epoch meets, and where the step after it is announced (for `following`)."""

    address: Address
    id: str | None  # the announcement this address was chosen under; None: chosen now
    following: frozenset[FunctionRef]  # the functions of the announced step; empty: none announced
    next_address: Address | None
    next_id: str

    def next_of(self, ref: FunctionRef) -> NextEpoch | None:
        """What `ref`'s request announces: where it meets next, with the announced step's counts; None when it is
        not among that step's functions."""
        if ref not in self.following or self.next_address is None:
            return None
        counts = role_counts(f.fid for f in self.following)
        return NextEpoch(self.next_id, PsAddress(*self.next_address, counts[Role.SERVER], counts[Role.WORKER],
                                                 ref.host))


class Rendezvous:
    """Per job: the announced next meeting, and the functions it is for."""

    def __init__(self):
        self._ahead: dict[str, tuple[frozenset, Address, str]] = {}  # job -> (functions, address, id)
        self._lock = threading.Lock()

    def meeting(self, platform: Platform, job: str, refs: Sequence[FunctionRef],
                following: Sequence[FunctionRef] = ()) -> Meeting:
        """This epoch's meeting (the one announced when it runs on the functions announced for), and the next one
        announced for `following`."""
        scheduler = next(ref for ref in refs if ref.fid.role == Role.SCHEDULER)
        with self._lock:
            ahead = self._ahead.pop(job, None)
        if ahead is not None and ahead[0] == frozenset(refs):
            address, announced, busy = ahead[1], ahead[2], set()
        else:  # the announcement did not come true: its scheduler may still listen
            busy = set() if ahead is None else {ahead[1][1]}
            address, announced = platform.rendezvous_address(scheduler, frozenset(busy)), None
        next_scheduler = next((ref for ref in following if ref.fid.role == Role.SCHEDULER), None)
        next_id = uuid.uuid4().hex
        if next_scheduler is None or not platform.joins_ahead(next_scheduler):
            return Meeting(address, announced, frozenset(), None, next_id)
        next_address = platform.rendezvous_address(next_scheduler, frozenset(busy | {address[1]}))
        with self._lock:
            self._ahead[job] = (frozenset(following), next_address, next_id)
        return Meeting(address, announced, frozenset(following), next_address, next_id)

    def forget(self, job: str) -> None:
        """The job ended: no epoch of it comes again."""
        with self._lock:
            self._ahead.pop(job, None)
