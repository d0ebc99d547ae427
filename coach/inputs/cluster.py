"""Cluster files -> ClusterSpec (nodes, slots, prices). `load_cluster` is the only function here that reads a file.

Money is never silent: every node must have a price, its own `price_per_slot_s` or the file's top-level one; a
file that leaves a node without any is an error (only the embedded default cluster, which no file describes, has
its documented 0.0001). Every number has the bounds of CLUSTER_BOUNDS, and the file the caps of coach.inputs.limits.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml

from coach.domain.cluster import ClusterSpec, DEFAULT_CLUSTER, NodeSpec
from coach.inputs.jobs import YamlLoader
from coach.inputs.limits import (MAX_CLUSTER_FILE_BYTES, MAX_CLUSTER_VALUES, Bound, FileTooLarge, NotRegularFile,
                                YamlLimitError, YamlValueError, one_line, read_capped, short)
from coach.inputs.yaml_errors import FILE_FIELD, invalid_yaml_line

NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
TOP_FIELDS = {"name", "price_per_slot_s", "nodes", "scheduler"}
NODE_FIELDS = {"name", "slots", "price_per_slot_s"}

#: Most nodes a cluster file may list.
MAX_NODES = 100_000
#: Longest cluster name (it is a label in logs and summaries).
MAX_NAME_CHARS = 128
#: Every number of a cluster file and its bounds (docs/job-files.md, "Cluster files", lists them).
CLUSTER_BOUNDS: dict[str, Bound] = {
    "slots": Bound(True, 1, 100_000),  # per node
    "price_per_slot_s": Bound(False, 0.0, 1e6),  # money per slot-second, top-level or per node
}


class ClusterFileError(Exception):
    """A bad cluster file; `lines` holds `FILE: FIELD: what is wrong` lines."""

    def __init__(self, lines: list[str]):
        lines = [one_line(line, 1000) for line in lines]  # the messages are short already; this is a last resort
        super().__init__("\n".join(lines))
        self.lines = lines


class _Loader(YamlLoader):
    """The job files' YAML dialect (YAML 1.2 floats such as `1e-4`), with room for 100,000 nodes."""

    max_values = MAX_CLUSTER_VALUES


def _positive_number(value, where: str, errors: list[str], integer: bool) -> bool:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        errors.append(f"{where}: expected {'an integer' if integer else 'a number'}, got {type(value).__name__}")
        return False
    finite = isinstance(value, int) or math.isfinite(value)  # an int is finite, however large (no float() of it)
    if not finite or (value <= 0 if integer else value < 0):
        errors.append(f"{where}: must be {'> 0' if integer else '>= 0'}, got {short(value)}")
        return False
    bound = CLUSTER_BOUNDS["slots" if integer else "price_per_slot_s"]
    if value > bound.high:
        errors.append(f"{where}: must be <= {bound.high:g}, got {short(value)}")
        return False
    return True


def parse_cluster(data, source: str) -> ClusterSpec:
    """Validate already-parsed YAML; raise ClusterFileError listing every problem."""
    if not isinstance(data, dict):
        raise ClusterFileError([f"{source}: (file): expected a mapping with 'nodes'"])
    errors = [f"{source}: {short(key, 64) if not isinstance(key, str) else key[:64]}: unknown field"
              for key in sorted(set(data) - TOP_FIELDS, key=str)]
    default_ok = "price_per_slot_s" in data and _positive_number(
        data["price_per_slot_s"], f"{source}: price_per_slot_s", errors, integer=False)
    nodes = _parse_nodes(data, source, default_ok, errors)
    scheduler = data.get("scheduler")
    errors += _scheduler_problems(scheduler, source)
    name = data.get("name", Path(source).stem)
    errors += _name_problems(name, source)
    if errors:
        prefix = f"{source}: "
        raise ClusterFileError([prefix + one_line(line[len(prefix):]) if line.startswith(prefix) else line
                                for line in errors])
    return ClusterSpec(name=name, nodes=tuple(nodes), source=source, scheduler=scheduler)


def _parse_nodes(data: dict, source: str, default_ok: bool, errors: list[str]) -> list[NodeSpec]:
    """The nodes that are valid; the problems of the others in `errors`, one line for all nodes without a price."""
    raw_nodes = _node_list(data.get("nodes"), source, errors)
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_nodes):
        node = _parse_node(raw, f"{source}: nodes[{i}]", data, default_ok, seen, errors)
        if node is not None:
            nodes.append(node)
    unpriced = [f"nodes[{i}]" for i, raw in enumerate(raw_nodes)
                if isinstance(raw, dict) and "price_per_slot_s" not in raw and "price_per_slot_s" not in data]
    if unpriced:
        shown = ", ".join(unpriced[:3]) + (f" and {len(unpriced) - 3} more" if len(unpriced) > 3 else "")
        errors.append(f"{source}: price_per_slot_s: required field missing (no price for {shown}; "
                      "set it at the top level or on every node)")
    return nodes


def _node_list(raw_nodes, source: str, errors: list[str]) -> list:
    """The file's `nodes` when it is a non-empty list of at most MAX_NODES; else [] and a problem."""
    if not isinstance(raw_nodes, list) or not raw_nodes:
        errors.append(f"{source}: nodes: required, a non-empty list of nodes")
        return []
    if len(raw_nodes) > MAX_NODES:
        errors.append(f"{source}: nodes: at most {MAX_NODES} nodes, got {len(raw_nodes)}")
        return []
    return raw_nodes


def _parse_node(raw, where: str, data: dict, default_ok: bool, seen: set[str], errors: list[str]) -> NodeSpec | None:
    """One node when its name, slots and price (its own or the top level's) are valid; else None and problems."""
    if not isinstance(raw, dict):
        errors.append(f"{where}: expected a mapping with name and slots")
        return None
    errors.extend(f"{where}.{key}: unknown field" for key in sorted(set(raw) - NODE_FIELDS, key=str))
    name = _node_name(raw.get("name"), where, seen, errors)
    slots_ok = "slots" in raw and _positive_number(raw["slots"], f"{where}.slots", errors, integer=True)
    if "slots" not in raw:
        errors.append(f"{where}.slots: required field missing")
    price, price_ok = _node_price(raw, where, data, default_ok, errors)
    return NodeSpec(name, raw["slots"], float(price)) if slots_ok and price_ok and name is not None else None


def _node_name(name, where: str, seen: set[str], errors: list[str]) -> str | None:
    """The node's name when it is a valid one (a duplicate is a problem, but still its name); else None."""
    if not isinstance(name, str) or not NODE_NAME.fullmatch(name):
        errors.append(f"{where}.name: required, letters, digits, '.', '_' or '-'")
        return None
    if name in seen:
        errors.append(f"{where}.name: duplicate node name '{name}'")
    else:
        seen.add(name)
    return name


def _node_price(raw: dict, where: str, data: dict, default_ok: bool, errors: list[str]) -> tuple[Any, bool]:
    """A node's price and whether it is valid: its own, else the top level's (whose problem is reported once,
    by parse_cluster); (None, False) when neither is given (reported once for all such nodes, by _parse_nodes)."""
    if "price_per_slot_s" in raw:
        price = raw["price_per_slot_s"]
        return price, _positive_number(price, f"{where}.price_per_slot_s", errors, integer=False)
    if "price_per_slot_s" in data:
        return data["price_per_slot_s"], default_ok
    return None, False


def _scheduler_problems(scheduler, source: str) -> list[str]:
    """The problem of a `scheduler` that names no profile of scheduler_fork; none when it is not given."""
    if scheduler is None:
        return []
    from scheduler_fork import PROFILES

    if isinstance(scheduler, str) and scheduler in PROFILES:
        return []
    return [f"{source}: scheduler: unknown profile {short(scheduler)}; known: {', '.join(sorted(PROFILES))}"]


def _name_problems(name, source: str) -> list[str]:
    """The problem of a cluster name that is not 1-MAX_NAME_CHARS printable characters."""
    if not isinstance(name, str):
        return [f"{source}: name: expected a string"]
    if not name.strip() or len(name) > MAX_NAME_CHARS or not name.isprintable():
        return [f"{source}: name: must be 1-{MAX_NAME_CHARS} printable characters, got {short(name)}"]
    return []


def load_cluster(path: str | Path | None) -> ClusterSpec:
    """Read a cluster file, or return DEFAULT_CLUSTER when no path is given."""
    if path is None:
        return DEFAULT_CLUSTER
    source = str(path)
    try:
        text = read_capped(Path(path), MAX_CLUSTER_FILE_BYTES).decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ClusterFileError([f"{source}: {FILE_FIELD}: not UTF-8 text (byte {error.start})"]) from None
    except (FileTooLarge, NotRegularFile) as error:
        raise ClusterFileError([f"{source}: {FILE_FIELD}: {error}"]) from None
    except OSError as error:
        raise ClusterFileError([f"{source}: {FILE_FIELD}: {error.strerror or error}"]) from None
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except (YamlLimitError, YamlValueError) as error:
        raise ClusterFileError([f"{source}: {FILE_FIELD}: {error}"]) from None
    except yaml.YAMLError as error:
        raise ClusterFileError([invalid_yaml_line(source, error, with_problem=False)]) from None
    return parse_cluster(data, source)
