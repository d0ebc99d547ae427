"""Leader election with a coordination.k8s.io/v1 Lease, so that of several replicas only one binds.

The rules (client-go's leaderelection, reduced to what Coach needs):
- acquire the Lease when it does not exist (create), when its holder is empty, or when it has expired: a PUT
  carrying the resourceVersion that was read, so that of two replicas racing for it one gets 409 and stays a
  follower. Expired is judged as client-go judges it, by this replica's own monotonic clock: the Lease's record
  (holder, renewTime, transitions) last changed when this replica first saw it so, and it expires
  leaseDurationSeconds after that sighting. The renewTime written by another machine's clock is never compared
  with this machine's, so clock skew between replicas cannot make a live leader's Lease look expired;
- the holder renews every lease_duration/3 the same way;
- the holder counts itself leader only until `renew deadline` = 2/3 of the lease duration after the start of its
  last successful renewal, by its own monotonic clock. A follower cannot take the Lease before
  renewTime + duration, which is written at the start of that renewal, so the old leader has stopped binding
  a third of the duration before anyone else may start. A 409 on renewal (someone else took it) ends the
  leadership at once;
- on stop, the holder writes an empty holderIdentity so that a follower takes over at its next try.

A thread does the renewing; `leads_until_s()` is what the binder asks right before every binding.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from kubernetes import client

from coach.domain.kube import LEASE_NAME
from coach.kube_scheduler.objects import parse_time_s, rfc3339
from coach.kube_scheduler.rest import finish, read_json

log = logging.getLogger(__name__)

#: A follower retries at least this often (kube-scheduler's retry period), so a released Lease is taken fast.
MAX_RETRY_S = 2.0


class LeaseElector:
    """Holds or waits for the Lease; see the module docstring."""

    def __init__(self, api: client.ApiClient, namespace: str, identity: str, lease_duration_s: float = 15.0,
                 on_change: Callable[[bool], None] = lambda leader: None, name: str = LEASE_NAME):
        if lease_duration_s < 1:
            raise ValueError(f"lease duration must be at least 1 s, got {lease_duration_s:g}")
        self._api = client.CoordinationV1Api(api)
        self.namespace, self.identity, self.name = namespace, identity, name
        self.lease_duration_s = float(lease_duration_s)
        self.renew_deadline_s = self.lease_duration_s * 2 / 3  # leadership lapses this long after a renewal began
        self.renew_every_s = self.lease_duration_s / 3
        self.retry_s = min(MAX_RETRY_S, self.renew_every_s)
        self._on_change = on_change  # told True when this replica becomes leader, False when it stops being one
        self._valid_until = 0.0  # monotonic time until which this replica is leader
        self._holding = False  # this replica holds the Lease (as of its last try)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="coach-scheduler-lease", daemon=True)
        self.transitions = 0  # times this replica became leader
        self._renewed = False  # the last attempt wrote the Lease
        self._observed: tuple | None = None  # the Lease's record as last read (holder, renewTime, transitions)
        self._observed_at = 0.0  # monotonic time when this replica first saw that record

    def is_leader(self) -> bool:
        """True while this replica holds the Lease and its last renewal is recent enough (see the docstring)."""
        return self._holding and time.monotonic() < self._valid_until

    def leads_until_s(self) -> float:
        """The monotonic time until which this replica leads (0 when it does not): what a binder checks."""
        with self._lock:
            return self._valid_until if self._holding else 0.0

    def start(self) -> LeaseElector:
        self._thread.start()
        return self

    def stop(self, release: bool = True) -> None:
        """Stop renewing; with `release`, give the Lease up (empty holderIdentity) if this replica holds it."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        was = self._holding
        self._lose()
        if release and was:
            try:
                lease = self._read()
                spec = lease.get("spec") or {}
                if lease and spec.get("holderIdentity") == self.identity:
                    now_s = time.time()
                    spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=rfc3339(now_s, micro=True))
                    finish(self._api.replace_namespaced_lease(self.name, self.namespace, lease, _preload_content=False,
                                                              _request_timeout=self._timeout()))
            except Exception as error:  # it expires on its own
                log.warning("could not release Lease %s/%s: %s", self.namespace, self.name, error)

    # ---- the thread ------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            leader = self.try_once()
            self._stop.wait(self.renew_every_s if leader and self._renewed else self.retry_s)

    def try_once(self) -> bool:
        """One acquire-or-renew attempt; True when this replica is leader afterwards."""
        self._renewed = False
        started = time.monotonic()
        now_s = time.time()
        try:
            lease = self._read()
            if lease is None:
                self._create(now_s)
            else:
                spec = lease.setdefault("spec", {})
                holder = spec.get("holderIdentity") or ""
                self._observe(spec, started)
                if holder != self.identity and holder and not self._expired(spec, started):
                    self._lose()  # someone else holds it
                    return False
                if holder != self.identity:
                    spec["acquireTime"] = rfc3339(now_s, micro=True)
                    spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
                spec.update(holderIdentity=self.identity, renewTime=rfc3339(now_s, micro=True),
                            leaseDurationSeconds=max(1, round(self.lease_duration_s)))
                finish(self._api.replace_namespaced_lease(self.name, self.namespace, lease, _preload_content=False,
                                                          _request_timeout=self._timeout()))
        except client.ApiException as error:
            if error.status == 409:  # another replica wrote it first
                self._lose()
            else:
                log.warning("Lease %s/%s: HTTP %s", self.namespace, self.name, error.status)
            return self.is_leader()
        except Exception as error:  # the apiserver is unreachable: leadership lapses by itself at the deadline
            log.warning("Lease %s/%s: %s", self.namespace, self.name, type(error).__name__)
            return self.is_leader()
        self._hold(started)
        self._renewed = True
        return True

    def _read(self) -> dict | None:
        try:
            response = self._api.read_namespaced_lease(self.name, self.namespace, _preload_content=False,
                                                       _request_timeout=self._timeout())
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return read_json(response)

    def _create(self, now_s: float) -> None:
        stamp = rfc3339(now_s, micro=True)
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": max(1, round(self.lease_duration_s)),
                         "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 0}}
        finish(self._api.create_namespaced_lease(self.namespace, body, _preload_content=False,
                                                 _request_timeout=self._timeout()))

    def _observe(self, spec: dict, now_mono_s: float) -> None:
        """Note when the Lease's record was first seen as it is now (client-go's observedTime)."""
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, now_mono_s

    def _expired(self, spec: dict, now_mono_s: float) -> bool:
        """The holder has not renewed for leaseDurationSeconds of this replica's clock (a record without a
        usable duration or renewTime has expired)."""
        duration_s = spec.get("leaseDurationSeconds")
        if parse_time_s(spec.get("renewTime")) is None or isinstance(duration_s, bool) \
                or not isinstance(duration_s, (int, float)):
            return True
        return self._observed_at + duration_s < now_mono_s

    def _timeout(self) -> float:
        return max(0.5, self.renew_every_s)

    def _hold(self, started: float) -> None:
        with self._lock:
            became = not self.is_leader()
            self._holding = True
            self._valid_until = started + self.renew_deadline_s
        if became:
            self.transitions += 1
            log.info("%s is now the leader (Lease %s/%s)", self.identity, self.namespace, self.name)
            self._on_change(True)

    def _lose(self) -> None:
        with self._lock:
            was = self.is_leader()
            self._holding = False
            self._valid_until = 0.0
        if was:
            log.info("%s is no longer the leader", self.identity)
            self._on_change(False)
