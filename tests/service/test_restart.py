"""A served run outlives its server: stopped, it interrupts its jobs; started again, it resumes them and shows the
finished ones as their summary left them. A pointer that names no run is one line and exit 2."""

from __future__ import annotations

import json

from coach.storage.results import read_log
from coach.ui.cli import main
from tests.service.conftest import job_text
from tests.support import wait_for


def test_a_restarted_server_resumes_the_interrupted_jobs_and_keeps_the_finished_ones(serve, tmp_path):
    results = tmp_path / "results"
    first = serve(results=results, epoch_s=0.2)
    assert first.post("/api/jobs", job_text("quick", max_epochs=1)).status_code == 201
    wait_for(lambda: first.phase("quick") == "done", 30, "quick to finish")
    assert first.post("/api/jobs", job_text("slow", max_epochs=12)).status_code == 201
    wait_for(lambda: first.get("/api/jobs/slow").json()["status"]["epoch"] >= 2, 30, "two epochs of slow")
    first.close()
    log = first.served.run_dir / "slow.jsonl"
    assert read_log(log)[-1]["phase"] == "interrupted"

    second = serve(results=results, epoch_s=0.01)

    assert second.served.resumed and second.served.run_id == first.served.run_id
    assert second.phase("quick") == "done"
    wait_for(lambda: second.phase("slow") == "done", 30, "slow to finish after the restart")
    records = read_log(log)
    assert [r["epoch"] for r in records if r["phase"] == "training"] == list(range(1, 13))
    assert records[-1]["stop_reason"] == "max_epochs"
    summary = second.get("/api/summary").json()
    assert {name: job["stop_reason"] for name, job in summary["jobs"].items()} == {"quick": "max_epochs",
                                                                                 "slow": "max_epochs"}
    assert second.post("/api/jobs", job_text("quick", max_epochs=1)).status_code == 409  # the run knows it


def test_a_job_stopped_by_its_user_is_not_resumed(serve, tmp_path):
    results = tmp_path / "results"
    first = serve(results=results, epoch_s=0.2)
    first.post("/api/jobs", job_text("halted", max_epochs=50))
    wait_for(lambda: first.get("/api/jobs/halted").json()["status"]["epoch"] >= 1, 30, "an epoch")
    first.post("/api/jobs/halted/stop")
    wait_for(lambda: first.phase("halted") == "stopped_by_user", 30, "the stop")
    first.close()
    lines = len(read_log(first.served.run_dir / "halted.jsonl"))

    second = serve(results=results)

    assert second.phase("halted") == "stopped_by_user"
    assert len(read_log(second.served.run_dir / "halted.jsonl")) == lines


def test_a_pointer_to_no_run_is_one_line_and_exit_2(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    (results / "service.json").write_text(json.dumps({"run_id": "../elsewhere"}))

    assert main(["serve", "--port", "0", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "service.json: run_id:" in err

    (results / "service.json").write_text(json.dumps({"run_id": "gone"}))
    assert main(["serve", "--port", "0", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run.json" in err


def test_a_tampered_manifest_is_refused_before_anything_is_written(serve, tmp_path, capsys):
    results = tmp_path / "results"
    first = serve(results=results)
    first.post("/api/jobs", job_text("fine", max_epochs=1))
    wait_for(lambda: first.phase("fine") == "done", 30, "the job to finish")
    first.close()
    manifest_path = first.served.run_dir / "run.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["jobs"][0]["name"] = "../../evil"
    manifest_path.write_text(json.dumps(manifest))

    assert main(["serve", "--port", "0", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert "run.json: jobs[0].name:" in err
    assert not list(tmp_path.rglob("evil*"))
