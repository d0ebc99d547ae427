"""Output folders written whole: the files go into a hidden folder beside the target, renamed to it when complete.

Why: `coach compare` and `coach report` write several files into one folder. A full disk, a Ctrl-C or a failed
plot part-way through must leave no half-written folder (0-byte PNGs beside an older compare.json) and must not
touch what an earlier command wrote. Side effects: creates, renames and removes folders; nothing else.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


class CannotWrite(Exception):
    """A file of an output folder could not be written; `name` is the file, `reason` the system's word."""

    def __init__(self, name: str, reason: str):
        super().__init__(f"cannot write {name} ({reason})")
        self.name = name
        self.reason = reason


def writable_problem(folder: Path) -> str | None:
    """Why `folder` could not be created or written, found before any work, or None.

    The nearest existing folder is probed with a temporary folder, removed at once (root ignores permission bits,
    so only trying tells a read-only mount or /proc apart)."""
    if folder.exists() and not folder.is_dir():
        return "not a folder"
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".coach-probe-", dir=existing))
    except OSError as error:
        return f"cannot write in {existing} ({error.strerror or error})"
    return None


def is_empty(folder: Path) -> bool:
    """True when `folder` does not exist or holds nothing."""
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is None
    except FileNotFoundError:
        return True


def write_files(folder: Path, files: Sequence[tuple[str, Callable[[Path], object]]]) -> None:
    """`draw(folder / name)` for each file in turn; an OSError is CannotWrite naming the file (a full disk's
    error from deep in a PNG encoder names none)."""
    for name, draw in files:
        try:
            draw(folder / name)
        except OSError as error:
            raise CannotWrite(name, error.strerror or str(error)) from None


def write_whole(folder: Path, write: Callable[[Path], T], replace: bool = False) -> T:
    """`write(partial)` fills a hidden folder beside `folder`, then it is renamed to `folder`; returns what
    `write` returned. `folder` must be absent or empty unless `replace` (then the old one is moved aside, and
    removed once the new one is in place). On any error the hidden folder is removed and `folder` is as it was;
    an OSError is CannotWrite."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        partial = folder.parent / f".{folder.name}.partial-{os.getpid()}-{secrets.token_hex(3)}"
        partial.mkdir()  # the umask's mode, as a folder made by mkdir -p
    except OSError as error:
        raise CannotWrite(folder.name, error.strerror or str(error)) from None
    try:
        result = write(partial)
        _rename_in(partial, folder, replace)
    except OSError as error:
        raise CannotWrite(folder.name, error.strerror or str(error)) from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)  # gone already when renamed
    return result


def _rename_in(partial: Path, folder: Path, replace: bool) -> None:
    """Rename `partial` to `folder`: onto an absent or empty folder only (one filled meanwhile stays as it is);
    with `replace`, a full one is moved aside first, and back if the rename fails."""
    if not (replace and not is_empty(folder)):
        os.rename(partial, folder)
        return
    old = folder.parent / f".{folder.name}.old-{os.getpid()}-{secrets.token_hex(3)}"
    os.rename(folder, old)
    try:
        os.rename(partial, folder)
    except OSError:
        os.rename(old, folder)
        raise
    shutil.rmtree(old, ignore_errors=True)
