"""Every file a command reads is read with a bound and a type check (issue 37, item 1).

A FIFO, /dev/zero (a character device), a folder, or a sparse file of 3 GiB named where a command reads a history,
a log, a summary, a manifest, a workload or a checkpoint's state: one stderr line naming the file and the problem
(the kind of file, or the cap it breaks), exit 2, nothing written. Each case runs `coach` in a subprocess under
RLIMIT_AS (so that an unbounded read fails the test instead of eating the machine) and with a timeout (so that a
blocking open or read of a FIFO fails it instead of hanging).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from coach.dl2.params_file import MAX_MODEL_BYTES
from coach.inputs.limits import (MAX_LOG_BYTES, MAX_LOG_LINE_BYTES, MAX_RUN_JSON_BYTES, MAX_STATE_BYTES,
                                 capped_lines, read_capped)
from coach.simulator.workloads import MAX_WORKLOAD_BYTES
from tests.unit.test_bad_input import (MODEL, finished_run, job_yaml, plan_inputs, run_folder, snapshot,
                                       write)

REPO = Path(__file__).resolve().parents[2]
MEMORY_BYTES = 2 << 30  # address space of one `coach` process: MXNet's and scipy's imports fit, a slurp does not
SPARSE_BYTES = 3 << 30  # over every cap, and no disk used
TIMEOUT_S = 60  # a FIFO opened for reading blocks: the test fails at this instead of hanging

KINDS = ("fifo", "dev-zero", "folder", "sparse")


def make(path: Path, kind: str) -> None:
    """Put a file of `kind` at `path` (replacing what is there)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        with open(path, "wb") as handle:
            handle.truncate(SPARSE_BYTES)


def expected(kind: str, cap: int) -> str:
    return {"fifo": "not a regular file (a FIFO)", "dev-zero": "not a regular file (a character device)",
            "folder": "Is a directory", "sparse": f"larger than {cap} bytes (the limit)"}[kind]


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def coach(folder: Path, argv: list) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coach.ui.cli", *map(str, argv)], cwd=folder, capture_output=True,
                          text=True, timeout=TIMEOUT_S, preexec_fn=_limited,
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


def refused(folder: Path, argv: list, *texts: str, allowed: set[str] = frozenset()) -> str:
    """`coach ARGV` exits 2 with one stderr line holding every text, no traceback, nothing written under
    `folder` (paths in `allowed` aside). Returns the line."""
    before = snapshot(folder)
    line = one_line(coach(folder, argv), *texts)
    after = snapshot(folder)
    assert {k: v for k, v in after.items() if k not in allowed} == \
        {k: v for k, v in before.items() if k not in allowed}
    return line


@pytest.fixture
def here(tmp_path: Path) -> Path:
    (tmp_path / "model.py").write_text(MODEL)
    return tmp_path


# --------------------------------------------------------------------------- the readers themselves


def test_a_long_log_is_streamed_a_line_at_a_time_and_a_line_without_end_stops_at_its_cap(tmp_path):
    log = tmp_path / "long.jsonl"
    with open(log, "wb") as handle:
        handle.write(b'{"a": 1}\n' * 3)
        handle.truncate(MAX_LOG_LINE_BYTES * 4)  # then zeros without a newline: one endless line, no disk used
    lines = capped_lines(log)
    assert [next(lines) for _ in range(3)] == [(number, b'{"a": 1}\n') for number in (1, 2, 3)]
    with pytest.raises(Exception, match=f"longer than {MAX_LOG_LINE_BYTES} bytes") as raised:
        next(lines)
    assert raised.value.number == 4


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(Exception, match=r"not a regular file \(a FIFO\)"):
        read_capped(tmp_path / "fifo", 100)


# --------------------------------------------------------------------------- `coach plan --history`


@pytest.mark.parametrize("kind", KINDS)
def test_plan_refuses_a_history_that_is_not_a_bounded_regular_file(here, kind):
    job, log = plan_inputs(here)
    make(log, kind)
    refused(here, ["plan", job, "--history", log], str(log), expected(kind, MAX_LOG_BYTES))


def test_plan_refuses_a_history_line_over_its_cap(here):
    job, log = plan_inputs(here)
    with open(log, "r+b") as handle:
        handle.truncate(MAX_LOG_LINE_BYTES * 3)  # a last "line" of zeros, 2 MiB long, no disk used
    refused(here, ["plan", job, "--history", log], str(log), f"longer than {MAX_LOG_LINE_BYTES} bytes (the limit)")


# --------------------------------------------------------------------------- `coach compare`, `coach report`


@pytest.mark.parametrize("command", ["compare", "report"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("name", "cap"), [("tiny.jsonl", MAX_LOG_BYTES), ("summary.json", MAX_RUN_JSON_BYTES)])
def test_compare_and_report_refuse_a_run_folder_file_that_is_not_a_bounded_regular_file(here, command, kind, name,
                                                                                        cap):
    run = finished_run(here / "run")
    make(run / name, kind)
    argv = ["compare", run, run, "--out", here / "out"] if command == "compare" else ["report", run]
    refused(here, argv, str(run), name, expected(kind, cap))


@pytest.mark.parametrize("command", ["compare", "report"])
@pytest.mark.parametrize(("name", "field", "value"), [("summary.json", "jct_s", 1e160),
                                                      ("tiny.jsonl", "cumulative_cost", 1e308)])
def test_compare_and_report_refuse_a_value_too_large_to_compute_with_and_warn_of_nothing(here, command, name, field,
                                                                                          value):
    """A JCT of 1e160 made compare's standard deviation infinite (numpy's RuntimeWarnings, then a traceback after
    the plots were written); a cost of 1e308 made matplotlib warn of an overflow. Both are refused when read."""
    run = finished_run(here / "run")
    other = finished_run(here / "other")
    if name == "summary.json":
        summary = json.loads((run / name).read_text())
        summary["jobs"]["tiny"][field] = value
        (run / name).write_text(json.dumps(summary))
    else:
        record = json.loads((run / name).read_text())
        (run / name).write_text(json.dumps({**record, field: value}) + "\n")
    argv = ["compare", run, other, "--out", here / "out"] if command == "compare" else ["report", run]
    refused(here, argv, str(run), name, field, "must be <= 1e+12")


# --------------------------------------------------------------------------- `coach run --resume`


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("name", "cap"), [("tiny.jsonl", MAX_LOG_BYTES), ("run.json", MAX_RUN_JSON_BYTES),
                                           ("summary.json", MAX_RUN_JSON_BYTES)])
def test_resume_refuses_a_run_folder_file_that_is_not_a_bounded_regular_file(here, kind, name, cap):
    run_dir = run_folder(here)
    make(run_dir / name, kind)
    refused(here, ["run", "--resume", run_dir], str(run_dir / name), expected(kind, cap))


# --------------------------------------------------------------------------- `coach serve`'s results folder


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("name", "cap"), [("service.json", MAX_RUN_JSON_BYTES),
                                           ("20260101-000000-abcd/tiny.jsonl", MAX_LOG_BYTES)])
def test_serve_refuses_a_results_folder_file_that_is_not_a_bounded_regular_file(here, kind, name, cap):
    run_dir = run_folder(here)
    write(here / "results", "service.json", json.dumps({"run_id": run_dir.name}))
    make(here / "results" / name, kind)
    refused(here, ["serve", "--results", here / "results", "--port", 0, "--models", here], str(here / "results" / name),
            expected(kind, cap), allowed={"results"})  # its time: service.lock was made, then removed
    assert not (here / "results" / "service.lock").exists()  # a refused folder is left as it was found


# --------------------------------------------------------------------------- `coach simulate`


@pytest.mark.parametrize("kind", KINDS)
def test_simulate_refuses_a_workload_that_is_not_a_bounded_regular_file(here, kind):
    workload = here / "workload.csv"
    make(workload, kind)
    refused(here, ["simulate", workload, "--policy", "fifo", "--results", here / "out"], str(workload),
            expected(kind, MAX_WORKLOAD_BYTES).replace("Is a directory", ""))


# --------------------------------------------------------------------------- `coach train-policy --resume`


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("name", "cap"), [("state.json", MAX_STATE_BYTES), ("net.params", MAX_MODEL_BYTES)])
def test_train_policy_resume_refuses_a_checkpoint_file_that_is_not_a_bounded_regular_file(here, kind, name, cap):
    checkpoint = here / "model.params.ckpt"
    write(checkpoint, "state.json", "{}")
    for other in ("net.params", "trainer.states"):
        write(checkpoint, other, "x")
    make(checkpoint / name, kind)
    refused(here, ["train-policy", "--level", "run", "--imitate", "coach", "--out", here / "model.params",
                   "--resume", "--quiet"], str(checkpoint / name), expected(kind, cap))


def test_a_job_file_is_still_read(here):
    """The readers' type checks let a plain file through (a guard against refusing everything)."""
    write(here, "job.yaml", job_yaml())
    done = coach(here, ["validate", "job.yaml"])
    assert done.returncode == 0, done.stderr
