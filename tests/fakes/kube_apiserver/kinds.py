"""What the apiserver does to an object of a given kind on its way in and out: defaults, validation, the
events.k8s.io <-> core/v1 Event conversion, the binding of a pod. Pure functions over JSON dicts.
"""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.kube_apiserver.errors import bad_request, conflict, invalid
from tests.fakes.kube_apiserver.resources import EVENTS, NAMESPACES, NODES, PODS, ResourceType

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # namespaces are DNS labels, not subdomains

# core/v1 Event field <-> events.k8s.io/v1 Event field; the two APIs store the same object.
_EVENT_FIELDS = (("involvedObject", "regarding"), ("message", "note"), ("reportingComponent", "reportingController"),
                 ("source", "deprecatedSource"), ("firstTimestamp", "deprecatedFirstTimestamp"),
                 ("lastTimestamp", "deprecatedLastTimestamp"), ("count", "deprecatedCount"))
_EVENT_SAME = ("metadata", "reason", "type", "eventTime", "series", "action", "related", "reportingInstance")


def check_name(rt: ResourceType, obj: dict[str, Any]) -> None:
    """422 unless the object has a valid name, or a generateName the store will complete."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    if not name and not meta.get("generateName"):
        raise invalid(rt.kind, rt.group, "", "metadata.name", "FieldValueRequired",
                      "Required value: name or generateName is required")
    if name:
        pattern, what = (_LABEL, "RFC 1123 label") if rt is NAMESPACES else (_SUBDOMAIN, "RFC 1123 subdomain")
        if len(name) > 253 or not pattern.match(name):
            raise invalid(rt.kind, rt.group, name, "metadata.name", "FieldValueInvalid",
                          f'Invalid value: "{name}": a lowercase {what} must consist of lower case alphanumeric '
                          f"characters, '-' or '.', and must start and end with an alphanumeric character")


def _qos_class(spec: dict[str, Any]) -> str:
    resources = [c.get("resources") or {} for c in spec.get("containers") or []]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all((r.get("limits") or {}).get(res) is not None
                     and (r.get("requests") or r.get("limits")).get(res) == (r.get("limits") or {}).get(res)
                     for r in resources for res in ("cpu", "memory"))
    return "Guaranteed" if guaranteed else "Burstable"


def _default_pod(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    containers = spec.get("containers")
    if not containers:
        raise invalid("Pod", "", obj["metadata"].get("name", ""), "spec.containers", "FieldValueRequired",
                      "Required value")
    for container in containers:
        image = container.get("image", "")
        container.setdefault("imagePullPolicy", "Always" if image.endswith(":latest") or ":" not in image
                             else "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("resources", {})
    for key, value in (("schedulerName", "default-scheduler"), ("restartPolicy", "Always"),
                       ("dnsPolicy", "ClusterFirst"), ("terminationGracePeriodSeconds", 30),
                       ("securityContext", {}), ("priority", 0), ("enableServiceLinks", True),
                       ("preemptionPolicy", "PreemptLowerPriority")):
        spec.setdefault(key, value)
    obj["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}


def prepare_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Defaults and checks of a new object, in place (the object is the request's own copy)."""
    check_name(rt, obj)
    if rt is PODS:
        _default_pod(obj)
    elif rt is NAMESPACES:
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj["status"] = {"phase": "Active"}
    elif rt is NODES:
        obj.setdefault("spec", {})
    elif rt.custom and rt.has_status:
        obj.pop("status", None)  # a custom resource with a status subresource ignores status on create


def finish_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    """What needs the final name: the namespace's own label."""
    if rt is NAMESPACES:
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]


def to_storage(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as stored: events.k8s.io/v1 events become core/v1 events."""
    if rt is not EVENTS:
        return obj
    out = {"kind": "Event", "apiVersion": "v1"}
    for core, new in _EVENT_FIELDS:
        if new in obj:
            out[core] = obj[new]
    for same in _EVENT_SAME:
        if same in obj:
            out[same] = obj[same]
    return out


def from_storage(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """The stored object as `rt` shows it (only events differ between versions)."""
    if rt is not EVENTS:
        return obj
    out = {"kind": "Event", "apiVersion": EVENTS.api_version}
    for core, new in _EVENT_FIELDS:
        if core in obj:
            out[new] = obj[core]
    for same in _EVENT_SAME:
        if same in obj:
            out[same] = obj[same]
    return out


def bind(pod: dict[str, Any], binding: dict[str, Any], now: str) -> dict[str, Any]:
    """The pod after a `Binding`: spec.nodeName set and PodScheduled=True; 409 if it is already bound."""
    target = binding.get("target") or {}
    node = target.get("name") or ""
    name = pod["metadata"]["name"]
    if target.get("kind", "Node") not in ("Node", ""):
        raise bad_request(f"binding target kind must be Node, not {target.get('kind')!r}")
    if not node:
        raise invalid("Binding", "", name, "target.name", "FieldValueRequired", "Required value")
    uid = (binding.get("metadata") or {}).get("uid")
    if uid and uid != pod["metadata"]["uid"]:
        raise conflict("pods", "", name, f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                         f"{pod['metadata']['uid']}")
    if pod["metadata"].get("deletionTimestamp"):
        raise conflict("pods", "", name, f"pod {name} is being deleted, cannot be assigned to a host")
    if pod.get("spec", {}).get("nodeName"):
        raise conflict("pods", "", name, f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"')
    # copy only what changes: stored objects are never mutated, so the rest can be shared
    bound = {**pod, "spec": {**pod["spec"], "nodeName": node}, "metadata": dict(pod["metadata"]),
             "status": dict(pod.get("status") or {})}
    annotations = (binding.get("metadata") or {}).get("annotations") or {}
    if annotations:
        bound["metadata"]["annotations"] = {**(bound["metadata"].get("annotations") or {}), **annotations}
    conditions = [c for c in bound["status"].get("conditions", []) if c.get("type") != "PodScheduled"]
    conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now})
    bound["status"]["conditions"] = conditions
    return bound
