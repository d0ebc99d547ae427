"""What a warm host keeps between invocations (HostState), and the spare child it holds (Spare). Plain data."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from coach.domain.contracts import EpochRequest, NextEpoch
from coach_functions.epochs import EpochRegistry, registry_from_env
from coach_functions.warmup import Warmth


@dataclass
class Spare:
    """A child forked ahead of its request, blocked reading it from `request_fd`; it replies on `reply_fd`."""

    pid: int
    request_fd: int  # the host's end: one frame, the request (a stale spare is killed, never told)
    reply_fd: int  # the host's end of the reply pipe
    generation: int  # HostState.generation when it was forked: it knows the models loaded until then
    joined: NextEpoch | None = None  # the announced rendezvous it joined: it runs only that epoch
    log_from: int | None = None  # where the function's log ended when it was forked (failures.log_size)

    def serves(self, request: EpochRequest, joined_here: bool) -> bool:
        """Whether it may run `request`; `joined_here`: a child of this host joined the request's rendezvous, which
        then only that child may run (ps-lite takes one node per function)."""
        if self.joined is None:
            return not joined_here
        return self.joined.id == request.rendezvous_id and self.joined.ps == request.ps


@dataclass
class HostState:
    """Per-host memory shared by invocations: loaded models and their data, the running children, the spare."""

    models: dict[str, tuple[float, Any, Any]] = field(default_factory=dict)  # path -> (mtime, module, data)
    # path -> (module, classes): what a worker epoch's shape pass found for the module loaded now (None: a loss
    # whose labels are not class indices); epochs from a checkpoint then skip the shape pass
    classes: dict[str, tuple[Any, int | None]] = field(default_factory=dict)
    children: set[int] = field(default_factory=set)  # pids of running epoch children
    # where the children are registered for a cancel that another worker process of the function receives
    # (coach_functions/epochs.py); None: this process is the function's only one, its `children` are all there is
    epochs: EpochRegistry | None = field(default_factory=registry_from_env)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # held from making a child's pipes until the host has closed the child's ends: no other child may inherit
    # them (a reply pipe whose write end another process holds never reaches EOF)
    fork_lock: threading.Lock = field(default_factory=threading.Lock)
    # held by the keeper from choosing a spare until it is stored, and by an epoch taking it: an epoch never forks
    # a child of its own while the keeper's spare joins the same rendezvous
    keeping: threading.Lock = field(default_factory=threading.Lock)
    generation: int = 0  # counts the changes of `models`
    spare: Spare | None = None
    ahead: tuple[str, NextEpoch] | None = None  # (role, announcement) the next spare joins: the last request's
    joined_id: str | None = None  # the last announcement a child of this host joined: no other child may join it
    wants_spare: threading.Event = field(default_factory=threading.Event)
    keeper: threading.Thread | None = None
    warmth: Warmth = field(default_factory=Warmth)  # the batch shapes warmed in this host (coach_functions/warmup.py)
