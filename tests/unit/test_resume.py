"""coach.app.run over a simulated platform that writes real checkpoint files: interrupts, resumes, lost logs,
moved run folders, diverged training and closed outputs, end to end through the live driver, in seconds.

The platform answers at once (durations from coach.platforms.virtual's speed model); rank 0 "saves" a
checkpoint by writing both of its files, so the file checkpoint store of a real run sees it complete.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from coach.app.run import exit_code_for, resume_run, run_jobs
from coach.domain.cluster import DEFAULT_CLUSTER
from coach.domain.jobs import JobSpec
from coach.policy.planning import CALIBRATION_POINTS
from coach.storage.results import read_log
from tests.support import Scripted, factory


def spec(tmp_path: Path, name: str = "sim", **fields) -> JobSpec:
    values = dict(name=name, source=tmp_path / f"{name}.yaml", model_path=tmp_path / "model.py", batch_size=64,
                  optimizer="sgd", optimizer_params={}, learning_rate=0.05, target_loss=0.0, consecutive=3,
                  max_epochs=6, budget=10.0, workers=2, servers=1, max_workers=None, max_servers=None, seed=0,
                  epoch_timeout_s=60.0, max_retries=1)
    values.update(fields)
    return JobSpec(**values)


def interrupted_run(tmp_path: Path, job: JobSpec, at_step: int = 3, results: Path | None = None):
    stop = threading.Event()
    platform = Scripted(stop, stop_at_step=at_step)
    report = run_jobs([job], DEFAULT_CLUSTER, results or tmp_path / "results", view="quiet",
                      platform_factory=factory(platform), stop_event=stop, policy="static")
    return report


def strict(path: Path) -> list[dict]:
    """A log read the way a strict JSON reader in another language would: NaN or Infinity is an error."""
    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def stop_reasons(records: list[dict]) -> list:
    return [r["stop_reason"] for r in records]


# --------------------------------------------------------------------------- interrupted, then resumed


def test_an_interrupted_job_closes_without_a_stop_reason_and_after_resume_only_the_last_line_has_one(tmp_path):
    job = spec(tmp_path)
    report = interrupted_run(tmp_path, job, at_step=3)

    assert report.exit_code == 130
    assert report.summary["jobs"]["sim"]["stop_reason"] == "interrupted"
    records = read_log(report.run_dir / "sim.jsonl")
    assert [r["phase"] for r in records] == ["training"] * 3 + ["interrupted"]
    assert records[-1]["stop_reason"] is None and records[-1]["epoch"] == 3
    assert records[-1]["charged_s"] == 0.0

    resumed = resume_run(report.run_dir, view="quiet", platform_factory=factory(Scripted()))

    assert resumed.exit_code == 0
    records = strict(report.run_dir / "sim.jsonl")
    assert [r["epoch"] for r in records if r["phase"] == "training"] == [1, 2, 3, 4, 5, 6]
    assert stop_reasons(records) == [None] * (len(records) - 1) + ["max_epochs"]
    assert resumed.summary["jobs"]["sim"]["stop_reason"] == "max_epochs"


@pytest.mark.parametrize("damage", ["emptied", "torn first line"])
def test_a_log_without_a_complete_record_goes_on_from_the_newest_complete_checkpoint(tmp_path, damage):
    job = spec(tmp_path)
    report = interrupted_run(tmp_path, job, at_step=3)
    spent = report.summary["jobs"]["sim"]["total_cost"]
    log = report.run_dir / "sim.jsonl"
    log.write_text("" if damage == "emptied" else log.read_text()[:40])  # cut before the first newline
    assert sorted(p.name for p in (report.run_dir / "checkpoints" / "sim").iterdir()) == [
        "epoch-0003.params", "epoch-0003.states"]

    resumed = resume_run(report.run_dir, view="quiet", platform_factory=factory(Scripted()))

    records = strict(log)
    first = records[0]
    assert (first["phase"], first["epoch"], first["cost"], first["stop_reason"]) == ("recovered", 3, 0.0, None)
    assert first["checkpoint"] == str(report.run_dir / "checkpoints" / "sim" / "epoch-0003")
    assert first["cumulative_cost"] == spent  # what summary.json last said
    training = [r for r in records if r["phase"] == "training"]
    assert [r["epoch"] for r in training] == [4, 5, 6]  # max_epochs still counts the lost epochs
    assert abs(training[0]["cumulative_cost"] - (spent + training[0]["cost"])) < 1e-12
    assert stop_reasons(records) == [None] * (len(records) - 1) + ["max_epochs"]
    assert resumed.exit_code == 0
    assert resumed.summary["jobs"]["sim"]["epochs"] == 6


def test_a_lost_log_whose_newest_checkpoint_is_the_last_epoch_stops_at_once_with_max_epochs(tmp_path):
    job = spec(tmp_path, max_epochs=3)
    report = interrupted_run(tmp_path, job, at_step=3)  # epoch 3 finishes the job before the stop matters
    assert report.summary["jobs"]["sim"]["stop_reason"] == "max_epochs"
    log = report.run_dir / "sim.jsonl"
    log.write_text("")
    summary = json.loads((report.run_dir / "summary.json").read_text())
    summary["jobs"]["sim"]["stop_reason"] = None  # neither the log nor the summary knows it finished
    (report.run_dir / "summary.json").write_text(json.dumps(summary))

    resumed = resume_run(report.run_dir, view="quiet", platform_factory=factory(Scripted()))

    records = read_log(log)
    assert [(r["phase"], r["epoch"], r["stop_reason"]) for r in records] == [
        ("recovered", 3, None), ("stopped", 3, "max_epochs")]
    assert resumed.exit_code == 0


def test_a_lost_log_of_a_job_the_summary_says_finished_is_left_as_the_summary_says(tmp_path):
    job = spec(tmp_path, max_epochs=2)
    report = run_jobs([job], DEFAULT_CLUSTER, tmp_path / "results", view="quiet",
                      platform_factory=factory(Scripted()), policy="static")
    (report.run_dir / "sim.jsonl").write_text("")
    before = report.summary["jobs"]["sim"]

    resumed = resume_run(report.run_dir, view="quiet", platform_factory=factory(Scripted()))

    assert (report.run_dir / "sim.jsonl").read_text() == ""
    after = resumed.summary["jobs"]["sim"]
    assert {k: after[k] for k in ("stop_reason", "epochs", "total_cost", "workers", "servers", "finished")} == {
        k: before[k] for k in ("stop_reason", "epochs", "total_cost", "workers", "servers", "finished")}
    assert resumed.exit_code == 0


def test_a_lost_log_without_any_checkpoint_starts_from_scratch(tmp_path):
    job = spec(tmp_path, max_epochs=2)
    report = interrupted_run(tmp_path, job, at_step=1)
    (report.run_dir / "sim.jsonl").write_text("")
    shutil.rmtree(report.run_dir / "checkpoints" / "sim")

    resume_run(report.run_dir, view="quiet", platform_factory=factory(Scripted()))

    records = read_log(report.run_dir / "sim.jsonl")
    assert [(r["phase"], r["epoch"]) for r in records] == [("training", 1), ("training", 2)]
    assert records[0]["cumulative_cost"] > records[0]["cost"]  # the summary's figure is carried on


def test_a_dynamic_job_that_lost_its_log_calibrates_again_from_its_checkpoint_and_numbers_on(tmp_path):
    # instant simulated replies timed by the wall clock make a noisy speed fit: the budget must not depend on it
    job = spec(tmp_path, workers=None, servers=None, max_epochs=5, budget=1e12)
    stop = threading.Event()
    report = run_jobs([job], DEFAULT_CLUSTER, tmp_path / "results", view="quiet",
                      platform_factory=factory(Scripted(stop, stop_at_step=len(CALIBRATION_POINTS) + 2)),
                      stop_event=stop)  # calibration and 2 epochs
    assert report.exit_code == 130
    (report.run_dir / "sim.jsonl").write_text("")

    resumed = resume_run(report.run_dir, view="quiet", platform_factory=factory(Scripted()))

    records = read_log(report.run_dir / "sim.jsonl")
    phases = [(r["phase"], r["epoch"]) for r in records]
    assert phases[0] == ("recovered", 2)
    calibrated = 1 + len(CALIBRATION_POINTS)
    assert phases[1:calibrated] == [("calibration", 0)] * len(CALIBRATION_POINTS)  # lost with the log
    assert records[1]["checkpoint"] != records[0]["checkpoint"]
    assert phases[calibrated:] == [("training", 3), ("training", 4), ("training", 5)]
    assert resumed.exit_code == 0 and records[-1]["stop_reason"] == "max_epochs"


# --------------------------------------------------------------------------- paths


def test_a_run_started_with_a_relative_results_folder_resumes_from_another_directory(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    report = interrupted_run(tmp_path, spec(tmp_path), at_step=2, results=Path("results"))
    assert report.run_dir.is_absolute()

    monkeypatch.chdir(tmp_path / "b")
    resumed = resume_run(Path("..") / "a" / "results" / report.run_id, view="quiet",
                         platform_factory=factory(Scripted()))

    assert resumed.exit_code == 0
    assert resumed.run_dir == report.run_dir
    assert not (tmp_path / "b" / "results").exists()


def test_a_moved_run_folder_resumes_from_its_own_checkpoints(tmp_path):
    report = interrupted_run(tmp_path, spec(tmp_path), at_step=2)
    moved = tmp_path / "elsewhere" / report.run_id
    shutil.move(report.run_dir, moved)

    resumed = resume_run(moved, view="quiet", platform_factory=factory(Scripted()))

    assert resumed.exit_code == 0
    records = read_log(moved / "sim.jsonl")
    assert records[-1]["checkpoint"].startswith(str(moved))


# --------------------------------------------------------------------------- diverged training, failures, outputs


def diverging_replies(monkeypatch) -> None:
    """Until WorkerReply has its `diverged` field (another change adds it), a reply body that says
    `"diverged": true` becomes a WorkerReply whose loss is NaN, built directly, as from_dict refuses NaN."""
    import dataclasses

    import coach.drivers.core as core

    original = core.WorkerReply
    if "diverged" in {f.name for f in dataclasses.fields(original)}:
        return  # the contract carries it: nothing to stand in for

    class Reply(original):
        @classmethod
        def from_dict(cls, data):
            if data.get("diverged"):
                plain = {key: value for key, value in data.items() if key != "diverged"}
                return replace(original.from_dict({**plain, "loss_sum": 1.0}), loss_sum=math.nan)
            return original.from_dict(data)

    monkeypatch.setattr(core, "WorkerReply", Reply)


def test_a_diverged_epoch_ends_the_job_with_diverged_its_cost_charged_and_no_nan_written(tmp_path, monkeypatch):
    diverging_replies(monkeypatch)
    platform = Scripted(nan_at_step=3)
    report = run_jobs([spec(tmp_path)], DEFAULT_CLUSTER, tmp_path / "results", view="quiet",
                      platform_factory=factory(platform), policy="static")

    assert report.exit_code == 1
    records = strict(report.run_dir / "sim.jsonl")
    assert [r["phase"] for r in records] == ["training", "training", "stopped"]
    closing = records[-1]
    assert closing["stop_reason"] == "diverged" and closing["epoch"] == 2
    assert closing["cost"] > 0 and closing["charged_s"] > 0
    assert "epoch 3: worker rank 0, 1 reported a non-finite loss" in closing["error"]
    assert abs(closing["cumulative_cost"] - sum(r["cost"] for r in records)) < 1e-12
    assert "NaN" not in (report.run_dir / "summary.json").read_text()
    assert report.summary["jobs"]["sim"]["stop_reason"] == "diverged"
    assert exit_code_for(["diverged"]) == 1


def test_a_failed_jobs_summary_counts_are_those_of_its_last_line(tmp_path):
    job = spec(tmp_path, max_retries=1)
    platform = Scripted(fail=frozenset({("sim", 1, 1), ("sim", 1, 2)}))
    report = run_jobs([job], DEFAULT_CLUSTER, tmp_path / "results", view="quiet",
                      platform_factory=factory(platform), policy="static")

    records = read_log(report.run_dir / "sim.jsonl")
    assert [r["phase"] for r in records] == ["retry", "retry", "stopped"]
    assert all(r["charged_s"] > 0 for r in records[:2])
    entry = report.summary["jobs"]["sim"]
    assert (entry["workers"], entry["servers"]) == (records[-1]["workers"], records[-1]["servers"]) == (2, 1)
    assert report.exit_code == 1


def test_a_plain_view_whose_output_is_a_closed_pipe_does_not_fail_the_jobs(tmp_path, monkeypatch):
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    closed = os.fdopen(write_fd, "w")
    monkeypatch.setattr("sys.stdout", closed)
    try:
        report = run_jobs([spec(tmp_path, max_epochs=3)], DEFAULT_CLUSTER, tmp_path / "results", view="plain",
                          platform_factory=factory(Scripted()), policy="static")
    finally:
        monkeypatch.undo()
        closed.close()

    assert report.exit_code == 0
    assert report.summary["jobs"]["sim"]["stop_reason"] == "max_epochs"
