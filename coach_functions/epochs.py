"""Where a function's running epoch children are registered, so that a cancel reaches them from any worker process.

Why: Nuclio runs one wrapper process per worker of the HTTP trigger (coach_functions/*/function.yaml has two, so that a
cancel can come in while an epoch runs), and hands each request to a free one: the cancel lands in another process
than the epoch it must stop. Those processes share their container's file system and PID namespace, so each epoch
child is registered as an empty file in a folder of the container's temp dir, named after the function's
`COACH_EPOCHS_DIR` (relative to the temp dir, or absolute), and a cancel signals every child registered there.

An entry is `<pid>-<start>`: the child's pid and its start time in clock ticks since boot (/proc/<pid>/stat),
which tells it apart from a later process that reuses the pid. A cancel opens a pidfd first and checks the start
time after, so the signal reaches the registered process or none; entries of processes that are gone (their host
was killed before it could remove them) or whose pid now names another process are removed on the way. The
folder must be a real folder (not a link) owned by this user and closed to others.

Without `COACH_EPOCHS_DIR` (Coach's local host: one process per function) `registry_from_env` gives None and the
host keeps its children in memory, as before.

Side effects: creates the folder, creates and removes entry files, reads /proc, signals processes.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import tempfile
from pathlib import Path

EPOCHS_DIR_ENV = "COACH_EPOCHS_DIR"


class RegistryError(OSError):
    """The folder cannot be trusted or made; the message names it and says why."""


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks after boot (field 22 of /proc/<pid>/stat), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            text = stat_file.read()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2:].split()  # after "pid (comm) ": comm may hold spaces and parentheses
    return int(fields[19]) if len(fields) > 19 else None


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            text = stat_file.read()
    except OSError:
        return True
    return text[text.rfind(b")") + 2:][:1] in (b"Z", b"X")


class EpochRegistry:
    """The running epoch children of one function, as files in a folder its worker processes share."""

    def __init__(self, folder: Path):
        self.folder = folder
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.lstat(folder)
        except OSError as error:
            raise RegistryError(f"{folder}: {error.strerror}") from None
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise RegistryError(f"{folder}: not a folder of this user closed to others")

    def add(self, pid: int) -> bool:
        """Register a running epoch child: the child itself, before its work starts (or its parent, before it
        reaps it: its pid holds until then). False, said in the log, when it cannot be: the epoch runs on, and a
        cancel from another process misses it."""
        name = self.entry(pid)
        if name is None:
            return False  # gone already: nothing to cancel
        try:
            fd = os.open(self.folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as error:
            sys.stderr.write(f"epoch child {pid} not registered in {self.folder}: {error.strerror}\n")
            sys.stderr.flush()
            return False
        os.close(fd)
        return True

    @staticmethod
    def entry(pid: int) -> str | None:
        """The entry of a process while its pid is held (it runs, or is a zombie not reaped yet); None when gone."""
        ticks = start_ticks(pid)
        return None if ticks is None else f"{pid}-{ticks}"

    def discard(self, entry: str | None) -> None:
        """Forget an entry (its child reaped); the entry named, never another process's of the same pid."""
        if entry is not None:
            self._drop((0, 0, entry))

    def cancel_all(self) -> int:
        """SIGKILL every registered epoch child still running; how many were signalled."""
        signalled = 0
        for pid, ticks, name in self._entries():
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                self._drop((pid, ticks, name))  # its host died before it could remove it
                continue
            try:
                if start_ticks(pid) != ticks:  # the pid names another process now
                    self._drop((pid, ticks, name))
                    continue
                if _is_zombie(pid):  # ended already; its host reaps it and removes the entry
                    continue
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                signalled += 1
            except ProcessLookupError:
                pass
            finally:
                os.close(pidfd)
        return signalled

    def _entries(self) -> list[tuple[int, int, str]]:
        entries = []
        try:
            names = os.listdir(self.folder)
        except OSError:
            return []
        for name in names:
            pid, dash, ticks = name.partition("-")
            if dash and pid.isdigit() and ticks.isdigit():
                entries.append((int(pid), int(ticks), name))
        return entries

    def _drop(self, entry: tuple[int, int, str]) -> None:
        try:
            os.unlink(self.folder / entry[2])
        except FileNotFoundError:
            pass


def registry_from_env() -> EpochRegistry | None:
    """The registry `COACH_EPOCHS_DIR` names (relative to the temp dir), or None when it is not set. A folder that
    cannot be trusted is logged and left out: a cancel then reaches this process's own children only."""
    name = os.environ.get(EPOCHS_DIR_ENV, "").strip()
    if not name:
        return None
    try:
        return EpochRegistry(Path(tempfile.gettempdir()) / name)
    except RegistryError as error:
        sys.stderr.write(f"{EPOCHS_DIR_ENV}: {error}: a cancel reaches this worker process's epochs only\n")
        sys.stderr.flush()
        return None
