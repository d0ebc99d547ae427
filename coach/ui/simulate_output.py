"""What `coach simulate` and its sweep over several policies share on the way out: a results folder that never
writes over an earlier run's, and a progress bar on stderr."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

REFRESH_S = 0.1  # the progress bar is redrawn at most this often


def unique_dir(base: Path, run_id: str) -> Path:
    """results/<run_id>, or -2, -3...: an earlier run's folder is never written over."""
    candidate, n = base / run_id, 1
    while candidate.exists():
        n += 1
        candidate = base / f"{run_id}-{n}"
    return candidate


def progress_bar(quiet: bool, label: str = "simulating"):
    """A rich progress bar on stderr (jobs finished), or nothing with --quiet. `label`: a sweep's run i/n."""
    if quiet:
        return None, None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn(label.replace("[", r"\[")), BarColumn(), MofNCompleteColumn(), TextColumn("jobs done"),
                        TimeElapsedColumn(), TextColumn("{task.fields[clock]}"),
                        console=Console(file=sys.stderr), transient=True)
    state: dict[str, Any] = {"task": None, "total": 0, "shown_s": 0.0}

    def on_round(now_s: float, left: int) -> None:
        if state["task"] is None:
            state["total"] = left
            state["task"] = progress.add_task("simulate", total=left, clock="")
            progress.start()
        wall_s = time.monotonic()
        if wall_s - state["shown_s"] >= REFRESH_S or left == 0:
            state["shown_s"] = wall_s
            progress.update(state["task"], completed=state["total"] - left,
                            clock=f"simulated {now_s / 3600:.1f} h")

    return progress, on_round
