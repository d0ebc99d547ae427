"""What a pod asks of a node and what a node refuses: resource amounts, taints and tolerations, node selectors.

Frozen, hashable values (so that pods and nodes that ask and offer the same share a bucket) and kube's matching
rules for them, as k8s.io/api/core/v1's Toleration.ToleratesTaint and component-helpers' node affinity define
them. The Filter plugins (plugins/node_fit.py) apply these rules; coach.kube_scheduler builds the values from a
pod's and a node's JSON.

Side effects: none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

#: Resource names, as in a pod's requests and a node's status.allocatable.
CPU, MEMORY, PODS = "cpu", "memory", "pods"

#: Taint effects. Only NoSchedule and NoExecute keep pods off a node; PreferNoSchedule is a score, not a filter.
NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "PreferNoSchedule", "NoExecute"
EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)
FILTERING_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})

#: The taint a cordoned node carries (kube's NodeUnschedulable lets a pod that tolerates it onto the node).
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"

#: The one field a node selector term may match on (matchFields).
NODE_NAME_FIELD = "metadata.name"

#: Node selector operators (matchExpressions; matchFields takes In and NotIn only).
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")

#: Resource name -> whole amount (cpu in millicores, memory in bytes, pods and extended resources in units), as
#: sorted pairs without zeros: equal amounts are equal tuples.
Amounts = tuple[tuple[str, int], ...]
#: Label key -> value, as sorted pairs.
Labels = tuple[tuple[str, str], ...]


def amounts(value: Mapping[str, int] | Iterable[tuple[str, int]] | None, what: str) -> Amounts:
    """`value` (a mapping or pairs) as sorted pairs without zero amounts; ValueError unless every amount is a
    whole number >= 0."""
    pairs = value.items() if isinstance(value, Mapping) else (value or ())
    out = {}
    for name, amount in pairs:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{what}: a resource name must be a non-empty string, got {name!r}")
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            raise ValueError(f"{what}: {name} must be a whole amount >= 0, got {amount!r}")
        if amount:
            out[name] = amount
    return tuple(sorted(out.items()))


def labels(value: Mapping[str, str] | Iterable[tuple[str, str]] | None, what: str) -> Labels:
    """`value` (a mapping or pairs) as sorted (key, value) pairs; ValueError unless every key and value is a string."""
    pairs = value.items() if isinstance(value, Mapping) else (value or ())
    out = {}
    for key, text in pairs:
        if not isinstance(key, str) or not key or not isinstance(text, str):
            raise ValueError(f"{what}: labels must map non-empty strings to strings, got {key!r}: {text!r}")
        out[key] = text
    return tuple(sorted(out.items()))


@dataclass(frozen=True)
class Taint:
    """A node's taint: pods that do not tolerate it stay off the node (NoSchedule, NoExecute)."""

    key: str  # e.g. node.kubernetes.io/not-ready
    value: str = ""  # often empty
    effect: str = NO_SCHEDULE  # NoSchedule, PreferNoSchedule or NoExecute

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key or not isinstance(self.value, str):
            raise ValueError(f"a taint needs a non-empty key and a string value, got {self.key!r}={self.value!r}")
        if self.effect not in EFFECTS:
            raise ValueError(f"taint {self.key}: effect must be one of {', '.join(EFFECTS)}, got {self.effect!r}")


@dataclass(frozen=True)
class Toleration:
    """A pod's toleration. An empty key with operator Exists tolerates every taint; an empty effect, every effect."""

    key: str = ""  # the taint key it tolerates; "" = every key (operator Exists only)
    operator: str = "Equal"  # "Equal" (the value must match) or "Exists" (any value)
    value: str = ""  # compared with the taint's value under Equal
    effect: str = ""  # the effect it tolerates; "" = every effect

    def __post_init__(self) -> None:
        if self.operator not in ("Equal", "Exists"):
            raise ValueError(f"toleration {self.key!r}: operator must be Equal or Exists, got {self.operator!r}")
        if not isinstance(self.key, str) or not isinstance(self.value, str):
            raise ValueError(f"toleration {self.key!r}: key and value must be strings")
        if self.effect and self.effect not in EFFECTS:
            raise ValueError(f"toleration {self.key!r}: effect must be empty or one of {', '.join(EFFECTS)}")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration with an empty key must use operator Exists")

    def tolerates(self, taint: Taint) -> bool:
        """kube's Toleration.ToleratesTaint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


def untolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> Taint | None:
    """The first NoSchedule or NoExecute taint that no toleration tolerates (kube: FindMatchingUntoleratedTaint)."""
    tolerations = tuple(tolerations)
    for taint in taints:
        if taint.effect in FILTERING_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def tolerates_unschedulable(tolerations: Iterable[Toleration]) -> bool:
    """The pod may go onto a cordoned node (kube's NodeUnschedulable)."""
    taint = Taint(UNSCHEDULABLE_TAINT, "", NO_SCHEDULE)
    return any(t.tolerates(taint) for t in tolerations)


def _integer(text: str | None) -> int | None:
    """A label value as kube's Gt/Lt read it (a base-10 int64), else None."""
    if text is None:
        return None
    try:
        number = int(text, 10)
    except ValueError:
        return None
    return number if -(2**63) <= number < 2**63 else None


@dataclass(frozen=True)
class Requirement:
    """One node selector requirement: `key` `operator` `values` (a NodeSelectorRequirement)."""

    key: str  # a label key, or metadata.name in matchFields
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()  # In/NotIn: one or more; Exists/DoesNotExist: none; Gt/Lt: one integer

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"a node selector requirement needs a key, got {self.key!r}")
        if self.operator not in OPERATORS:
            raise ValueError(f"requirement {self.key}: operator must be one of {', '.join(OPERATORS)}, "
                             f"got {self.operator!r}")
        if not all(isinstance(v, str) for v in self.values):
            raise ValueError(f"requirement {self.key}: values must be strings")
        count = len(self.values)
        if self.operator in ("In", "NotIn") and count == 0:
            raise ValueError(f"requirement {self.key} {self.operator}: needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and count:
            raise ValueError(f"requirement {self.key} {self.operator}: takes no values")
        if self.operator in ("Gt", "Lt") and (count != 1 or _integer(self.values[0]) is None):
            raise ValueError(f"requirement {self.key} {self.operator}: needs one integer value")

    def matches(self, value: str | None) -> bool:
        """Whether a node whose label (or field) `key` is `value` (None: absent) meets the requirement."""
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        number = _integer(value)
        if number is None:
            return False
        bound = int(self.values[0])
        return number > bound if op == "Gt" else number < bound


@dataclass(frozen=True)
class Term:
    """A node selector term: every expression (on labels) and every field requirement must hold. An empty term
    matches no node (kube: "a null or empty node selector term matches no objects")."""

    expressions: tuple[Requirement, ...] = ()  # matchExpressions, on the node's labels
    fields: tuple[Requirement, ...] = ()  # matchFields, on metadata.name (In and NotIn)

    def __post_init__(self) -> None:
        object.__setattr__(self, "expressions", tuple(self.expressions))
        object.__setattr__(self, "fields", tuple(self.fields))
        for field_requirement in self.fields:
            if field_requirement.key != NODE_NAME_FIELD or field_requirement.operator not in ("In", "NotIn"):
                raise ValueError(f"matchFields supports {NODE_NAME_FIELD} with In or NotIn only, "
                                 f"got {field_requirement.key} {field_requirement.operator}")

    def matches(self, node_labels: Mapping[str, str], node_name: str | None) -> bool:
        if not self.expressions and not self.fields:
            return False
        return (all(r.matches(node_labels.get(r.key)) for r in self.expressions)
                and all(r.matches(node_name) for r in self.fields))


def selects(node_selector: Labels, terms: tuple[Term, ...] | None, node_labels: Mapping[str, str],
            node_name: str | None) -> bool:
    """kube's NodeAffinity filter: every nodeSelector pair is a label of the node, and some required term matches."""
    for key, value in node_selector:
        if node_labels.get(key) != value:
            return False
    return terms is None or any(term.matches(node_labels, node_name) for term in terms)


def selector_keys(node_selector: Labels, terms: tuple[Term, ...] | None) -> tuple[frozenset[str], bool]:
    """The label keys a pod's node selection reads, and whether it reads the node's name (matchFields)."""
    keys = {key for key, _ in node_selector}
    by_name = False
    for term in terms or ():
        keys.update(r.key for r in term.expressions)
        by_name = by_name or bool(term.fields)
    return frozenset(keys), by_name


__all__ = [
    "CPU", "MEMORY", "PODS", "NO_SCHEDULE", "PREFER_NO_SCHEDULE", "NO_EXECUTE", "EFFECTS", "FILTERING_EFFECTS",
    "UNSCHEDULABLE_TAINT", "NODE_NAME_FIELD", "OPERATORS", "Amounts", "Labels", "amounts", "labels", "Taint",
    "Toleration", "untolerated", "tolerates_unschedulable", "Requirement", "Term", "selects", "selector_keys",
]
