"""A job's log as a download: CSV (one row per line of the log, the columns a spreadsheet needs) or JSON lines (the
log itself). Streamed line by line, so a long log is never held whole; a torn last line is not a record."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Iterator

from coach.inputs.runs import checked_line, log_lines

CSV_COLUMNS = ("epoch", "phase", "loss", "val_loss", "accuracy", "train_accuracy", "epoch_time_s", "compute_s",
               "cost", "cumulative_cost", "budget", "workers", "servers", "placement", "samples", "start", "end",
               "attempt", "stop_reason")


def _cell(record: dict, column: str) -> object:
    value = record.get(column)
    if column == "placement" and isinstance(value, dict):
        return " ".join(f"{function}={node}" for function, node in sorted(value.items()))
    return "" if value is None else value


def csv_lines(log: Path) -> Iterator[str]:
    """The header, then one CSV row per record of the log."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    yield out.getvalue()
    for record in records_of(log):
        out.seek(0)
        out.truncate()
        writer.writerow([_cell(record, column) for column in CSV_COLUMNS])
        yield out.getvalue()


def jsonl_lines(log: Path) -> Iterator[bytes]:
    """The log's complete lines, as they are on disk."""
    if not log.exists():
        return
    for _, line in log_lines(log, allow_torn_tail=True):  # capped, regular files only
        if line.strip():
            yield line


def records_of(log: Path) -> Iterator[dict]:
    if not log.exists():
        return
    for number, line in log_lines(log, allow_torn_tail=True):  # capped, regular files only
        if line.strip():
            yield checked_line(log, number, line)
