"""Invoke several functions at once and collect their replies: one epoch's roles, or a batch of warm-ups.

The first failure cancels the others, so no role waits for a dead peer until its deadline. Side effects: the
invocations themselves (through the Platform).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from coach.domain.invocation import Failure, FunctionRef, Platform, Reply


@dataclass(frozen=True)
class Together:
    replies: Mapping[str, Reply]  # function name -> reply, for every function that answered 200
    failure: Failure | None  # the first failure, if any (the others were cancelled then)
    wall_s: float  # from the first request sent to the last reply received


def invoke_together(platform: Platform, refs: Sequence[FunctionRef],
                    payload_for: Callable[[FunctionRef], Mapping], timeout_s: float) -> Together:
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
