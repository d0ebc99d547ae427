"""The apiserver's REST semantics, apart from HTTP: a request (method, path, query, media types, body) becomes a
`Reply`, or a `WatchRequest` that the HTTP layer streams. Raises ApiError for every refusal. No I/O.

URL shapes: /api/v1/<plural>[/<name>[/<sub>]], /api/v1/namespaces/<ns>/<plural>[/<name>[/<sub>]], and the
same under /apis/<group>/<version>; a legacy `watch/` segment after the version means ?watch=true.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping
from urllib.parse import parse_qs, urlsplit

from tests.fakes.kube_apiserver import discovery, kinds, tables
from tests.fakes.kube_apiserver.errors import (ApiError, STALE, bad_request, conflict, invalid, method_not_allowed,
                                               success, unknown_path, unsupported_media)
from tests.fakes.kube_apiserver.patches import JSON_PATCH, MERGE, STRATEGIC, apply_patch
from tests.fakes.kube_apiserver.resources import BINDINGS, BY_GROUP_VERSION, PODS, ResourceType
from tests.fakes.kube_apiserver.selectors import FieldSelector, LabelSelector
from tests.fakes.kube_apiserver.store import Obj, Store

_TRUE = {"1", "t", "T", "true", "TRUE", "True"}  # Go's strconv.ParseBool
_JSON_TYPES = ("application/json", "")  # bodies of POST and PUT; a missing Content-Type is taken as JSON


@dataclass(frozen=True)
class Reply:
    """A finished answer: status code and a JSON document (or text, for the health endpoints)."""

    code: int
    body: Any
    content_type: str = "application/json"


@dataclass(frozen=True)
class WatchRequest:
    """What a watch stream needs: whose changes, from which revision, and how to show them."""

    rt: ResourceType  # the type and version being watched
    namespace: str | None  # None: every namespace (or a cluster-scoped type)
    labels: LabelSelector
    fields: FieldSelector
    after_rv: int  # replay the changes after this revision
    initial: tuple[Obj, ...]  # objects to send as ADDED before any change (a watch without a resourceVersion)
    bookmarks: bool  # allowWatchBookmarks
    initial_events_end: bool  # sendInitialEvents: mark the end of `initial` with an annotated BOOKMARK
    timeout_s: float | None  # timeoutSeconds
    table_version: str | None  # send each object as a one-row Table of this meta.k8s.io version
    include_object: str  # includeObject for Tables
    error: Obj | None = None  # a Status to send as the only event (410: the revision is too old)

    def matches(self, obj: Obj) -> bool:
        return self.labels.matches(obj["metadata"].get("labels")) and self.fields.matches(obj)

    def view(self, obj: Obj) -> Obj:
        return kinds.from_storage(self.rt, obj)


@dataclass(frozen=True)
class _Route:
    rt: ResourceType
    namespace: str | None  # from the URL; None when the URL names none
    name: str | None
    subresource: str | None
    legacy_watch: bool


def _route(parts: list[str]) -> _Route | Reply:
    """The resource a path names, or a discovery document."""
    if parts[:1] == ["api"]:
        group, version, rest = "", (parts[1] if len(parts) > 1 else None), parts[2:]
    elif parts[:1] == ["apis"]:
        group, version, rest = (parts[1] if len(parts) > 1 else None), (parts[2] if len(parts) > 2 else None), parts[3:]
    else:
        raise unknown_path()
    if version is None:
        doc = discovery.api_group(group) if group else None
        if doc is None:
            raise unknown_path()
        return Reply(200, doc)
    types = BY_GROUP_VERSION.get((group, version))
    if types is None:
        raise unknown_path()
    if not rest:
        return Reply(200, discovery.resource_list(group, version))
    legacy_watch = rest[0] == "watch"
    if legacy_watch:
        rest = rest[1:]
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in types and types[rest[2]].namespaced:
        rt, namespace, tail = types[rest[2]], rest[1], rest[3:]
    elif rest and rest[0] in types:
        rt, namespace, tail = types[rest[0]], None, rest[1:]
        if rt.namespaced and tail:
            raise unknown_path()
    else:
        raise unknown_path()
    if len(tail) > 2 or (len(tail) == 2 and tail[1] not in rt.subresources) or any(not p for p in tail):
        raise unknown_path()
    return _Route(rt, namespace, tail[0] if tail else None, tail[1] if len(tail) == 2 else None, legacy_watch)


def _media_type(header: str | None) -> str:
    return (header or "").split(";")[0].strip().lower()


def _decode(body: bytes) -> Any:
    """JSON in UTF-8, the one encoding the apiserver takes (decoded first: json.loads of bytes spends about a
    tenth of a pod's create guessing the encoding)."""
    try:
        return json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}")


def _object_body(rt: ResourceType, body: bytes, content_type: str | None) -> Obj:
    """A POST or PUT body: a JSON object of the right kind with an object for metadata."""
    if _media_type(content_type) not in _JSON_TYPES:
        raise unsupported_media(_media_type(content_type), ("application/json",))
    obj = _decode(body)
    if not isinstance(obj, dict):
        raise bad_request(f"the request body must be a JSON object, not {type(obj).__name__}")
    if not isinstance(obj.get("metadata", {}), dict):
        raise bad_request("metadata must be a JSON object")
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if kind and kind != rt.kind:
        raise bad_request(f"the kind in the body ({kind}) does not match the resource ({rt.kind})")
    if api_version and api_version != rt.api_version:
        raise bad_request(f"the API version in the data ({api_version}) does not match the expected API version "
                          f"({rt.api_version})")
    return obj


class Api:
    """Serves the resource table from a Store."""

    def __init__(self, store: Store, server_address: Callable[[], str], now: Callable[[], str],
                 graceful_pod_deletion: bool = False):
        self.store = store
        self._graceful_pod_deletion = graceful_pod_deletion  # see FakeApiServer
        self._server_address = server_address  # host:port, for /api's serverAddressByClientCIDRs
        self._now = now  # RFC 3339 timestamps for conditions
        self.binding_attempts: list[tuple[str, str, int]] = []  # (namespace, pod, HTTP status) per binding POST

    # ---- entry point -------------------------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> Reply | WatchRequest:
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        parts = [p for p in url.path.split("/") if p != ""]
        if parts in (["healthz"], ["livez"], ["readyz"]):
            return Reply(200, "ok", "text/plain; charset=utf-8")
        if parts == ["version"]:
            return Reply(200, discovery.VERSION)
        if parts == ["api"]:
            return Reply(200, discovery.api_versions(self._server_address()))
        if parts == ["apis"]:
            return Reply(200, discovery.api_group_list())
        route = _route(parts)
        if isinstance(route, Reply):
            if method != "GET":
                raise method_not_allowed()
            return route
        accept = headers.get("Accept") or ""
        content_type = headers.get("Content-Type")
        handler = {"GET": self._get, "POST": self._post, "PUT": self._put, "PATCH": self._patch,
                   "DELETE": self._delete}.get(method)
        if handler is None or (route.legacy_watch and method != "GET"):
            raise method_not_allowed()
        return handler(route, query, accept, content_type, body)

    # ---- helpers -----------------------------------------------------------------------------------------------

    def _namespace(self, route: _Route) -> str:
        """The namespace an object lives in: the URL's for namespaced types, "" for cluster-scoped ones."""
        return route.namespace or "" if route.rt.namespaced else ""

    def _selectors(self, rt: ResourceType, query: Mapping[str, str]) -> tuple[LabelSelector, FieldSelector]:
        return (LabelSelector.parse(query.get("labelSelector")),
                FieldSelector.parse(query.get("fieldSelector"), rt.field_paths, dict(rt.field_aliases)))

    def _show(self, rt: ResourceType, obj: Obj, accept: str, query: Mapping[str, str]) -> Obj:
        version = tables.wants_table(accept)
        view = lambda o: kinds.from_storage(rt, o)  # noqa: E731
        if version:
            return tables.table(rt, [obj], obj["metadata"]["resourceVersion"], version,
                                query.get("includeObject", "PartialObjectMetadata"), view)
        return view(obj)

    # ---- verbs -------------------------------------------------------------------------------------------------

    def _get(self, route: _Route, query: Mapping[str, str], accept: str, content_type: str | None, body: bytes
             ) -> Reply | WatchRequest:
        rt = route.rt
        if "get" not in rt.verbs:
            raise method_not_allowed()
        if route.legacy_watch or query.get("watch") in _TRUE:
            return self._watch(route, query, accept, *self._selectors(rt, query))
        if route.name is not None:
            return Reply(200, self._show(rt, self.store.get(rt, self._namespace(route), route.name), accept, query))
        labels, fields = self._selectors(rt, query)
        namespace = route.namespace if rt.namespaced else None
        items, rv = self.store.list(rt, namespace,
                                    lambda o: labels.matches(o["metadata"].get("labels")) and fields.matches(o))
        version = tables.wants_table(accept)
        if version:
            return Reply(200, tables.table(rt, items, rv, version, query.get("includeObject", "PartialObjectMetadata"),
                                           lambda o: kinds.from_storage(rt, o)))
        return Reply(200, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": {"resourceVersion": str(rv)},
                           "items": [kinds.from_storage(rt, o) for o in items]})

    def _watch(self, route: _Route, query: Mapping[str, str], accept: str, labels: LabelSelector,
               fields: FieldSelector) -> WatchRequest:
        rt = route.rt
        namespace = route.namespace if rt.namespaced else None
        timeout = query.get("timeoutSeconds")
        try:
            timeout_s = float(timeout) if timeout not in (None, "") else None
        except ValueError:
            raise bad_request(f'invalid timeoutSeconds "{timeout}"')
        send_initial = query.get("sendInitialEvents") in _TRUE
        error = None
        try:
            after_rv, initial = self.store.watch_from(rt, namespace,
                                                      None if send_initial else query.get("resourceVersion"))
        except ApiError as exc:
            if exc.code != 410:
                raise
            after_rv, initial, error = 0, [], exc.status()  # the apiserver answers 200, then one ERROR event
        if route.name is not None:  # a watch of one object: .../pods/NAME?watch=1 or the legacy /watch/... form
            fields = FieldSelector(fields.terms + FieldSelector.parse(f"metadata.name={route.name}",
                                                                      rt.field_paths).terms)
        match = lambda o: labels.matches(o["metadata"].get("labels")) and fields.matches(o)  # noqa: E731
        return WatchRequest(rt, namespace, labels, fields, after_rv, tuple(o for o in initial if match(o)),
                            query.get("allowWatchBookmarks") in _TRUE, send_initial, timeout_s,
                            tables.wants_table(accept), query.get("includeObject", "PartialObjectMetadata"), error)

    def _post(self, route: _Route, query: Mapping[str, str], accept: str, content_type: str | None, body: bytes
              ) -> Reply:
        rt = route.rt
        if query.get("dryRun"):
            raise bad_request("dryRun is not supported by this fake apiserver")
        if rt is BINDINGS or route.subresource == "binding":
            return self._bind(route, content_type, body)
        if route.name is not None or "create" not in rt.verbs or (rt.namespaced and route.namespace is None):
            raise method_not_allowed()
        obj = _object_body(rt, body, content_type)
        namespace = self._namespace(route)
        body_ns = obj.get("metadata", {}).get("namespace")
        if rt.namespaced and body_ns and body_ns != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        created = self.store.create(rt, namespace, obj)
        return Reply(201, self._show(rt, created, accept, query))

    def _bind(self, route: _Route, content_type: str | None, body: bytes) -> Reply:
        """pods/<name>/binding (or the older namespaces/<ns>/bindings): 201 with a Status, 409 if bound."""
        if route.namespace is None:
            raise method_not_allowed()
        binding = _object_body(BINDINGS, body, content_type)
        name = binding.get("metadata", {}).get("name") or ""
        if route.subresource == "binding":
            if name and name != route.name:
                raise bad_request("name in URL does not match name in Binding object")
            name = route.name or ""
        elif route.name is not None:
            raise method_not_allowed()
        if not name:
            raise invalid("Binding", "", "", "metadata.name", "FieldValueRequired", "Required value: name is required")
        try:
            self.store.mutate(PODS, route.namespace, name, lambda pod: kinds.bind(pod, binding, self._now()))
        except ApiError as error:
            self.binding_attempts.append((route.namespace, name, error.code))
            raise
        self.binding_attempts.append((route.namespace, name, 201))
        return Reply(201, success(201))

    def _check_rv(self, rt: ResourceType, current: Obj, given: Any, name: str) -> None:
        """Optimistic concurrency: a stated resourceVersion must be the current one."""
        if given and str(given) != current["metadata"]["resourceVersion"]:
            raise conflict(rt.plural, rt.group, name, STALE)

    def _put(self, route: _Route, query: Mapping[str, str], accept: str, content_type: str | None, body: bytes
             ) -> Reply:
        rt, name = route.rt, route.name
        if name is None or "update" not in rt.verbs or (rt.namespaced and route.namespace is None):
            raise method_not_allowed()
        obj = _object_body(rt, body, content_type)
        body_name = obj.get("metadata", {}).get("name")
        if body_name and body_name != name:
            raise bad_request(f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        body_ns = obj.get("metadata", {}).get("namespace")
        if rt.namespaced and body_ns and body_ns != route.namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")

        def change(current: Obj) -> Obj:
            given = obj.get("metadata", {}).get("resourceVersion")
            self._check_rv(rt, current, given, name)
            if not given and rt.custom:
                raise invalid(rt.kind, rt.group, name, "metadata.resourceVersion", "FieldValueInvalid",
                              "Invalid value: 0x0: must be specified for an update")
            return self._merge_into(rt, route.subresource, current, obj)

        updated = self.store.mutate(rt, self._namespace(route), name, change)
        return Reply(200, self._show(rt, updated, accept, query))

    def _merge_into(self, rt: ResourceType, subresource: str | None, current: Obj, wanted_view: Obj) -> Obj:
        """The stored object after a write of `wanted_view`: /status takes only the status, the main resource
        everything but the status when the type has a status subresource."""
        wanted = kinds.to_storage(rt, wanted_view)
        wanted["kind"], wanted["apiVersion"] = current["kind"], current["apiVersion"]
        if subresource == "status":
            new = dict(current)
            new["metadata"] = dict(current["metadata"])
            if "status" in wanted:
                new["status"] = wanted["status"]
            else:
                new.pop("status", None)
            return new
        if rt.has_status:
            if "status" in current:
                wanted["status"] = current["status"]
            else:
                wanted.pop("status", None)
        return wanted

    def _patch(self, route: _Route, query: Mapping[str, str], accept: str, content_type: str | None, body: bytes
               ) -> Reply:
        rt, name = route.rt, route.name
        if name is None or "patch" not in rt.verbs or (rt.namespaced and route.namespace is None):
            raise method_not_allowed()
        accepted = (JSON_PATCH, MERGE) if rt.custom else (JSON_PATCH, MERGE, STRATEGIC)
        media = _media_type(content_type)
        if media not in accepted:
            raise unsupported_media(media, accepted + ("application/apply-patch+yaml",))
        patch = _decode(body)

        def change(current: Obj) -> Obj:
            patched = apply_patch(media, kinds.from_storage(rt, current), patch)
            if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
                raise invalid(rt.kind, rt.group, name, "metadata", "FieldValueRequired",
                              "Required value: the patched object must be an object with metadata")
            self._check_rv(rt, current, patched["metadata"].get("resourceVersion"), name)
            return self._merge_into(rt, route.subresource, current, patched)

        updated = self.store.mutate(rt, self._namespace(route), name, change)
        return Reply(200, self._show(rt, updated, accept, query))

    def _terminate(self, route: _Route, options: dict, preconditions: dict | None) -> Obj | None:
        """A graceful pod deletion, as the pod registry's CheckGracefulDelete: a pod that is bound, not Succeeded
        or Failed, deleted with a grace period (the request's, else its terminationGracePeriodSeconds) gets a
        deletionTimestamp and stays; None when it must go now (or is terminating with a shorter period already)."""
        namespace = self._namespace(route)
        pod = self.store.get(PODS, namespace, route.name)
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        phase = (pod.get("status") or {}).get("phase")
        if not grace or grace < 0 or not (pod.get("spec") or {}).get("nodeName") or phase in ("Succeeded", "Failed"):
            return None
        current_grace = pod["metadata"].get("deletionGracePeriodSeconds")

        def change(current: Obj) -> Obj:
            for field_name in ("uid", "resourceVersion"):
                want = (preconditions or {}).get(field_name)
                if want and want != current["metadata"].get(field_name):
                    found = current["metadata"].get(field_name)
                    raise conflict("pods", "", route.name,
                                   f"Precondition failed: {field_name} in precondition: {want}, in object meta: {found}")
            meta = dict(current["metadata"])
            if current_grace is None or grace < current_grace:  # a later delete may only shorten the period
                when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=grace)
                meta["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")  # when the period ends, as real
                meta["deletionGracePeriodSeconds"] = grace
            return {**current, "metadata": meta}

        return self.store.mutate(PODS, namespace, route.name, change)

    def _delete(self, route: _Route, query: Mapping[str, str], accept: str, content_type: str | None, body: bytes
                ) -> Reply:
        rt = route.rt
        options = _decode(body) if body.strip() else {}
        preconditions = options.get("preconditions") if isinstance(options, dict) else None
        if route.subresource is not None or (rt.namespaced and route.namespace is None):
            raise method_not_allowed()
        if route.name is not None:
            if "delete" not in rt.verbs:
                raise method_not_allowed()
            if rt is PODS and self._graceful_pod_deletion:
                terminating = self._terminate(route, options if isinstance(options, dict) else {}, preconditions)
                if terminating is not None:
                    return Reply(200, terminating)
            gone = self.store.delete(rt, self._namespace(route), route.name, preconditions)
            return Reply(200, kinds.from_storage(rt, gone))
        if "deletecollection" not in rt.verbs:
            raise method_not_allowed()
        labels, fields = self._selectors(rt, query)
        items, _ = self.store.list(rt, route.namespace if rt.namespaced else None,
                                   lambda o: labels.matches(o["metadata"].get("labels")) and fields.matches(o))
        gone = []
        for obj in items:
            try:
                gone.append(self.store.delete(rt, self._namespace(route), obj["metadata"]["name"]))
            except ApiError as exc:
                if exc.code != 404:  # already gone is fine
                    raise
        return Reply(200, {"kind": rt.list_kind, "apiVersion": rt.api_version,
                           "metadata": {"resourceVersion": str(self.store.resource_version)},
                           "items": [kinds.from_storage(rt, o) for o in gone]})
