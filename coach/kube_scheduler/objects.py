"""Kubernetes objects (JSON dicts, as the apiserver sends them) -> the plain data the scheduler reasons about.

The watch hands raw JSON over, never the client's generated models: turning 10,000 pods into V1Pod objects
would cost more than scheduling them. Everything here is pure; a malformed field becomes a `problem` string
that the scheduler reports (as an Event), never an exception. Quantities ("100m", "2Gi", "1e3") become whole
numbers: cpu in millicores, everything else (memory in bytes, pods, extended resources) in units, rounded up as
kube-scheduler rounds them (MilliValue, Value).
"""

from __future__ import annotations

import datetime
import functools
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping

from coach.domain.identity import FunctionId
from coach.domain.kube import POD_GROUP_LABEL, SCHEDULER_NAME, SLOTS_LABEL
from coach.kube_scheduler.constraints import node_affinity, node_selector, node_taints, tolerations
from scheduler_fork import Taint, Term, Toleration
from scheduler_fork.constraints import CPU, Amounts, Labels

#: Pod phases after which a pod holds no slot (kube-scheduler does not count terminated pods either).
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class NodeInfo:
    """A node as placement sees it (everything kube-scheduler's filters read, and Coach's slot cap)."""

    name: str  # metadata.name
    slots: int | None  # at most this many of Coach's pods: the coach.io/slots label; None without it (no cap)
    schedulable: bool  # false when spec.unschedulable (cordoned)
    problem: str | None = None  # what was malformed and ignored (the slots label, a quantity, a taint), if anything
    allocatable: Amounts = ()  # status.allocatable: cpu in millicores, memory in bytes, pods, ...; missing = 0
    labels: Labels = ()  # metadata.labels
    taints: tuple[Taint, ...] = ()  # spec.taints, in order


@dataclass(frozen=True)
class PodInfo:
    """A pod: Coach's to place (its spec.schedulerName is Coach's), or another's that takes room on its node."""

    namespace: str  # metadata.namespace
    name: str  # metadata.name
    uid: str  # metadata.uid: a pod deleted and created again under the same name is another pod
    node: str | None  # spec.nodeName: None while pending
    fid: FunctionId | None  # the function it runs, from its labels; None when they are missing or wrong
    group: str | None  # its PodGroup's name (the scheduling.x-k8s.io/pod-group label); None when absent
    problem: str | None  # why it cannot be placed whatever the cluster holds (labels, requests, selection), else None
    terminal: bool  # Succeeded or Failed: holds no slot
    deleting: bool  # metadata.deletionTimestamp is set: never placed, keeps its node's slot until gone
    resource_version: str  # metadata.resourceVersion
    created: str = ""  # metadata.creationTimestamp (RFC 3339): the arrival order of pods listed together
    scheduler: str = ""  # spec.schedulerName
    requests: Amounts = ()  # what it takes of its node: max(sum over containers, any init container) + overhead
    tolerations: tuple[Toleration, ...] = ()  # spec.tolerations
    node_selector: Labels = ()  # spec.nodeSelector
    node_affinity: tuple[Term, ...] | None = None  # the required node affinity's terms; None: none
    phase: str = ""  # status.phase (Pending, Running, ...): its PodGroup's status counts the running ones

    @property
    def demand(self) -> tuple:
        """What it asks of a node (two pods with equal demands fit the same nodes)."""
        return (self.requests, self.tolerations, self.node_selector, self.node_affinity)

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


#: A Kubernetes quantity: a signed decimal number, then a binary suffix (Ki..Ei), a decimal exponent (e3, E-2)
#: or a decimal suffix (m, k, M, G, T, P, E) or nothing.
_QUANTITY = re.compile(r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
                       r"(?:(Ki|Mi|Gi|Ti|Pi|Ei)|[eE]([+-]?[0-9]+)|(m|k|M|G|T|P|E)?)")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": Fraction(1, 1000), "": Fraction(1), "k": Fraction(10**3), "M": Fraction(10**6),
            "G": Fraction(10**9), "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18)}
#: The largest amount a quantity may come to (kube keeps them in an int64).
MAX_AMOUNT = 2**63 - 1


def parse_quantity(value: Any, milli: bool = False) -> tuple[int | None, str | None]:
    """A quantity as a whole number >= 0, rounded up: in thousandths when `milli` (cpu: "100m" -> 100, "0.5" ->
    500, "1" -> 1000), else in units ("2Gi" -> 2147483648, "1e3" -> 1000, "1k" -> 1000, "1M" -> 1000000).
    Returns (amount, None), or (None, why) for anything else."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None, f"{value!r} is not a quantity"
    return _quantity(value, milli)


@functools.lru_cache(maxsize=4096, typed=True)
def _quantity(value: str | int | float, milli: bool) -> tuple[int | None, str | None]:
    """parse_quantity's work, remembered: every pod of a function asks the same "500m" and "1Gi"."""
    if isinstance(value, float) and not math.isfinite(value):
        return None, f"{value!r} is not a quantity"
    text = value if isinstance(value, str) else repr(value)
    match = _QUANTITY.fullmatch(text) if len(text) <= 64 else None
    if match is None:
        return None, f"{text[:40]!r} is not a quantity"
    sign, number, binary, exponent, decimal = match.groups()
    if exponent is not None and abs(int(exponent)) > 40:
        return None, f"{text!r} is out of range"
    amount = Fraction(number)
    if binary:
        amount *= _BINARY[binary]
    elif exponent is not None:
        amount *= Fraction(10) ** int(exponent)
    else:
        amount *= _DECIMAL[decimal or ""]
    if sign == "-" and amount:
        return None, f"{text!r} is negative"
    whole = math.ceil(amount * 1000 if milli else amount)
    if whole > MAX_AMOUNT:
        return None, f"{text!r} is out of range"
    return whole, None


def parse_resources(value: Any, where: str) -> tuple[dict[str, int], str | None]:
    """A resource map ({"cpu": "500m", "memory": "1Gi"}) as whole amounts (cpu in millicores); a malformed entry
    is left out and named in the problem."""
    amounts, problem = {}, None
    for name, quantity in _dict(value).items():
        amount, why = parse_quantity(quantity, milli=name == CPU)
        if why is None:
            amounts[str(name)] = amount
        elif problem is None:
            problem = f"{where}.{name}: {why}"
    return amounts, problem


def pod_requests(spec: Mapping[str, Any]) -> tuple[Amounts, str | None]:
    """What a pod takes of its node, as kube-scheduler counts it: per resource, the larger of the sum over its
    containers and the largest init container (they run one at a time, before the others), plus the pod's
    overhead (its RuntimeClass's)."""
    total, problem = _container_requests(spec, "containers", sum)
    if spec.get("initContainers"):
        largest, why = _container_requests(spec, "initContainers", max)
        problem = problem or why
        for name, amount in largest.items():
            total[name] = max(total.get(name, 0), amount)
    if spec.get("overhead"):
        overhead, why = parse_resources(spec.get("overhead"), "spec.overhead")
        problem = problem or why
        for name, amount in overhead.items():
            total[name] = total.get(name, 0) + amount
    return tuple(sorted((name, amount) for name, amount in total.items() if amount)), problem


def _container_requests(spec: Mapping[str, Any], kind: str, combine) -> tuple[dict[str, int], str | None]:
    """The requests of spec[kind]'s containers, combined per resource by `combine` (sum or max), and a problem."""
    out: dict[str, int] = {}
    problem = None
    containers = spec.get(kind)
    for index, container in enumerate(containers if isinstance(containers, list) else ()):
        requests = _dict(_dict(container).get("resources")).get("requests")
        if not requests:
            continue
        found, why = parse_resources(requests, f"spec.{kind}[{index}].resources.requests")
        problem = problem or why
        for name, amount in found.items():
            out[name] = combine((out[name], amount)) if name in out else amount
    return out, problem


def node_info(obj: Mapping[str, Any]) -> NodeInfo:
    """A node's name, slot cap, allocatable resources, labels, taints and whether it is cordoned."""
    meta = _dict(obj.get("metadata"))
    labels = _dict(meta.get("labels"))
    spec = _dict(obj.get("spec"))
    problems = []
    slots = None
    if SLOTS_LABEL in labels:
        slots = _count(labels[SLOTS_LABEL])
        if slots is None:
            problems.append(f"label {SLOTS_LABEL}={str(labels[SLOTS_LABEL])[:40]!r} is not a whole number >= 0; "
                            f"no slot cap")
    status = _dict(obj.get("status"))
    if "allocatable" not in status:
        problems.append("no status.allocatable yet: no pod fits until its kubelet reports it")
    allocatable, why = parse_resources(status.get("allocatable"), "status.allocatable")
    problems.append(why)
    taints, why = node_taints(spec)
    problems.append(why)
    return NodeInfo(name=str(meta.get("name", "")), slots=slots, schedulable=not spec.get("unschedulable", False),
                    problem="; ".join(p for p in problems if p) or None,
                    allocatable=tuple(sorted((k, v) for k, v in allocatable.items() if v)),
                    labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())), taints=taints)


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
    spec = _dict(obj.get("spec"))
    requests, why_requests = pod_requests(spec)
    tolerated, why_tolerations = tolerations(spec)
    selector, why_selector = node_selector(spec)
    terms, why_affinity = node_affinity(spec)
    problem = problem or why_requests or why_tolerations or why_selector or why_affinity
    status = _dict(obj.get("status"))
    return PodInfo(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
                   uid=str(meta.get("uid", "")), node=spec.get("nodeName") or None,
                   fid=fid, group=group, problem=problem, terminal=status.get("phase") in TERMINAL_PHASES,
                   deleting=bool(meta.get("deletionTimestamp")), resource_version=str(meta.get("resourceVersion", "")),
                   created=str(meta.get("creationTimestamp", "")), scheduler=str(spec.get("schedulerName") or ""),
                   requests=requests, tolerations=tolerated, node_selector=selector, node_affinity=terms,
                   phase=str(status.get("phase") or ""))


def coachs(pod: PodInfo, namespace: str | None) -> bool:
    """The pod is Coach's to place: its schedulerName is Coach's, and it lives in the namespace Coach schedules
    (any, when None). Every other pod only takes room on its node once bound."""
    return pod.scheduler == SCHEDULER_NAME and (namespace is None or pod.namespace == namespace)


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
    moment = datetime.datetime.fromtimestamp(now_s, tz=datetime.UTC)
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
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()
