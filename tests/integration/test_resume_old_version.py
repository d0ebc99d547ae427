"""`coach run --resume` continues a run that the previous version of Coach wrote and was interrupted in.

The fixture in fixtures/run-v1/ is what that version wrote (run.json without `schema` or `policy`, its log
lines, its checkpoint), with its absolute paths turned into placeholders so it can move.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from coach.app.run import resume_run
from coach.storage.results import read_log

FIXTURE = Path(__file__).parent / "fixtures" / "run-v1"
MODELS = Path(__file__).parent / "models"


def old_run(tmp_path: Path, max_epochs: int) -> Path:
    run_dir = tmp_path / "20261123-103511-679d"
    shutil.copytree(FIXTURE, run_dir)
    for name in ("run.json", "summary.json", "old-tiny.jsonl"):
        path = run_dir / name
        path.write_text(path.read_text().replace("@RUN_DIR@", str(run_dir)).replace("@MODELS@", str(MODELS))
                        .replace("@JOBS@", str(tmp_path)))
    manifest = json.loads((run_dir / "run.json").read_text())
    manifest["jobs"][0]["max_epochs"] = max_epochs  # 40 in the fixture; fewer keep the test short
    (run_dir / "run.json").write_text(json.dumps(manifest))
    return run_dir


def test_a_run_written_by_the_previous_version_resumes_where_it_stopped(tmp_path):
    run_dir = old_run(tmp_path, max_epochs=4)
    before = read_log(run_dir / "old-tiny.jsonl")
    assert "schema" not in json.loads((FIXTURE / "run.json").read_text())

    report = resume_run(run_dir, view="quiet")

    assert report.exit_code == 0
    records = read_log(run_dir / "old-tiny.jsonl")
    assert records[:3] == before  # the old lines are untouched
    new = records[3:]
    assert [(r["phase"], r["epoch"]) for r in new] == [("training", 3), ("training", 4)]
    assert new[0]["cumulative_cost"] > before[-1]["cumulative_cost"]
    assert new[0]["cumulative_cost"] == before[-1]["cumulative_cost"] + new[0]["cost"]
    assert new[-1]["stop_reason"] == "max_epochs"
    assert new[0]["loss"] < before[1]["loss"]  # it went on from the checkpoint, not from scratch
    job = report.summary["jobs"]["old-tiny"]
    assert (job["epochs"], job["stop_reason"], job["total_cost"]) == (4, "max_epochs", new[-1]["cumulative_cost"])
