"""The webhook of `coach serve --notify URL`: a JSON POST when a job ends (reached its target, ran out of budget or
epochs, failed, was stopped), so that nobody has to watch the page to know.

Deliveries run on a thread of their own, from a bounded queue: a slow or dead receiver never holds up the
driver, and when MAX_QUEUED deliveries wait the oldest is dropped (and counted) rather than memory growing.
Each delivery is tried up to TRIES times, with a doubling pause between tries; a 2xx answer is a delivery.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable

import requests

from coach.net.http import Limits, bounded_request

MAX_QUEUED = 100
TRIES = 4
FIRST_PAUSE_S = 0.5
TIMEOUT_S = 5.0  # per read; a delivery ends within twice this, its answer read up to MAX_ANSWER_BYTES
MAX_ANSWER_BYTES = 64 << 10  # the webhook's answer is not used: only its status
LIMITS = Limits(TIMEOUT_S, TIMEOUT_S, 2 * TIMEOUT_S, MAX_ANSWER_BYTES)


class Notifier:
    def __init__(self, url: str, tries: int = TRIES, first_pause_s: float = FIRST_PAUSE_S,
                 max_queued: int = MAX_QUEUED, on_outcome: Callable[[str], None] | None = None):
        self.url, self.tries, self.first_pause_s = url, tries, first_pause_s
        self._queue: collections.deque[dict] = collections.deque(maxlen=max_queued)
        self._wake = threading.Condition()
        self._closed = False
        self.dropped = 0  # deliveries pushed out of a full queue
        self.on_outcome = on_outcome or (lambda outcome: None)  # "delivered" or "failed", for the metrics
        self._thread = threading.Thread(target=self._deliver_all, name="coach-serve-notify", daemon=True)
        self._thread.start()

    def send(self, payload: dict) -> None:
        """Queue one delivery; never blocks."""
        with self._wake:
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1
                self.on_outcome("dropped")
            self._queue.append(payload)
            self._wake.notify()

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued (within `timeout_s`), then stop."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout_s)

    def _deliver_all(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._closed:
                    self._wake.wait()
                if not self._queue:
                    return
                payload = self._queue.popleft()
            self.on_outcome("delivered" if self._deliver(payload) else "failed")

    def _deliver(self, payload: dict) -> bool:
        pause_s = self.first_pause_s
        for attempt in range(1, self.tries + 1):
            try:
                answer = bounded_request("POST", self.url, LIMITS, json={**payload, "attempt": attempt})
                if 200 <= answer.status_code < 300:
                    return True
            except requests.RequestException:
                pass
            if attempt < self.tries:
                time.sleep(pause_s)
                pause_s *= 2
        return False


def ended_payload(run_id: str, job: str, ending: dict | None, outcome: dict) -> dict:
    """What the webhook says of a job that ended: its run, its end in words, figures of its outcome."""
    ending = ending or {}
    return {"event": "job.ended", "run_id": run_id, "job": job, "stop_reason": outcome.get("stop_reason"),
            "kind": ending.get("kind"), "words": ending.get("words"), "epochs": outcome.get("epochs"),
            "final_loss": outcome.get("final_loss"), "final_val_loss": outcome.get("final_val_loss"),
            "cost": outcome.get("total_cost"), "budget": outcome.get("budget"), "jct_s": outcome.get("jct_s"),
            "finished": outcome.get("finished")}
