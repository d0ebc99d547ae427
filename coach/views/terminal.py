"""How a run shows itself: a live rich table, plain log lines for CI, or nothing. Side effect: prints.

Views receive JobStatus snapshots from the job threads; they never decide anything.

What they say about epochs: `JobStatus.epoch` counts the epochs *done*, so the views label it `epochs_done`
(plain lines) and `done` (the table), and the lifecycle's message names the step itself: `running epoch 3` while
it runs, `epoch 3 done` once its line is written (`running step 2/4 at 1/2` and `step 2/4 done` for calibration).
Plain output prints a step once, when it is done, with its loss: a status whose message starts with `running `
is shown by the live table only.

A view never takes a run down: when its output is gone (`coach run ... | head -1` closed the pipe), it stops
printing and the jobs go on. Each plain line is written whole under one lock, so lines from concurrent jobs
never merge.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from typing import Callable, Mapping, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from coach.domain.status import JobStatus

RUNNING = "running "  # the message of a status whose step is still running starts with this


def _console(file: TextIO | None = None) -> Console:
    """Stdout; wide enough for the table when it is a pipe or a CI log rather than a terminal."""
    file = file or sys.stdout
    return Console(file=file) if file.isatty() else Console(file=file, width=140)


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def status_table(statuses: Mapping[str, JobStatus], title: str) -> Table:
    table = Table(title=title)
    for column in ("job", "phase", "done", "loss", "val_loss", "w/s", "cost / budget", "note"):
        table.add_column(column)
    for s in statuses.values():
        table.add_row(s.job, s.phase, str(s.epoch), _fmt(s.loss), _fmt(s.val_loss), f"{s.workers}/{s.servers}",
                      f"{s.cost:.4f} / {s.budget:g}", s.message)
    return table


def plain_line(status: JobStatus) -> str:
    """One status as a plain line (without its time stamp)."""
    line = (f"{status.job}: {status.phase} epochs_done={status.epoch} loss={_fmt(status.loss)} "
            f"val_loss={_fmt(status.val_loss)} w/s={status.workers}/{status.servers} "
            f"cost={status.cost:.4f}/{status.budget:g}")
    return f"{line} ({status.message})" if status.message else line


def is_running(status: JobStatus) -> bool:
    """True while the status is about a step that has started and is not done."""
    return status.message.startswith(RUNNING)


def _gone(error: BaseException) -> bool:
    """True for the errors of writing to an output that is closed (a pipe whose reader left, a closed file)."""
    if isinstance(error, (BrokenPipeError, ConnectionResetError)):
        return True
    if isinstance(error, ValueError):  # "I/O operation on closed file"
        return True
    return isinstance(error, OSError) and error.errno in (errno.EPIPE, errno.EBADF, errno.ECONNRESET)


def _silence(stream: TextIO) -> None:
    """Point the stream's file descriptor at /dev/null, so whatever is still buffered or printed later (the
    final `results:` line, the interpreter's flush at exit) goes nowhere instead of raising BrokenPipeError.
    This is what Python's documentation recommends for SIGPIPE."""
    try:
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError, AttributeError):
        return
    try:
        os.dup2(devnull, fd)
    except OSError:
        pass
    finally:
        os.close(devnull)


class QuietView:
    """Prints nothing while running; the caller prints the results folder."""

    def __init__(self, run_id: str, console: Console | None = None, out: TextIO | None = None):
        self.run_id = run_id
        self.console = console or Console(file=sys.stderr)
        self.statuses: dict[str, JobStatus] = {}
        self._lock = threading.Lock()
        self._out = out  # None: sys.stdout at the time of writing
        self.broken = False  # the output is gone: nothing more is printed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, status: JobStatus) -> None:
        with self._lock:
            self.statuses[status.job] = status

    def final(self) -> None:
        pass

    @property
    def out(self) -> TextIO:
        return self._out or sys.stdout

    def _guarded(self, write: Callable[[], None]) -> None:
        """Run `write`; when the output is gone, stop printing for good (the jobs go on)."""
        if self.broken:
            return
        try:
            write()
        except Exception as error:  # noqa: BLE001 - only a vanished output is swallowed
            if not _gone(error):
                raise
            self.broken = True
            _silence(self.out)


class PlainView(QuietView):
    """One timestamped line per change, for CI logs and pipes; a step is printed once, when it is done."""

    def update(self, status: JobStatus) -> None:
        with self._lock:  # held for the whole line, so concurrent jobs' lines never merge
            previous = self.statuses.get(status.job)
            self.statuses[status.job] = status
            if previous == status or is_running(status):
                return
            text = f"{time.strftime('%H:%M:%S')} {plain_line(status)}\n"
            out = self.out

            def write() -> None:
                out.write(text)
                out.flush()

            self._guarded(write)

    def final(self) -> None:
        with self._lock:
            table = status_table(dict(self.statuses), f"run {self.run_id}")
            self._guarded(lambda: _console(self.out).print(table))


class LiveView(QuietView):
    """A table redrawn four times a second while jobs run, then the final table."""

    def __enter__(self):
        self._live = Live(status_table({}, f"run {self.run_id}"), refresh_per_second=4, transient=True,
                          console=_console(self.out))
        self._guarded(self._live.__enter__)
        return self

    def __exit__(self, *exc):
        try:
            self._live.__exit__(*exc)
        except Exception as error:  # noqa: BLE001
            if not _gone(error):
                raise
            self.broken = True
            _silence(self.out)
        return False

    def update(self, status: JobStatus) -> None:
        super().update(status)
        with self._lock:
            snapshot = dict(self.statuses)
        self._guarded(lambda: self._live.update(status_table(snapshot, f"run {self.run_id}")))

    def final(self) -> None:
        with self._lock:
            table = status_table(dict(self.statuses), f"run {self.run_id}")
        self._guarded(lambda: _console(self.out).print(table))


VIEWS: dict[str, Callable[[str], QuietView]] = {"live": LiveView, "plain": PlainView, "quiet": QuietView}
