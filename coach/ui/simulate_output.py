"""What `coach simulate` and its sweep over several policies share on the way out: a results folder that never
writes over an earlier run's, a progress bar on stderr, and lines saying how long a long simulation expects to
take (a million-job workload is valid input but takes hours on 2 cores)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

REFRESH_S = 0.1  # the progress bar is redrawn at most this often
ESTIMATE_AFTER_S = 3.0  # wall seconds of progress an estimate is made from
LONG_S = 60.0  # a simulation expected to take longer than this says so
UPDATE_EVERY_S = 60.0  # and then says again how far it is, this often


def unique_dir(base: Path, run_id: str) -> Path:
    """results/<run_id>, or -2, -3...: an earlier run's folder is never written over (nor a link by that name,
    even one pointing nowhere)."""
    candidate, n = base / run_id, 1
    while os.path.lexists(candidate):
        n += 1
        candidate = base / f"{run_id}-{n}"
    return candidate


def settings_of(args, cluster, workload: Path, policy: str):
    """The simulation `coach simulate`'s options ask for, of one workload under one policy (a sweep has several)."""
    from coach.simulator.session import Settings

    return Settings(workload, cluster, policy, args.scheduler, args.interval, args.seed,
                    Path(args.traces) if args.traces else None, args.budget_factor, args.restart_s)


def write_run(run_dir: Path, outcome, settings) -> dict:
    """One simulated run's folder (its logs, summary and figures), whole or not at all (CannotWrite); its
    summary."""
    from coach.simulator import results
    from coach.storage.folders import write_whole

    return write_whole(run_dir, lambda folder: results.write(folder, outcome, settings.run_id, settings.as_dict()))


def progress_bar(quiet: bool, label: str = "simulating"):
    """A rich progress bar on stderr (jobs finished), or nothing with --quiet. `label`: a sweep's run i/n."""
    if quiet:
        return None, None
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    progress = Progress(TextColumn(label.replace("[", r"\[")), BarColumn(), MofNCompleteColumn(), TextColumn("jobs done"),
                        TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                        TextColumn("{task.fields[clock]}"),
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


def expected_left_s(done: int, total: int, elapsed_s: float) -> float | None:
    """Wall seconds left at the pace so far (jobs finished per second); None before any job has finished."""
    if done <= 0 or elapsed_s <= 0:
        return None
    return (total - done) * elapsed_s / done


def saying_how_long(on_round: Callable[[float, int], None] | None, what: str,
                    say: Callable[[str], None]) -> Callable[[float, int], None]:
    """`on_round`, which also says, ESTIMATE_AFTER_S into the rounds, how long the rest is expected to take when
    that is more than LONG_S, and then every UPDATE_EVERY_S how far it is and how long the rest takes at the last
    interval's pace: so a run of hours is never silent, with or without a progress bar, and an estimate made from
    its first seconds (a trace whose queue builds up over weeks gets slower per simulated day) is corrected as it
    goes. The pace is counted from the first round: reading a workload (seconds for the Philly trace) finishes no
    job."""
    state: dict[str, Any] = {"total": None, "started_s": None, "long": None, "last": None}

    def each_round(now_s: float, left: int) -> None:
        wall_s = time.monotonic()
        if state["total"] is None:
            state["total"], state["started_s"] = left, wall_s
        total = state["total"]
        elapsed_s = wall_s - state["started_s"]
        if state["long"] is None and elapsed_s >= ESTIMATE_AFTER_S:
            rest_s = expected_left_s(total - left, total, elapsed_s)
            state["long"] = rest_s is None or rest_s > LONG_S
            state["last"] = (wall_s, total - left)
            if state["long"]:
                pace = "no job has finished yet" if rest_s is None else f"about {rest_s / 60:.0f} min more"
                say(f"{what}: {total} jobs, {pace} at this pace (Ctrl-C stops it and writes nothing)")
        elif state["long"] and wall_s - state["last"][0] >= UPDATE_EVERY_S and left > 0:
            since_s, done_before = wall_s - state["last"][0], state["last"][1]
            done = total - left
            rest_s = expected_left_s(done - done_before, total - done_before, since_s)
            pace = ("no job finished in the last interval" if rest_s is None
                    else f"about {rest_s / 60:.0f} min more at the last {since_s / 60:.0f} min's pace")
            say(f"{what}: {done} of {total} jobs done, {now_s / 3600:.1f} h simulated, {pace}")
            state["last"] = (wall_s, done)
        if on_round is not None:
            on_round(now_s, left)

    return each_round
