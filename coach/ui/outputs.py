"""Where a command will write, checked before it does any work: a file it writes must be able to exist (its folder
exists and takes new files; the path is not a folder, FIFO, device or socket). A command writes such a file under a
temporary name in the same folder and renames it, so an interrupted or failed command never leaves half a file."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def output_file_problem(path: Path) -> str | None:
    """Why `path` cannot be written as a regular file, or None. The folder is probed with a temporary file removed
    at once (root ignores permission bits, so only trying tells a read-only mount or /proc apart); a FIFO is never
    opened (opening one for writing blocks until someone reads)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:
        return f"cannot check it ({error.strerror or error})"
    if mode is not None and stat.S_ISDIR(mode):
        return "is a folder, expected the file to write"
    if mode is not None and not stat.S_ISREG(mode):
        return "is a special file (a FIFO, device or socket), expected a regular file to write"
    folder = path.absolute().parent
    if not folder.is_dir():
        return f"{folder}: no such folder"
    try:
        descriptor, probe = tempfile.mkstemp(prefix=".coach-probe-", dir=folder)
        os.close(descriptor)
        os.unlink(probe)
    except OSError as error:
        return f"cannot write in {folder} ({error.strerror or error})"
    return None


def same_file(path: Path, other: Path) -> bool:
    """Whether both exist and are one file: the same path, another spelling of it, a hard or a symbolic link."""
    try:
        return os.path.samefile(path, other)
    except (OSError, ValueError):  # one of them is missing, unreadable, or has a NUL in its name
        return False
