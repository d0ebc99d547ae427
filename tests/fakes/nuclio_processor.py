"""The container of a fake Nuclio function's pod: what Nuclio's processor does for a Python function, on loopback.

One process per pod. It forks one wrapper process per worker of the function's HTTP trigger (`--workers`, the
trigger's `numWorkers`), each of which loads the handler and calls `init_context` on its own
(tests/fakes/nuclio_wrapper.py), then serves HTTP on 127.0.0.1 and hands each request to a free wrapper: the one
free longest first, as Nuclio's fixed worker pool does, waiting up to `--availability-timeout-ms` (the trigger's
`workerAvailabilityTimeoutMilliseconds`, default 10 s) and answering 503 when none came free. A wrapper handles one
event at a time. A wrapper that ends while the processor runs ends the processor at once with code 1 (Nuclio's
processor panics: "Wrapper process for worker N exited unexpectedly"), which drops every open connection.

SIGTERM (the kubelet stopping the pod): stop taking requests, pass SIGTERM to every wrapper (each finishes its
current event), leave when they have. The process leads a process group of its own, so that the kubelet can SIGKILL
the pod's every process (wrappers, their epoch children) at the end of the grace period.

Started by the dashboard's kubelet through Coach's template (coach.platforms.template, entry module this one):
`main(["--handler", H, "--name", N, "--workers", "2", "--parent-pid", P])`; prints `READY <port> <pid>,<pid>`
(the wrappers') on stdout.
Side effects: processes, a listening socket, the handler's own.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import os
import queue
import signal
import socket
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from coach.platforms.host import die_with_parent
from tests.fakes import nuclio_wrapper

DEFAULT_AVAILABILITY_TIMEOUT_MS = 10_000  # Nuclio's DefaultWorkerAvailabilityTimeoutMilliseconds
MAX_BODY_BYTES = 64 * 1024 * 1024
DRAIN_TIMEOUT_S = 5.0  # how long a stopping processor waits for the answers of the events its wrappers finished
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "date", "server"})


class Worker:
    """One wrapper process and the processor's end of its socket."""

    def __init__(self, index: int, pid: int, sock: socket.socket):
        self.index = index
        self.pid = pid
        self.sock = sock


def fork_workers(handler: str, name: str, count: int) -> list[Worker]:
    """Fork `count` wrappers (from this single-threaded process) and wait until each has run init_context."""
    workers = []
    parent_pid = os.getpid()
    for index in range(count):
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            ours.close()
            for other in workers:
                other.sock.close()
            nuclio_wrapper.run(theirs, handler, name, index, parent_pid)
        theirs.close()
        workers.append(Worker(index, pid, ours))
    for worker in workers:
        hello = nuclio_wrapper.recv_frame(worker.sock)
        if not hello or not hello.get("ready"):
            raise RuntimeError(f"wrapper process for worker {worker.index} failed to start (see its traceback above)")
    return workers


class Processor:
    """The HTTP side: requests to free workers; ends the process when a wrapper ends unexpectedly."""

    def __init__(self, workers: list[Worker], availability_timeout_s: float):
        self.workers = workers
        self.availability_timeout_s = availability_timeout_s
        self.free: queue.Queue[Worker] = queue.Queue()
        for worker in workers:
            self.free.put(worker)
        self.stopping = threading.Event()
        self.answering = threading.Semaphore(0)  # released once per request answered, for `drained`
        self.taken = 0  # requests taken (under `lock`)
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.server.daemon_threads = True

    def watch(self) -> None:
        """Reap the wrappers; one that ends before the processor is told to stop ends the processor (code 1)."""
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                return
            if self.stopping.is_set():
                continue
            index = next((w.index for w in self.workers if w.pid == pid), None)
            if index is None:
                continue
            sys.stderr.write(f"Wrapper process for worker {index} exited unexpectedly with: exit status "
                             f"{os.waitstatus_to_exitcode(status)}\n")
            sys.stderr.flush()
            os._exit(1)

    def stop(self) -> None:
        """SIGTERM: no new requests; every wrapper finishes its event and leaves; then this process leaves."""
        self.stopping.set()
        threading.Thread(target=self.server.shutdown, daemon=True).start()
        for worker in self.workers:
            try:
                os.kill(worker.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def drained(self, timeout_s: float) -> None:
        """Wait (at most `timeout_s`) until every request taken has been answered."""
        with self.lock:
            taken, self.taken = self.taken, 0
        for _ in range(taken):
            if not self.answering.acquire(timeout=timeout_s):
                return

    def dispatch(self, frame: dict) -> dict:
        """The response frame of one request, from the first free worker."""
        try:
            worker = self.free.get(timeout=self.availability_timeout_s)
        except queue.Empty:
            return {"status": 503, "content_type": "text/plain", "headers": {},
                    "body": base64.b64encode(b"Worker unavailable").decode()}
        try:
            nuclio_wrapper.send_frame(worker.sock, frame)
            reply = nuclio_wrapper.recv_frame(worker.sock)
        except OSError:
            reply = None
        if reply is None:  # the wrapper died: `watch` ends the process; wait for it rather than answer
            threading.Event().wait()
        self.free.put(worker)
        return reply

    def _handler_class(self):
        processor = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):  # quiet: the handler's own log is what matters
                pass

            def _serve(self):
                with processor.lock:
                    processor.taken += 1
                try:
                    self._answer()
                finally:
                    processor.answering.release()

            def _answer(self):
                length = self.headers.get("Content-Length") or "0"
                if not length.isdigit() or int(length) > MAX_BODY_BYTES:
                    self.close_connection = True
                    self._send(413 if length.isdigit() else 400, b"", "text/plain", {})
                    return
                body = self.rfile.read(int(length))
                if processor.stopping.is_set():
                    self.close_connection = True
                    self._send(503, b"Processor is stopping", "text/plain", {})
                    return
                reply = processor.dispatch({
                    "method": self.command, "path": self.path, "headers": dict(self.headers.items()),
                    "content_type": self.headers.get("Content-Type") or "", "body": base64.b64encode(body).decode()})
                self._send(reply["status"], base64.b64decode(reply["body"]), reply["content_type"], reply["headers"])

            def _send(self, status: int, body: bytes, content_type: str, headers: dict) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for key, value in headers.items():
                    if key.lower() not in _HOP_BY_HOP and key.lower() != "content-type":
                        self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        return Handler


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tests.fakes.nuclio_processor", description=__doc__.splitlines()[0])
    parser.add_argument("--handler", required=True)
    parser.add_argument("--name", default="function")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--parent-pid", type=int, default=os.getppid())
    parser.add_argument("--availability-timeout-ms", type=int, default=DEFAULT_AVAILABILITY_TIMEOUT_MS)
    args = parser.parse_args(argv)
    die_with_parent(args.parent_pid)
    os.setpgid(0, 0)  # the pod's processes are one group, SIGKILLed together at the end of the grace period
    # (in the dashboard's session still, so that whoever started the stack sees them)
    tempfile.tempdir = None  # the pod's TMPDIR (its own temp dir, as a container's /tmp), not the template's
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)  # until the wrappers exist: they must not inherit a handler of ours
    module = args.handler.partition(":")[0]
    try:
        importlib.import_module(module)  # once here rather than in every wrapper (each still runs init_context)
    except Exception:  # noqa: BLE001 - each wrapper fails on it and logs it
        pass
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        workers = fork_workers(args.handler, args.name, max(1, args.workers))
    except RuntimeError as error:
        print(str(error), file=sys.stderr, flush=True)
        return 1
    processor = Processor(workers, args.availability_timeout_ms / 1000)
    signal.signal(signal.SIGTERM, lambda *_: processor.stop())
    threading.Thread(target=processor.watch, name="wrapper-watch", daemon=True).start()
    serving = threading.Thread(target=processor.server.serve_forever, name="http", daemon=True)
    serving.start()
    pids = ",".join(str(worker.pid) for worker in workers)
    print(f"READY {processor.server.server_address[1]} {pids}", flush=True)
    while serving.is_alive():
        serving.join(0.5)  # the main thread must stay free to run the SIGTERM handler
    for worker in workers:  # told to stop: wait for every wrapper to finish its event
        try:
            os.waitpid(worker.pid, 0)
        except ChildProcessError:
            pass
    processor.drained(DRAIN_TIMEOUT_S)  # and for their answers to be sent
    return 0


if __name__ == "__main__":
    sys.exit(main())
