"""One watch stream: the events a `WatchRequest` should see, as JSON lines, batch by batch. No sockets: the
HTTP layer writes each batch as one chunk and checks between batches that the client is still there.

An object that starts matching the selectors arrives as ADDED, one that stops matching as DELETED (as the
apiserver's watch cache does). A watch that falls behind the bounded history gets one ERROR event (410
Expired) and ends; so does one that asks for a revision that was already forgotten.
"""

from __future__ import annotations

import json
import time
from typing import Callable, Iterator

from tests.fakes.kube_apiserver import tables
from tests.fakes.kube_apiserver.api import WatchRequest
from tests.fakes.kube_apiserver.errors import ApiError
from tests.fakes.kube_apiserver.store import Change, Closed, Obj, Store

_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))  # one encoder for every line
IDLE_CHECK_S = 1.0  # how often an idle stream wakes to see whether its client left
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def _line(kind: str, obj: Obj) -> bytes:
    return _COMPACT_JSON.encode({"type": kind, "object": obj}).encode() + b"\n"


def event_for(request: WatchRequest, change: Change) -> tuple[str, Obj] | None:
    """The event `request` sees for `change`, or None: selectors are checked on the object before and after."""
    if change.storage_key != request.rt.storage_key:
        return None
    if request.namespace is not None and change.namespace != request.namespace:
        return None
    if change.type == "ADDED":
        return ("ADDED", change.new) if request.matches(change.new) else None
    was = change.old is not None and request.matches(change.old)
    if change.type == "DELETED":
        return ("DELETED", change.new) if was else None
    now = request.matches(change.new)
    if was and now:
        return "MODIFIED", change.new
    if now:
        return "ADDED", change.new
    if was:
        return "DELETED", change.new
    return None


def stream(store: Store, request: WatchRequest, bookmark_interval_s: float,
           clock: Callable[[], float] = time.monotonic) -> Iterator[list[bytes]]:
    """Batches of event lines; an empty batch means "nothing yet" (a chance to check the client). Ends at the
    timeout, on 410, or when the store closes."""

    def render(obj: Obj) -> Obj:
        if request.table_version:
            return tables.table(request.rt, [obj], obj["metadata"]["resourceVersion"], request.table_version,
                                request.include_object, request.view)
        return request.view(obj)

    def bookmark(rv: int, annotations: dict[str, str] | None = None) -> bytes:
        meta: Obj = {"resourceVersion": str(rv)}
        if annotations:
            meta["annotations"] = annotations
        return _line("BOOKMARK", {"kind": request.rt.kind, "apiVersion": request.rt.api_version, "metadata": meta})

    if request.error is not None:
        yield [_line("ERROR", request.error)]
        return
    start = clock()
    deadline = start + request.timeout_s if request.timeout_s is not None else None
    next_bookmark = start + bookmark_interval_s
    cursor = request.after_rv
    first = [_line("ADDED", render(obj)) for obj in request.initial]
    if request.initial_events_end:
        first.append(bookmark(cursor, {INITIAL_EVENTS_END: "true"}))
    yield first
    while True:
        now = clock()
        if deadline is not None and now >= deadline:
            return
        wake = now + IDLE_CHECK_S
        if request.bookmarks:
            wake = min(wake, next_bookmark)
        if deadline is not None:
            wake = min(wake, deadline)
        try:
            changes, complete_rv = store.changes_after(cursor, max(wake - now, 0.0), request.rt.storage_key)
        except Closed:
            return
        except ApiError as exc:
            yield [_line("ERROR", exc.status())]
            return
        batch = []
        for change in changes:
            event = event_for(request, change)
            if event is not None:
                batch.append(_line(event[0], render(event[1])))
        cursor = max(cursor, complete_rv)
        if request.bookmarks and clock() >= next_bookmark:
            batch.append(bookmark(cursor))
            next_bookmark = clock() + bookmark_interval_s
        yield batch
