"""Bounds on what a person's file may hold: its size, its YAML, its numbers, and the length of a message about it.

Why this module exists: job, cluster and matrix files (and the run folders `coach run --resume` and `coach plan`
read) are written by people or by earlier runs, and a mistake in one must cost a one-line error, never memory,
minutes or a traceback. So:

- a file is read only up to a size cap, and only when it is a regular file (a FIFO or /dev/zero would block or
  never end);
- YAML is composed at most `max_depth` levels deep and constructed only when it holds at most `max_values` values
  *after* expanding aliases, so a "billion laughs" alias bomb of a few hundred bytes is refused before anything
  walks it (and a recursive alias is refused too);
- a value PyYAML cannot construct (`2026-13-45`, an integer of 5,000 digits, `!!float x`) is an error, not a
  ValueError from inside PyYAML;
- numbers are checked against a `Bound` (a range and, for floats, finiteness) from one table per file format;
- a value quoted in a message is shown with `short()`, which never builds the whole repr of a huge value first,
  and every message is cut to `MAX_MESSAGE` characters.

Side effects: `open_regular`, `read_capped` and `capped_lines` read one file; nothing else here has any.
"""

from __future__ import annotations

import errno
import math
import os
import reprlib
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import yaml

#: Longest message part of one error line (the `FIELD: what is wrong` after `FILE: `), in characters.
MAX_MESSAGE = 300
#: Longest quoted value inside a message.
MAX_QUOTED = 40
#: Size caps, in bytes, of the files a person writes.
MAX_JOB_FILE_BYTES = 1 << 20  # 1 MiB
MAX_MATRIX_FILE_BYTES = 1 << 20  # 1 MiB
MAX_CLUSTER_FILE_BYTES = 16 << 20  # 16 MiB: room for 100,000 nodes written out one by one
MAX_MODEL_FILE_BYTES = 16 << 20  # 16 MiB of Python source
#: Size caps, in bytes, of the files earlier runs wrote (and that a person may name: `--history`, a run folder).
MAX_LOG_BYTES = 256 << 20  # 256 MiB: a JSON-lines log (a job's `<job>.jsonl`, a `--history`), ~500,000 records
MAX_LOG_LINE_BYTES = 1 << 20  # 1 MiB: one line (one record) of a JSON-lines log
MAX_RUN_JSON_BYTES = 64 << 20  # 64 MiB: run.json, summary.json, manifest.json, a served run's pointer
MAX_STATE_BYTES = 64 << 20  # 64 MiB: `coach train-policy`'s state.json (its curves and settings)
#: Values (scalars, lists and mappings, counting every alias as the whole value it stands for) a YAML file may hold.
MAX_JOB_VALUES = 10_000
MAX_MATRIX_VALUES = 10_000
MAX_CLUSTER_VALUES = 1_000_000
#: Deepest nesting of lists and mappings a YAML file may have.
MAX_YAML_DEPTH = 64


class FileTooLarge(Exception):
    """A file over its size cap; the message is `larger than N bytes (the limit)`."""


class LineTooLong(FileTooLarge):
    """A line of a file over its cap; the message is `longer than N bytes (the limit)`, `number` the line's."""

    def __init__(self, number: int, max_bytes: int):
        super().__init__(f"longer than {max_bytes} bytes (the limit)")
        self.number = number


class NotRegularFile(Exception):
    """A path that is neither a regular file nor a folder (a FIFO, a device, a socket)."""


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def open_regular(path: Path | str, max_bytes: int | None = None) -> BinaryIO:
    """`path` opened for reading (binary), when it is a regular file of at most `max_bytes` bytes on disk.

    Opened without blocking first, so a FIFO is refused instead of waiting for a writer, and checked on the open
    file itself (no window between a check and the open). A sparse file is refused by its size before a byte is
    read. Raises NotRegularFile (`not a regular file (a FIFO)`), FileTooLarge, IsADirectoryError, or another
    OSError (FileNotFoundError, PermissionError ...).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a file")
            raise NotRegularFile(f"not a regular file ({kind})")
        if max_bytes is not None and info.st_size > max_bytes:
            raise FileTooLarge(f"file is larger than {max_bytes} bytes (the limit)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_capped(path: Path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes` bytes.

    Raises FileTooLarge, NotRegularFile, or OSError (FileNotFoundError, IsADirectoryError, PermissionError ...).
    """
    with open_regular(path, max_bytes) as handle:
        data = handle.read(max_bytes + 1)  # the file may have grown since it was opened
    if len(data) > max_bytes:
        raise FileTooLarge(f"file is larger than {max_bytes} bytes (the limit)")
    return data


def capped_lines(path: Path, max_bytes: int = MAX_LOG_BYTES,
                 max_line_bytes: int = MAX_LOG_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, the line's bytes with its newline) for every line of a regular file, streamed.

    At most `max_bytes` bytes in all and `max_line_bytes` per line (its newline not counted) are read, so a long
    log costs one line's memory at a time and a line without end costs at most the line cap. The last line may
    lack its newline (a torn tail). Raises what `open_regular` raises, at the first read; LineTooLong at a line
    over its cap; FileTooLarge when the file grows past `max_bytes` while it is read.
    """
    with open_regular(path, max_bytes) as handle:
        total = 0
        number = 0
        while True:
            line = handle.readline(max_line_bytes + 1)
            if not line:
                return
            number += 1
            if len(line) > max_line_bytes and not line.endswith(b"\n"):
                raise LineTooLong(number, max_line_bytes)
            total += len(line)
            if total > max_bytes:
                raise FileTooLarge(f"file is larger than {max_bytes} bytes (the limit)")
            yield number, line


def file_problem(error: Exception) -> str:
    """What is wrong with a file, for the `FILE: (file): ...` part of a line: the cap or the kind it broke, or
    the OS's word (`No such file or directory`, `Is a directory`, `Permission denied`)."""
    if isinstance(error, OSError):
        return error.strerror or str(error)
    return str(error)


# --------------------------------------------------------------------------- messages


_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxtuple = _REPR.maxlist = _REPR.maxarray = _REPR.maxdict = 4
_REPR.maxset = _REPR.maxfrozenset = _REPR.maxdeque = 4
_REPR.maxstring = _REPR.maxlong = _REPR.maxother = MAX_QUOTED


def short(value: Any, limit: int = MAX_QUOTED) -> str:
    """repr(value), cut to `limit` characters (`...` at the end), without building the repr of a huge value.

    Strings are cut before repr; containers go through reprlib (a few items, two levels); an integer of more than
    a hundred digits is described, not written out.
    """
    if isinstance(value, str):
        text = repr(value[: limit + 1])
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 330:
        text = f"<integer of {len(str(abs(value))) if value.bit_length() < 14_000 else 'over 4000'} digits>"
    elif isinstance(value, (list, tuple, dict, set, frozenset)):
        text = _REPR.repr(value)
    else:
        try:
            text = repr(value)
        except Exception:  # noqa: BLE001 - a value that cannot even be shown is shown by its type
            text = f"<{type(value).__name__}>"
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def describe(value: Any) -> str:
    """`str '64'`, `float 2.5`, `bool True`, `null` -- for 'expected X, got ...' (at most ~50 characters)."""
    if value is None:
        return "null"
    return f"{type(value).__name__} {short(value)}"


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` on one line (line breaks become spaces), cut to `limit` characters with `...` at the end."""
    if "\n" in text or "\r" in text:
        text = " ".join(text.splitlines())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def field_name(key: Any, limit: int = 64) -> str:
    """A mapping key as the FIELD of an error line: `str(key)`, cut to `limit` characters and kept on one line."""
    text = key if isinstance(key, str) else short(key, limit)
    return one_line(text, limit)


# --------------------------------------------------------------------------- numbers


@dataclass(frozen=True)
class Bound:
    """The allowed range of one numeric field: an integer or a finite number in [low, high] (low may be exclusive)."""

    integer: bool  # True: an int (not a bool); False: an int or a float, finite
    low: int | float  # smallest allowed value (or the exclusive lower limit)
    high: int | float  # largest allowed value (inclusive)
    low_exclusive: bool = False

    def check(self, value: Any) -> tuple[Any, str | None]:
        """(the value, None) when it fits (floats as float), else (None, what is wrong)."""
        if self.integer:
            if isinstance(value, bool) or not isinstance(value, int):
                return None, f"expected an integer, got {describe(value)}"
            if value < self.low:
                return None, f"must be >= {self._shown(self.low)}, got {short(value)}"
            if value > self.high:
                return None, f"must be <= {self._shown(self.high)}, got {short(value)}"
            return value, None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None, f"expected a number, got {describe(value)}"
        try:
            number = float(value)
        except OverflowError:
            number = math.inf if value > 0 else -math.inf
        if not math.isfinite(number):
            return None, f"must be a finite number, got {number}"
        if (number <= self.low) if self.low_exclusive else (number < self.low):
            return None, f"must be {'>' if self.low_exclusive else '>='} {self._shown(self.low)}, got {number!r}"
        if number > self.high:
            return None, f"must be <= {self._shown(self.high)}, got {number!r}"
        return number, None

    def _shown(self, limit: float) -> str:
        return str(int(limit)) if self.integer else f"{limit:g}"

    def text(self) -> str:
        """The range for people, e.g. `1 ≤ x ≤ 1024` or `0 < x ≤ 604800`."""
        return f"{self._shown(self.low)} {'<' if self.low_exclusive else '≤'} x ≤ {self._shown(self.high)}"


# --------------------------------------------------------------------------- YAML


class YamlLimitError(yaml.YAMLError):
    """YAML refused before it is constructed: too deep, too many values after expanding aliases, or recursive.

    `str(error)` is the message part of the line (`FILE: (file): <message>`).
    """


class YamlValueError(yaml.YAMLError):
    """A scalar PyYAML recognised but could not construct (e.g. `2026-13-45`, a 5,000-digit integer)."""


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader with bounds: nesting at most `max_depth`, at most `max_values` values after expanding aliases.

    Any loading function (`yaml.load(text, Loader=...)`, `get_single_node` + `construct_document`) gets the bounds:
    the depth is checked while composing, the expanded size before constructing, and a value that PyYAML fails to
    construct becomes a YamlValueError. Subclass it to change the limits.
    """

    max_depth: int = MAX_YAML_DEPTH
    max_values: int = MAX_JOB_VALUES

    def compose_node(self, parent, index):  # noqa: D102 - PyYAML's hook
        depth = getattr(self, "_coach_depth", 0) + 1
        if depth > self.max_depth:
            raise YamlLimitError(f"YAML nested more than {self.max_depth} levels deep")
        self._coach_depth = depth
        try:
            return super().compose_node(parent, index)
        finally:
            self._coach_depth = depth - 1

    def construct_document(self, node):  # noqa: D102 - PyYAML's hook
        expanded_size(node, self.max_values)
        try:
            return super().construct_document(node)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, AttributeError, OverflowError, KeyError, IndexError) as error:
            raise YamlValueError(f"a value cannot be read: {one_line(str(error), 120)}") from None


def expanded_size(root: yaml.Node, limit: int) -> int:
    """Values in the node tree, each alias counted as the whole value it stands for; YamlLimitError above `limit`.

    Shared nodes are measured once (memoised), so this costs one pass over the distinct nodes whatever the
    expansion; a node that contains itself (a recursive alias) is refused.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise YamlLimitError("YAML alias refers to a value that contains it (recursive alias)")
        active.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        for child in children:
            total += size(child)
            if total > limit:
                raise YamlLimitError(f"YAML holds more than {limit} values after expanding aliases (the limit)")
        active.discard(key)
        sizes[key] = total
        return total

    return size(root)  # the depth is at most max_depth (composing checked it), so the recursion is bounded
