"""HTTP requests with limits: a connect and a read timeout, a wall-clock deadline, and a largest answer.

Why this module exists: `requests` bounds neither the size of an answer nor the time it takes — its read timeout
is per socket read, so a server that drips a byte a second, or one that answers without end, holds a client
forever or fills its memory. Every HTTP client of Coach (`coach status/submit/stop/logs`, the Nuclio dashboard
client, `--notify`, the site check) goes through `bounded_request`, which:

- connects within `connect_s` and waits at most `read_s` for each read;
- reads the answer as a stream and refuses it past `max_bytes` (at once when its Content-Length says so), so
  memory is bounded by the cap, not by the server;
- ends the whole exchange at `deadline_s`: a watchdog shuts the connection's socket down, so a server that drips
  its headers or its body is cut off too (urllib3's connections through a proxy are not watched: for them the
  deadline is checked between reads of the body, i.e. it holds within one read timeout).

The refusals are `requests.RequestException`s (`AnswerTooLarge`, and `DeadlinePassed`, a `requests.Timeout`), so
callers that already handle requests' errors handle them; `problem(error)` says any of them in a few words.

Side effects: network I/O; one short-lived watchdog timer thread per request.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter

#: Defaults: a client waits this long to connect, this long for each read, this long in all, in seconds.
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
DEADLINE_S = 60.0
#: Largest answer read, in bytes (a `coach status` of thousands of jobs is a few MiB).
MAX_ANSWER_BYTES = 16 << 20
CHUNK_BYTES = 64 << 10


@dataclass(frozen=True)
class Limits:
    """The bounds of one request: seconds to connect, per read, in all; bytes of the answer."""

    connect_s: float = CONNECT_TIMEOUT_S
    read_s: float = READ_TIMEOUT_S
    deadline_s: float = DEADLINE_S
    max_bytes: int = MAX_ANSWER_BYTES


class AnswerTooLarge(requests.RequestException):
    """The answer is larger than the limit; str: `answer larger than N bytes (the limit)`."""


class DeadlinePassed(requests.Timeout):
    """The exchange took longer than the deadline; str: `no complete answer within S s (the deadline)`."""


# -- the watchdog: the connection a request runs on, reachable from another thread ------------------------------
_current = threading.local()


class _Watch:
    """What the watchdog of one request knows: the connection it runs on, and whether it fired."""

    def __init__(self) -> None:
        self.sock: Any = None  # kept here: http.client forgets it once an answer that ends with its close begins
        self.fired = False
        self.lock = threading.Lock()

    def watch(self, sock: Any) -> None:
        with self.lock:
            self.sock = sock if sock is not None else self.sock

    def fire(self) -> None:
        with self.lock:
            self.fired = True
            sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # a blocked read returns at once; the request fails
            except OSError:
                pass


class _Watched:
    """A urllib3 connection that tells the current request's watch which socket it uses (reused or new)."""

    def connect(self):  # noqa: D102 - urllib3's
        super().connect()
        watch = getattr(_current, "watch", None)
        if watch is not None:
            watch.watch(self.sock)

    def request(self, *args, **kwargs):  # noqa: D102 - urllib3's
        watch = getattr(_current, "watch", None)
        if watch is not None:
            watch.watch(self.sock)  # None before a new connection connects (connect() tells it then)
        return super().request(*args, **kwargs)


class _HTTPConnection(_Watched, urllib3.connection.HTTPConnection):
    pass


class _HTTPSConnection(_Watched, urllib3.connection.HTTPSConnection):
    pass


class _HTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


class BoundedAdapter(HTTPAdapter):
    """requests' adapter whose connections the deadline watchdog can cut."""

    def init_poolmanager(self, *args, **kwargs):  # noqa: D102 - requests'
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}


def new_session() -> requests.Session:
    """A requests Session whose requests `bounded_request` can cut at their deadline."""
    session = requests.Session()
    adapter = BoundedAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


_shared = threading.local()


def _session() -> requests.Session:
    session = getattr(_shared, "session", None)
    if session is None:
        session = _shared.session = new_session()
    return session


def bounded_request(method: str, url: str, limits: Limits = Limits(), *,
                    session: requests.Session | None = None, **kwargs) -> requests.Response:
    """The answer to one request, its body read whole (`.content`, `.text`, `.json()` work) within `limits`.

    Raises AnswerTooLarge, DeadlinePassed, or requests' own errors (ConnectTimeout, ReadTimeout, ConnectionError,
    InvalidURL ...). `session` should come from `new_session` (another one works, with the deadline checked only
    between reads); the default is one per thread.
    """
    session = session or _session()
    start = time.monotonic()
    watch = _Watch()
    timer = threading.Timer(limits.deadline_s, watch.fire)
    timer.daemon = True
    _current.watch = watch
    timer.start()
    try:
        response = session.request(method, url, stream=True, timeout=(limits.connect_s, limits.read_s), **kwargs)
        try:
            response._content = _body(response, limits, start, watch)  # what .content would have read
            response._content_consumed = True  # type: ignore[attr-defined]  # requests keeps it off its type
        finally:
            response.close()
        return response
    except requests.RequestException:
        if watch.fired:
            raise _late(limits) from None
        raise
    except OSError:  # a socket cut while urllib3 was between its own error handlers
        if watch.fired:
            raise _late(limits) from None
        raise
    finally:
        timer.cancel()
        _current.watch = None


def _late(limits: Limits) -> DeadlinePassed:
    return DeadlinePassed(f"no complete answer within {limits.deadline_s:g} s (the deadline)")


def _body(response: requests.Response, limits: Limits, start: float, watch: _Watch) -> bytes:
    length = response.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > limits.max_bytes:
        raise AnswerTooLarge(f"answer larger than {limits.max_bytes} bytes (the limit): Content-Length {length}")
    body = bytearray()
    for chunk in _chunks(response):
        body += chunk
        if len(body) > limits.max_bytes:
            raise AnswerTooLarge(f"answer larger than {limits.max_bytes} bytes (the limit)")
        if watch.fired or time.monotonic() - start > limits.deadline_s:
            raise _late(limits)
    if watch.fired:  # cut at the deadline: what arrived (headers, a body) may be only its start
        raise _late(limits)
    return bytes(body)


def _chunks(response: requests.Response):
    """The body's chunks; a read that times out is a ReadTimeout (requests says ConnectionError in the body)."""
    try:
        yield from response.iter_content(CHUNK_BYTES)
    except requests.ConnectionError as error:
        if error.args and isinstance(error.args[0], urllib3.exceptions.ReadTimeoutError):
            raise requests.ReadTimeout(str(error.args[0])) from None
        raise


def problem(error: requests.RequestException, limits: Limits = Limits()) -> str:
    """A failed request in a few words: the limit it broke, `connection refused`, or the error's kind."""
    if isinstance(error, (AnswerTooLarge, DeadlinePassed)):
        return str(error)
    if isinstance(error, requests.ConnectTimeout):
        return f"cannot connect within {limits.connect_s:g} s"
    if isinstance(error, requests.ReadTimeout):
        return f"no answer within {limits.read_s:g} s"
    if isinstance(error, requests.ConnectionError) and "refused" in str(error).lower():
        return "connection refused"
    if isinstance(error, requests.ConnectionError):
        return f"cannot connect ({type(error).__name__})"
    return type(error).__name__
