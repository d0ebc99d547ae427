"""/metrics (Prometheus text format, from prometheus-client) and /healthz, on one small HTTP server.

Each scheduler has its own registry, so that two in one process (the tests' two replicas) do not mix their
counts. /healthz answers 200 "ok" while every watch is alive, else 503 with what is wrong.
Side effects: a listening socket and one thread, between start() and stop().
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: Bind latency buckets, seconds: from a loopback apiserver (milliseconds) to a burst of thousands of pods
#: decided at once and waiting for a binder thread (tens of seconds).
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """The scheduler's counters and gauges."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.pods_bound = Counter("coach_scheduler_pods_bound", "Pods this replica bound (binding answered 201).",
                                  registry=r)
        self.pods_pending = Gauge("coach_scheduler_pods_pending", "Pods with Coach's schedulerName and no node.",
                                  registry=r)
        self.bind_latency = Histogram("coach_scheduler_bind_latency_seconds",
                                      "From the scheduling decision to the apiserver's 201 for the binding.",
                                      buckets=LATENCY_BUCKETS_S, registry=r)
        self.binding_conflicts = Counter("coach_scheduler_binding_conflicts",
                                         "Bindings answered 409: the pod was bound already; its node was adopted.",
                                         registry=r)
        self.binding_errors = Counter("coach_scheduler_binding_errors",
                                      "Bindings that failed otherwise (5xx, timeout, no connection) and were retried.",
                                      registry=r)
        self.relists = Counter("coach_scheduler_relists", "Lists after the first, e.g. after a 410 Gone.",
                               ["resource"], registry=r)
        self.is_leader = Gauge("coach_scheduler_is_leader", "1 while this replica holds the Lease.", registry=r)
        self.nodes = Gauge("coach_scheduler_nodes", "Nodes in placement (schedulable).", registry=r)
        self.events_dropped = Counter("coach_scheduler_events_dropped",
                                      "Events not written because the Event queue was full.", registry=r)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's name
        """Quiet: Prometheus scrapes every few seconds."""

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/metrics":
            self._send(200, generate_latest(self.server.metrics.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            problem = self.server.health()
            self._send(200 if problem is None else 503, b"ok" if problem is None else problem.encode(),
                       "text/plain; charset=utf-8")
        else:
            self._send(404, b"not found: try /metrics or /healthz", "text/plain; charset=utf-8")

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, metrics: Metrics, health: Callable[[], str | None]):
        self.metrics, self.health = metrics, health
        super().__init__(address, _Handler)


class MetricsServer:
    """Serves `metrics` and `health()` (None when healthy, else the problem) on host:port (0: a free port)."""

    def __init__(self, metrics: Metrics, health: Callable[[], str | None], host: str = "0.0.0.0", port: int = 10259):
        self._server = _Server((host, port), metrics, health)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="coach-scheduler-metrics", daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()
