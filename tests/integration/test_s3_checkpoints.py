"""`coach run --checkpoints s3://bucket/prefix` against a real S3-protocol server on loopback (moto's server mode).

The quick ones first: the option's one-line refusals (exit 2, nothing written), and a run whose simulated
workers upload real objects (as rank 0 does: both objects, then the marker) interrupted and resumed from the store
its manifest names. Then real training: function hosts that save to and load from the bucket, a run interrupted by
Ctrl-C and resumed with `coach run --resume` from its s3 checkpoint.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import boto3
import pytest
import yaml

from coach.app.run import resume_run, run_jobs
from coach.domain.cluster import DEFAULT_CLUSTER
from coach.domain.jobs import JobSpec
from coach.platforms.virtual import VirtualPlatform
from coach.storage.results import read_log
from coach.storage.s3 import parse_s3_url
from coach.ui.cli import main

from .conftest import MODELS, host_processes, wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def s3(s3_env):
    client = boto3.session.Session().client("s3")
    yield client
    client.close()


def objects(client, bucket: str) -> list[str]:
    return sorted(item["Key"] for item in client.list_objects_v2(Bucket=bucket).get("Contents", ()))


def job_file(folder: Path, name: str, **fields) -> Path:
    data = {"name": name, "model": str(MODELS / "tiny_mlp.py"), "batch_size": 64, "optimizer": "sgd",
            "optimizer_params": {"momentum": 0.9}, "learning_rate": 0.05, "target_loss": 0.0, "max_epochs": 3,
            "budget": 10.0, "workers": 2, "servers": 1, "epoch_timeout_s": 120}
    data.update(fields)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# --------------------------------------------------------------------------- the option's refusals


@pytest.mark.parametrize("url, why", [
    ("s3://coach-no-such-bucket/run", "bucket 'coach-no-such-bucket' does not exist"),
    ("s3:///run", "no bucket (expected s3://bucket/prefix)"),
    ("ftp://host/run", "unknown checkpoint store 'ftp'; known: file, s3"),
])
def test_a_store_that_cannot_be_used_is_refused_before_anything_starts(s3_env, tmp_path, capsys, url, why):
    results = tmp_path / "results"

    code = main(["run", str(job_file(tmp_path, "tiny")), "--quiet", "--results", str(results), "--checkpoints", url])

    assert code == 2
    assert capsys.readouterr().err == f"--checkpoints: {url}: {why}\n"
    assert not results.exists() or list(results.iterdir()) == []


def test_an_unreachable_endpoint_is_refused_in_one_line(s3_env, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # discard: nothing listens there

    code = main(["run", str(job_file(tmp_path, "tiny")), "--quiet", "--results", str(tmp_path / "results"),
                 "--checkpoints", "s3://b/run"])

    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("--checkpoints: s3://b/run: EndpointConnectionError: Could not connect to the endpoint")


def test_a_folder_is_a_file_store_and_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "taken").write_text("a file")

    code = main(["run", str(job_file(tmp_path, "tiny")), "--quiet", "--results", str(tmp_path / "results"),
                 "--checkpoints", str(tmp_path / "taken")])

    assert code == 2
    url = (tmp_path / "taken").as_uri()
    assert capsys.readouterr().err == f"--checkpoints: {url}: {tmp_path / 'taken'} is not a folder\n"
    assert main(["run", str(job_file(tmp_path, "tiny")), "--checkpoints", ""]) == 2
    assert capsys.readouterr().err == ("coach run: error: argument --checkpoints: expected s3://bucket/prefix or a "
                                       "folder, got ''\n")


def test_a_resumed_run_takes_its_store_from_its_manifest_only(tmp_path, capsys):
    code = main(["run", "--resume", str(tmp_path), "--checkpoints", "s3://b/run"])

    assert code == 2
    assert capsys.readouterr().err.startswith("--checkpoints: a resumed run uses the store its manifest names")


# --------------------------------------------------------------------------- a run over the store, in seconds


class S3Marks:
    """Rank 0 of a simulated epoch saves as a real one does: both objects, then the completion marker."""

    def __init__(self):
        self.client = boto3.session.Session().client("s3")

    def mark_saved(self, prefix: str) -> None:
        where = parse_s3_url(prefix)
        for suffix in (".params", ".states", ".complete"):
            self.client.put_object(Bucket=where.bucket, Key=where.key + suffix, Body=b"weights")


class Stopping(VirtualPlatform):
    """Sets `stop` while step `stop_at_step` runs (as Ctrl-C would); that step still completes."""

    def __init__(self, stop: threading.Event | None = None, stop_at_step: int | None = None):
        super().__init__(S3Marks())
        self.stop, self.stop_at_step = stop, stop_at_step

    def invoke(self, ref, request, timeout_s):
        if getattr(request, "step", None) == self.stop_at_step and self.stop is not None:
            self.stop.set()
        return super().invoke(ref, request, timeout_s)

    def close(self) -> None:
        super().close()
        self.store.client.close()


def simulated_job(tmp_path: Path) -> JobSpec:
    return JobSpec(name="sim", source=tmp_path / "sim.yaml", model_path=tmp_path / "model.py", batch_size=64,
                   optimizer="sgd", optimizer_params={}, learning_rate=0.05, target_loss=0.0, consecutive=3,
                   max_epochs=6, budget=10.0, workers=2, servers=1, max_workers=None, max_servers=None, seed=0,
                   epoch_timeout_s=60.0, max_retries=1)


def interrupted(tmp_path: Path, url: str):
    stop = threading.Event()
    platform = Stopping(stop, stop_at_step=3)
    return run_jobs([simulated_job(tmp_path)], DEFAULT_CLUSTER, tmp_path / "results", view="quiet",
                    platform_factory=lambda logs, token: platform, stop_event=stop, policy="static",
                    checkpoints=url)


def test_a_run_keeps_its_checkpoints_in_the_bucket_and_resumes_from_the_store_its_manifest_names(tmp_path, bucket,
                                                                                                 s3):
    url = f"s3://{bucket}/runs"
    report = interrupted(tmp_path, url)

    assert report.exit_code == 130
    assert json.loads((report.run_dir / "run.json").read_text())["checkpoints"] == url
    assert not (report.run_dir / "checkpoints").exists()  # nothing on this machine's disk
    records = read_log(report.run_dir / "sim.jsonl")
    assert [r["checkpoint"] for r in records if r["phase"] == "training"] == [
        f"{url}/sim/epoch-{n:04d}" for n in (1, 2, 3)]
    assert objects(s3, bucket) == [f"runs/sim/epoch-0003{s}" for s in (".complete", ".params", ".states")]

    resumed = resume_run(report.run_dir, view="quiet", platform_factory=lambda logs, token: Stopping())

    assert resumed.exit_code == 0
    records = read_log(report.run_dir / "sim.jsonl")
    assert [r["epoch"] for r in records if r["phase"] == "training"] == [1, 2, 3, 4, 5, 6]
    assert objects(s3, bucket) == [f"runs/sim/epoch-0006{s}" for s in (".complete", ".params", ".states")]


def test_a_log_that_lost_its_lines_goes_on_from_the_newest_checkpoint_with_a_marker(tmp_path, bucket, s3):
    url = f"s3://{bucket}/runs"
    report = interrupted(tmp_path, url)
    (report.run_dir / "sim.jsonl").write_text("")
    s3.put_object(Bucket=bucket, Key="runs/sim/epoch-0004.params", Body=b"half")  # a crash before its marker
    s3.put_object(Bucket=bucket, Key="runs/sim/epoch-0004.states", Body=b"half")

    resumed = resume_run(report.run_dir, view="quiet", platform_factory=lambda logs, token: Stopping())

    records = read_log(report.run_dir / "sim.jsonl")
    assert records[0]["checkpoint"] == f"{url}/sim/epoch-0003"  # the recovered line: epoch 3 was the last done
    assert [r["epoch"] for r in records if r["phase"] == "training"] == [4, 5, 6]
    assert resumed.exit_code == 0
    assert objects(s3, bucket) == [f"runs/sim/epoch-0006{s}" for s in (".complete", ".params", ".states")]


def test_a_resume_whose_checkpoint_lost_its_marker_is_refused_in_one_line(tmp_path, bucket, s3, capsys):
    report = interrupted(tmp_path, f"s3://{bucket}/runs")
    s3.delete_object(Bucket=bucket, Key="runs/sim/epoch-0003.complete")

    code = main(["run", "--resume", str(report.run_dir), "--quiet"])

    assert code == 2
    assert capsys.readouterr().err == (f"{report.run_dir / 'sim.jsonl'}: checkpoint: s3://{bucket}/runs/sim/epoch-0003 "
                                       f"of job sim is missing or incomplete\n")


def test_a_resume_whose_bucket_is_gone_is_refused_naming_the_manifest(tmp_path, bucket, s3, capsys):
    report = interrupted(tmp_path, f"s3://{bucket}/runs")
    manifest = json.loads((report.run_dir / "run.json").read_text())
    manifest["checkpoints"] = "s3://coach-gone-bucket/runs"
    (report.run_dir / "run.json").write_text(json.dumps(manifest))

    code = main(["run", "--resume", str(report.run_dir), "--quiet"])

    assert code == 2
    assert capsys.readouterr().err == (f"{report.run_dir / 'run.json'}: checkpoints: s3://coach-gone-bucket/runs: "
                                       f"bucket 'coach-gone-bucket' does not exist\n")


# --------------------------------------------------------------------------- real training


def coach(*args: str, output: Path) -> subprocess.Popen:
    """`coach` in its own process (Ctrl-C needs one), its output in a file; the environment is this one's."""
    with open(output, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "coach.ui.cli", *args], stdout=out, stderr=subprocess.STDOUT,
                                cwd=ROOT)


def trained(results: Path, job: str) -> int:
    logs = list(results.glob(f"*/{job}.jsonl"))
    return logs[0].read_text().count('"phase": "training"') if logs else 0


def test_real_training_checkpoints_to_the_bucket_and_resumes_from_it_after_ctrl_c(tmp_path, bucket, s3, marker):
    name, url, results = f"{marker}-s3", f"s3://{bucket}/runs", tmp_path / "results"
    epochs = 5
    run = coach("run", str(job_file(tmp_path, name, max_epochs=epochs)), "--plain", "--results", str(results),
                "--checkpoints", url, output=tmp_path / "run.out")
    try:
        assert wait_until(lambda: trained(results, name) >= 2, 90), (tmp_path / "run.out").read_text()
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=60) == 130, (tmp_path / "run.out").read_text()
    finally:
        run.kill()
        run.wait()
    run_dir = next(results.iterdir())
    done = trained(results, name)
    assert 2 <= done < epochs
    assert not (run_dir / "checkpoints").exists()
    tag = f"epoch-{done:04d}"
    assert objects(s3, bucket) == [f"runs/{name}/{tag}{s}" for s in (".complete", ".params", ".states")]
    before = [r for r in read_log(run_dir / f"{name}.jsonl") if r["phase"] == "training"]

    resumed = coach("run", "--resume", str(run_dir), "--plain", output=tmp_path / "resume.out")
    try:
        assert resumed.wait(timeout=120) == 0, (tmp_path / "resume.out").read_text()
    finally:
        resumed.kill()
        resumed.wait()

    records = [r for r in read_log(run_dir / f"{name}.jsonl") if r["phase"] == "training"]
    assert [r["epoch"] for r in records] == list(range(1, epochs + 1))
    assert [r["checkpoint"] for r in records] == [f"{url}/{name}/epoch-{n:04d}" for n in range(1, epochs + 1)]
    # it went on from the bucket's checkpoint (nothing else holds one): the loss carries on, it does not restart
    assert records[done]["loss"] < before[0]["loss"] * 0.8, [r["loss"] for r in records]
    assert objects(s3, bucket) == [f"runs/{name}/epoch-{epochs:04d}{s}" for s in (".complete", ".params", ".states")]
    assert "Traceback" not in (tmp_path / "run.out").read_text() + (tmp_path / "resume.out").read_text()
    assert wait_until(lambda: host_processes(marker) == [], 15)
