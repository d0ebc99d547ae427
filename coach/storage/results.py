"""The per-epoch record, its append-only JSON-lines log, and the run summary.

Side effects: appends to `results/<run-id>/<job>.jsonl` (flushed and fsynced per record) and rewrites
`summary.json` atomically. Nothing else in Coach writes results.

Everything written here is standard JSON (RFC 8259): a NaN or an infinity is never written. A value that is not
finite raises NonFiniteValue, naming the file and the field, and nothing is written — a reader of a log or a
summary never meets `NaN`, `Infinity` or `-Infinity`, which `json.loads` in other languages rejects.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import threading
import time
from datetime import datetime, UTC
from pathlib import Path
from typing import Any, Iterator

from coach.domain.records import EpochRecord


def new_run_id(now_s: float | None = None) -> str:
    """Sortable and unique: UTC time plus a short random suffix."""
    stamp = datetime.fromtimestamp(time.time() if now_s is None else now_s, tz=UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(2)}"


class NonFiniteValue(ValueError):
    """A record or a summary holds NaN or an infinity; standard JSON has no such numbers, so it is not written."""


def _non_finite(value: Any, where: str = "") -> Iterator[str]:
    """The paths (`loss`, `decision.speed_fit.b1`, `jobs.a.total_cost`) of every non-finite float in `value`."""
    if isinstance(value, float):
        if not math.isfinite(value):
            yield f"{where or '(value)'} = {value!r}"
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _non_finite(item, f"{where}[{index}]")


def standard_json(data: Any, where: str, **dumps_options) -> str:
    """`json.dumps(data)` without NaN or infinities: NonFiniteValue names `where` and each offending field."""
    try:
        return json.dumps(data, allow_nan=False, **dumps_options)
    except ValueError:
        found = list(_non_finite(data))
        if not found:
            raise
        raise NonFiniteValue(f"{where}: not written, standard JSON has no NaN or infinity: "
                             f"{', '.join(found)}") from None


class ResultLog:
    """Append-only JSON lines for one job; every record is flushed and fsynced before `append` returns."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def append(self, record: EpochRecord) -> None:
        """One line; a record with a non-finite number raises NonFiniteValue and the log is left as it was."""
        line = record_line(record, str(self.path))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            self._file.close()


def record_line(record: EpochRecord, where: str = "") -> str:
    """The record as one line of standard JSON (NonFiniteValue for NaN or an infinity, naming the field)."""
    data = json.loads(record.to_json())  # the record's own field order and its extra-field checks
    return standard_json(data, f"{where or record.job}: epoch {record.epoch} ({record.phase})")


def read_log(path: Path) -> list[dict]:
    """Every record of a log, in order (each line parses with json.loads on its own)."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def drop_torn_tail(path: Path) -> bool:
    """Cut a last line that a killed writer left without its newline, so appending starts on a fresh line.

    Every complete record ends in a newline (it is written and fsynced in one go); a tail without one was
    never a record. Returns True when something was cut.
    """
    with open(path, "rb+") as handle:
        data = handle.read()
        if not data or data.endswith(b"\n"):
            return False
        handle.truncate(data.rfind(b"\n") + 1)
        return True


def write_json_atomic(path: Path, data: Any) -> None:
    """Replace `path` with `data` as standard JSON; NonFiniteValue (and `path` untouched) for NaN or infinity."""
    text = standard_json(data, str(path), indent=2, sort_keys=False)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    os.replace(tmp, path)



class MemorySink:
    """A job's records kept in memory (virtual-time runs that write no files, and tests)."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.closed = False

    def append(self, record: EpochRecord) -> None:
        self.records.append(json.loads(record_line(record)))

    def close(self) -> None:
        self.closed = True
