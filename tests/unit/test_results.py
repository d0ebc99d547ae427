"""coach.results: one JSON line per epoch record (append-only), the run summary, run ids, atomic JSON."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from types import MappingProxyType

import pytest

from coach.domain.records import EpochRecord, JobOutcome, iso, summary_dict

from coach.storage.results import ResultLog, new_run_id, read_log, write_json_atomic

RECORD = EpochRecord(
    run_id="20240101-120000-abcd", job="lenet", phase="training", epoch=1, workers=2, servers=1,
    placement={"lenet-scheduler-0": "node-1", "lenet-worker-0": "node-1"}, loss=0.5, val_loss=0.4,
    accuracy=0.875, train_accuracy=0.75, samples=4000, epoch_time_s=12.5, compute_s=10.25,
    start="2024-01-01T12:00:00.000+00:00", end="2024-01-01T12:00:12.500+00:00", cost=0.0125,
    cumulative_cost=0.0125, budget=0.5,
)

RECORD_AS_JSON = {
    "run_id": "20240101-120000-abcd", "job": "lenet", "phase": "training", "epoch": 1, "workers": 2, "servers": 1,
    "placement": {"lenet-scheduler-0": "node-1", "lenet-worker-0": "node-1"}, "loss": 0.5, "val_loss": 0.4,
    "accuracy": 0.875, "train_accuracy": 0.75, "samples": 4000, "epoch_time_s": 12.5, "compute_s": 10.25,
    "start": "2024-01-01T12:00:00.000+00:00", "end": "2024-01-01T12:00:12.500+00:00", "cost": 0.0125,
    "cumulative_cost": 0.0125, "budget": 0.5, "stop_reason": None, "attempt": 1, "checkpoint": None,
}


def append_all(path, *records) -> None:
    log = ResultLog(path)
    try:
        for record in records:
            log.append(record)
    finally:
        log.close()


# --------------------------------------------------------------------------- the job log


def test_each_record_is_one_json_line(tmp_path):
    path = tmp_path / "run" / "lenet.jsonl"  # the folder is created on open

    append_all(path, RECORD, replace(RECORD, epoch=2, stop_reason="max_epochs"))

    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0]) == RECORD_AS_JSON
    assert json.loads(lines[1]) == {**RECORD_AS_JSON, "epoch": 2, "stop_reason": "max_epochs"}


def test_a_record_is_on_disk_as_soon_as_append_returns(tmp_path):
    path = tmp_path / "lenet.jsonl"
    log = ResultLog(path)
    try:
        log.append(RECORD)

        assert read_log(path) == [RECORD_AS_JSON]
    finally:
        log.close()


def test_opening_an_existing_log_again_appends_after_the_earlier_lines(tmp_path):
    path = tmp_path / "lenet.jsonl"

    append_all(path, RECORD)
    append_all(path, replace(RECORD, epoch=2))

    assert [record["epoch"] for record in read_log(path)] == [1, 2]


def test_extra_details_are_flattened_into_the_line(tmp_path):
    path = tmp_path / "lenet.jsonl"

    append_all(path, replace(RECORD, extra={"decision": "scale-up", "predicted_cost": 0.02}))

    (line,) = read_log(path)
    assert "extra" not in line
    assert line == {**RECORD_AS_JSON, "decision": "scale-up", "predicted_cost": 0.02}


def test_a_read_only_placement_mapping_is_written_as_a_json_object():
    # `placement` is typed Mapping[str, str]; ClusterState hands out read-only MappingProxyType mappings.
    record = replace(RECORD, placement=MappingProxyType({"lenet-worker-0": "node-2"}))

    assert json.loads(record.to_json())["placement"] == {"lenet-worker-0": "node-2"}


def test_read_log_skips_blank_lines(tmp_path):
    path = tmp_path / "lenet.jsonl"
    path.write_text('{"epoch": 1}\n\n{"epoch": 2}\n   \n', encoding="utf-8")

    assert read_log(path) == [{"epoch": 1}, {"epoch": 2}]


# --------------------------------------------------------------------------- the summary


def test_iso_is_utc_with_milliseconds():
    assert iso(0.0) == "1970-01-01T00:00:00.000+00:00"
    assert iso(1700000000.25) == "2023-11-14T22:13:20.250+00:00"


def test_job_outcome_jct_is_finish_minus_submission_rounded_to_milliseconds():
    # (the ISO times are truncated to milliseconds, the JCT is rounded)
    outcome = JobOutcome(submitted_s=1000.0, finished_s=1012.3456, epochs=3, final_loss=0.2, final_val_loss=0.25,
                         stop_reason="target_loss", total_cost=0.03, budget=0.5, workers=2, servers=1)

    assert outcome.to_dict() == {
        "submitted": "1970-01-01T00:16:40.000+00:00", "finished": "1970-01-01T00:16:52.345+00:00", "jct_s": 12.346,
        "epochs": 3, "final_loss": 0.2, "final_val_loss": 0.25, "stop_reason": "target_loss", "total_cost": 0.03,
        "budget": 0.5, "workers": 2, "servers": 1,
    }


def test_summary_has_no_makespan_while_a_job_is_unfinished():
    outcomes = {"a": JobOutcome(submitted_s=1000.0, finished_s=1010.0), "b": JobOutcome(submitted_s=1000.0)}

    summary = summary_dict("run-1", 1000.0, outcomes, {"cluster": "thesis-3-nodes", "scheduler": "gang"})

    assert summary["makespan_s"] is None
    assert summary["ended"] is None
    assert summary["jobs"]["a"]["jct_s"] == 10.0
    assert summary["jobs"]["b"]["jct_s"] is None
    assert summary["jobs"]["b"]["finished"] is None


def test_summary_makespan_runs_from_the_start_to_the_last_finished_job():
    outcomes = {"a": JobOutcome(submitted_s=1000.0, finished_s=1010.0),
                "b": JobOutcome(submitted_s=1000.0, finished_s=1020.5)}

    summary = summary_dict("run-1", 1000.0, outcomes, {"cluster": "thesis-3-nodes", "scheduler": "gang"})

    assert summary == {
        "run_id": "run-1",
        "started": "1970-01-01T00:16:40.000+00:00",
        "ended": "1970-01-01T00:17:00.500+00:00",
        "makespan_s": 20.5,
        "cluster": "thesis-3-nodes",
        "scheduler": "gang",
        "jobs": {"a": outcomes["a"].to_dict(), "b": outcomes["b"].to_dict()},
    }
    assert (summary["jobs"]["a"]["jct_s"], summary["jobs"]["b"]["jct_s"]) == (10.0, 20.5)


def test_a_summary_is_json_serialisable():
    outcomes = {"a": JobOutcome(submitted_s=1000.0, finished_s=1010.0)}

    summary = summary_dict("run-1", 1000.0, outcomes, {})

    assert json.loads(json.dumps(summary)) == summary


# --------------------------------------------------------------------------- run ids and atomic JSON


def test_a_run_id_is_the_utc_time_and_four_hex_digits():
    assert re.fullmatch(r"20231114-221320-[0-9a-f]{4}", new_run_id(1700000000.0))


def test_a_run_id_without_a_time_uses_now():
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", new_run_id())


def test_a_run_id_for_time_zero_is_the_unix_epoch():
    # 0.0 is a valid timestamp, not "no timestamp given"
    assert new_run_id(0.0).startswith("19700101-000000-")


def test_write_json_atomic_writes_indented_json_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("old", encoding="utf-8")

    write_json_atomic(path, {"run_id": "r", "jobs": {}})

    assert path.read_text(encoding="utf-8") == '{\n  "run_id": "r",\n  "jobs": {}\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_write_json_atomic_refuses_what_json_cannot_hold_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "summary.json"
    write_json_atomic(path, {"v": 1})

    with pytest.raises(TypeError):
        write_json_atomic(path, {"v": object()})

    assert json.loads(path.read_text(encoding="utf-8")) == {"v": 1}


def test_a_torn_last_line_is_cut_before_a_resumed_run_appends(tmp_path):
    from coach.storage.results import drop_torn_tail

    log = tmp_path / "job.jsonl"
    log.write_text('{"epoch": 1}\n{"epoch": 2, "lo')
    assert drop_torn_tail(log) is True
    assert log.read_text() == '{"epoch": 1}\n'
    assert drop_torn_tail(log) is False  # a whole log is left alone


# --------------------------------------------------------------------------- standard JSON only


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_record_with_a_non_finite_number_is_refused_naming_the_field_and_nothing_is_written(tmp_path, bad):
    from coach.storage.results import NonFiniteValue

    path = tmp_path / "lenet.jsonl"
    append_all(path, RECORD)
    log = ResultLog(path)
    try:
        with pytest.raises(NonFiniteValue) as raised:
            log.append(replace(RECORD, epoch=2, loss=bad, extra={"decision": {"speed_fit": {"b1": bad}}}))
    finally:
        log.close()

    message = str(raised.value)
    assert str(path) in message and "epoch 2 (training)" in message
    assert f"loss = {bad!r}" in message and f"decision.speed_fit.b1 = {bad!r}" in message
    assert read_log(path) == [RECORD_AS_JSON]  # the log is as it was


def test_a_summary_with_a_non_finite_number_is_refused_and_the_old_file_kept(tmp_path):
    from coach.storage.results import NonFiniteValue

    path = tmp_path / "summary.json"
    write_json_atomic(path, {"v": 1})

    with pytest.raises(NonFiniteValue, match=r"summary.json: .*jobs\.a\.total_cost = nan, series\[1\] = inf"):
        write_json_atomic(path, {"jobs": {"a": {"total_cost": float("nan")}}, "series": [1.0, float("inf")]})

    assert json.loads(path.read_text(encoding="utf-8")) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_a_memory_sink_refuses_non_finite_numbers_as_a_log_does():
    from coach.storage.results import MemorySink, NonFiniteValue

    sink = MemorySink()
    with pytest.raises(NonFiniteValue):
        sink.append(replace(RECORD, cost=float("inf")))
    assert sink.records == []
