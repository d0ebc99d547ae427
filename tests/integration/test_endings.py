"""No function host outlives `coach run`: after a normal end, Ctrl-C, or `kill -9` of the controller. A run
resumes from any directory, and a closed stdout does not fail the jobs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from .conftest import MODELS, host_processes, wait_until

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def start_run(job_file: Path, results: Path) -> subprocess.Popen:
    """`coach run` as its own process (signals need one); its output goes to a file beside the results."""
    results.mkdir(parents=True, exist_ok=True)
    with open(results.parent / "coach-run.out", "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "coach.ui.cli", "run", str(job_file), "--plain", "--results", str(results)],
            stdout=out, stderr=subprocess.STDOUT)


def first_epoch_logged(results: Path, job: str) -> bool:
    logs = list(results.glob(f"*/{job}.jsonl"))
    return bool(logs) and logs[0].read_text().count("\n") >= 1


def test_ctrl_c_stops_the_run_records_why_and_leaves_no_process(tmp_path, make_job, marker):
    job = make_job(f"{marker}-sigint", max_epochs=200)
    results = tmp_path / "results"
    run = start_run(job.source, results)
    try:
        assert wait_until(lambda: first_epoch_logged(results, job.name), 120)
        assert len(host_processes(marker)) >= 4  # four hosts, plus their epoch children while an epoch runs
        run.send_signal(signal.SIGINT)
        run.wait(timeout=60)
    finally:
        run.kill()
    output = (results.parent / "coach-run.out").read_text()
    assert run.returncode == 130, output
    assert "Traceback" not in output
    log = next(results.glob(f"*/{job.name}.jsonl"))
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    # the closing line says it was interrupted; no line carries a stop reason, as the job may be resumed
    assert (lines[-1]["phase"], lines[-1]["stop_reason"]) == ("interrupted", None)
    assert all(r["stop_reason"] is None for r in lines)
    assert [r["epoch"] for r in lines if r["phase"] == "training"] == list(range(1, len(lines)))
    summary = json.loads(next(results.glob("*/summary.json")).read_text())
    assert summary["jobs"][job.name]["stop_reason"] == "interrupted"
    assert wait_until(lambda: host_processes(marker) == [], 10)


def test_kill_9_of_the_controller_takes_every_function_with_it(tmp_path, make_job, marker):
    job = make_job(f"{marker}-sigkill", max_epochs=200)
    results = tmp_path / "results"
    run = start_run(job.source, results)
    try:
        assert wait_until(lambda: first_epoch_logged(results, job.name), 120)
        assert len(host_processes(marker)) >= 4  # four hosts, plus their epoch children while an epoch runs
        run.kill()
        run.wait(timeout=10)
    finally:
        run.kill()
    assert wait_until(lambda: host_processes(marker) == [], 15), host_processes(marker)
    # the log written so far stays readable line by line
    log = next(results.glob(f"*/{job.name}.jsonl"))
    assert all(json.loads(line)["job"] == job.name for line in log.read_text().splitlines())


LONG_EPOCHS = 8  # the run is killed once it has 3 (short's 1 epoch ends first): the resume has epochs left to train


def test_a_run_killed_with_kill_9_resumes_with_continuous_logs(tmp_path, make_job, marker):
    from coach.storage.results import read_log
    from coach.app.run import resume_run

    short = make_job(f"{marker}-short", max_epochs=1)
    long = make_job(f"{marker}-long", max_epochs=LONG_EPOCHS)
    job_files = [short.source, long.source]
    results = tmp_path / "results"
    results.mkdir()
    with open(tmp_path / "coach-run.out", "w") as out:
        run = subprocess.Popen([sys.executable, "-m", "coach.ui.cli", "run", *map(str, job_files), "--plain",
                                "--results", str(results)], stdout=out, stderr=subprocess.STDOUT)

    def trained(job) -> int:
        logs = list(results.glob(f"*/{job.name}.jsonl"))
        return logs[0].read_text().count('"phase": "training"') if logs else 0

    try:
        assert wait_until(lambda: trained(short) == 1 and trained(long) >= 3, 120)
        run.kill()
        run.wait(timeout=10)
    finally:
        run.kill()
    assert wait_until(lambda: host_processes(marker) == [], 15)
    run_dir = next(results.iterdir())
    short_log_before = (run_dir / f"{short.name}.jsonl").read_bytes()
    killed_at = trained(long)
    assert killed_at < LONG_EPOCHS

    report = resume_run(run_dir, view="quiet")

    assert (run_dir / f"{short.name}.jsonl").read_bytes() == short_log_before  # finished: untouched
    records = read_log(run_dir / f"{long.name}.jsonl")
    epochs = [r["epoch"] for r in records if r["phase"] == "training"]
    assert epochs == list(range(1, LONG_EPOCHS + 1))  # no epoch twice, none missing
    cumulative = [r["cumulative_cost"] for r in records]
    assert cumulative == sorted(cumulative)  # carried on, never restarted
    assert abs(cumulative[-1] - sum(r["cost"] for r in records)) < 1e-9
    assert records[-1]["stop_reason"] == "max_epochs"
    assert all(r["run_id"] == run_dir.name for r in records)
    assert report.summary["jobs"][short.name]["stop_reason"] == "max_epochs"
    assert report.summary["jobs"][long.name]["epochs"] == LONG_EPOCHS
    assert report.exit_code == 0
    assert host_processes(marker) == []


def trained_epochs(results: Path, job: str) -> int:
    logs = list(results.glob(f"*/{job}.jsonl"))
    return logs[0].read_text().count('"phase": "training"') if logs else 0


def test_kill_9_with_several_jobs_leaves_no_host_or_child(tmp_path, make_job, marker):
    # three jobs of four functions each fill the default cluster's 12 slots; epochs run when the controller dies
    jobs = [make_job(f"{marker}-many{i}", max_epochs=500) for i in range(3)]
    results = tmp_path / "results"
    results.mkdir()
    with open(tmp_path / "coach-run.out", "w") as out:
        run = subprocess.Popen([sys.executable, "-m", "coach.ui.cli", "run", *(str(job.source) for job in jobs),
                                "--plain", "--results", str(results)], stdout=out, stderr=subprocess.STDOUT)
    try:
        assert wait_until(lambda: all(trained_epochs(results, job.name) >= 1 for job in jobs), 240), (
            (tmp_path / "coach-run.out").read_text()[-2000:])
        assert len(host_processes(marker)) >= 12
        run.kill()
        run.wait(timeout=10)
        # every host and epoch child goes with the controller (how soon is benchmarks' business, not this test's)
        assert wait_until(lambda: host_processes(marker) == [], 10), host_processes(marker)
    finally:
        run.kill()
        run.wait(timeout=10)


def write_job(folder: Path, name: str, **fields) -> Path:
    """A job file with a relative model path, beside a copy of the model, as a user would keep them."""
    (folder / "models").mkdir(parents=True, exist_ok=True)
    shutil.copy(MODELS / "tiny_mlp.py", folder / "models" / "tiny_mlp.py")
    data = {"name": name, "model": "models/tiny_mlp.py", "batch_size": 64, "optimizer": "sgd",
            "optimizer_params": {"momentum": 0.9}, "learning_rate": 0.05, "target_loss": 0.0, "max_epochs": 4,
            "budget": 10.0, "workers": 1, "servers": 1, "epoch_timeout_s": 120}
    data.update(fields)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_run_with_relative_paths_interrupted_in_one_directory_resumes_from_another(tmp_path, marker):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    elsewhere.mkdir(parents=True)
    name = f"{marker}-rel"
    write_job(project, name, max_epochs=40)
    with open(tmp_path / "first.out", "w") as out:
        run = subprocess.Popen([sys.executable, "-m", "coach.ui.cli", "run", f"{name}.yaml", "--plain",
                                "--results", "results"], cwd=project, env=ENV, stdout=out,
                               stderr=subprocess.STDOUT)
    results = project / "results"
    try:
        assert wait_until(lambda: trained_epochs(results, name) >= 2, 180), (tmp_path / "first.out").read_text()
        run.send_signal(signal.SIGINT)
        run.wait(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 130, (tmp_path / "first.out").read_text()
    run_dir = next(results.iterdir())
    before = [json.loads(line) for line in (run_dir / f"{name}.jsonl").read_text().splitlines()]
    assert before[-1]["phase"] == "interrupted"
    # fewer epochs this time, so the resumed job ends soon: the manifest holds the validated job
    manifest = json.loads((run_dir / "run.json").read_text())
    manifest["jobs"][0]["max_epochs"] = len([r for r in before if r["phase"] == "training"]) + 2
    (run_dir / "run.json").write_text(json.dumps(manifest))

    resumed = subprocess.run([sys.executable, "-m", "coach.ui.cli", "run", "--resume",
                              os.path.relpath(run_dir, elsewhere), "--plain"], cwd=elsewhere, env=ENV,
                             capture_output=True, text=True, timeout=300)

    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert "Traceback" not in resumed.stderr
    records = [json.loads(line) for line in (run_dir / f"{name}.jsonl").read_text().splitlines()]
    assert records[:len(before)] == before  # appended to, never rewritten
    epochs = [r["epoch"] for r in records if r["phase"] == "training"]
    assert epochs == list(range(1, manifest["jobs"][0]["max_epochs"] + 1))
    assert [r["stop_reason"] for r in records] == [None] * (len(records) - 1) + ["max_epochs"]
    assert all(r["checkpoint"].startswith(str(run_dir)) for r in records if r["phase"] == "training")
    assert not (elsewhere / "results").exists() and list(elsewhere.iterdir()) == []
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["jobs"][name]["stop_reason"] == "max_epochs"
    assert wait_until(lambda: host_processes(marker) == [], 10)


def test_a_closed_stdout_does_not_fail_the_jobs(tmp_path, make_job, marker):
    """`coach run ... | head -1`: the reader leaves after one line; the run goes on and ends normally."""
    job = make_job(f"{marker}-head", max_epochs=3)
    results = tmp_path / "results"
    run = subprocess.Popen([sys.executable, "-m", "coach.ui.cli", "run", str(job.source), "--plain", "--results",
                            str(results)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = run.stdout.readline()
        run.stdout.close()  # what `head -1` does once it has its line
        _, errors = run.communicate(timeout=240)
    finally:
        run.kill()
    assert first  # a line was printed before the pipe closed
    errors = errors.decode(errors="replace")
    assert run.returncode == 0, errors[-2000:]
    assert "Traceback" not in errors and "BrokenPipeError" not in errors
    log = next(results.glob(f"*/{job.name}.jsonl"))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["phase"] for r in records] == ["training"] * 3 and records[-1]["stop_reason"] == "max_epochs"
    summary = json.loads(next(results.glob("*/summary.json")).read_text())
    assert summary["jobs"][job.name]["stop_reason"] == "max_epochs"
    assert wait_until(lambda: host_processes(marker) == [], 10)
