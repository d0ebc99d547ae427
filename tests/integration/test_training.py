"""Real training over real processes: warm hosts, HTTP invocations, ps-lite on loopback, checkpoints."""

from __future__ import annotations

from datetime import datetime

from coach.domain.cluster import DEFAULT_CLUSTER, ClusterSpec, NodeSpec
from coach.storage.results import read_log
from coach.app.run import run_jobs

from .conftest import LENET, host_processes

RECORD_FIELDS = {
    "run_id", "job", "phase", "epoch", "workers", "servers", "placement", "loss", "val_loss", "accuracy",
    "samples", "epoch_time_s", "start", "end", "cost", "cumulative_cost", "budget", "stop_reason",
}


def test_lenet_with_two_workers_and_one_server_learns(tmp_path, make_job, marker):
    job = make_job(f"{marker}-lenet", model=LENET, max_epochs=4)
    report = run_jobs([job], DEFAULT_CLUSTER, tmp_path / "results", view="quiet")

    records = read_log(report.run_dir / f"{job.name}.jsonl")
    assert [r["epoch"] for r in records] == [1, 2, 3, 4]
    assert all(RECORD_FIELDS <= set(r) for r in records)
    assert all(r["workers"] == 2 and r["servers"] == 1 and r["phase"] == "training" for r in records)
    assert all(len(r["placement"]) == 4 for r in records)  # scheduler, server, two workers
    losses = [r["loss"] for r in records]
    assert losses[-1] < losses[0] / 3, losses  # LeNet on MNIST: ~1.5 -> ~0.15 in four epochs
    assert records[-1]["val_loss"] < records[0]["val_loss"]
    assert records[-1]["accuracy"] > 0.9
    assert all(r["samples"] == 4000 for r in records)  # 4,000 training digits, two equal shards
    assert [r["stop_reason"] for r in records] == [None, None, None, "max_epochs"]
    # cost accumulates for real: every epoch costs something and the running total is their sum
    costs = [r["cost"] for r in records]
    assert all(c > 0 for c in costs)
    assert abs(records[-1]["cumulative_cost"] - sum(costs)) < 1e-9
    # checkpoint of the last epoch only: parameters and optimizer state
    checkpoints = sorted(p.name for p in (report.run_dir / "checkpoints" / job.name).iterdir())
    assert checkpoints == ["epoch-0004.params", "epoch-0004.states"]
    summary = report.summary["jobs"][job.name]
    assert summary["epochs"] == 4 and summary["stop_reason"] == "max_epochs"
    assert summary["jct_s"] > 0 and report.summary["makespan_s"] >= summary["jct_s"]
    assert report.exit_code == 0
    assert host_processes(marker) == []


def test_two_jobs_train_concurrently_and_both_finish(tmp_path, make_job, marker):
    first = make_job(f"{marker}-a", max_epochs=3)
    second = make_job(f"{marker}-b", max_epochs=3, workers=1, servers=2)
    report = run_jobs([first, second], DEFAULT_CLUSTER, tmp_path / "results", view="quiet")

    logs = {job.name: read_log(report.run_dir / f"{job.name}.jsonl") for job in (first, second)}
    assert all(len(records) == 3 for records in logs.values())
    assert all(records[-1]["stop_reason"] == "max_epochs" for records in logs.values())
    # no job waited for the other: their training spans overlap in time
    spans = {name: (datetime.fromisoformat(r[0]["start"]), datetime.fromisoformat(r[-1]["end"]))
             for name, r in logs.items()}
    (a_start, a_end), (b_start, b_end) = spans.values()
    assert a_start < b_end and b_start < a_end
    # their functions never shared a name, and each job's placement stayed inside the cluster
    assert set(logs[first.name][0]["placement"]).isdisjoint(logs[second.name][0]["placement"])
    assert logs[second.name][0]["workers"] == 1 and logs[second.name][0]["servers"] == 2
    assert report.exit_code == 0
    assert host_processes(marker) == []


def test_with_gang_jobs_that_fit_one_at_a_time_complete_in_submission_order(tmp_path, make_job, marker):
    small = ClusterSpec("one-node", (NodeSpec("solo", slots=4, price_per_slot_s=0.001),))
    # three functions a job (scheduler, server, worker): two jobs never fit at once, and each job starts one
    # host (importing MXNet, ~3 s of CPU) fewer than with two workers
    jobs = [make_job(f"{marker}-{i}", max_epochs=2, workers=1, servers=1) for i in range(3)]
    report = run_jobs(jobs, small, tmp_path / "results", view="quiet", scheduler="gang",
                      placement_timeout_s=600.0)  # a slow machine must not requeue a job that waits its turn

    logs = [read_log(report.run_dir / f"{job.name}.jsonl") for job in jobs]
    assert all([r["phase"] for r in log] == ["training", "training"] for log in logs)
    for earlier, later in zip(logs, logs[1:]):  # four slots, three a job: one job at a time, first submitted first
        assert later[0]["start"] >= earlier[-1]["end"]
    finished = [report.summary["jobs"][job.name]["finished"] for job in jobs]
    assert finished == sorted(finished)
    assert report.exit_code == 0


def test_a_tiny_budget_stops_the_job_for_budget(tmp_path, make_job, marker):
    job = make_job(f"{marker}-cheap", max_epochs=20, budget=1e-6)
    report = run_jobs([job], DEFAULT_CLUSTER, tmp_path / "results", view="quiet")

    records = read_log(report.run_dir / f"{job.name}.jsonl")
    assert len(records) == 1
    assert records[-1]["stop_reason"] == "budget"
    assert report.exit_code == 0


def test_a_job_larger_than_the_cluster_is_reported_unschedulable(tmp_path, make_job, marker):
    too_big = make_job(f"{marker}-big", workers=10, servers=5)
    fine = make_job(f"{marker}-fine", max_epochs=1)
    report = run_jobs([too_big, fine], DEFAULT_CLUSTER, tmp_path / "results", view="quiet")

    big = read_log(report.run_dir / f"{too_big.name}.jsonl")
    assert len(big) == 1 and big[0]["phase"] == "stopped"
    assert big[0]["stop_reason"] == "unschedulable: needs 16 slots, the cluster has 12"
    assert read_log(report.run_dir / f"{fine.name}.jsonl")[-1]["stop_reason"] == "max_epochs"
    assert report.exit_code == 1


def test_a_model_that_fails_to_load_fails_its_job_only(tmp_path, make_job, marker):
    from .conftest import MODELS

    broken = make_job(f"{marker}-broken", model=MODELS / "broken_data.py")
    fine = make_job(f"{marker}-ok", max_epochs=1)
    report = run_jobs([broken, fine], DEFAULT_CLUSTER, tmp_path / "results", view="quiet")

    last = read_log(report.run_dir / f"{broken.name}.jsonl")[-1]
    assert last["phase"] == "stopped"
    assert last["stop_reason"].startswith(f"failed: {broken.name}-worker-")
    assert "the data set is not where it should be" in last["stop_reason"]
    assert read_log(report.run_dir / f"{fine.name}.jsonl")[-1]["stop_reason"] == "max_epochs"
    assert report.exit_code == 1
    assert host_processes(marker) == []


def test_a_job_without_its_quorum_gives_its_slots_back_and_requeues_with_the_reason(tmp_path, make_job, marker):
    one_node = ClusterSpec("one-node", (NodeSpec("solo", slots=4, price_per_slot_s=0.001),))
    first = make_job(f"{marker}-long", max_epochs=6)
    second = make_job(f"{marker}-queued", max_epochs=1)
    report = run_jobs([first, second], one_node, tmp_path / "results", view="quiet", scheduler="default",
                      placement_timeout_s=0.5)

    queued = read_log(report.run_dir / f"{second.name}.jsonl")
    requeues = [r for r in queued if r["phase"] == "requeued"]
    assert requeues, queued
    assert all(r["reason"].startswith("0/1 nodes are available: 1 Insufficient slots.")  # no free slot, in the log
               for r in requeues)
    assert [r["requeue"] for r in requeues] == list(range(1, len(requeues) + 1))
    assert queued[-1]["stop_reason"] == "max_epochs"  # it ran once the first job released its slots
    assert read_log(report.run_dir / f"{first.name}.jsonl")[-1]["stop_reason"] == "max_epochs"
    assert report.summary["scheduler"] == "default"
    assert report.exit_code == 0
