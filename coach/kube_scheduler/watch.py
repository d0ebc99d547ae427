"""List then watch one kind of object, as client-go's reflector does, and hand every change to a sink.

- List (in pages of `page_size`, following `continue`), hand the whole list over (`Replace`), remember the
  list's resourceVersion, then watch from it with `allowWatchBookmarks=true`: every event and every BOOKMARK
  moves the resourceVersion on, so a watch that ends (the server's timeout) resumes where it stopped.
- A 410 Gone (an ERROR event with code 410, or the watch request itself answered 410) means the version is too
  old to resume from: list again, and hand the fresh list over; the consumer diffs it against what it holds.
- Other failures (connection refused, a 5xx) back off (0.2 s doubling to 5 s) and resume from the last version.

The watch stream is read raw (`_preload_content=False`), one JSON event per line: the generated models would
cost more than the scheduling. Side effects: HTTP requests, one thread per Informer.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from kubernetes import client

from coach.kube_scheduler.objects import resource_version
from coach.kube_scheduler.rest import read_json

log = logging.getLogger(__name__)

#: How long a watch request may stay open (the server ends it then; we resume from the last version).
WATCH_TIMEOUT_S = 240
#: Without a successful list or watch for this long, an informer counts as down (/healthz).
STALE_AFTER_S = 30.0


@dataclass(frozen=True)
class Replace:
    """Every object of `kind` as a (re)list found them: the consumer replaces what it holds."""

    kind: str  # "nodes", "pods", "podgroups"
    items: list  # the objects (JSON dicts)


@dataclass(frozen=True)
class Change:
    """One watch event."""

    kind: str
    type: str  # ADDED, MODIFIED or DELETED
    obj: dict  # the object (JSON dict); for DELETED its last state


class Gone(Exception):
    """The resourceVersion is too old: list again."""


class Informer:
    """One kind's list+watch loop in its own thread; see the module docstring."""

    def __init__(self, kind: str, list_call: Callable[..., Any], sink: Callable[[object], None],
                 on_relist: Callable[[str], None] = lambda kind: None, page_size: int = 500,
                 watch_timeout_s: int = WATCH_TIMEOUT_S):
        self.kind = kind
        self._list_call = list_call  # the client's list function with its selectors bound; takes **kwargs
        self._sink = sink  # receives Replace and Change, in order
        self._on_relist = on_relist  # told after every list but the first
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.resource_version: str | None = None  # where the next watch starts
        self.synced = threading.Event()  # set once the first list was handed over
        self.lists = 0  # lists done (the first one and every relist)
        self._last_ok = 0.0  # monotonic time of the last successful list, watch start or event
        self._watching = False
        self._stop = threading.Event()
        self._response = None
        self._interrupted = False
        self._thread = threading.Thread(target=self._run, name=f"coach-scheduler-watch-{kind}", daemon=True)

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the thread, closing the open watch so that it does not wait for the next event."""
        self._stop.set()
        response = self._response
        if response is not None:
            _shutdown(response)
        if self._thread.is_alive():
            self._thread.join(10.0)

    def interrupt(self) -> None:
        """Close the open watch (or the one being opened); the thread watches again from the last
        resourceVersion, as after a network failure: if that version was compacted meanwhile, it gets 410 and
        lists again."""
        self._interrupted = True
        response = self._response
        if response is not None:
            _shutdown(response)

    def healthy(self) -> bool:
        """Listed once, and watching now or heard from the apiserver within STALE_AFTER_S."""
        return (self.synced.is_set() and self._thread.is_alive()
                and (self._watching or time.monotonic() - self._last_ok < STALE_AFTER_S))

    # ---- the thread ------------------------------------------------------------------------------------------

    def _run(self) -> None:
        backoff_s = 0.2
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                self._watch()
                backoff_s = 0.2
            except Gone:
                self.resource_version = None  # list again at once
            except Exception as error:
                if self._stop.is_set():
                    return
                if self._interrupted:
                    self._interrupted = False
                    continue
                if isinstance(error, client.ApiException) and error.status == 410:
                    self.resource_version = None
                    continue
                log.warning("watch of %s failed (%s); retrying in %.1f s", self.kind, _describe(error), backoff_s)
                self._stop.wait(backoff_s)
                backoff_s = min(5.0, backoff_s * 2)
            finally:
                self._watching = False

    def _list(self) -> None:
        items: list = []
        token = None
        while True:
            kwargs: dict[str, Any] = {"limit": self.page_size, "_preload_content": False, "_request_timeout": (5, 120)}
            if token:
                kwargs["_continue"] = token
            body = read_json(self._list_call(**kwargs))
            items.extend(body.get("items") or ())
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                break
        version = resource_version(body)
        self._sink(Replace(self.kind, items))
        self.resource_version = version
        self._last_ok = time.monotonic()
        self.lists += 1
        if self.synced.is_set():
            self._on_relist(self.kind)
        self.synced.set()

    def _watch(self) -> None:
        response = self._list_call(watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
                                   timeout_seconds=self.watch_timeout_s, _preload_content=False,
                                   _request_timeout=(5, self.watch_timeout_s + 30))
        self._response = response
        try:
            if self._stop.is_set():
                return
            if self._interrupted:  # interrupted while this watch was being opened: drop it too
                self._interrupted = False
                return
            self._watching = True
            self._last_ok = time.monotonic()
            for line in _lines(response):
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        log.info("watch of %s: resourceVersion %s is gone; listing again", self.kind,
                                 self.resource_version)
                        raise Gone()
                    raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                version = resource_version(obj)
                if kind != "BOOKMARK":
                    self._sink(Change(self.kind, kind, obj))
                if version:
                    self.resource_version = version
                self._last_ok = time.monotonic()
                if self._stop.is_set():
                    return
        finally:
            self._response = None
            response.close()  # never hand a half-read stream back to the pool
            response.release_conn()


def _lines(response) -> Iterator[bytes]:
    """The lines of a streaming HTTP response, each as soon as it has arrived (chunked or not)."""
    chunks = response.read_chunked() if response.chunked else iter(lambda: response.read1(65536), b"")
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        if b"\n" not in chunk:
            continue
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _shutdown(response) -> None:
    """Unblock a thread reading `response` by shutting its socket down."""
    connection = getattr(response, "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _describe(error: Exception) -> str:
    if isinstance(error, client.ApiException):
        return f"HTTP {error.status} {error.reason}"
    return type(error).__name__
