"""The fake apiserver's state: objects, one global resourceVersion counter (etcd's revision) and a bounded
history of changes that watches replay from. Thread-safe; no I/O.

Every write bumps the counter by one and appends exactly one `Change`, so the change for revision N sits at a
known offset in the history and a watch resumes in O(1). Stored objects are never mutated after they are
stored: writers build new dicts, so readers may serialize them outside the lock. When the history forgets a
change, a watch from before it gets 410 Expired, as from a compacted etcd. A watch waits for changes of its
own kind only (as on the apiserver's watch cache, one per resource): a write wakes the watches of its kind, not
every watch, and a watch whose kind had no forgotten change since its revision does not expire.
"""

from __future__ import annotations

import copy
import datetime
import random
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from tests.fakes.kube_apiserver import kinds
from tests.fakes.kube_apiserver.errors import ApiError, already_exists, bad_request, conflict, expired, not_found
from tests.fakes.kube_apiserver.resources import NAMESPACES, TYPES, ResourceType

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects

_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's generateName alphabet (no vowels, no 0/1/3)
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


_stamp = [0, ""]  # the second and its RFC 3339 text: formatted once a second, not on every write


def utc_now() -> str:
    """RFC 3339 to the second, as metadata.creationTimestamp."""
    now_s = int(time.time())
    if _stamp[0] != now_s:
        moment = datetime.datetime.fromtimestamp(now_s, datetime.timezone.utc)
        _stamp[:] = [now_s, moment.strftime("%Y-%m-%dT%H:%M:%SZ")]
    return _stamp[1]


@dataclass(frozen=True)
class Change:
    """One write, as watches see it."""

    rv: int  # the revision this write made
    storage_key: str  # which set of objects it touched
    namespace: str  # "" for cluster-scoped objects
    type: str  # ADDED, MODIFIED or DELETED
    old: Obj | None  # the object before (None for ADDED)
    new: Obj  # the object after; for DELETED, its last state stamped with the deletion's revision


class Closed(Exception):
    """The store is shutting down; watches end."""


class Store:
    """All objects of all served types, with the revision counter and the watch history."""

    def __init__(self, watch_history: int = 10_000, now: Callable[[], str] = utc_now, seed: int = 0):
        if watch_history < 1:
            raise ValueError(f"watch_history must be at least 1, not {watch_history}")
        lock = threading.RLock()
        self._cond = threading.Condition(lock)  # the store's lock
        # per kind: woken on its writes; its latest write; its newest change the history forgot
        self._kind_cond = {rt.storage_key: threading.Condition(lock) for rt in TYPES}
        self._kind_rv = {rt.storage_key: 0 for rt in TYPES}
        self._forgotten_rv = {rt.storage_key: 0 for rt in TYPES}
        self._now = now
        self._random = random.Random(seed)
        self._rv = 0
        self._objects: dict[str, dict[Key, Obj]] = {rt.storage_key: {} for rt in TYPES}
        self._history: deque[Change] = deque(maxlen=watch_history)
        self._oldest_watchable_rv = 0  # a watch may start from this revision or any later one
        self._closed = False
        for name in INITIAL_NAMESPACES:
            self.create(NAMESPACES, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # ---- reads -------------------------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        with self._cond:
            obj = self._objects[rt.storage_key].get((namespace, name))
        if obj is None:
            raise not_found(rt.plural, rt.group, name)
        return obj

    def list(self, rt: ResourceType, namespace: str | None, match: Callable[[Obj], bool] = lambda o: True
             ) -> tuple[list[Obj], int]:
        """Objects of `rt` in `namespace` (None: all namespaces) that `match`, sorted by key, and the revision."""
        with self._cond:
            items = list(self._objects[rt.storage_key].items())
            rv = self._rv
        items.sort(key=lambda kv: kv[0])
        return [obj for (ns, _), obj in items if (namespace is None or ns == namespace) and match(obj)], rv

    # ---- writes ------------------------------------------------------------------------------------------------

    def _commit(self, rt: ResourceType, namespace: str, kind: str, old: Obj | None, new: Obj) -> Obj:
        """Stamp `new` with the next revision, store (or drop, for DELETED) it and record the change. Locked."""
        if self._closed:
            raise ApiError(503, "ServiceUnavailable", "the apiserver is shutting down")
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        objects = self._objects[rt.storage_key]
        key = (namespace, new["metadata"]["name"])
        if kind == "DELETED":
            objects.pop(key, None)
        else:
            objects[key] = new
        if len(self._history) == self._history.maxlen:
            forgotten = self._history[0]
            self._oldest_watchable_rv = forgotten.rv
            self._forgotten_rv[forgotten.storage_key] = forgotten.rv
        self._history.append(Change(self._rv, rt.storage_key, namespace, kind, old, new))
        self._kind_rv[rt.storage_key] = self._rv
        self._kind_cond[rt.storage_key].notify_all()
        return new

    def _check_namespace(self, rt: ResourceType, namespace: str) -> None:
        if rt.namespaced and ("", namespace) not in self._objects[NAMESPACES.storage_key]:
            raise not_found("namespaces", "", namespace)

    def create(self, rt: ResourceType, namespace: str, obj: Obj) -> Obj:
        """Store a new object (the caller's dict, which the store takes over); 409 AlreadyExists on a name clash."""
        kinds.prepare_create(rt, obj)
        obj = {"kind": rt.kind, "apiVersion": rt.api_version, **obj}
        meta = obj.setdefault("metadata", {})
        for server_owned in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp", "selfLink"):
            meta.pop(server_owned, None)
        if rt.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        meta["uid"] = str(uuid.UUID(int=self._random.getrandbits(128), version=4))  # os.urandom is slow here
        meta["creationTimestamp"] = self._now()
        meta.setdefault("generation", 1)
        obj = kinds.to_storage(rt, obj)
        with self._cond:
            self._check_namespace(rt, namespace)
            objects = self._objects[rt.storage_key]
            if not meta.get("name"):
                for _ in range(100):
                    name = meta["generateName"] + "".join(self._random.choice(_SUFFIX_ALPHABET) for _ in range(5))
                    if (namespace, name) not in objects:
                        break
                else:
                    raise ApiError(409, "AlreadyExists", "could not generate a unique name")
                meta["name"] = name
                kinds.check_name(rt, obj)
            elif (namespace, meta["name"]) in objects:
                raise already_exists(rt.plural, rt.group, meta["name"])
            kinds.finish_create(rt, obj)
            return self._commit(rt, namespace, "ADDED", None, obj)

    def mutate(self, rt: ResourceType, namespace: str, name: str, change: Callable[[Obj], Obj]) -> Obj:
        """Read-modify-write under the lock: `change(current)` returns the new object (a fresh dict; it must not
        touch `current`) or raises ApiError."""
        with self._cond:
            current = self._objects[rt.storage_key].get((namespace, name))
            if current is None:
                raise not_found(rt.plural, rt.group, name)
            new = change(current)
            meta = new["metadata"] = dict(new.get("metadata") or {})  # _commit stamps it: never share it
            old_meta = current["metadata"]
            for fixed in ("name", "namespace", "uid", "creationTimestamp", "generateName"):
                if fixed in old_meta:
                    meta[fixed] = old_meta[fixed]
            if new.get("spec") != current.get("spec"):
                meta["generation"] = old_meta.get("generation", 1) + 1
            return self._commit(rt, namespace, "MODIFIED", current, new)

    def delete(self, rt: ResourceType, namespace: str, name: str, preconditions: dict[str, Any] | None = None
               ) -> Obj:
        """Remove an object at once (no grace period); its namespace's objects go with a namespace."""
        with self._cond:
            current = self._objects[rt.storage_key].get((namespace, name))
            if current is None:
                raise not_found(rt.plural, rt.group, name)
            for field in ("uid", "resourceVersion"):
                want = (preconditions or {}).get(field)
                if want and want != current["metadata"].get(field):
                    raise conflict(rt.plural, rt.group, name,
                                   f"Precondition failed: {'UID' if field == 'uid' else 'ResourceVersion'} in "
                                   f"precondition: {want}, {'UID' if field == 'uid' else 'ResourceVersion'} in "
                                   f"object meta: {current['metadata'].get(field)}")
            if rt is NAMESPACES and name in INITIAL_NAMESPACES:
                raise ApiError(403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be '
                                                 f"deleted", {"name": name, "kind": "namespaces"})
            if rt is NAMESPACES:
                for other in TYPES:
                    if other.namespaced:
                        for key in [k for k in self._objects[other.storage_key] if k[0] == name]:
                            gone = self._objects[other.storage_key][key]
                            self._commit(other, name, "DELETED", gone, copy.deepcopy(gone))
            gone = copy.deepcopy(current)
            gone["metadata"]["deletionTimestamp"] = self._now()
            return self._commit(rt, namespace, "DELETED", current, gone)

    # ---- watch -------------------------------------------------------------------------------------------------

    def watch_from(self, rt: ResourceType, namespace: str | None, resource_version: str | None
                   ) -> tuple[int, list[Obj]]:
        """Where a watch starts: (revision to resume after, objects to send as ADDED first).

        No resourceVersion, or "0", means "the current state, then changes" (taken atomically); N means "the
        changes after N" and raises 410 Expired when the history forgot a change of this kind after N."""
        with self._cond:
            if resource_version in (None, "", "0"):
                return self._rv, self.list(rt, namespace)[0]
            try:
                start = int(resource_version)
            except ValueError:
                raise bad_request(f'invalid resource version "{resource_version}"')
            if start < self._forgotten_rv[rt.storage_key]:
                raise expired(start, self._oldest_watchable_rv)
            return start, []

    def changes_after(self, after_rv: int, timeout_s: float, storage_key: str) -> tuple[list[Change], int]:
        """The changes to `storage_key`'s objects after revision `after_rv`, waiting up to `timeout_s` for one,
        and the revision this answer is complete up to (the current one: a watch resumes after it). 410 Expired
        if one of them was forgotten, Closed when the store shuts down."""
        with self._cond:
            if not self._closed and self._kind_rv[storage_key] <= after_rv and timeout_s > 0:
                self._kind_cond[storage_key].wait(timeout_s)
            if self._closed:
                raise Closed()
            if after_rv < self._forgotten_rv[storage_key]:
                raise expired(after_rv, self._oldest_watchable_rv)
            if not self._history or self._kind_rv[storage_key] <= after_rv:
                return [], self._rv
            history = self._history
            offset = max(after_rv + 1 - history[0].rv, 0)
            # index from the end: a watch that keeps up asks for the last few, and deque indexing is cheap there
            return [change for change in (history[i] for i in range(offset - len(history), 0))
                    if change.storage_key == storage_key], self._rv

    def compact(self) -> None:
        """Forget the whole history, so that a watch from any earlier revision gets 410 (for tests)."""
        with self._cond:
            self._history.clear()
            self._oldest_watchable_rv = self._rv
            for key in self._forgotten_rv:
                self._forgotten_rv[key] = self._rv
            self._wake_all()

    def close(self) -> None:
        """End every watch; later writes fail with 503."""
        with self._cond:
            self._closed = True
            self._wake_all()

    def _wake_all(self) -> None:
        for cond in self._kind_cond.values():
            cond.notify_all()
