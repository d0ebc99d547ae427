"""No function host outlives `coach run`: after a normal end, Ctrl-C, or `kill -9` of the controller."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from .conftest import host_processes, wait_until


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
    assert lines[-1]["stop_reason"] == "interrupted"
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


def test_a_run_killed_with_kill_9_resumes_with_continuous_logs(tmp_path, make_job, marker):
    from coach.storage.results import read_log
    from coach.app.run import resume_run

    short = make_job(f"{marker}-short", max_epochs=1)
    long = make_job(f"{marker}-long", max_epochs=12)
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
    assert killed_at < 12

    report = resume_run(run_dir, view="quiet")

    assert (run_dir / f"{short.name}.jsonl").read_bytes() == short_log_before  # finished: untouched
    records = read_log(run_dir / f"{long.name}.jsonl")
    epochs = [r["epoch"] for r in records if r["phase"] == "training"]
    assert epochs == list(range(1, 13))  # no epoch twice, none missing
    cumulative = [r["cumulative_cost"] for r in records]
    assert cumulative == sorted(cumulative)  # carried on, never restarted
    assert abs(cumulative[-1] - sum(r["cost"] for r in records)) < 1e-9
    assert records[-1]["stop_reason"] == "max_epochs"
    assert all(r["run_id"] == run_dir.name for r in records)
    assert report.summary["jobs"][short.name]["stop_reason"] == "max_epochs"
    assert report.summary["jobs"][long.name]["epochs"] == 12
    assert report.exit_code == 0
    assert host_processes(marker) == []
