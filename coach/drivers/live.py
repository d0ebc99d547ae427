"""The live driver: lifecycles over real ports, with the wall clock, threads for blocking work, and signals.

One loop thread delivers every event and carries every command out, so lifecycles, the policy and the
placement are only ever touched from it; deploys, epochs and removals run on a thread pool and come back as
events. A stop (Ctrl-C, SIGTERM, `stop_event`) closes the platform, so in-flight epochs fail at once and every
job records `interrupted`. Other threads reach the loop only through `call_soon` (a server adds and stops jobs so).
`OpenDriver` keeps running when every job is done, until its stop event: a server's run, to which jobs arrive.
Side effects: through the ports; threads.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Sequence

from coach.drivers.core import Driver, Work
from coach.lifecycle import events as ev

POLL_S = 0.2  # how often jobs that wait for their quorum see the scheduler again


class WallClock:
    """Seconds since the Unix epoch."""

    def now_s(self) -> float:
        return time.time()


class LiveDriver(Driver):
    def __init__(self, *args, stop_event: threading.Event | None = None, threads: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.stop_event = stop_event or threading.Event()
        self._stopping = False  # the stop event has been acted on
        self.clock = WallClock()
        # finished work (Work, its future), or a call another thread asked for (None, (callable, its future))
        self._done: queue.SimpleQueue[tuple[Work | None, Future | tuple]] = queue.SimpleQueue()
        self._timers: list[tuple[float, int, str]] = []
        self._timer_at: dict[str, float] = {}
        self._seq = itertools.count()
        self._inflight = 0
        self._pool = ThreadPoolExecutor(threads or max(4, 3 * len(self.jobs)), thread_name_prefix="coach-work")

    def call_soon(self, call: Callable[[], object]) -> Future:
        """Run `call` on the loop thread, from any thread; its future holds what it returned or raised."""
        future: Future = Future()
        self._done.put((None, (call, future)))
        return future

    def may_end(self) -> bool:
        """True when the loop may return: every job done and no work in flight."""
        return self.finished and self._inflight == 0

    def start_work(self, work: Work) -> None:
        self._inflight += 1
        future = self._pool.submit(work.run)
        future.add_done_callback(lambda done: self._done.put((work, done)))

    def set_timer(self, job: str, at_s: float) -> None:
        self._timer_at[job] = at_s
        heapq.heappush(self._timers, (at_s, next(self._seq), job))

    def run(self, first_events: Sequence[tuple[str, ev.Event]]) -> None:
        """Deliver the first events (Start or Resume, in submission order), then run until every job is done."""
        try:
            for job, event in first_events:
                self.deliver(job, event)
            next_poll_s = time.monotonic() + POLL_S
            while not self.may_end():
                self._stop_if_asked()
                self._wait_for_work(min(POLL_S, self._until_next_timer_s()))
                self._fire_timers()
                if time.monotonic() >= next_poll_s:
                    next_poll_s = time.monotonic() + POLL_S
                    self.poll_waiting()
        finally:
            self._pool.shutdown(wait=True)
            self._refuse_calls()

    def _stop_if_asked(self) -> None:
        """Once the stop event is set (a signal, a server closing): close the platform, so that in-flight epochs
        fail at once, and ask every job to stop. Checked before each result is delivered too, so that a failure
        the stop itself caused (a host that the same Ctrl-C ended) reaches a job that already knows it is
        interrupted: never a `retry` line, nor a `failed` end."""
        if self.stop_event.is_set() and not self._stopping:
            self._stopping = True
            self.ports.platform.close()
            self.stop_all()

    def _refuse_calls(self) -> None:
        """Calls that came too late for the loop fail, so that no caller waits for ever."""
        while True:
            try:
                work, item = self._done.get_nowait()
            except queue.Empty:
                return
            if work is None and item[1].set_running_or_notify_cancel():
                item[1].set_exception(RuntimeError("the run has stopped"))

    def _until_next_timer_s(self) -> float:
        return max(self._timers[0][0] - self.now_s(), 0.0) if self._timers else POLL_S

    def _wait_for_work(self, timeout_s: float) -> None:
        try:
            work, future = self._done.get(timeout=max(timeout_s, 0.001))
        except queue.Empty:
            return
        if work is None:
            self._answer(*future)
            return
        self._inflight -= 1
        self._stop_if_asked()
        try:
            result = future.result()
        except Exception as error:  # a bug in a port: the job stops with its name, the run goes on
            self.fail(work.job, error)
            self.settle()
            return
        event = work.to_event(result, self.now_s())
        if event is not None:
            self.deliver(work.job, event)

    def _fire_timers(self) -> None:
        now_s = self.now_s()
        while self._timers and self._timers[0][0] <= now_s:
            at_s, _, job = heapq.heappop(self._timers)
            if self._timer_at.get(job) == at_s:
                del self._timer_at[job]
                self.timer(job)

    def _answer(self, call: Callable[[], object], future: Future) -> None:
        """Another thread's call, on the loop thread; a failing one fails its caller, never the run."""
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(call())
        except Exception as error:
            future.set_exception(error)


class OpenDriver(LiveDriver):
    """A live driver that waits for more jobs when every job is done; it returns once its stop event is set
    and the jobs it stopped have ended."""

    def may_end(self) -> bool:
        return self.stop_event.is_set() and super().may_end()
