"""The log tail of a job's functions (`GET /api/jobs/{name}/logs`, `coach logs JOB`): windowed, so that no request
reads a whole log however long it has grown, and followed by offsets, so that a stream sends each line once.

A function's log is `<run>/logs/<job>-<role>-<index>.log` (the local platform writes them; on Nuclio they are the
platform's and there is nothing here). A function removed and deployed again appends to its file.
"""

from __future__ import annotations

import re
from pathlib import Path

from coach.inputs.limits import NotRegularFile, open_regular

MAX_LINES = 1000  # lines one request may ask for, per function
WINDOW_BYTES = 256 * 1024  # bytes read from the end of a file for its tail, and per file and poll when following
MAX_LINE_CHARS = 2000  # a longer line is cut (a stack of binary noise should not fill the page)


def log_files(log_dir: Path, job: str) -> dict[str, Path]:
    """Function name -> its log file, for the functions of `job` only (not those of a job whose name it starts)."""
    pattern = re.compile(re.escape(job) + r"-(scheduler|server|worker)-\d+\.log")
    try:
        found = sorted(path for path in log_dir.iterdir() if pattern.fullmatch(path.name))
    except OSError:
        return {}
    return {path.name[:-len(".log")]: path for path in found}


def _opened(path: Path):
    """The log opened for reading when it is a regular file; OSError for anything else (a FIFO would block)."""
    try:
        return open_regular(path)
    except NotRegularFile as error:
        raise OSError(f"{path}: {error}") from None


def _lines(data: bytes) -> list[str]:
    return [line[:MAX_LINE_CHARS] for line in data.decode("utf-8", "replace").splitlines()]


def tail(path: Path, lines: int) -> tuple[list[str], int]:
    """The last `lines` complete lines of a file (within its last WINDOW_BYTES) and the offset after them."""
    with _opened(path) as handle:
        size = handle.seek(0, 2)
        start = max(0, size - WINDOW_BYTES)
        handle.seek(start)
        data = handle.read(size - start)
    end = data.rfind(b"\n") + 1  # a line still being written is sent once it is whole
    body = data[:end]
    if start > 0:  # the window's first line is most likely a fragment
        body = body[body.find(b"\n") + 1:]
    return _lines(body)[-lines:] if lines else [], start + end


def since(path: Path, offset: int) -> tuple[list[str], int]:
    """The complete lines written after `offset` (at most WINDOW_BYTES of them) and the offset after them; a file
    that shrank (replaced) is read from its start."""
    with _opened(path) as handle:
        size = handle.seek(0, 2)
        if size < offset:
            offset = 0
        handle.seek(offset)
        data = handle.read(min(size - offset, WINDOW_BYTES))
    end = data.rfind(b"\n") + 1
    if end == 0 and len(data) == WINDOW_BYTES:  # one line longer than the window: send it cut
        end = len(data)
    return _lines(data[:end]), offset + end
