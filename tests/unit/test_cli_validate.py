"""The `coach` command's input checks: `validate` and the refusals of `run` that happen before anything starts.

Bad input exits with 2 and prints only the `FILE: FIELD: message` lines, on stderr.
A refused `run` creates no results folder and starts nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import coach.app.run
from coach.ui.cli import main

MODEL = "def build_model():\n    return None\n\n\ndef load_data():\n    return None\n"

STATIC_JOB = """\
name: tiny
model: model.py
batch_size: 8
optimizer: sgd
learning_rate: 0.1
target_loss: 0.5
max_epochs: 2
budget: 0.25
workers: 2
servers: 1
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write(tmp_path, "model.py", MODEL)
    return tmp_path


@pytest.fixture
def no_training(monkeypatch):
    """Fail loudly instead of training if a refused `run` ever got as far as starting the jobs."""
    def refuse(*args, **kwargs):
        raise AssertionError("run_jobs must not be called for bad input")

    monkeypatch.setattr(coach.app.run, "run_jobs", refuse)


# --------------------------------------------------------------------------- validate


def test_validate_a_good_static_job_prints_one_ok_line(folder, capsys):
    job = write(folder, "job.yaml", STATIC_JOB)

    assert main(["validate", str(job)]) == 0

    out = capsys.readouterr()
    assert out.out == f"{job}: ok: job 'tiny' (2 workers, 1 servers, budget 0.25)\n"
    assert out.err == ""


def test_validate_a_dynamic_job_says_so(folder, capsys):
    job = write(folder, "job.yaml", STATIC_JOB.replace("workers: 2\nservers: 1\n", ""))

    assert main(["validate", str(job)]) == 0

    assert capsys.readouterr().out == f"{job}: ok: job 'tiny' (dynamic, budget 0.25)\n"


def test_validate_prints_one_line_per_file(folder, capsys):
    first = write(folder, "a.yaml", STATIC_JOB)
    second = write(folder, "b.yaml", STATIC_JOB.replace("name: tiny", "name: other"))

    assert main(["validate", str(first), str(second)]) == 0

    assert capsys.readouterr().out.splitlines() == [
        f"{first}: ok: job 'tiny' (2 workers, 1 servers, budget 0.25)",
        f"{second}: ok: job 'other' (2 workers, 1 servers, budget 0.25)",
    ]


def test_validate_a_bad_job_exits_2_with_only_the_error_lines_on_stderr(folder, capsys):
    job = write(folder, "job.yaml", STATIC_JOB.replace("batch_size: 8", 'batch_size: "8"').replace(
        "budget: 0.25", "budget: -1"))

    assert main(["validate", str(job)]) == 2

    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == (f"{job}: batch_size: expected an integer, got str '8'\n"
                       f"{job}: budget: must be > 0, got -1.0\n")


def test_validate_reports_a_missing_file(tmp_path, capsys):
    missing = tmp_path / "missing.yaml"

    assert main(["validate", str(missing)]) == 2

    assert capsys.readouterr() == ("", f"{missing}: (file): file not found\n")


def test_validate_reports_the_bad_files_of_a_mixed_set_only(folder, capsys):
    good = write(folder, "good.yaml", STATIC_JOB)
    bad = write(folder, "bad.yaml", STATIC_JOB.replace("name: tiny", "name: bad") + "colour: red\n")

    assert main(["validate", str(good), str(bad)]) == 2

    assert capsys.readouterr() == ("", f"{bad}: colour: unknown field\n")


# --------------------------------------------------------------------------- run refuses before starting


def test_run_refuses_a_calibration_fraction_above_one_and_writes_nothing(folder, capsys, no_training):
    job = write(folder, "job.yaml", STATIC_JOB.replace("workers: 2\nservers: 1\n", "calibration_fraction: 1.5\n"))
    results = folder / "results"

    assert main(["run", str(job), "--results", str(results)]) == 2

    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == f"{job}: calibration_fraction: must be <= 1, got 1.5\n"
    assert not results.exists()


def test_run_refuses_a_bad_cluster_file_and_writes_nothing(folder, capsys, no_training):
    job = write(folder, "job.yaml", STATIC_JOB)
    cluster = write(folder, "cluster.yaml", "nodes:\n  - name: a\n    slots: 0\n")
    results = folder / "results"

    assert main(["run", str(job), "--cluster", str(cluster), "--results", str(results)]) == 2

    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == f"{cluster}: nodes[0].slots: must be > 0, got 0\n"
    assert not results.exists()


def test_run_refuses_a_bad_job_file_before_reading_the_cluster(folder, capsys, no_training):
    job = write(folder, "job.yaml", STATIC_JOB.replace("optimizer: sgd", "optimizer: sgdd"))
    missing_cluster = folder / "no-cluster.yaml"
    results = folder / "results"

    assert main(["run", str(job), "--cluster", str(missing_cluster), "--results", str(results)]) == 2

    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == (f"{job}: optimizer: unknown optimizer 'sgdd', allowed: adadelta, adagrad, adam, nag, "
                       "rmsprop, sgd (did you mean 'sgd'?)\n")
    assert not results.exists()


def test_resuming_a_folder_that_is_not_a_run_is_one_line_and_exit_2(folder, capsys):
    assert main(["run", "--resume", str(folder)]) == 2
    out = capsys.readouterr()
    assert out.err == f"{folder / 'run.json'}: (file): No such file or directory\n"


def test_resume_takes_no_job_files(folder, capsys):
    assert main(["run", "x.yaml", "--resume", str(folder)]) == 2
    assert "--resume: give the run folder only" in capsys.readouterr().err
