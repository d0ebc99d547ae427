"""Server-side printing: the meta.k8s.io/v1 `Table` that `kubectl get` asks for (Accept: ...;as=Table). Pure
apart from reading the wall clock for the AGE column.

kubectl no longer prints built-in kinds itself: it shows the columns and cells the server sends.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable

from tests.fakes.kube_apiserver.resources import (CORE_EVENTS, EVENTS, LEASES, NAMESPACES, NODES, PODS,
                                                  ResourceType)

Obj = dict[str, Any]


def human_duration(seconds: float) -> str:
    """`45s`, `3m20s`, `2h5m`, `3d4h`: kubectl's way of writing an age."""
    s = int(seconds)
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y"


def age(timestamp: str | None, now: datetime.datetime) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    if then.tzinfo is None:
        then = then.replace(tzinfo=datetime.timezone.utc)
    return human_duration((now - then).total_seconds())


def _column(name: str, description: str, type_: str = "string", priority: int = 0, format_: str = "") -> Obj:
    return {"name": name, "type": type_, "format": format_, "description": description, "priority": priority}


NAME = _column("Name", "Name must be unique within a namespace.", format_="name")
AGE = _column("Age", "CreationTimestamp is the time this object was created.")


def _pod_row(pod: Obj, now: datetime.datetime) -> list[Any]:
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for c in statuses if c.get("ready"))
    phase = status.get("reason") or status.get("phase") or "Unknown"
    if pod["metadata"].get("deletionTimestamp"):
        phase = "Terminating"
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    return [pod["metadata"]["name"], f"{ready}/{total}", phase, restarts,
            age(pod["metadata"].get("creationTimestamp"), now), status.get("podIP") or "<none>",
            (pod.get("spec") or {}).get("nodeName") or "<none>"]


def _node_row(node: Obj, now: datetime.datetime) -> list[Any]:
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    state = {"True": "Ready", "False": "NotReady"}.get(conditions.get("Ready", ""), "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix):] for k in (node["metadata"].get("labels") or {}) if k.startswith(prefix))
    version = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or ""
    return [node["metadata"]["name"], state, ",".join(roles) or "<none>",
            age(node["metadata"].get("creationTimestamp"), now), version]


def _event_row(event: Obj, now: datetime.datetime) -> list[Any]:
    involved = event.get("involvedObject") or {}
    last = event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp")
    return [age(last, now), event.get("type") or "", event.get("reason") or "",
            f"{(involved.get('kind') or '').lower()}/{involved.get('name') or ''}", event.get("message") or ""]


Printer = tuple[tuple[Obj, ...], Callable[[Obj, datetime.datetime], list[Any]]]

_PRINTERS: dict[str, Printer] = {
    PODS.storage_key: ((NAME, _column("Ready", "The number of ready containers out of all containers."),
                        _column("Status", "The pod's phase, or why it is not running."),
                        _column("Restarts", "Container restarts.", "integer"), AGE,
                        _column("IP", "The pod's IP address.", priority=1),
                        _column("Node", "The node the pod is bound to.")), _pod_row),
    NODES.storage_key: ((NAME, _column("Status", "The node's Ready condition."),
                         _column("Roles", "node-role.kubernetes.io labels."), AGE,
                         _column("Version", "The kubelet's version.")), _node_row),
    NAMESPACES.storage_key: ((NAME, _column("Status", "The namespace's phase."), AGE),
                             lambda ns, now: [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", ""),
                                              age(ns["metadata"].get("creationTimestamp"), now)]),
    CORE_EVENTS.storage_key: ((_column("Last Seen", "When the event last happened."), _column("Type", "Normal or "
                               "Warning."), _column("Reason", "Why the event happened, in one word."),
                               _column("Object", "The object the event is about."),
                               _column("Message", "What happened, for people.")), _event_row),
    LEASES.storage_key: ((NAME, _column("Holder", "spec.holderIdentity"), AGE),
                         lambda lease, now: [lease["metadata"]["name"],
                                             (lease.get("spec") or {}).get("holderIdentity") or "",
                                             age(lease["metadata"].get("creationTimestamp"), now)]),
}
_DEFAULT: Printer = ((NAME, AGE), lambda obj, now: [obj["metadata"]["name"],
                                                   age(obj["metadata"].get("creationTimestamp"), now)])


def wants_table(accept: str) -> str | None:
    """The Table version (`v1` or `v1beta1`) the Accept header asks for first, or None for plain JSON."""
    for media in accept.split(","):
        params = dict(p.strip().split("=", 1) for p in media.split(";")[1:] if "=" in p)
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
            return params["v"]
    return None


def _row_object(rt: ResourceType, obj: Obj, include: str, table_version: str, view: Callable[[Obj], Obj]) -> Any:
    if include == "None":
        return None
    if include == "Object":
        return view(obj)
    return {"kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{table_version}", "metadata": obj["metadata"]}


def table(rt: ResourceType, objects: list[Obj], resource_version: int | str, table_version: str, include: str,
          view: Callable[[Obj], Obj], now: datetime.datetime | None = None) -> Obj:
    """A Table of `objects` (stored form); `include` is the includeObject parameter: None, Object or
    PartialObjectMetadata (the default); `view` turns a stored object into what `rt` shows."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    columns, row = _PRINTERS.get(rt.storage_key if rt is not EVENTS else CORE_EVENTS.storage_key, _DEFAULT)
    return {"kind": "Table", "apiVersion": f"meta.k8s.io/{table_version}",
            "metadata": {"resourceVersion": str(resource_version)}, "columnDefinitions": list(columns),
            "rows": [{"cells": row(obj, now), "object": _row_object(rt, obj, include, table_version, view)}
                     for obj in objects]}
