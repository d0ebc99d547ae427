"""Cluster files -> ClusterSpec (nodes, slots, prices). `load_cluster` is the only function here that reads a file.

Money is never silent: every node must have a price, its own `price_per_slot_s` or the file's top-level one; a
file that leaves a node without any is an error (only the embedded default cluster, which no file describes, has
its documented 0.0001). Every number has the bounds of CLUSTER_BOUNDS, and the file the caps of coach.inputs.limits.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

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
#: Every number of a cluster file and its bounds (README's Cluster files section lists them).
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
    errors: list[str] = []
    if not isinstance(data, dict):
        raise ClusterFileError([f"{source}: (file): expected a mapping with 'nodes'"])
    for key in sorted(set(data) - TOP_FIELDS, key=str):
        errors.append(f"{source}: {short(key, 64) if not isinstance(key, str) else key[:64]}: unknown field")
    default_price = data.get("price_per_slot_s")
    default_ok = "price_per_slot_s" in data and _positive_number(
        default_price, f"{source}: price_per_slot_s", errors, integer=False)
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        errors.append(f"{source}: nodes: required, a non-empty list of nodes")
        raw_nodes = []
    elif len(raw_nodes) > MAX_NODES:
        errors.append(f"{source}: nodes: at most {MAX_NODES} nodes, got {len(raw_nodes)}")
        raw_nodes = []
    nodes, seen, unpriced = [], set(), []
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
        elif "price_per_slot_s" in data:  # inherits the top-level price, which is reported once, above
            price = default_price
            ok = ok and default_ok
        else:  # no price anywhere: reported once, below
            unpriced.append(f"nodes[{i}]")
            ok = False
        if ok and name is not None:
            nodes.append(NodeSpec(name, raw["slots"], float(price)))
    if unpriced:
        shown = ", ".join(unpriced[:3]) + (f" and {len(unpriced) - 3} more" if len(unpriced) > 3 else "")
        errors.append(f"{source}: price_per_slot_s: required field missing (no price for {shown}; "
                      "set it at the top level or on every node)")
    scheduler = data.get("scheduler")
    if scheduler is not None:
        from scheduler_fork import PROFILES

        if not isinstance(scheduler, str) or scheduler not in PROFILES:
            errors.append(f"{source}: scheduler: unknown profile {short(scheduler)}; "
                          f"known: {', '.join(sorted(PROFILES))}")
    name = data.get("name", Path(source).stem)
    if not isinstance(name, str):
        errors.append(f"{source}: name: expected a string")
    elif not name.strip() or len(name) > MAX_NAME_CHARS or not name.isprintable():
        errors.append(f"{source}: name: must be 1-{MAX_NAME_CHARS} printable characters, got {short(name)}")
    if errors:
        prefix = f"{source}: "
        raise ClusterFileError([prefix + one_line(line[len(prefix):]) if line.startswith(prefix) else line
                                for line in errors])
    return ClusterSpec(name=name, nodes=tuple(nodes), source=source, scheduler=scheduler)


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
