"""The fake kube-apiserver on loopback HTTP/1.1: keep-alive for ordinary requests, chunked streams for watches,
one thread per connection. Side effects: a listening socket and its threads, between start() and stop().

`stop()` leaves nothing behind: it ends every watch, closes every client connection and joins every thread.
"""

from __future__ import annotations

import email.utils
import json
import select
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.fakes.kube_apiserver import watch
from tests.fakes.kube_apiserver.api import Api, Reply, WatchRequest
from tests.fakes.kube_apiserver.errors import ApiError, bad_request, too_large
from tests.fakes.kube_apiserver.store import Store, utc_now

MAX_BODY_BYTES = 3 * 1024 * 1024  # the apiserver's own request size limit
MAX_HEADER_LINE_BYTES = 64 * 1024
MAX_HEADERS = 100


#: One encoder for every answer (json.dumps with separators builds a new one per call).
COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))
_PHRASES = {status.value: status.phrase for status in HTTPStatus}
_date = [0, ""]  # the second and its HTTP date: formatted once a second, not once per answer


def _http_date() -> str:
    now_s = int(time.time())
    if _date[0] != now_s:
        _date[:] = [now_s, email.utils.formatdate(now_s, usegmt=True)]
    return _date[1]


class _Headers(dict):
    """Request headers by lower-cased name (a repeated header's values joined by ", ")."""

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(name.lower(), default)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "coach-fake-apiserver"
    wbufsize = 64 * 1024  # headers and body leave in one send; handle_one_request flushes after each request
    server: "_Server"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def parse_request(self) -> bool:
        """The request line and headers, parsed directly: the standard library's email-based header parser
        costs about a third of a request here. Malformed requests get a 400 Status and a closed connection."""
        self.command = None
        self.close_connection = True
        self.request_version = "HTTP/1.1"  # so that an error answer has a status line
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = self.requestline.split()
        if len(words) != 3 or words[2] not in ("HTTP/1.0", "HTTP/1.1"):
            return self._refuse(400, f"bad request line {self.requestline[:100]!r}")
        self.command, self.path, self.request_version = words
        headers = _Headers()
        for _ in range(MAX_HEADERS + 1):
            line = self.rfile.readline(MAX_HEADER_LINE_BYTES + 1)
            if len(line) > MAX_HEADER_LINE_BYTES:
                return self._refuse(431, "a request header line is too long")
            if line in (b"\r\n", b"\n", b""):
                break
            name, colon, value = line.decode("iso-8859-1").partition(":")
            if not colon or not name.strip():
                return self._refuse(400, f"malformed request header {line[:100]!r}")
            key, value = name.strip().lower(), value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        else:
            return self._refuse(431, f"more than {MAX_HEADERS} request headers")
        self.headers = headers  # type: ignore[assignment]
        connection = (headers.get("Connection") or "").lower()
        self.close_connection = connection == "close" or (self.request_version == "HTTP/1.0"
                                                          and connection != "keep-alive")
        if (headers.get("Expect") or "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.wfile.flush()
        return True

    def _refuse(self, code: int, message: str) -> bool:
        self.close_connection = True
        reason = "BadRequest" if code == 400 else "RequestHeaderFieldsTooLarge"
        self._reply(Reply(code, ApiError(code, reason, message).status()))
        return False

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Quiet: a fake serving thousands of requests a second must not write a line for each."""

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_OPTIONS(self) -> None:
        self._serve("OPTIONS")

    def _read_body(self) -> bytes:
        limit = self.server.max_body_bytes
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks, total = [], 0
            while True:
                size_line = self.rfile.readline(64)
                try:
                    size = int(size_line.split(b";")[0].strip() or b"x", 16)
                except ValueError:
                    self.close_connection = True
                    raise bad_request("malformed chunked request body")
                if size == 0:
                    while self.rfile.readline(1024).strip():  # trailers
                        pass
                    return b"".join(chunks)
                total += size
                if total > limit:
                    self.close_connection = True
                    raise too_large(limit)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(8)
        length_text = self.headers.get("Content-Length") or "0"
        try:
            length = int(length_text)
            if length < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            raise bad_request(f"Content-Length is not a size: {length_text!r}")
        if length > limit:
            self.close_connection = True  # the body stays unread, so this connection cannot carry another request
            raise too_large(limit)
        return self.rfile.read(length) if length else b""

    def _serve(self, method: str) -> None:
        try:
            body = self._read_body()
            outcome = self.server.api.handle(method, self.path, self.headers, body)
        except ApiError as exc:
            outcome = Reply(exc.code, exc.status())
        except Exception as exc:  # a bug in the fake: answer like the apiserver would, never with a traceback
            outcome = Reply(500, ApiError(500, "InternalError", f"{type(exc).__name__}: {exc}").status())
        try:
            if isinstance(outcome, WatchRequest):
                self._stream(outcome)
            else:
                self._reply(outcome, head_only=method == "HEAD")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _reply(self, reply: Reply, head_only: bool = False) -> None:
        """The status line, the headers and the body in one write, formatted here: send_response and send_header
        cost as much as the rest of a binding's handling."""
        if isinstance(reply.body, str):
            data = reply.body.encode()
        else:
            data = COMPACT_JSON.encode(reply.body).encode()
        head = (f"HTTP/1.1 {reply.code} {_PHRASES.get(reply.code, '')}\r\nContent-Type: {reply.content_type}\r\n"
                f"Cache-Control: no-cache, private\r\nDate: {_http_date()}\r\nContent-Length: {len(data)}\r\n"
                f"{'Connection: close' + chr(13) + chr(10) if self.close_connection else ''}\r\n").encode("latin-1")
        self.wfile.write(head if head_only else head + data)

    def _client_left(self) -> bool:
        """True when the client closed its end (readable with nothing to read)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _stream(self, request: WatchRequest) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for batch in watch.stream(self.server.api.store, request, self.server.bookmark_interval_s):
            if batch:
                data = b"".join(batch)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            elif self._client_left():
                self.close_connection = True
                return
        self.wfile.write(b"0\r\n\r\n")


class _Server(ThreadingHTTPServer):
    """A threading HTTP server that knows its connections, so that stop() can close them and join every thread."""

    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], api: Api, bookmark_interval_s: float, max_body_bytes: int):
        self.api = api
        self.bookmark_interval_s = bookmark_interval_s
        self.max_body_bytes = max_body_bytes
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: a client that vanishes mid-request is not the server's error."""

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class FakeApiServer:
    """A kube-apiserver on loopback that the official client and kubectl talk to; see the package docstring."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, watch_history: int = 10_000,
                 bookmark_interval_s: float = 1.0, max_body_bytes: int = MAX_BODY_BYTES,
                 graceful_pod_deletion: bool = False):
        """`graceful_pod_deletion`: a bound, running pod deleted with a grace period stays, Terminating, until a
        delete with gracePeriodSeconds=0 (as on a real apiserver, where the kubelet sends that one); off, every
        delete removes at once."""
        if bookmark_interval_s <= 0:
            raise ValueError(f"bookmark_interval_s must be positive, not {bookmark_interval_s}")
        self._address = (host, port)
        self.store = Store(watch_history)
        self._bookmark_interval_s = bookmark_interval_s
        self._max_body_bytes = max_body_bytes
        self._graceful_pod_deletion = graceful_pod_deletion
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.api: Api | None = None  # after start(); its `binding_attempts` are what tests count

    @property
    def binding_attempts(self) -> list[tuple[str, str, int]]:
        """(namespace, pod, HTTP status) of every binding POST so far: a second 201 for one pod never happens,
        and a scheduler that adopts what is bound never even tries (no 409s)."""
        return list(self.api.binding_attempts) if self.api is not None else []

    def start(self) -> "FakeApiServer":
        if self._server is not None:
            return self
        api = self.api = Api(self.store, lambda: f"{self.host}:{self.port}", utc_now,
                             graceful_pod_deletion=self._graceful_pod_deletion)
        self._server = _Server(self._address, api, self._bookmark_interval_s, self._max_body_bytes)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"fake-apiserver-{self.port}", daemon=True)
        self._thread.start()
        return self

    @property
    def host(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake apiserver is not started")
        return self._server.server_address[0]

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the fake apiserver is not started")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        """A kubeconfig whose current context points at this server, without credentials."""
        path = Path(path)
        config = {"apiVersion": "v1", "kind": "Config", "preferences": {},
                  "clusters": [{"name": "coach-fake", "cluster": {"server": self.url}}],
                  "users": [{"name": "coach-fake", "user": {}}],
                  "contexts": [{"name": "coach-fake",
                                "context": {"cluster": "coach-fake", "user": "coach-fake", "namespace": namespace}}],
                  "current-context": "coach-fake"}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def compact(self) -> None:
        """Forget the watch history: a watch from any earlier resourceVersion now gets 410 Expired."""
        self.store.compact()

    def stop(self) -> None:
        """End watches, close connections, join threads. Safe to call twice."""
        server, self._server = self._server, None
        if server is None:
            return
        self.store.close()
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> "FakeApiServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
