"""When a worker stops training inside its deadline, shared by the runtime (`functions/`), the virtual platform
and the lifecycle so that they cut an epoch alike. Pure: no clock.

An epoch's functions get `deadline_s`; each worker leaves its training loop a reserve before it, so that what
follows the loop (rank 0's validation and checkpoint save, the kvstore teardown that lets the servers and the
PS scheduler end, the replies) still fits, and replies with the part of the epoch it did (`stopped_early`).
"""

from __future__ import annotations

#: The least time kept free after the training loop. On a quiet 2-core machine, for LeNet with 2 workers and 1
#: server, what follows the loop (validation, most of it, then the save, the kvstore teardown, the child's exit and
#: the HTTP reply) takes about half of this (benchmarks/coach_epoch_profile.py shows the parts);
#: benchmarks/partial_epoch.py measures the slack left at real cuts.
STOP_RESERVE_S = 0.5
#: ... or this many times the epoch's own set-up (fork to the first step: ps-lite rendezvous, model build,
#: checkpoint load, broadcast), whichever is longer. The teardown is the same kind of ps-lite work as the set-up
#: and slows down with it when the machine is loaded: with other jobs running on both cores, teardowns up to
#: about twice the set-up were seen, where on a quiet machine they are well below it.
SETUP_MULTIPLE = 2.0


def stop_reserve_s(setup_s: float) -> float:
    """Seconds kept free after the training loop when the epoch's set-up took `setup_s`."""
    return max(STOP_RESERVE_S, SETUP_MULTIPLE * setup_s)


def training_stop_s(deadline_s: float, setup_s: float = 0.0) -> float:
    """Seconds after its start by which a worker must be out of its training loop (<= setup_s: train nothing)."""
    return deadline_s - stop_reserve_s(setup_s)
