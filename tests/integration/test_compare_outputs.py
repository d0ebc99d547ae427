"""Where `coach compare` and `coach report` write, and what they leave when they cannot.

Each case runs `coach` in a real process: a closed stdout, an --out that already holds results, an --out that
cannot be written, a disk that fills up part-way. The rules: one stderr line naming --out and the file, exit 2,
nothing half-written and nothing of before lost.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_bad_input import MODEL, finished_run, snapshot
from tests.unit.test_unbounded_inputs import one_line

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120


def coach(folder: Path, argv: list, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coach.ui.cli", *map(str, argv)], cwd=folder, capture_output=True,
                          text=True, timeout=TIMEOUT_S, preexec_fn=preexec_fn,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture
def here(tmp_path: Path) -> Path:
    (tmp_path / "model.py").write_text(MODEL)
    finished_run(tmp_path / "a")
    finished_run(tmp_path / "b")
    return tmp_path


def _close_stdout() -> None:
    os.close(1)


@pytest.mark.parametrize("command", ["compare", "report"])
def test_a_closed_stdout_still_writes_the_results(here, command):
    argv = ["compare", "a", "b", "--out", "out"] if command == "compare" else ["report", "a", "--out", "out"]

    done = coach(here, argv, preexec_fn=_close_stdout)

    assert (done.returncode, done.stderr) == (0, "")
    assert (here / "out" / ("compare.json" if command == "compare" else "cost.png")).is_file()


def argv_of(command: str, out: str | None = "out") -> list:
    head = ["compare", "a", "b"] if command == "compare" else ["report", "a"]
    return head + (["--out", out] if out else [])


@pytest.mark.parametrize("command", ["compare", "report"])
def test_an_out_folder_holding_an_earlier_result_is_refused_and_kept(here, command):
    """Before, a second comparison into the same --out silently wrote over the first."""
    assert coach(here, argv_of(command)).returncode == 0
    before = snapshot(here)

    one_line(coach(here, argv_of(command)), "--out: out: holds", "already", "name a new or empty folder")

    assert snapshot(here) == before


def test_an_empty_out_folder_takes_the_results(here):
    (here / "out").mkdir()

    assert coach(here, argv_of("compare")).returncode == 0
    assert sorted(p.name for p in (here / "out").iterdir()) == ["compare.json", "epoch_time.png", "jct_box.png",
                                                               "runtime_bars.png"]


def test_the_default_report_folder_is_replaced_by_a_new_report_of_the_same_run_only(here):
    assert coach(here, argv_of("report", None)).returncode == 0
    assert coach(here, argv_of("report", None)).returncode == 0  # an earlier report of this run: replaced
    assert sorted(p.name for p in here.iterdir() if p.name.startswith(".")) == []  # no hidden folder left
    (here / "a" / "report" / "notes.txt").write_text("mine")
    before = snapshot(here)

    one_line(coach(here, argv_of("report", None)), "a/report: (the default --out): holds 'notes.txt'")

    assert snapshot(here) == before


@pytest.mark.parametrize("command", ["compare", "report"])
@pytest.mark.parametrize("out", ["/proc/coach-out", "locked/out"])
def test_an_out_folder_that_cannot_be_written_is_refused_before_any_work(here, command, out):
    """Before, /proc/x or a read-only folder was found after the statistics, named as `(file)` by a PNG."""
    if out.startswith("locked"):
        (here / "locked").mkdir()
        if subprocess.run(["chattr", "+i", str(here / "locked")], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not available here (root ignores a folder's mode bits)")
    before = snapshot(here)
    try:
        line = one_line(coach(here, argv_of(command, out)), f"--out: {out}: cannot write in")
    finally:
        subprocess.run(["chattr", "-i", str(here / "locked")], capture_output=True)
    assert "png" not in line
    assert snapshot(here) == before


def _small_files() -> None:
    """A file-size limit stands in for a full disk: a write past it fails (EFBIG) instead of killing the process."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (12_000, 12_000))


@pytest.mark.parametrize("command", ["compare", "report"])
@pytest.mark.parametrize("earlier", [False, True])
def test_a_disk_that_fills_up_part_way_leaves_nothing_half_written(here, command, earlier):
    """Before, a full disk left 0-byte PNGs and a `coach: (file): No space left on device` line."""
    out = None if command == "report" and earlier else "out"  # the default report folder replaces an earlier one
    if earlier:
        assert coach(here, argv_of(command, out)).returncode == 0
        if out:
            out = "out2"
    before = snapshot(here)

    line = one_line(coach(here, argv_of(command, out), preexec_fn=_small_files), "cannot write",
                    "File too large", "nothing was written")

    assert line.startswith(f"--out: {out}: " if out else "a/report: (the default --out): ")
    assert ".png" in line or "compare.json" in line
    assert without_folder_times(snapshot(here)) == without_folder_times(before)  # the hidden folder came and went


def without_folder_times(found: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int] | None]:
    return {path: None if Path(path).suffix == "" else stat for path, stat in found.items()}


@pytest.mark.parametrize("out, message", [("", "expected a path, got an empty one"),
                                          ("o" * 300, "a name of 300 bytes in")])
@pytest.mark.parametrize("command", ["compare", "report"])
def test_an_empty_or_overlong_out_is_refused_naming_it(here, command, out, message):
    """An empty --out would be the current folder; a name past 255 bytes would fail at the first file, naming it
    rather than the option."""
    before = snapshot(here)
    argv = ["compare", "a", "b", "--out", out] if command == "compare" else ["report", "a", "--out", out]
    done = coach(here, argv)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert "argument --out: " + message in line
    assert snapshot(here) == before
