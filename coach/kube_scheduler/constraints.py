"""A pod's and a node's placement rules, from their JSON, as scheduler_fork's values: a node's taints, a pod's
tolerations, spec.nodeSelector and required node affinity.

Pure. What the apiserver would have refused (an unknown operator, an effect that does not exist) becomes a
`problem` string, never an exception: the pod is then held with that reason, the node reported.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

from scheduler_fork import Requirement, Taint, Term, Toleration
from scheduler_fork.constraints import Labels

#: Where the required node affinity sits in a pod's spec.
AFFINITY_PATH = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def node_taints(spec: Mapping[str, Any]) -> tuple[tuple[Taint, ...], str | None]:
    """spec.taints as Taints (in the node's order), and a problem if some taint was malformed (it is left out)."""
    taints, problem = [], None
    for raw in _list(spec.get("taints")):
        raw = _dict(raw)
        try:
            taints.append(Taint(_text(raw.get("key")), _text(raw.get("value")), _text(raw.get("effect"))))
        except ValueError as error:
            problem = problem or f"spec.taints: {error}"
    return tuple(taints), problem


def tolerations(spec: Mapping[str, Any]) -> tuple[tuple[Toleration, ...], str | None]:
    """spec.tolerations as Tolerations ('' operator is Equal, as the apiserver defaults it), and a problem."""
    raws = _list(spec.get("tolerations"))
    if not raws:
        return (), None
    try:  # the JSON as it came, as the key of what it was worked out to last time
        return _tolerations(tuple(tuple(raw.items()) if isinstance(raw, dict) else raw for raw in raws))
    except TypeError:  # something unhashable in it: malformed, worked out without remembering
        return _tolerations.__wrapped__(tuple(tuple(raw.items()) if isinstance(raw, dict) else () for raw in raws))


@functools.lru_cache(maxsize=1024)
def _tolerations(raws: tuple) -> tuple[tuple[Toleration, ...], str | None]:
    """The Tolerations of spec.tolerations (each as its JSON's items), remembered: every pod gets the same two
    from the DefaultTolerationSeconds admission plugin."""
    found = []
    for raw in raws:
        raw = dict(raw) if isinstance(raw, tuple) else {}
        try:
            found.append(Toleration(_text(raw.get("key")), _text(raw.get("operator")) or "Equal",
                                    _text(raw.get("value")), _text(raw.get("effect"))))
        except (ValueError, TypeError) as error:
            return (), f"spec.tolerations: {error}"
    return tuple(found), None


def node_selector(spec: Mapping[str, Any]) -> tuple[Labels, str | None]:
    """spec.nodeSelector as sorted (key, value) pairs, and a problem if it is not a map of strings."""
    raw = spec.get("nodeSelector")
    if raw is None:
        return (), None
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        return (), "spec.nodeSelector must map label keys to string values"
    return tuple(sorted(raw.items())), None


def _requirements(raws: Any, where: str) -> tuple[Requirement, ...]:
    out = []
    for raw in _list(raws):
        raw = _dict(raw)
        values = raw.get("values") or []
        if not isinstance(values, list):
            raise ValueError(f"{where}: values must be a list")
        out.append(Requirement(_text(raw.get("key")), _text(raw.get("operator")), tuple(str(v) for v in values)))
    return tuple(out)


def node_affinity(spec: Mapping[str, Any]) -> tuple[tuple[Term, ...] | None, str | None]:
    """The required node affinity's terms (None: the pod has none), and a problem if a term is malformed."""
    required = _dict(_dict(_dict(spec.get("affinity")).get("nodeAffinity"))
                     .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return None, None
    terms = []
    try:
        for raw in _list(required.get("nodeSelectorTerms")):
            raw = _dict(raw)
            terms.append(Term(_requirements(raw.get("matchExpressions"), "matchExpressions"),
                              _requirements(raw.get("matchFields"), "matchFields")))
    except ValueError as error:
        return None, f"{AFFINITY_PATH}: {error}"
    return tuple(terms), None


__all__ = ["AFFINITY_PATH", "node_taints", "tolerations", "node_selector", "node_affinity"]
