"""The virtual-time driver: the same lifecycles, policy and placement as `coach run`, on a virtual clock. Nothing
sleeps.

Blocking work runs at once against a platform that reports computed durations (coach.platforms.virtual); its event
is scheduled at now + duration on a heap, and the clock jumps from event to event. coach.app.virtual_run composes
runs on it, for the run-level dl2 trainer (coach.dl2.learn_run), the drivers' contract suite and the benchmarks.
`coach simulate` does not: the cluster simulator (coach.simulator) has its own clock of scheduling rounds.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Sequence

from coach.drivers.core import Driver, Work
from coach.lifecycle import events as ev

TICK_S = 1.0  # how often, in virtual seconds, jobs waiting for their quorum see the scheduler again


class VirtualClock:
    """Virtual seconds since the Unix epoch; only the driver moves it."""

    def __init__(self, start_s: float = 0.0):
        self.t_s = start_s

    def now_s(self) -> float:
        return self.t_s


class VirtualDriver(Driver):
    def __init__(self, *args, start_s: float = 0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.clock = VirtualClock(start_s)
        self._heap: list[tuple[float, int, str, str, object]] = []
        self._seq = itertools.count()
        self._timer_at: dict[str, float] = {}
        self._tick_pending = False
        self._cut: set[int] = set()  # heap entries of work a stop cut short
        self.events = 0  # events delivered, for the benchmark

    def start_work(self, work: Work) -> None:
        result = work.run()
        now_s = self.clock.t_s
        self._push(now_s + work.duration_s(result), "work", work.job, (work, result, now_s))

    def set_timer(self, job: str, at_s: float) -> None:
        self._timer_at[job] = at_s
        self._push(at_s, "timer", job, None)

    def stop_at(self, at_s: float) -> None:
        """Send every job a stop at this virtual time (as Ctrl-C would)."""
        self._push(at_s, "stop", "", None)

    def _push(self, at_s: float, kind: str, job: str, payload: object) -> None:
        heapq.heappush(self._heap, (at_s, next(self._seq), kind, job, payload))

    def run(self, first_events: Sequence[tuple[str, ev.Event]]) -> None:
        for job, event in first_events:
            self.deliver(job, event)
        while self._heap:
            at_s, seq, kind, job, payload = heapq.heappop(self._heap)
            if seq in self._cut:
                continue
            self.clock.t_s = max(self.clock.t_s, at_s)
            self.events += 1
            if kind == "work":
                work, result, _ = payload
                event = work.to_event(result, self.clock.t_s)
                if event is not None:
                    self.deliver(job, event)
            elif kind == "timer":
                if self._timer_at.get(job) == at_s:
                    del self._timer_at[job]
                    self.timer(job)
            elif kind == "stop":
                self.stop_all()
                self._cut_in_flight()
            else:
                self._tick_pending = False
                self.poll_waiting()
            self._schedule_tick()

    def _cut_in_flight(self) -> None:
        """What closing the platform does live: work still in flight (an epoch) fails now, with the slot time
        it used so far; its own later event is dropped."""
        now_s = self.clock.t_s
        for at_s, seq, kind, job, payload in list(self._heap):
            if kind == "work" and at_s > now_s and seq not in self._cut and payload[0].cut is not None:
                work, result, started_s = payload
                self._cut.add(seq)
                self._push(now_s, "work", job, (work, work.cut(result, now_s - started_s), started_s))

    def _schedule_tick(self) -> None:
        """While a job waits for its quorum, let the scheduler see the pods again a virtual second later."""
        if self._tick_pending:
            return
        if self.placement_waited_for:
            self._tick_pending = True
            self._push(self.clock.t_s + TICK_S, "tick", "", None)
