"""The resource types this fake serves, described once: the URL table, discovery and selectors all read it. Pure.

A type is known by (group, version, plural). Types that share `storage` are one set of objects seen through two
API versions, as on the real apiserver: core/v1 and events.k8s.io/v1 events are the same events.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coach.domain.kube import PODGROUP_GROUP, PODGROUP_KIND, PODGROUP_PLURAL, PODGROUP_VERSION

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


@dataclass(frozen=True)
class ResourceType:
    """One served resource of one API version."""

    group: str  # "" for the core group
    version: str  # e.g. v1
    plural: str  # the URL segment: pods
    kind: str  # Pod
    namespaced: bool  # False for nodes and namespaces
    short_names: tuple[str, ...] = ()  # kubectl's aliases: po
    subresources: tuple[str, ...] = ()  # "status" (own spec/status split), "binding" (pods)
    fields: frozenset[str] = frozenset()  # field selector paths beyond metadata.name/namespace
    field_aliases: tuple[tuple[str, str], ...] = ()  # other spellings of those paths: (alias, path)
    storage: str = ""  # objects are shared by types with the same storage key ("" = group/plural)
    custom: bool = False  # a custom resource: merge and JSON patch only, updates must name a resourceVersion
    verbs: tuple[str, ...] = ALL_VERBS
    categories: tuple[str, ...] = ()  # "all" puts it in `kubectl get all`
    singular: str = field(default="")  # pod

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> str:
        return self.storage or f"{self.plural}.{self.group}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def field_paths(self) -> frozenset[str]:
        return COMMON_FIELDS | self.fields


_EVENT_FIELDS = frozenset({
    "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
    "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
    "reason", "reportingComponent", "source.component", "type"})
_EVENT_ALIASES = (("source", "source.component"),) + tuple(
    (f"regarding.{part}", f"involvedObject.{part}")
    for part in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
) + (("reportingController", "reportingComponent"),)

NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False, ("ns",), ("status",),
                          frozenset({"status.phase"}), singular="namespace",
                          verbs=("create", "delete", "get", "list", "patch", "update", "watch"))
NODES = ResourceType("", "v1", "nodes", "Node", False, ("no",), ("status",), frozenset({"spec.unschedulable"}),
                     singular="node")
PODS = ResourceType("", "v1", "pods", "Pod", True, ("po",), ("binding", "status"), frozenset({
    "spec.nodeName", "spec.schedulerName", "status.phase", "spec.restartPolicy", "spec.serviceAccountName",
    "status.podIP", "status.nominatedNodeName", "spec.hostNetwork"}), categories=("all",), singular="pod")
BINDINGS = ResourceType("", "v1", "bindings", "Binding", True, verbs=("create",), singular="binding")
CORE_EVENTS = ResourceType("", "v1", "events", "Event", True, ("ev",), fields=_EVENT_FIELDS,
                           field_aliases=_EVENT_ALIASES, storage="events", singular="event")
EVENTS = ResourceType("events.k8s.io", "v1", "events", "Event", True, ("ev",), fields=_EVENT_FIELDS,
                      field_aliases=_EVENT_ALIASES, storage="events", singular="event")
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, singular="lease")
PODGROUPS = ResourceType(PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL, PODGROUP_KIND, True, ("pg", "pgs"),
                         ("status",), custom=True, singular="podgroup")

TYPES: tuple[ResourceType, ...] = (NAMESPACES, NODES, PODS, BINDINGS, CORE_EVENTS, EVENTS, LEASES, PODGROUPS)

#: (group, version) -> {plural: type}
BY_GROUP_VERSION: dict[tuple[str, str], dict[str, ResourceType]] = {}
for _type in TYPES:
    BY_GROUP_VERSION.setdefault((_type.group, _type.version), {})[_type.plural] = _type

#: API groups in discovery order (the core group is served under /api, not /apis).
GROUPS: tuple[tuple[str, str], ...] = tuple(dict.fromkeys((t.group, t.version) for t in TYPES if t.group))
