"""Failures are bounded, recorded events: a killed worker host costs a retry, not the job."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from coach.domain.cluster import DEFAULT_CLUSTER
from coach.storage.results import read_log
from coach.app.run import run_jobs

from tests.support import stderr_of

from .conftest import wait_until


def host_pid(function_name: str) -> int | None:
    """The warm host (not an epoch child) serving `function_name`: its stderr is the function's log file, and its
    parent's (the template process's) is not."""
    for process in Path("/proc").glob("[0-9]*"):
        try:
            status = (process / "status").read_text()
        except OSError:
            continue
        ppid = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if stderr_of(process.name).endswith(f"/{function_name}.log") and \
                not stderr_of(ppid).endswith(f"/{function_name}.log"):
            return int(process.name)
    return None


def test_a_worker_host_killed_mid_epoch_is_replaced_and_the_job_reaches_its_target(tmp_path, make_job, marker):
    job = make_job(f"{marker}-crash", max_epochs=40, target_loss=0.6, learning_rate=0.2, consecutive=2)
    results = tmp_path / "results"
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.update(report=run_jobs(
        [job], DEFAULT_CLUSTER, results, view="quiet")))
    runner.start()
    try:
        # once an epoch is logged, kill worker 0's host while the next epochs run
        assert wait_until(lambda: any(p.read_text() for p in results.glob(f"*/{job.name}.jsonl")), 120)
        victim = host_pid(f"{job.name}-worker-0")
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
    finally:
        runner.join(timeout=240)
    report = outcome["report"]
    records = read_log(report.run_dir / f"{job.name}.jsonl")
    retries = [r for r in records if r["phase"] == "retry"]
    assert len(retries) == 1 and retries[0]["will_retry"] is True
    # the failed attempt says what it was charged: slot-seconds of its functions, priced as its cost
    assert retries[0]["charged_s"] > 0 and retries[0]["cost"] > 0
    assert abs(retries[0]["cost"] - retries[0]["charged_s"] * DEFAULT_CLUSTER.nodes[0].price_per_slot_s) < 1e-6
    assert f"{job.name}-worker-0" in retries[0]["error"] or "unreachable" in retries[0]["error"]
    epochs = [r for r in records if r["phase"] == "training"]
    assert [r["epoch"] for r in epochs] == list(range(1, len(epochs) + 1))  # no epoch lost or repeated
    retried = next(r for r in epochs if r["epoch"] == retries[0]["epoch"])
    assert retried["attempt"] == 2
    assert records[-1]["stop_reason"] == "target_loss"
    # the failed attempt was paid for: cumulative cost includes it
    assert abs(records[-1]["cumulative_cost"] - sum(r["cost"] for r in records)) < 1e-9
    assert report.exit_code == 0


def test_retries_are_bounded(tmp_path, make_job, marker):
    from .conftest import MODELS

    # one worker and one server: every attempt runs on fresh functions, so each host fewer is three host starts
    # (each imports MXNet, ~3 s of CPU) fewer
    job = make_job(f"{marker}-hopeless", model=MODELS / "crash_in_epoch.py", max_retries=2, workers=1, servers=1)
    report = run_jobs([job], DEFAULT_CLUSTER, tmp_path / "results", view="quiet")

    records = read_log(report.run_dir / f"{job.name}.jsonl")
    assert [r["phase"] for r in records] == ["retry", "retry", "retry", "stopped"]
    assert [r["attempt"] for r in records[:3]] == [1, 2, 3]
    assert [r["will_retry"] for r in records[:3]] == [True, True, False]
    assert records[-1]["stop_reason"].startswith("failed after 3 attempts: ")
    assert "the model exploded" in records[-1]["stop_reason"]
    assert all(r["charged_s"] > 0 for r in records[:3]) and records[-1]["charged_s"] == 0
    # the summary's counts are those of the log's last line, also for a job that never finished an epoch
    job_summary = report.summary["jobs"][job.name]
    assert (job_summary["workers"], job_summary["servers"]) == (records[-1]["workers"], records[-1]["servers"])
    assert (job_summary["workers"], job_summary["servers"]) == (1, 1)
    assert report.exit_code == 1
