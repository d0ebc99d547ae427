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
    cluster = write(folder, "cluster.yaml", "price_per_slot_s: 0.0001\nnodes:\n  - name: a\n    slots: 0\n")
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


# --------------------------------------------------------------------------- money is never silent


def fake_report(results: Path):
    from types import SimpleNamespace

    return SimpleNamespace(run_dir=results / "run", exit_code=0)


def test_run_prints_the_cluster_and_its_price_before_it_starts(folder, capsys, monkeypatch):
    job = write(folder, "job.yaml", STATIC_JOB)
    started = []
    monkeypatch.setattr(coach.app.run, "run_jobs",
                        lambda specs, cluster, results, **options: started.append(cluster) or fake_report(results))

    assert main(["run", str(job), "--results", str(folder / "results"), "--plain"]) == 0

    assert capsys.readouterr().out.splitlines() == [
        "cluster: thesis-3-nodes (the default cluster): 3 nodes, 12 slots, 0.0001 per slot-second",
        f"results: {folder / 'results' / 'run'}"]
    assert started[0].name == "thesis-3-nodes"


def test_run_prints_the_range_of_prices_of_a_cluster_file(folder, capsys, monkeypatch):
    job = write(folder, "job.yaml", STATIC_JOB)
    cluster = write(folder, "cluster.yaml", "name: lab\nprice_per_slot_s: 0.001\nnodes:\n  - {name: a, slots: 4}\n"
                                            "  - {name: b, slots: 2, price_per_slot_s: 0.003}\n")
    monkeypatch.setattr(coach.app.run, "run_jobs", lambda specs, cluster, results, **options: fake_report(results))

    assert main(["run", str(job), "--cluster", str(cluster), "--results", str(folder / "r"), "--plain"]) == 0

    assert capsys.readouterr().out.splitlines()[0] == (
        f"cluster: lab ({cluster}): 2 nodes, 6 slots, 0.001-0.003 per slot-second")


def test_run_quiet_prints_only_the_results_folder(folder, capsys, monkeypatch):
    job = write(folder, "job.yaml", STATIC_JOB)
    monkeypatch.setattr(coach.app.run, "run_jobs", lambda specs, cluster, results, **options: fake_report(results))

    assert main(["run", str(job), "--results", str(folder / "results"), "--quiet"]) == 0

    assert capsys.readouterr().out == f"results: {folder / 'results' / 'run'}\n"


# --------------------------------------------------------------------------- --version, --help


def test_version_comes_from_the_package_metadata(capsys):
    from importlib.metadata import version

    assert main(["--version"]) == 0

    assert capsys.readouterr().out == f"coach {version('coach')}\n"


def test_help_lists_the_exit_codes(capsys):
    assert main(["--help"]) == 0

    out = capsys.readouterr().out
    assert "exit codes:" in out
    for code in ("0", "1", "2", "130"):
        assert f"\n  {code} " in out


def every_parser():
    """(command, parser) for `coach` and every sub-command, nested ones included."""
    import argparse

    from coach.ui.cli import build_parser

    found, todo = [], [("coach", build_parser())]
    while todo:
        name, parser = todo.pop()
        found.append((name, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{name} {sub}", child) for sub, child in action.choices.items()]
    return found


def test_every_option_shows_its_default_and_every_positional_argument_is_described():
    import argparse

    checked = 0
    for name, parser in every_parser():
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
                continue
            checked += 1
            if action.option_strings:
                assert "default" in (action.help or ""), f"{name} {action.option_strings[0]}: no default in help"
                if action.default not in (None, False) and "%(default)" not in action.help:
                    assert str(action.default) in action.help, (name, action.option_strings)
            else:
                assert action.help, f"{name} {action.dest}: positional argument without help"
    assert checked >= 25


def test_every_sub_command_help_shows_the_exit_codes(capsys):
    for name, parser in every_parser():
        if name in ("coach", "coach bench"):
            continue
        assert "130" in parser.format_help(), name


@pytest.mark.parametrize("argv", [["run", "--placement-timeout", "nan", "x.yaml"], ["plan", "x", "--history", "h",
                                                                                  "--budget-left", "inf"]])
def test_a_non_finite_option_is_argparse_s_one_line_error(argv, capsys):
    assert main(argv) == 2

    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: argument --" in err and "must be a finite number" in err


# --------------------------------------------------------------------------- money is never silent


def test_validate_warns_when_the_budget_is_below_the_least_one_epoch_can_cost(folder, capsys):
    job = write(folder, "job.yaml", STATIC_JOB.replace("budget: 0.25", "budget: 0.0001"))

    assert main(["validate", str(job)]) == 0  # a warning, not bad input

    out = capsys.readouterr()
    assert out.out == f"{job}: ok: job 'tiny' (2 workers, 1 servers, budget 0.0001)\n"
    assert out.err == (f"{job}: budget: warning: 0.0001 is below the least one epoch at 2/1 can cost "
                       "(4 slots x 0.3 s x 0.0001 per slot-second = 0.00012); the job will stop with `budget` "
                       "before training\n")


def test_validate_warns_a_dynamic_job_about_its_first_calibration_step_and_uses_the_cluster_price(folder, capsys):
    job = write(folder, "job.yaml", STATIC_JOB.replace("workers: 2\nservers: 1\n", "").replace("0.25", "0.5"))
    cluster = write(folder, "cluster.yaml", "nodes:\n  - {name: a, slots: 4, price_per_slot_s: 1.0}\n")

    assert main(["validate", str(job), "--cluster", str(cluster)]) == 0

    assert capsys.readouterr().err == (
        f"{job}: budget: warning: 0.5 is below the least one epoch at 1/1 can cost (3 slots x 0.3 s x 1 per "
        "slot-second = 0.9); the job will stop with `budget` before training\n")
