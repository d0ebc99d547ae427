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

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120


def coach(folder: Path, argv: list, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coach.ui.cli", *map(str, argv)], cwd=folder, capture_output=True,
                          text=True, timeout=TIMEOUT_S, preexec_fn=preexec_fn,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def one_line(done: subprocess.CompletedProcess, *texts: str) -> str:
    """Exit 2 with one stderr line holding every text, and no traceback. Returns the line."""
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    for text in texts:
        assert str(text) in lines[0], (text, lines[0])
    return lines[0]


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
