"""Cluster files -> ClusterSpec (nodes, slots, prices). `load_cluster` is the only function here that reads a file."""

from __future__ import annotations

import math
import re
from pathlib import Path

import yaml

from coach.domain.cluster import ClusterSpec, DEFAULT_CLUSTER, NodeSpec
from coach.files.yaml_errors import invalid_yaml_line

NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
TOP_FIELDS = {"name", "price_per_slot_s", "nodes", "scheduler"}
NODE_FIELDS = {"name", "slots", "price_per_slot_s"}


class ClusterFileError(Exception):
    """A bad cluster file; `lines` holds `FILE: FIELD: what is wrong` lines."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def _positive_number(value, where: str, errors: list[str], integer: bool) -> bool:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        errors.append(f"{where}: expected {'an integer' if integer else 'a number'}, got {type(value).__name__}")
        return False
    if not math.isfinite(value) or (value <= 0 if integer else value < 0):
        errors.append(f"{where}: must be {'> 0' if integer else '>= 0'}, got {value}")
        return False
    return True


def parse_cluster(data, source: str) -> ClusterSpec:
    """Validate already-parsed YAML; raise ClusterFileError listing every problem."""
    errors: list[str] = []
    if not isinstance(data, dict):
        raise ClusterFileError([f"{source}: (file): expected a mapping with 'nodes'"])
    for key in sorted(set(data) - TOP_FIELDS, key=str):
        errors.append(f"{source}: {key}: unknown field")
    default_price = data.get("price_per_slot_s", 0.0)
    if "price_per_slot_s" in data:
        _positive_number(default_price, f"{source}: price_per_slot_s", errors, integer=False)
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        errors.append(f"{source}: nodes: required, a non-empty list of nodes")
        raw_nodes = []
    nodes, seen = [], set()
    for i, raw in enumerate(raw_nodes):
        where = f"{source}: nodes[{i}]"
        if not isinstance(raw, dict):
            errors.append(f"{where}: expected a mapping with name and slots")
            continue
        for key in sorted(set(raw) - NODE_FIELDS, key=str):
            errors.append(f"{where}.{key}: unknown field")
        name = raw.get("name")
        if not isinstance(name, str) or not NODE_NAME.fullmatch(name):
            errors.append(f"{where}.name: required, letters, digits, '.', '_' or '-'")
            name = None
        elif name in seen:
            errors.append(f"{where}.name: duplicate node name '{name}'")
        else:
            seen.add(name)
        ok = "slots" in raw and _positive_number(raw["slots"], f"{where}.slots", errors, integer=True)
        if "slots" not in raw:
            errors.append(f"{where}.slots: required field missing")
        if "price_per_slot_s" in raw:
            price = raw["price_per_slot_s"]
            ok = _positive_number(price, f"{where}.price_per_slot_s", errors, integer=False) and ok
        else:  # inherits the top-level price, which is reported once, above
            price = default_price
        if ok and name is not None:
            nodes.append(NodeSpec(name, raw["slots"], float(price)))
    scheduler = data.get("scheduler")
    if scheduler is not None:
        from scheduler_fork import PROFILES

        if scheduler not in PROFILES:
            errors.append(f"{source}: scheduler: unknown profile {scheduler!r}; known: {', '.join(sorted(PROFILES))}")
    name = data.get("name", Path(source).stem)
    if not isinstance(name, str):
        errors.append(f"{source}: name: expected a string")
    if errors:
        raise ClusterFileError(errors)
    return ClusterSpec(name=name, nodes=tuple(nodes), source=source, scheduler=scheduler)


def load_cluster(path: str | Path | None) -> ClusterSpec:
    """Read a cluster file, or return DEFAULT_CLUSTER when no path is given."""
    if path is None:
        return DEFAULT_CLUSTER
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ClusterFileError([f"{source}: (file): {error.strerror or error}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ClusterFileError([invalid_yaml_line(source, error, with_problem=False)]) from None
    return parse_cluster(data, source)
