"""How a run shows itself: a live rich table, plain log lines for CI, or nothing. Side effect: prints.

Views receive JobStatus snapshots from the job threads; they never decide anything.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, Mapping

from rich.console import Console
from rich.live import Live
from rich.table import Table

from coach.domain.status import JobStatus


def _console() -> Console:
    """Stdout; wide enough for the table when it is a pipe or a CI log rather than a terminal."""
    return Console() if sys.stdout.isatty() else Console(width=140)


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def status_table(statuses: Mapping[str, JobStatus], title: str) -> Table:
    table = Table(title=title)
    for column in ("job", "phase", "epoch", "loss", "val_loss", "w/s", "cost / budget", "note"):
        table.add_column(column)
    for s in statuses.values():
        table.add_row(s.job, s.phase, str(s.epoch), _fmt(s.loss), _fmt(s.val_loss), f"{s.workers}/{s.servers}",
                      f"{s.cost:.4f} / {s.budget:g}", s.message)
    return table


class QuietView:
    """Prints nothing while running; the caller prints the results folder."""

    def __init__(self, run_id: str, console: Console | None = None):
        self.run_id = run_id
        self.console = console or Console(file=sys.stderr)
        self.statuses: dict[str, JobStatus] = {}
        self._lock = threading.Lock()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, status: JobStatus) -> None:
        with self._lock:
            self.statuses[status.job] = status

    def final(self) -> None:
        pass


class PlainView(QuietView):
    """One timestamped line per change, for CI logs and pipes."""

    def update(self, status: JobStatus) -> None:
        with self._lock:
            previous = self.statuses.get(status.job)
            self.statuses[status.job] = status
        if previous == status:
            return
        line = (f"{time.strftime('%H:%M:%S')} {status.job}: {status.phase} epoch={status.epoch} "
                f"loss={_fmt(status.loss)} val_loss={_fmt(status.val_loss)} w/s={status.workers}/{status.servers} "
                f"cost={status.cost:.4f}/{status.budget:g}")
        if status.message:
            line += f" ({status.message})"
        print(line, flush=True)

    def final(self) -> None:
        _console().print(status_table(self.statuses, f"run {self.run_id}"))


class LiveView(QuietView):
    """A table redrawn four times a second while jobs run, then the final table."""

    def __enter__(self):
        self._live = Live(status_table({}, f"run {self.run_id}"), refresh_per_second=4, transient=True)
        self._live.__enter__()
        return self

    def __exit__(self, *exc):
        self._live.__exit__(*exc)
        return False

    def update(self, status: JobStatus) -> None:
        super().update(status)
        with self._lock:
            snapshot = dict(self.statuses)
        self._live.update(status_table(snapshot, f"run {self.run_id}"))

    def final(self) -> None:
        _console().print(status_table(self.statuses, f"run {self.run_id}"))


VIEWS: dict[str, Callable[[str], QuietView]] = {"live": LiveView, "plain": PlainView, "quiet": QuietView}
