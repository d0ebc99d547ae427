"""One scenario suite, run by both drivers: what a run writes is the lifecycle's, whichever driver carries it.

Every assertion here is a fact the lifecycle, the policy and the placement determine — epoch numbers, counts,
stop reasons, cost arithmetic, the order jobs get slots in — never a duration, which only the live half measures.
"""

from __future__ import annotations

import math
from datetime import datetime

from coach.domain.cluster import ClusterSpec, NodeSpec
from coach.lifecycle.job import INTERRUPTED
from coach.policy.planning import CALIBRATION_MIN_STEPS, CALIBRATION_POINTS, calibration_within
from coach.app.run_policies import RUN_POLICIES

PRICE_PER_SLOT_S = 0.0001
ONE_NODE = ClusterSpec("one-node", (NodeSpec("n1", 4, PRICE_PER_SLOT_S),))  # room for one 2+1 job at a time
TWO_NODES = ClusterSpec("two-nodes", (NodeSpec("n1", 4, PRICE_PER_SLOT_S), NodeSpec("n2", 4, PRICE_PER_SLOT_S)))
DECISION_FIELDS = {"speed_fit", "stopped_by", "workers", "servers", "predicted_epoch_cost"}
STOP_GRACE_S = 20.0  # a stopped job ends this long after the stop at most (an in-flight epoch fails or finishes)


def training(records: list[dict]) -> list[dict]:
    return [r for r in records if r["phase"] == "training"]


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def assert_costs_add_up(records: list[dict]) -> None:
    """Every line's cumulative cost is the sum of the costs of the lines up to it."""
    running = 0.0
    for r in records:
        running += r["cost"]
        assert abs(r["cumulative_cost"] - running) < 1e-12, (r["cumulative_cost"], running)


def assert_summary_matches_log(summary: dict, records: list[dict]) -> None:
    steps = [r for r in records if r["phase"] in ("calibration", "training")]
    assert summary["epochs"] == (training(records)[-1]["epoch"] if training(records) else 0)
    assert summary["stop_reason"] == records[-1]["stop_reason"]
    assert abs(summary["total_cost"] - records[-1]["cumulative_cost"]) < 1e-12
    if steps:
        assert (summary["workers"], summary["servers"]) == (steps[-1]["workers"], steps[-1]["servers"])


def test_a_static_job_trains_every_epoch_once_and_stops_at_max_epochs(drive, job):
    spec = job("static", max_epochs=3)
    summary, logs = drive([spec], ONE_NODE, policy="static")

    records = logs[spec.name]
    assert [r["phase"] for r in records] == ["training"] * 3  # the last epoch's line carries the stop reason
    assert [r["epoch"] for r in records] == [1, 2, 3]
    assert [r["stop_reason"] for r in records] == [None, None, "max_epochs"]
    assert all((r["workers"], r["servers"], r["attempt"]) == (2, 1, 1) for r in records)
    assert all(len(r["placement"]) == 4 and set(r["placement"].values()) == {"n1"} for r in records)
    assert all(r["cost"] > 0 for r in records)
    cumulative = [r["cumulative_cost"] for r in records]
    assert all(a < b for a, b in zip(cumulative, cumulative[1:]))
    assert_costs_add_up(records)
    assert all(at(r["start"]) <= at(r["end"]) for r in records)
    assert all(at(a["end"]) <= at(b["start"]) for a, b in zip(records, records[1:]))  # one epoch at a time
    job_summary = summary["jobs"][spec.name]
    assert job_summary["epochs"] == 3 and job_summary["stop_reason"] == "max_epochs"
    assert (job_summary["workers"], job_summary["servers"]) == (2, 1)
    assert_summary_matches_log(job_summary, records)
    assert summary["policy"] == "static" and summary["scheduler"] == "gang" and summary["cluster"] == "one-node"


def test_a_dynamic_job_calibrates_at_four_points_then_trains_with_recorded_decisions(drive, job):
    spec = job("dynamic", workers=None, servers=None, max_workers=2, max_servers=2, max_epochs=2)
    summary, logs = drive([spec], TWO_NODES, policy="coach")

    records = logs[spec.name]
    calibration, trained = records[:4], records[4:]
    assert [r["phase"] for r in calibration] == ["calibration"] * 4
    assert [(r["workers"], r["servers"]) for r in calibration] == list(calibration_within(CALIBRATION_POINTS, 2)) \
        == [(1, 1), (1, 2), (2, 1), (2, 2)]  # within its 2 workers
    assert [r["calibration_step"] for r in calibration] == [1, 2, 3, 4]
    assert all(r["epoch"] == 0 for r in calibration)
    # whole batches on every worker (the last one nearly full), at least CALIBRATION_MIN_STEPS of them, from the
    # first step on: the warmed workers told the data's size at deploy
    for r in calibration:
        per_worker, batch = r["samples"] // r["workers"], r["batch_size"]
        assert r["data_fraction"] == 1 or (-per_worker % batch <= batch // 8 and
                                           math.ceil(per_worker / batch) >= CALIBRATION_MIN_STEPS)
    assert all("decision" not in r for r in calibration)
    assert [r["phase"] for r in trained] == ["training", "training"]
    assert [r["epoch"] for r in trained] == [1, 2]
    for r in trained:
        decision = r["decision"]
        assert DECISION_FIELDS <= set(decision)
        assert decision["stopped_by"] in {"gain", "budget", "capacity", "limit"}
        assert decision["speed_fit"]["form"] and decision["speed_fit"]["rms_error"] >= 0
        assert (r["workers"], r["servers"]) == (decision["workers"], decision["servers"])
        assert 1 <= r["workers"] <= spec.max_workers and 1 <= r["servers"] <= spec.max_servers
    # every step so far feeds the fit: the four calibration points, then one more per epoch
    assert [r["decision"]["speed_fit"]["observations"] for r in trained] == [4, 5]
    assert [r["stop_reason"] for r in records] == [None] * 5 + ["max_epochs"]
    assert_costs_add_up(records)
    assert_summary_matches_log(summary["jobs"][spec.name], records)


def test_gang_scheduling_runs_two_jobs_that_cannot_share_the_cluster_one_after_the_other(drive, job):
    first, second = job("first"), job("second")  # 2 workers + 1 server + 1 scheduler = all 4 slots each
    summary, logs = drive([first, second], ONE_NODE, policy="static", scheduler="gang")

    for spec in (first, second):
        assert [r["epoch"] for r in training(logs[spec.name])] == [1, 2]
        assert logs[spec.name][-1]["stop_reason"] == "max_epochs"
        assert summary["jobs"][spec.name]["stop_reason"] == "max_epochs"
        assert_costs_add_up(logs[spec.name])
    jobs = summary["jobs"]
    assert at(jobs[first.name]["finished"]) < at(jobs[second.name]["finished"])  # FIFO: the first one first
    spans = [(at(r["start"]), at(r["end"])) for r in training(logs[first.name])]
    for r in training(logs[second.name]):
        start, end = at(r["start"]), at(r["end"])
        assert all(end <= a_start or a_end <= start for a_start, a_end in spans), "epochs overlapped in time"
    assert at(training(logs[first.name])[-1]["end"]) <= at(training(logs[second.name])[0]["start"])


def test_a_job_larger_than_the_cluster_stops_as_unschedulable(drive, job):
    spec = job("huge", workers=4, servers=1)  # 6 slots on a 4-slot cluster
    summary, logs = drive([spec], ONE_NODE, policy="static")

    records = logs[spec.name]
    assert len(records) == 1 and records[0]["phase"] == "stopped"
    assert records[0]["stop_reason"].startswith("unschedulable: needs")
    assert records[0]["stop_reason"] == "unschedulable: needs 6 slots, the cluster has 4"
    assert records[0]["cost"] == 0 and records[0]["cumulative_cost"] == 0
    job_summary = summary["jobs"][spec.name]
    assert job_summary["stop_reason"] == records[0]["stop_reason"]
    assert job_summary["epochs"] == 0 and job_summary["total_cost"] == 0


def test_a_stop_request_mid_run_ends_the_job_as_interrupted(drive, job):
    """Ctrl-C, SIGTERM or `stop_event`: the log closes with an `interrupted` line, the summary says so."""
    spec = job("stopped", max_epochs=500)
    stop_after_s = 12.0
    summary, logs = drive([spec], ONE_NODE, policy="static", stop_after_s=stop_after_s)

    records = logs[spec.name]
    trained = training(records)
    # the closing line says it was interrupted; no line carries a stop reason, as the job may be resumed
    last = records[-1]
    assert (last["phase"], last["stop_reason"]) == (INTERRUPTED, None)
    assert all(r["stop_reason"] is None for r in records)
    assert 1 <= len(trained) < spec.max_epochs  # stopped while it was training
    assert [r["epoch"] for r in trained] == list(range(1, len(trained) + 1))
    assert records[-1]["epoch"] == len(trained)
    assert_costs_add_up(records)
    job_summary = summary["jobs"][spec.name]
    assert job_summary["stop_reason"] == INTERRUPTED
    assert job_summary["epochs"] == len(trained)
    assert abs(job_summary["total_cost"] - last["cumulative_cost"]) < 1e-12
    assert (job_summary["workers"], job_summary["servers"]) == (trained[-1]["workers"], trained[-1]["servers"])
    # it ended soon after the stop, in the run's own time
    assert job_summary["jct_s"] <= stop_after_s + STOP_GRACE_S


def test_the_static_policy_refuses_no_static_job_and_keeps_the_files_counts(drive, job):
    specs = [job("one-two", workers=1, servers=2), job("two-one", workers=2, servers=1)]
    assert [RUN_POLICIES["static"].check(spec) for spec in specs] == [None, None]
    summary, logs = drive(specs, TWO_NODES, policy="static")

    for spec in specs:
        records = logs[spec.name]
        assert [r["phase"] for r in records] == ["training"] * spec.max_epochs  # no wait, requeue or refusal
        assert all((r["workers"], r["servers"]) == (spec.workers, spec.servers) for r in records)
        assert all(len(r["placement"]) == spec.workers + spec.servers + 1 for r in records)
        assert all("decision" not in r for r in records)  # the file decided, not the policy
        assert records[-1]["stop_reason"] == "max_epochs"
        job_summary = summary["jobs"][spec.name]
        assert (job_summary["workers"], job_summary["servers"]) == (spec.workers, spec.servers)
        assert_summary_matches_log(job_summary, records)
