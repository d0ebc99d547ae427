"""Kubernetes objects (JSON dicts, as the apiserver sends them) -> the plain data the scheduler reasons about.

The watch hands raw JSON over, never the client's generated models: turning 10,000 pods into V1Pod objects
would cost more than scheduling them. Everything here is pure; a malformed field becomes a `problem` string
that the scheduler reports (as an Event), never an exception.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Mapping

from coach.domain.identity import FunctionId
from coach.domain.kube import POD_GROUP_LABEL, SLOTS_LABEL

#: Pod phases after which a pod holds no slot (kube-scheduler does not count terminated pods either).
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class NodeInfo:
    """A node as placement sees it."""

    name: str  # metadata.name
    slots: int  # Coach function slots: the coach.io/slots label, else status.allocatable.pods, else 0
    schedulable: bool  # false when spec.unschedulable (cordoned)
    problem: str | None = None  # why the slots label was ignored, if it was


@dataclass(frozen=True)
class PodInfo:
    """A pod whose spec.schedulerName is Coach's."""

    namespace: str  # metadata.namespace
    name: str  # metadata.name
    uid: str  # metadata.uid: a pod deleted and created again under the same name is another pod
    node: str | None  # spec.nodeName: None while pending
    fid: FunctionId | None  # the function it runs, from its labels; None when they are missing or wrong
    group: str | None  # its PodGroup's name (the scheduling.x-k8s.io/pod-group label); None when absent
    problem: str | None  # why it cannot be placed whatever the cluster holds (labels), else None
    terminal: bool  # Succeeded or Failed: holds no slot
    deleting: bool  # metadata.deletionTimestamp is set: never placed, keeps its node's slot until gone
    resource_version: str  # metadata.resourceVersion
    created: str = ""  # metadata.creationTimestamp (RFC 3339): the arrival order of pods listed together

    @property
    def key(self) -> str:
        """`namespace/name`, unique among the pods of the cluster."""
        return f"{self.namespace}/{self.name}"

    @property
    def group_key(self) -> str | None:
        """`namespace/group`: PodGroups are namespaced, like their pods."""
        return None if self.group is None else f"{self.namespace}/{self.group}"


@dataclass(frozen=True)
class GroupInfo:
    """A PodGroup (scheduling.x-k8s.io/v1alpha1)."""

    namespace: str  # metadata.namespace
    name: str  # metadata.name
    min_member: int | None  # spec.minMember; None when missing or not a whole number >= 1

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(text: Any) -> int | None:
    """A whole, non-negative count from a label or a quantity ('110'); None if it is anything else."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text if text >= 0 else None
    if isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= 12:
        return int(text)
    return None


def node_info(obj: Mapping[str, Any]) -> NodeInfo:
    """A node's name, slots and whether it takes new pods."""
    meta = _dict(obj.get("metadata"))
    labels = _dict(meta.get("labels"))
    allocatable = _dict(_dict(obj.get("status")).get("allocatable"))
    problem = None
    slots = None
    if SLOTS_LABEL in labels:
        slots = _count(labels[SLOTS_LABEL])
        if slots is None:
            problem = f"label {SLOTS_LABEL}={str(labels[SLOTS_LABEL])[:40]!r} is not a whole number >= 0"
    if slots is None:
        slots = _count(allocatable.get("pods")) or 0
    return NodeInfo(name=str(meta.get("name", "")), slots=slots,
                    schedulable=not _dict(obj.get("spec")).get("unschedulable", False), problem=problem)


def pod_info(obj: Mapping[str, Any]) -> PodInfo:
    """A pod's identity, node and what it runs."""
    meta = _dict(obj.get("metadata"))
    labels = _dict(meta.get("labels"))
    fid, problem = None, None
    try:
        fid = FunctionId.from_labels(labels)
        if not fid.job or fid.index < 0:
            raise ValueError("empty job or negative index")
    except KeyError as missing:
        fid, problem = None, f"missing label {missing.args[0]}: Coach places only pods that carry a function's labels"
    except (ValueError, TypeError):
        fid, problem = None, "labels coach.io/job, coach.io/role, coach.io/index do not name a function"
    group = labels.get(POD_GROUP_LABEL) or None
    if problem is None and group is None:
        problem = f"missing label {POD_GROUP_LABEL}: Coach places a pod only with its job's PodGroup"
    status = _dict(obj.get("status"))
    return PodInfo(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
                   uid=str(meta.get("uid", "")), node=_dict(obj.get("spec")).get("nodeName") or None,
                   fid=fid, group=group, problem=problem, terminal=status.get("phase") in TERMINAL_PHASES,
                   deleting=bool(meta.get("deletionTimestamp")), resource_version=str(meta.get("resourceVersion", "")),
                   created=str(meta.get("creationTimestamp", "")))


def group_info(obj: Mapping[str, Any]) -> GroupInfo:
    meta = _dict(obj.get("metadata"))
    min_member = _count(_dict(obj.get("spec")).get("minMember"))
    return GroupInfo(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
                     min_member=min_member if min_member else None)


def resource_version(obj: Mapping[str, Any]) -> str | None:
    """metadata.resourceVersion of an object or a list, or None."""
    version = _dict(obj.get("metadata")).get("resourceVersion")
    return str(version) if version else None


def rfc3339(now_s: float, micro: bool = False) -> str:
    """A Kubernetes Time (seconds) or MicroTime (microseconds), in UTC."""
    moment = datetime.datetime.fromtimestamp(now_s, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def parse_time_s(text: Any) -> float | None:
    """Seconds since the epoch of a Kubernetes Time or MicroTime; None if it is not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()
