"""Doing several platform calls of one step together: an epoch's roles, a batch of deploys or warm-ups.

The first failure of an epoch cancels the others, so no role waits for a dead peer until its deadline. The live
driver fans out over threads and measures wall time; the virtual-time driver calls in turn and takes the
longest reported duration as the wall time (nothing sleeps there). Side effects: the calls themselves.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence, TypeVar

from coach.domain.contracts import AheadRequest, EpochRequest, WarmRequest
from coach.domain.invocation import Failure, FunctionRef, Reply
from coach.ports import Platform

T = TypeVar("T")
R = TypeVar("R")
Payload = EpochRequest | WarmRequest | AheadRequest  # what Platform.invoke sends


@dataclass(frozen=True)
class Together:
    replies: Mapping[str, Reply]  # function name -> reply, for every function that answered 200
    failure: Failure | None  # the first failure, if any (the others were cancelled then)
    wall_s: float  # from the first request sent to the last reply received


class ThreadFanOut:
    """Real concurrency for real platforms: one thread per call."""

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        with ThreadPoolExecutor(max(len(items), 1)) as pool:
            return list(pool.map(fn, items))

    def together(self, platform: Platform, refs: Sequence[FunctionRef], payload_for: Callable[[FunctionRef], Payload],
                 timeout_s: float) -> Together:
        started = time.monotonic()
        replies: dict[str, Reply] = {}
        failure: Failure | None = None
        with ThreadPoolExecutor(max(len(refs), 1)) as pool:
            futures = [pool.submit(platform.invoke, ref, payload_for(ref), timeout_s) for ref in refs]
            for future in as_completed(futures):
                result = future.result()
                if isinstance(result, Reply):
                    replies[result.function] = result
                elif failure is None:
                    failure = result
                    for ref in refs:  # the others would wait for it until their deadline
                        platform.cancel(ref)
        return Together(replies, failure, time.monotonic() - started)

    def beside(self, platform: Platform, refs: Sequence[FunctionRef], payload_for: Callable[[FunctionRef], Payload],
               timeout_s: float) -> Callable[[], None]:
        """Start calls that go on beside a step's own and never fail it (announcements to functions the step does not
        use); returns what waits for them. Their results are dropped: a function that did not get its call works as
        if it had never been sent (coach/drivers/rendezvous.py)."""
        if not refs:
            return lambda: None
        pool = ThreadPoolExecutor(len(refs))
        for ref in refs:
            pool.submit(platform.invoke, ref, payload_for(ref), timeout_s)
        return lambda: pool.shutdown(wait=True)


class SequentialFanOut:
    """For platforms that answer at once with a computed duration: the step lasts as long as its slowest call."""

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        return [fn(item) for item in items]

    def beside(self, platform: Platform, refs: Sequence[FunctionRef], payload_for: Callable[[FunctionRef], Payload],
               timeout_s: float) -> Callable[[], None]:
        """The calls in turn, now (they answer at once); their results are dropped, as ThreadFanOut's are."""
        for ref in refs:
            platform.invoke(ref, payload_for(ref), timeout_s)
        return lambda: None

    def together(self, platform: Platform, refs: Sequence[FunctionRef], payload_for: Callable[[FunctionRef], Payload],
                 timeout_s: float) -> Together:
        replies: dict[str, Reply] = {}
        failure: Failure | None = None
        wall_s = 0.0
        for ref in refs:
            result = platform.invoke(ref, payload_for(ref), timeout_s)
            wall_s = max(wall_s, result.duration_s)
            if isinstance(result, Reply):
                replies[result.function] = result
            elif failure is None:
                failure = result
        return Together(replies, failure, wall_s)
