"""The scheduling queue: an active heap ordered by the QueueSort plugin, a backoff heap ordered by time, and
parked pods waiting for a named event.

kube-scheduler's PriorityQueue keeps three sets: activeQ, backoffQ and unschedulablePods. Here a pod that
fails a scheduling attempt usually goes straight to the backoff heap with kube's per-pod exponential backoff
(1 s, 2 s, 4 s, 8 s, then 10 s) counted in passed-in time, and returns to the active heap once it has expired.
kube would instead keep it among the unschedulable pods until a cluster event that a plugin's queueing hint says
may help it; since most events that can help a pod here are a submit, a delete or time passing, retrying after
the backoff reaches the same placements, with a few more attempts. The exception is a pod that only its own
job's turn can help (HeadOfLine: behind the first job in line): it is parked under a gate (its job) until the
scheduler wakes that gate, as kube's queueing hints would, so that a long line costs nothing per pass.

Side effects: none (no clock; the caller passes `now_s`).
"""

from __future__ import annotations

import heapq
from typing import Callable

from scheduler_fork.framework import Pod, backoff_s


class SchedulingQueue:
    """Pending pods: active (ready to try now) or backing off until a given time."""

    def __init__(self, key: Callable[[Pod], tuple]) -> None:
        self._key = key  # the QueueSort plugin's key
        self._active: list[tuple[tuple, int, str]] = []  # (sort key, token, pod)
        self._backoff: list[tuple[float, tuple, int, str]] = []  # (expiry, sort key, token, pod)
        self._token: dict[str, int] = {}  # pod -> token of its live heap entry (others are stale)
        self._until: dict[str, float] = {}  # pod in backoff -> expiry time
        self._parked: dict[str, dict[str, tuple[float, tuple]]] = {}  # gate -> pod -> (backoff expiry, sort key)
        self._gate_of: dict[str, str] = {}  # parked pod -> its gate
        self._next = 0  # next token
        self.attempts: dict[str, int] = {}  # pod -> failed scheduling attempts so far

    def __len__(self) -> int:
        return len(self._token)

    def __contains__(self, name: object) -> bool:
        return name in self._token

    def add(self, pod: Pod) -> None:
        """A new pod is active at once."""
        self._push_active(pod.name, self._key(pod))

    def requeue(self, pod: Pod, now_s: float) -> float:
        """A failed attempt: back off; returns the time the pod becomes active again."""
        until = self._failed(pod.name, now_s)
        self._push_backoff(pod.name, self._key(pod), until)
        return until

    def park(self, pod: Pod, now_s: float, gate: str) -> None:
        """A failed attempt that only `wake(gate)` can help: keep the pod out of the heaps until then."""
        until = self._failed(pod.name, now_s)
        self._new_token(pod.name)  # its heap entries, if any, become stale
        self._until.pop(pod.name, None)
        self._parked.setdefault(gate, {})[pod.name] = (until, self._key(pod))
        self._gate_of[pod.name] = gate

    def parked(self, gate: str) -> bool:
        """True when some pod is parked under `gate`."""
        return gate in self._parked

    def is_parked(self, name: str) -> bool:
        return name in self._gate_of

    def wake(self, gate: str, now_s: float) -> None:
        """The pods parked under `gate` go back: active if their backoff has expired by `now_s`, else backing off."""
        for name, (until, key) in self._parked.pop(gate, {}).items():
            del self._gate_of[name]
            if until <= now_s:
                self._push_active(name, key)
            else:
                self._push_backoff(name, key, until)

    def wake_all(self, now_s: float) -> None:
        for gate in list(self._parked):
            self.wake(gate, now_s)

    def flush(self, now_s: float) -> None:
        """Move every pod whose backoff has expired by `now_s` to the active heap."""
        backoff = self._backoff
        while backoff and backoff[0][0] <= now_s:
            _, key, token, name = heapq.heappop(backoff)
            if self._token.get(name) == token:
                del self._until[name]
                self._push_active(name, key)

    def pop(self) -> str | None:
        """The active pod with the smallest sort key, or None when no pod is active."""
        active = self._active
        while active:
            _, token, name = heapq.heappop(active)
            if self._token.get(name) == token:
                del self._token[name]
                return name
        return None

    def remove(self, name: str) -> None:
        """Forget a pod (deleted, or scheduled); its heap entries become stale."""
        self._token.pop(name, None)
        self._until.pop(name, None)
        gate = self._gate_of.pop(name, None)
        if gate is not None:
            parked = self._parked[gate]
            del parked[name]
            if not parked:
                del self._parked[gate]

    def forget_attempts(self, name: str) -> None:
        self.attempts.pop(name, None)

    def backoff_until(self, name: str) -> float | None:
        """When a backing-off pod becomes active again; None if it is active, parked or not queued."""
        return self._until.get(name)

    def _new_token(self, name: str) -> int:
        self._next += 1
        self._token[name] = self._next
        return self._next

    def _failed(self, name: str, now_s: float) -> float:
        """Count a failed attempt; when the pod's backoff after it ends."""
        attempts = self.attempts.get(name, 0) + 1
        self.attempts[name] = attempts
        return now_s + backoff_s(attempts)

    def _push_backoff(self, name: str, key: tuple, until: float) -> None:
        token = self._new_token(name)
        self._until[name] = until
        heapq.heappush(self._backoff, (until, key, token, name))

    def _push_active(self, name: str, key: tuple) -> None:
        token = self._new_token(name)
        heapq.heappush(self._active, (key, token, name))
