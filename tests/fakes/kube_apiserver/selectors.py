"""Label and field selectors in the apiserver's syntax, parsed once per request and matched per object. Pure.

Labels: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a` (exists), `!a` (does not exist), `a>3`, `a<3`.
Fields: `path=value`, `path==value`, `path!=value`, comma-separated, `\\,` `\\=` `\\\\` escapes. A field that is
absent reads as "", so `spec.nodeName=` selects the pods no one has bound yet. Bad syntax raises ApiError 400.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tests.fakes.kube_apiserver.errors import bad_request

_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector."""

    key: str  # the label key
    op: str  # "=", "!=", "in", "notin", "exists", "!", ">", "<"
    values: frozenset[str]  # the values the term names (one for =, != , >, <)

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return has and value in self.values
        if self.op in ("!=", "notin"):
            return not has or value not in self.values
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        bound = int(next(iter(self.values)))
        try:
            number = int(value) if has else None
        except ValueError:
            return False
        return number is not None and (number > bound if self.op == ">" else number < bound)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside `( )`."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _check_key(key: str, term: str) -> str:
    if not _KEY.match(key):
        raise bad_request(f"unable to parse requirement: invalid label key {key!r} in {term!r}")
    return key


def _check_value(value: str, term: str) -> str:
    if not _VALUE.match(value):
        raise bad_request(f"unable to parse requirement: invalid label value {value!r} in {term!r}")
    return value


_SET_TERM = re.compile(r"^\s*(\S+)\s+(in|notin)\s*\((.*)\)\s*$")
_BINARY_TERM = re.compile(r"^\s*([^=!<>\s]+)\s*(==|!=|=|>|<)\s*(.*?)\s*$")


def _parse_requirement(term: str) -> Requirement:
    if m := _SET_TERM.match(term):
        values = [v.strip() for v in m.group(3).split(",")]
        return Requirement(_check_key(m.group(1), term), m.group(2),
                           frozenset(_check_value(v, term) for v in values))
    if m := _BINARY_TERM.match(term):
        key, op, value = m.group(1), m.group(2), m.group(3)
        if op in (">", "<") and not re.fullmatch(r"-?\d+", value):
            raise bad_request(f"unable to parse requirement: {op} needs an integer value in {term!r}")
        return Requirement(_check_key(key, term), "=" if op == "==" else op, frozenset({_check_value(value, term)}))
    stripped = term.strip()
    if stripped.startswith("!"):
        return Requirement(_check_key(stripped[1:].strip(), term), "!", frozenset())
    if stripped:
        return Requirement(_check_key(stripped, term), "exists", frozenset())
    raise bad_request("unable to parse requirement: empty term in label selector")


@dataclass(frozen=True)
class LabelSelector:
    """All requirements must hold; the empty selector matches everything."""

    requirements: tuple[Requirement, ...]

    @classmethod
    def parse(cls, text: str | None) -> "LabelSelector":
        if not text or not text.strip():
            return cls(())
        return cls(tuple(_parse_requirement(term) for term in _split_top_level(text)))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


@dataclass(frozen=True)
class FieldTerm:
    path: str  # e.g. spec.nodeName
    equal: bool  # True for = and ==, False for !=
    value: str


def _split_escaped(text: str, sep: str) -> list[str]:
    """Split on `sep` where it is not escaped by a backslash; escapes stay in the parts."""
    parts, current, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            current.append(text[i:i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _parse_field_term(term: str) -> FieldTerm:
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        for op, equal in (("!=", False), ("==", True), ("=", True)):
            if term.startswith(op, i):
                return FieldTerm(_unescape(term[:i]).strip(), equal, _unescape(term[i + len(op):]))
        i += 1
    raise bad_request(f"invalid selector: '{term}'; can't understand '{term}'")


@dataclass(frozen=True)
class FieldSelector:
    """Equality terms on an object's fields (the paths a resource type supports), all of which must hold."""

    terms: tuple[FieldTerm, ...]

    @classmethod
    def parse(cls, text: str | None, supported: frozenset[str], aliases: Mapping[str, str] | None = None
              ) -> "FieldSelector":
        """`supported` are the paths the type allows (else 400 "field label not supported"); `aliases` maps
        other spellings (events.k8s.io's `regarding.name`) onto them."""
        if not text or not text.strip():
            return cls(())
        terms = []
        for raw in _split_escaped(text, ","):
            term = _parse_field_term(raw)
            path = (aliases or {}).get(term.path, term.path)
            if path not in supported:
                raise bad_request(f"field label not supported: {term.path}")
            terms.append(FieldTerm(path, term.equal, term.value))
        return cls(tuple(terms))

    def matches(self, obj: Mapping[str, Any], read: Callable[[Mapping[str, Any], str], str] | None = None) -> bool:
        read = read or field_value
        return all((read(obj, t.path) == t.value) == t.equal for t in self.terms)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string at a dotted path, "" when any step is missing (as the apiserver's field sets do)."""
    node: Any = obj
    for step in path.split("."):
        if not isinstance(node, dict) or step not in node:  # JSON objects; typing.Mapping's check is slow
            return ""
        node = node[step]
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)
