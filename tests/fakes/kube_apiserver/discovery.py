"""The discovery documents kubectl reads before anything else: /version, /api, /apis, /api/v1, /apis/<g>/<v>.
Pure: built from the resource table.
"""

from __future__ import annotations

from typing import Any

from tests.fakes.kube_apiserver.resources import BY_GROUP_VERSION, GROUPS, ResourceType

Obj = dict[str, Any]

#: The Kubernetes version this fake claims: within kubectl's supported skew of both 1.20-era and current kubectl.
VERSION: Obj = {"major": "1", "minor": "30", "gitVersion": "v1.30.0-coach-fake", "gitCommit": "0" * 40,
                "gitTreeState": "clean", "buildDate": "2024-04-17T00:00:00Z", "goVersion": "go1.22.2",
                "compiler": "gc", "platform": "linux/amd64"}


def api_versions(server_address: str) -> Obj:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def _group(name: str) -> Obj:
    versions = [{"groupVersion": f"{g}/{v}", "version": v} for g, v in GROUPS if g == name]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def api_group_list() -> Obj:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group(name) for name in dict.fromkeys(g for g, _ in GROUPS)]}


def api_group(name: str) -> Obj | None:
    if not any(g == name for g, _ in GROUPS):
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name)}


def _entries(rt: ResourceType) -> list[Obj]:
    main: Obj = {"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced, "kind": rt.kind,
                 "verbs": list(rt.verbs)}
    if rt.short_names:
        main["shortNames"] = list(rt.short_names)
    if rt.categories:
        main["categories"] = list(rt.categories)
    entries = [main]
    if "binding" in rt.subresources:
        entries.append({"name": f"{rt.plural}/binding", "singularName": "", "namespaced": rt.namespaced,
                        "kind": "Binding", "verbs": ["create"]})
    if rt.has_status:
        entries.append({"name": f"{rt.plural}/status", "singularName": "", "namespaced": rt.namespaced,
                        "kind": rt.kind, "verbs": ["get", "patch", "update"]})
    return entries


def resource_list(group: str, version: str) -> Obj | None:
    types = BY_GROUP_VERSION.get((group, version))
    if types is None:
        return None
    doc: Obj = {"kind": "APIResourceList", "groupVersion": f"{group}/{version}" if group else version,
                "resources": [entry for rt in types.values() for entry in _entries(rt)]}
    if group:
        doc["apiVersion"] = "v1"
    return doc
