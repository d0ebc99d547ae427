"""The per-epoch record, its append-only JSON-lines log, and the run summary.

Side effects: appends to `results/<run-id>/<job>.jsonl` (flushed and fsynced per record) and rewrites
`summary.json` atomically. Nothing else in Coach writes results.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from coach.domain.records import EpochRecord


def new_run_id(now_s: float | None = None) -> str:
    """Sortable and unique: UTC time plus a short random suffix."""
    stamp = datetime.fromtimestamp(time.time() if now_s is None else now_s, tz=timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(2)}"


class ResultLog:
    """Append-only JSON lines for one job; every record is flushed and fsynced before `append` returns."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def append(self, record: EpochRecord) -> None:
        line = record.to_json()
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_log(path: Path) -> list[dict]:
    """Every record of a log, in order (each line parses with json.loads on its own)."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


class LogFileError(Exception):
    """A results log that cannot be read; the message is one `FILE: (line N): what is wrong` line."""


def read_log_checked(path: Path) -> list[dict]:
    """Like read_log, but every problem becomes a one-line LogFileError instead of a traceback."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise LogFileError(f"{path}: (file): {error.strerror or error}") from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise LogFileError(f"{path}: (line {number}): not JSON: {error.msg}") from None
        if not isinstance(record, dict):
            raise LogFileError(f"{path}: (line {number}): expected a JSON object")
        records.append(record)
    return records


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
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)




class MemorySink:
    """A job's records kept in memory (simulations that write no files, and tests)."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.closed = False

    def append(self, record: EpochRecord) -> None:
        self.records.append(json.loads(record.to_json()))

    def close(self) -> None:
        self.closed = True
