"""Bad input, everywhere the `coach` command takes it: one line on stderr, exit code 2, nothing written.

Every case runs the real command line in-process (`coach.ui.cli.main`) on files in a fresh folder and checks the
same four things:
- the exit code is 2;
- stderr is exactly one line, and it names the file and the field (or the option);
- no traceback reaches the output;
- nothing was written: the folder (the results folder included, which the working folder holds) is unchanged.

A few cases also run `python -m coach.ui.cli` as a process, to show that no traceback reaches a real stderr.
None is timed: the bounds (file sizes, YAML values after expanding aliases, option ranges) make every refusal
fast by construction, and the cases check that the bound is what refuses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import coach.app.run
from coach.domain.cluster import DEFAULT_CLUSTER
from coach.inputs.jobs import load_job
from coach.ui.cli import main

REPO = Path(__file__).resolve().parents[2]

MODEL = "def build_model():\n    return None\n\n\ndef load_data():\n    return None\n"
JOB_FIELDS = {
    "name": "tiny", "model": "model.py", "batch_size": "8", "optimizer": "sgd", "learning_rate": "0.1",
    "target_loss": "0.5", "max_epochs": "10", "budget": "0.25", "workers": "2", "servers": "1",
}
CLUSTER = "name: lab\nprice_per_slot_s: 0.0001\nnodes:\n  - {name: a, slots: 4}\n  - {name: b, slots: 4}\n"
MATRIX = {
    "name": "demo", "models": {"m": "model.py"}, "jobs": [1, 2], "allocation": ["static", "dynamic"],
    "schedulers": ["gang"], "batch_size": 16, "optimizer": "sgd", "learning_rate": 0.1, "target_loss": 0.0,
    "max_epochs": 2, "budget": 1.0, "seed": 10,
}
# "Billion laughs": nine levels of nine aliases, 9**9 values once expanded, in a few hundred bytes.
ALIAS_BOMB = "".join(
    f"  {level}: &{level} [{', '.join(['1'] * 9 if i == 0 else [f'*{chr(ord(level) - 1)}'] * 9)}]\n"
    for i, level in enumerate("abcdefghi"))
TOO_MANY_VALUES = "YAML holds more than 10000 values after expanding aliases (the limit)"


def job_yaml(**changes: str | None) -> str:
    """A valid static job as YAML; a change sets a raw YAML value, None drops the field."""
    fields = {**JOB_FIELDS, **changes}
    return "".join(f"{key}: {value}\n" for key, value in fields.items() if value is not None)


@pytest.fixture
def here(tmp_path: Path, monkeypatch) -> Path:
    """A fresh working folder with a valid model file; default results folders would land in it too."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(MODEL)
    return tmp_path


@pytest.fixture(autouse=True)
def nothing_runs(monkeypatch):
    """Fail loudly instead of training if a refused command ever got as far as running the jobs."""
    def refuse(*args, **kwargs):
        raise AssertionError("bad input must be refused before anything runs")

    monkeypatch.setattr(coach.app.run, "run_jobs", refuse)
    monkeypatch.setattr(coach.app.run, "resume_run", refuse)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under `folder` with its size and modification time."""
    found = {}
    for path in folder.rglob("*"):
        stat = path.lstat()
        found[str(path.relative_to(folder))] = (stat.st_size, stat.st_mtime_ns)
    return found


def refused(capsys, folder: Path, argv: list[str], *expected: str) -> str:
    """Run `coach ARGV`; check exit code 2, one stderr line holding every `expected` text, no traceback, nothing
    written. Returns the line."""
    before = snapshot(folder)
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    assert code == 2, (code, out.err)
    lines = out.err.splitlines()
    assert len(lines) == 1, out.err
    for text in expected:
        assert str(text) in lines[0], (text, lines[0])
    assert out.out == ""
    assert snapshot(folder) == before
    return lines[0]


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


# --------------------------------------------------------------------------- job files

# (id, job file text, FIELD the line must name, a part of the message)
BAD_JOB_FILES = [
    ("workers-1e20-integer", job_yaml(workers="100000000000000000000"), "workers", "must be <= 1024"),
    ("workers-1e20-float", job_yaml(workers="1e20"), "workers", "expected an integer, got float 1e+20"),
    ("workers-above-1024", job_yaml(workers="1025"), "workers", "must be <= 1024, got 1025"),
    ("servers-above-1024", job_yaml(servers="5000"), "servers", "must be <= 1024"),
    ("max-workers-above-1024", job_yaml(workers=None, servers=None) + "max_workers: 2000\n", "max_workers",
     "must be <= 1024"),
    ("max-servers-above-1024", job_yaml(workers=None, servers=None) + "max_servers: 99999\n", "max_servers",
     "must be <= 1024"),
    ("batch-size-above-1e6", job_yaml(batch_size="1000001"), "batch_size", "must be <= 1000000"),
    ("per-worker-zero", job_yaml(batch_size="{per_worker: 0}"), "batch_size.per_worker", "must be >= 1, got 0"),
    ("scaling-unknown", job_yaml(batch_size="{per_worker: 8, scaling: sqrt}"), "batch_size.scaling",
     "unknown scaling 'sqrt'"),
    ("batch-size-unknown-key", job_yaml(batch_size="{per_worker: 8, global: 64}"), "batch_size.global",
     "unknown field"),
    ("scaling-a-list", job_yaml(batch_size="{per_worker: 8, scaling: [linear]}"), "batch_size.scaling",
     "expected a string, got list"),
    ("max-epochs-1e29", job_yaml(max_epochs="1e29"), "max_epochs", "expected an integer"),
    ("max-epochs-1e29-integer", job_yaml(max_epochs="1" + "0" * 29), "max_epochs", "must be <= 1000000"),
    ("consecutive-above-max-epochs", job_yaml(max_epochs="5") + "consecutive: 6\n", "consecutive",
     "must be <= max_epochs (5), got 6"),
    ("max-retries-above-100", job_yaml() + "max_retries: 1000\n", "max_retries", "must be <= 100"),
    ("max-retries-negative", job_yaml() + "max_retries: -1\n", "max_retries", "must be >= 0"),
    ("epoch-timeout-above-a-week", job_yaml() + "epoch_timeout_s: 1e9\n", "epoch_timeout_s", "must be <= 604800"),
    ("epoch-timeout-inf", job_yaml() + "epoch_timeout_s: .inf\n", "epoch_timeout_s", "finite"),
    ("epoch-timeout-nan", job_yaml() + "epoch_timeout_s: .nan\n", "epoch_timeout_s", "finite"),
    ("seed-2-to-the-32", job_yaml() + "seed: 4294967296\n", "seed", "must be <= 4294967295"),
    ("seed-float", job_yaml() + "seed: 1.5\n", "seed", "expected an integer, got float 1.5"),
    ("seed-word", job_yaml() + "seed: x\n", "seed", "expected an integer, got str 'x'"),
    ("budget-nan", job_yaml(budget=".nan"), "budget", "finite"),
    ("budget-minus-inf", job_yaml(budget="-.inf"), "budget", "finite"),
    ("budget-1e300", job_yaml(budget="1e300"), "budget", "must be <= 1e+12"),
    ("learning-rate-inf", job_yaml(learning_rate=".inf"), "learning_rate", "finite"),
    ("target-loss-nan", job_yaml(target_loss=".NaN"), "target_loss", "finite"),
    ("calibration-fraction-zero", job_yaml() + "calibration_fraction: 0\n", "calibration_fraction", "must be > 0"),
    ("calibration-fraction-above-one", job_yaml() + "calibration_fraction: 1.5\n", "calibration_fraction",
     "must be <= 1"),
    ("name-with-a-newline", job_yaml(name='"a\\nb"'), "name", "must be 1-64 characters"),
    ("optimizer-unknown-param", job_yaml() + "optimizer_params: {beta1: 0.9}\n", "optimizer_params.beta1",
     "unknown parameter of optimizer 'sgd'"),
    ("optimizer-param-of-another-optimizer", job_yaml(optimizer="adam") + "optimizer_params: {momentum: 0.9}\n",
     "optimizer_params.momentum", "unknown parameter of optimizer 'adam'"),
    ("optimizer-param-misspelt", job_yaml() + "optimizer_params: {momentun: 0.9}\n", "optimizer_params.momentun",
     "did you mean 'momentum'?"),
    ("optimizer-param-object-only", job_yaml() + "optimizer_params: {lr_scheduler: 1}\n",
     "optimizer_params.lr_scheduler", "cannot be set in a job file"),
    ("optimizer-param-nan", job_yaml() + "optimizer_params: {momentum: .nan}\n", "optimizer_params.momentum",
     "finite"),
    ("optimizer-param-list", job_yaml() + "optimizer_params: {wd: [1, 2]}\n", "optimizer_params.wd",
     "expected a number, got list [1, 2]"),
    ("optimizer-params-alias-bomb", job_yaml() + "optimizer_params:\n" + ALIAS_BOMB, "(file)", TOO_MANY_VALUES),
    ("alias-bomb-in-an-unknown-field", job_yaml() + "junk:\n" + ALIAS_BOMB, "(file)", TOO_MANY_VALUES),
    ("recursive-alias", job_yaml() + "optimizer_params: &x {momentum: *x}\n", "(file)", "recursive alias"),
    ("nested-100-levels", job_yaml() + "optimizer_params: " + "[" * 100 + "]" * 100 + "\n", "(file)",
     "nested more than 64 levels"),
    ("control-character", job_yaml(name="ti\x07ny"), "(file)", "invalid YAML"),
    ("date-that-does-not-exist", job_yaml() + "seed: 2026-13-45\n", "(file)", "a value cannot be read"),
    ("integer-of-5000-digits", job_yaml(batch_size="1" * 5000), "(file)", "a value cannot be read"),
    ("bad-float-tag", job_yaml(budget="!!float x"), "(file)", "a value cannot be read"),
    ("bad-timestamp-tag", job_yaml() + "seed: !!timestamp x\n", "(file)", "a value cannot be read"),
    ("python-object-tag", job_yaml(budget="!!python/object:os.system x"), "(file)", "invalid YAML"),
    ("two-documents", job_yaml() + "---\nname: other\n", "(file)", "invalid YAML at line"),
    ("duplicate-key", job_yaml() + "budget: 5\n", "budget", "duplicate key"),
    ("top-level-list", "- name: tiny\n", "(file)", "top level must be a mapping"),
    ("empty-file", "", "(file)", "file is empty"),
    ("string-budget", job_yaml(budget='"0.25"'), "budget", "expected a number, got str '0.25'"),
    ("model-not-a-string", job_yaml(model="12"), "model", "expected a string"),
    ("model-is-a-folder", job_yaml(model="."), "model", "is a directory"),
    ("model-missing", job_yaml(model="nowhere.py"), "model", "file not found"),
]


@pytest.mark.parametrize(("text", "field", "message"), [case[1:] for case in BAD_JOB_FILES],
                         ids=[case[0] for case in BAD_JOB_FILES])
def test_a_bad_job_file_is_one_line_naming_the_file_and_the_field(here, capsys, text, field, message):
    job = write(here, "job.yaml", text)

    refused(capsys, here, ["validate", job], f"{job}: {field}: ", message)


def test_a_job_file_over_a_mebibyte_is_refused_unread(here, capsys):
    job = write(here, "job.yaml", job_yaml() + "# padding\n" * 120_000)

    refused(capsys, here, ["validate", job], f"{job}: (file): file is larger than 1048576 bytes")


def test_a_job_file_that_is_not_utf8(here, capsys):
    job = write(here, "job.yaml", b"name: \xff\xfe\n")

    refused(capsys, here, ["validate", job], f"{job}: (file): not UTF-8 text (byte 6)")


def test_a_job_file_that_is_a_fifo_is_not_opened(here, capsys):
    job = here / "job.yaml"
    os.mkfifo(job)

    refused(capsys, here, ["validate", job], f"{job}: (file): not a regular file")


def test_a_missing_job_file(here, capsys):
    refused(capsys, here, ["validate", here / "nowhere.yaml"], f"{here / 'nowhere.yaml'}: (file): file not found")


def test_a_job_file_that_is_a_folder(here, capsys):
    (here / "jobs").mkdir()

    refused(capsys, here, ["validate", here / "jobs"], f"{here / 'jobs'}: (file): is a directory")


def test_a_ten_thousand_character_name_is_not_echoed_whole(here, capsys):
    job = write(here, "job.yaml", job_yaml(name="n" * 10_000))

    line = refused(capsys, here, ["validate", job], f"{job}: name: must be 1-64 characters")
    assert len(line) < len(str(job)) + 310


def test_a_ten_thousand_character_optimizer_is_not_echoed_whole(here, capsys):
    job = write(here, "job.yaml", job_yaml(optimizer="o" * 10_000))

    line = refused(capsys, here, ["validate", job], f"{job}: optimizer: unknown optimizer 'ooo")
    assert len(line) < len(str(job)) + 310


def test_a_ten_thousand_character_unknown_field_is_not_echoed_whole(here, capsys):
    job = write(here, "job.yaml", job_yaml() + "? " + "f" * 10_000 + "\n: 1\n")  # an explicit key: any length

    line = refused(capsys, here, ["validate", job], f"{job}: fff", "unknown field")
    assert len(line) < len(str(job)) + 310


def test_run_refuses_a_bounded_field_before_anything_starts(here, capsys):
    job = write(here, "job.yaml", job_yaml(workers="100000000000000000000"))

    refused(capsys, here, ["run", job, "--results", here / "results"], f"{job}: workers: must be <= 1024")


# --------------------------------------------------------------------------- model files

BAD_MODELS = [
    ("without-build-model", "def load_data():\n    return None\n", "missing: build_model"),
    ("without-load-data", "def build_model():\n    return None\n", "missing: load_data"),
    ("syntax-error", "def build_model()\n    return None\n", "syntax error"),
    ("null-byte", "def build_model():\n    return None\x00\n", "null bytes"),
    ("not-utf8", b"\xff\xfedef build_model(): pass\n", "syntax error"),
    ("nested-too-deeply", "x = " + "-" * 200_000 + "1\n" + MODEL, "nested too deeply"),
    ("build-model-is-a-variable", "build_model = None\n\ndef load_data():\n    return None\n",
     "missing: build_model"),
]


@pytest.mark.parametrize(("source", "message"), [case[1:] for case in BAD_MODELS],
                         ids=[case[0] for case in BAD_MODELS])
def test_a_bad_model_file_is_one_line_naming_the_job_file_and_model(here, capsys, source, message):
    write(here, "bad.py", source)
    job = write(here, "job.yaml", job_yaml(model="bad.py"))

    refused(capsys, here, ["validate", job], f"{job}: model: ", message)


def test_a_model_file_that_is_not_python(here, capsys):
    write(here, "model.txt", MODEL)
    job = write(here, "job.yaml", job_yaml(model="model.txt"))

    refused(capsys, here, ["validate", job], f"{job}: model: must be a .py file")


# --------------------------------------------------------------------------- cluster files

# (id, cluster file text, FIELD, a part of the message)
BAD_CLUSTERS = [
    ("no-price-anywhere", "nodes:\n  - {name: a, slots: 4}\n", "price_per_slot_s", "required field missing"),
    ("a-node-without-a-price", "nodes:\n  - {name: a, slots: 4, price_per_slot_s: 0.1}\n  - {name: b, slots: 4}\n",
     "price_per_slot_s", "no price for nodes[1]"),
    ("slots-above-1e5", "price_per_slot_s: 0.1\nnodes:\n  - {name: a, slots: 1000000}\n", "nodes[0].slots",
     "must be <= 100000"),
    ("slots-inf", "price_per_slot_s: 0.1\nnodes:\n  - {name: a, slots: .inf}\n", "nodes[0].slots",
     "expected an integer"),
    ("slots-huge-integer", "price_per_slot_s: 0.1\nnodes:\n  - {name: a, slots: " + "9" * 400 + "}\n",
     "nodes[0].slots", "must be <= 100000"),
    ("price-nan", "price_per_slot_s: .nan\nnodes:\n  - {name: a, slots: 4}\n", "price_per_slot_s", "got nan"),
    ("node-price-inf", "nodes:\n  - {name: a, slots: 4, price_per_slot_s: .inf}\n", "nodes[0].price_per_slot_s",
     "got inf"),
    ("price-above-1e6", "price_per_slot_s: 1e7\nnodes:\n  - {name: a, slots: 4}\n", "price_per_slot_s",
     "must be <= 1e+06"),
    ("price-a-word", "price_per_slot_s: cheap\nnodes:\n  - {name: a, slots: 4}\n", "price_per_slot_s",
     "expected a number"),
    ("price-a-list", "price_per_slot_s: [1]\nnodes:\n  - {name: a, slots: 4}\n", "price_per_slot_s",
     "expected a number"),
    ("alias-bomb", "price_per_slot_s: 0.1\nnodes:\n  - {name: a, slots: 4}\njunk:\n" + ALIAS_BOMB.replace(
        "[1, 1, 1, 1, 1, 1, 1, 1, 1]", "[" + ", ".join(["1"] * 200) + "]").replace(
        "  i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]\n", "  i: &i [" + ", ".join(["*h"] * 900) + "]\n"),
     "(file)", "YAML holds more than 1000000 values"),
    ("control-character", "name: l\x07b\nprice_per_slot_s: 0.1\nnodes: []\n", "(file)", "invalid YAML"),
    ("scheduler-a-list", CLUSTER + "scheduler: [gang]\n", "scheduler", "unknown profile ['gang']"),
    ("scheduler-unknown", CLUSTER + "scheduler: gnag\n", "scheduler", "unknown profile 'gnag'"),
    ("name-10000-characters", CLUSTER.replace("name: lab", "name: " + "l" * 10_000), "name",
     "must be 1-128 printable characters"),
    ("nodes-not-a-list", "price_per_slot_s: 0.1\nnodes: {a: 4}\n", "nodes", "non-empty list"),
    ("duplicate-node", "price_per_slot_s: 0.1\nnodes:\n  - {name: a, slots: 4}\n  - {name: a, slots: 4}\n",
     "nodes[1].name", "duplicate node name"),
    ("date-that-does-not-exist", CLUSTER + "extra: 2026-02-30\n", "(file)", "a value cannot be read"),
]


@pytest.mark.parametrize(("text", "field", "message"), [case[1:] for case in BAD_CLUSTERS],
                         ids=[case[0] for case in BAD_CLUSTERS])
def test_a_bad_cluster_file_is_one_line_naming_the_file_and_the_field(here, capsys, text, field, message):
    job = write(here, "job.yaml", job_yaml())
    cluster = write(here, "cluster.yaml", text)

    refused(capsys, here, ["run", job, "--cluster", cluster, "--results", here / "results"],
            f"{cluster}: {field}: ", message)


def test_a_cluster_file_that_is_not_utf8(here, capsys):
    job = write(here, "job.yaml", job_yaml())
    cluster = write(here, "cluster.yaml", b"nodes: \xff\n")

    refused(capsys, here, ["run", job, "--cluster", cluster], f"{cluster}: (file): not UTF-8 text (byte 7)")


def test_a_cluster_file_that_is_a_folder(here, capsys):
    job = write(here, "job.yaml", job_yaml())
    (here / "clusters").mkdir()

    refused(capsys, here, ["run", job, "--cluster", here / "clusters"], f"{here / 'clusters'}: (file): ")


def test_a_cluster_file_over_its_size_cap(here, capsys):
    job = write(here, "job.yaml", job_yaml())
    cluster = write(here, "cluster.yaml", CLUSTER + "#" * (16 << 20))

    refused(capsys, here, ["run", job, "--cluster", cluster], f"{cluster}: (file): file is larger than")


def test_plan_refuses_a_cluster_without_a_price(here, capsys):
    job = write(here, "job.yaml", job_yaml())
    log = write(here, "tiny.jsonl", "")
    cluster = write(here, "cluster.yaml", "nodes:\n  - {name: a, slots: 4}\n")

    refused(capsys, here, ["plan", job, "--history", log, "--cluster", cluster],
            f"{cluster}: price_per_slot_s: required field missing")


# --------------------------------------------------------------------------- matrix files


def matrix_yaml(**changes) -> str:
    import yaml

    data = {key: value for key, value in {**MATRIX, **changes}.items() if value is not None}
    return yaml.safe_dump(data, sort_keys=False)


# (id, matrix file text, FIELD, a part of the message)
BAD_MATRICES = [
    ("repeat-1000", matrix_yaml(repeat=1000), "repeat", "must be <= 100"),
    ("repeat-inf", matrix_yaml(repeat=float("inf")), "repeat", "expected an integer >= 1, got inf"),
    ("repeat-float", matrix_yaml(repeat=2.5), "repeat", "expected an integer >= 1, got 2.5"),
    ("jobs-1000", matrix_yaml(jobs=[1, 1000]), "jobs", "expected integers <= 100, got 1000"),
    ("jobs-nan", matrix_yaml(jobs=[float("nan")]), "jobs", "expected integers >= 1, got nan"),
    ("placement-timeout-inf", matrix_yaml(placement_timeout_s=float("inf")), "placement_timeout_s", "finite"),
    ("placement-timeout-nan", matrix_yaml(placement_timeout_s=float("nan")), "placement_timeout_s",
     "expected a number > 0, got nan"),
    ("placement-timeout-1e9", matrix_yaml(placement_timeout_s=1e9), "placement_timeout_s", "must be <= 604800"),
    ("static-workers-5000", matrix_yaml(static={"workers": 5000, "servers": 1}), "static.workers",
     "must be <= 1024"),
    ("seed-a-word", matrix_yaml(seed="x"), "seed", "expected an integer, got str 'x'"),
    ("seed-a-float", matrix_yaml(seed=1.5), "seed", "expected an integer, got float 1.5"),
    ("last-seed-beyond-2-to-the-32", matrix_yaml(seed=2**32 - 1), "seed", "the seed of job 2 of 2"),
    ("max-epochs-1e29", matrix_yaml(max_epochs=10**29), "max_epochs", "must be <= 1000000"),
    ("budget-nan-in-a-model", matrix_yaml(models={"m": {"model": "model.py", "budget": float("nan")}}),
     "models.m.budget", "finite"),
    ("alias-bomb", matrix_yaml() + "description:\n" + ALIAS_BOMB, "(file)", TOO_MANY_VALUES),
    ("control-character", matrix_yaml(description="a\x07b").replace("\\a", "\x07"), "(file)", "invalid YAML"),
    ("too-many-runs", matrix_yaml(jobs=list(range(1, 101)), schedulers=["gang", "default", "gang-strict"],
                                  repeat=100), "(file)", "more than 10000"),
    ("optimizer-param-unknown", matrix_yaml(optimizer_params={"beta1": 0.9}), "optimizer_params.beta1",
     "unknown parameter of optimizer 'sgd'"),
    ("cluster-without-a-price", matrix_yaml(cluster="cluster.yaml"), "price_per_slot_s", "required field missing"),
]


@pytest.mark.parametrize(("text", "field", "message"), [case[1:] for case in BAD_MATRICES],
                         ids=[case[0] for case in BAD_MATRICES])
def test_a_bad_matrix_is_one_line_naming_the_file_and_the_field(here, capsys, text, field, message):
    write(here, "cluster.yaml", "nodes:\n  - {name: a, slots: 4}\n")  # no price: for the case that names it
    matrix = write(here, "matrix.yaml", text)

    shown = here / "cluster.yaml" if field == "price_per_slot_s" else matrix
    refused(capsys, here, ["experiment", matrix, "--results", here / "results"], f"{shown}: {field}: ", message)


def test_a_matrix_that_is_not_utf8(here, capsys):
    matrix = write(here, "matrix.yaml", b"name: \xff\n")

    refused(capsys, here, ["experiment", matrix], f"{matrix}: (file): cannot read")


def test_a_missing_matrix(here, capsys):
    refused(capsys, here, ["experiment", here / "nowhere.yaml"], f"{here / 'nowhere.yaml'}: (file): file not found")


# --------------------------------------------------------------------------- run folders for `coach run --resume`


def run_folder(here: Path) -> Path:
    """A run folder as a killed `coach run` leaves it: manifest, summary, one epoch logged, its checkpoint."""
    spec = load_job(write(here, "job.yaml", job_yaml()))
    run_dir = here / "results" / "20260101-000000-abcd"
    checkpoint = run_dir / "checkpoints" / "tiny" / "epoch-0001"
    for suffix in (".params", ".states"):
        write(run_dir, f"checkpoints/tiny/epoch-0001{suffix}", "x")
    write(run_dir, "run.json", json.dumps({
        "schema": 2, "run_id": run_dir.name, "command": ["coach"], "started": "2026-01-01T00:00:00.000+00:00",
        "scheduler": "gang", "policy": "coach", "placement_timeout_s": 30.0, "platform": "local",
        "placement": "scheduler_fork", "cluster": DEFAULT_CLUSTER.to_dict(), "jobs": [spec.to_dict()]}))
    write(run_dir, "summary.json", json.dumps({
        "run_id": run_dir.name, "started": "2026-01-01T00:00:00.000+00:00", "ended": None, "makespan_s": None,
        "jobs": {"tiny": {"submitted": "2026-01-01T00:00:00.000+00:00", "finished": None, "jct_s": None}}}))
    write(run_dir, "tiny.jsonl", json.dumps(epoch_record(checkpoint=str(checkpoint))) + "\n")
    return run_dir


def epoch_record(**changes) -> dict:
    record = {"run_id": "r", "job": "tiny", "phase": "training", "epoch": 1, "workers": 2, "servers": 1,
              "placement": {}, "loss": 1.5, "val_loss": None, "accuracy": None, "train_accuracy": 0.5,
              "samples": 100, "epoch_time_s": 1.2, "compute_s": 1.0, "start": "2026-01-01T00:00:01.000+00:00",
              "end": "2026-01-01T00:00:02.200+00:00", "cost": 0.001, "cumulative_cost": 0.001, "budget": 0.25,
              "stop_reason": None, "attempt": 1, "checkpoint": None}
    record.update(changes)
    return {key: value for key, value in record.items() if value != "-"}


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_a_good_run_folder_gets_as_far_as_resuming(here, capsys, monkeypatch):
    run_dir = run_folder(here)
    resumed = []

    def resume_run(path, view):
        resumed.append(path)
        return SimpleNamespace(run_dir=path, exit_code=0)

    monkeypatch.setattr(coach.app.run, "resume_run", resume_run)

    assert main(["run", "--resume", str(run_dir)]) == 0

    assert resumed == [run_dir.resolve()]
    assert capsys.readouterr().out.splitlines() == [
        "cluster: thesis-3-nodes (the default cluster): 3 nodes, 12 slots, 0.0001 per slot-second",
        f"results: {run_dir.resolve()}"]


def _job(data: dict) -> dict:
    return data["jobs"][0]


# (id, change to run.json's data, FIELD, a part of the message)
BAD_MANIFESTS = [
    ("without-jobs", lambda d: d.pop("jobs"), "jobs", "required field missing"),
    ("jobs-not-a-list", lambda d: d.update(jobs={"tiny": 1}), "jobs", "expected a non-empty list"),
    ("batch-size-a-word", lambda d: _job(d).update(batch_size="x"), "jobs[0].batch_size", "expected an integer"),
    ("batch-scaling-unknown", lambda d: _job(d).update(batch_size={"per_worker": 8, "scaling": "sqrt"}),
     "jobs[0].batch_size.scaling", "unknown scaling"),
    ("workers-1e20", lambda d: _job(d).update(workers=10**20), "jobs[0].workers", "must be <= 1024"),
    ("budget-nan", lambda d: _job(d).update(budget=float("nan")), "jobs[0].budget", "finite"),
    ("model-with-a-syntax-error", lambda d: _job(d).update(model_path=str(Path(_job(d)["source"]).parent / "bad.py")),
     "jobs[0].model_path", "syntax error"),
    ("model-an-integer", lambda d: _job(d).update(model_path=5), "jobs[0].model_path", "expected a path"),
    ("unknown-job-field", lambda d: _job(d).update(colour="red"), "jobs[0].colour", "unknown field"),
    ("duplicate-job", lambda d: d["jobs"].append(dict(_job(d))), "jobs[1].name", "duplicate job name"),
    ("cluster-slots-a-word", lambda d: d["cluster"]["nodes"][0].update(slots="x"), "cluster.nodes[0].slots",
     "expected an integer"),
    ("cluster-without-a-price", lambda d: [n.pop("price_per_slot_s") for n in d["cluster"]["nodes"]],
     "cluster.price_per_slot_s", "required field missing"),
    ("scheduler-unknown", lambda d: d.update(scheduler="kube"), "scheduler", "unknown scheduler"),
    ("policy-unknown", lambda d: d.update(policy=["coach"]), "policy", "unknown policy"),
    ("placement-timeout-nan", lambda d: d.update(placement_timeout_s=float("nan")), "placement_timeout_s", "finite"),
    ("placement-timeout-a-word", lambda d: d.update(placement_timeout_s="30"), "placement_timeout_s",
     "expected a number"),
    ("without-schema", lambda d: d.pop("schema"), "schema", "required field missing"),
    ("another-schema", lambda d: d.update(schema=1), "schema", "layout 1 is not this Coach's (2)"),
    ("without-policy", lambda d: d.pop("policy"), "policy", "required field missing"),
]


@pytest.mark.parametrize(("change", "field", "message"), [case[1:] for case in BAD_MANIFESTS],
                         ids=[case[0] for case in BAD_MANIFESTS])
def test_a_bad_manifest_is_one_line_and_the_run_folder_is_untouched(here, capsys, change, field, message):
    write(here, "bad.py", "def build_model()\n")
    run_dir = run_folder(here)
    edit_json(run_dir / "run.json", change)

    refused(capsys, here, ["run", "--resume", run_dir], f"{run_dir / 'run.json'}: {field}: ", message)


def test_a_manifest_that_is_a_json_list(here, capsys):
    run_dir = run_folder(here)
    write(run_dir, "run.json", "[1, 2]")

    refused(capsys, here, ["run", "--resume", run_dir], f"{run_dir / 'run.json'}: (file): not a Coach run manifest")


def test_a_missing_manifest(here, capsys):
    run_dir = run_folder(here)
    (run_dir / "run.json").unlink()

    refused(capsys, here, ["run", "--resume", run_dir], f"{run_dir / 'run.json'}: (file): No such file")


def test_a_manifest_that_is_not_json(here, capsys):
    run_dir = run_folder(here)
    write(run_dir, "run.json", "{not json")

    refused(capsys, here, ["run", "--resume", run_dir], f"{run_dir / 'run.json'}: (file): not a Coach run manifest")


def test_a_manifest_that_is_binary(here, capsys):
    run_dir = run_folder(here)
    write(run_dir, "run.json", b"\x89PNG\r\n\x1a\n\x00\x00")

    refused(capsys, here, ["run", "--resume", run_dir], f"{run_dir / 'run.json'}: (file): not a Coach run manifest")


# (id, log text after the good line, or a function of the run folder giving the whole log; FIELD; message part)
BAD_LOGS = [
    ("binary-line", b"\x00\xff\xfe garbage\n", "(line 2)", "not UTF-8 text"),
    ("not-json", b"{not json\n", "(line 2)", "not JSON"),
    ("a-json-list", b"[1, 2]\n", "(line 2)", "expected a JSON object"),
    ("workers-a-word", json.dumps(epoch_record(epoch=2, workers="x")).encode() + b"\n", "(line 2): workers",
     "expected an integer"),
    ("epoch-time-a-list", json.dumps(epoch_record(epoch=2, epoch_time_s=[])).encode() + b"\n",
     "(line 2): epoch_time_s", "expected a number"),
    ("cost-null", json.dumps(epoch_record(epoch=2, cost=None)).encode() + b"\n", "(line 2): cost", "null"),
    ("epoch-a-word", json.dumps(epoch_record(epoch="2")).encode() + b"\n", "(line 2): epoch", "expected an integer"),
    ("checkpoint-an-integer", json.dumps(epoch_record(epoch=2, checkpoint=5)).encode() + b"\n",
     "(line 2): checkpoint", "expected a path"),
    ("end-not-a-time", json.dumps(epoch_record(epoch=2, end="yesterday")).encode() + b"\n", "(line 2): end",
     "ISO-8601"),
    ("loss-missing", json.dumps(epoch_record(epoch=2, loss="-")).encode() + b"\n", "(line 2): loss",
     "required field missing"),
]


@pytest.mark.parametrize(("tail", "field", "message"), [case[1:] for case in BAD_LOGS],
                         ids=[case[0] for case in BAD_LOGS])
def test_a_bad_log_line_refuses_the_resume_and_leaves_the_log_as_it_was(here, capsys, tail, field, message):
    run_dir = run_folder(here)
    log = run_dir / "tiny.jsonl"
    log.write_bytes(log.read_bytes() + tail + b'{"torn": ')  # a torn tail too: a refused resume must not cut it

    refused(capsys, here, ["run", "--resume", run_dir], f"{log}: {field}: ", message)


def test_a_log_line_of_another_type_than_an_epoch_is_checked_too(here, capsys):
    run_dir = run_folder(here)
    log = run_dir / "tiny.jsonl"
    with open(log, "a") as handle:
        handle.write(json.dumps({"job": "tiny", "phase": "retry", "epoch": 2, "will_retry": "yes"}) + "\n")

    refused(capsys, here, ["run", "--resume", run_dir], f"{log}: (line 2): will_retry: ", "expected true or false")


# --------------------------------------------------------------------------- `coach plan` histories


def plan_inputs(here: Path) -> tuple[Path, Path]:
    """A dynamic job and a good history of it (four calibration steps, two epochs)."""
    job = write(here, "dyn.yaml", job_yaml(name="dyn", workers=None, servers=None))
    lines = [epoch_record(job="dyn", phase="calibration", epoch=0, workers=w, servers=s, data_fraction=0.25)
             for w, s in ((1, 1), (1, 2), (2, 1), (2, 2))]
    lines += [epoch_record(job="dyn", epoch=k, loss=1.0 / k) for k in (1, 2)]
    log = write(here, "dyn.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    return job, log


def test_a_good_history_plans(here, capsys):
    job, log = plan_inputs(here)

    assert main(["plan", str(job), "--history", str(log)]) == 0
    assert json.loads(capsys.readouterr().out)["job"] == "dyn"


# (id, a line appended to the good history, FIELD, a part of the message)
BAD_HISTORIES = [
    ("workers-a-word", epoch_record(job="dyn", epoch=3, workers="x"), "(line 7): workers", "expected an integer"),
    ("epoch-time-a-list", epoch_record(job="dyn", epoch=3, epoch_time_s=[]), "(line 7): epoch_time_s",
     "expected a number"),
    ("cost-null", epoch_record(job="dyn", epoch=3, cost=None), "(line 7): cost", "null"),
    ("servers-zero", epoch_record(job="dyn", epoch=3, servers=0), "(line 7): servers", ">= 1"),
    ("data-fraction-zero", epoch_record(job="dyn", phase="calibration", data_fraction=0), "(line 7): data_fraction",
     "must be > 0"),
    ("cumulative-cost-a-word", epoch_record(job="dyn", epoch=3, cumulative_cost="x"), "(line 7): cumulative_cost",
     "expected a number"),
    ("phase-a-list", epoch_record(job="dyn", phase=["training"]), "(line 7): phase", "expected a string"),
    ("losses-both-null", epoch_record(job="dyn", epoch=3, loss=None), "(line 7): loss", "loss or val_loss"),
    ("epoch-missing", epoch_record(job="dyn", epoch="-"), "(line 7): epoch", "required field missing"),
    ("start-not-a-time", epoch_record(job="dyn", epoch=3, start=12), "(line 7): start", "ISO-8601"),
]


@pytest.mark.parametrize(("line", "field", "message"), [case[1:] for case in BAD_HISTORIES],
                         ids=[case[0] for case in BAD_HISTORIES])
def test_a_history_with_a_field_of_the_wrong_type(here, capsys, line, field, message):
    job, log = plan_inputs(here)
    with open(log, "a") as handle:
        handle.write(json.dumps(line) + "\n")

    refused(capsys, here, ["plan", job, "--history", log], f"{log}: {field}: ", message)


def test_a_binary_history(here, capsys):
    job, _ = plan_inputs(here)
    log = write(here, "binary.jsonl", b"\x89PNG\r\n\x1a\n" + bytes(range(256)))

    refused(capsys, here, ["plan", job, "--history", log], f"{log}: (line 1): not UTF-8 text")


def test_a_history_that_is_a_folder(here, capsys):
    job, _ = plan_inputs(here)
    (here / "logs").mkdir()

    refused(capsys, here, ["plan", job, "--history", here / "logs"], f"{here / 'logs'}: (file): Is a directory")


def test_a_missing_history(here, capsys):
    job, _ = plan_inputs(here)

    refused(capsys, here, ["plan", job, "--history", here / "nowhere.jsonl"],
            f"{here / 'nowhere.jsonl'}: (file): No such file")


def test_a_history_without_epochs_of_the_job(here, capsys):
    job, _ = plan_inputs(here)
    log = write(here, "other.jsonl", json.dumps(epoch_record(job="other")) + "\n")

    refused(capsys, here, ["plan", job, "--history", log], f"{log}: (file): no calibration or training epochs")


def test_a_history_line_that_is_not_json(here, capsys):
    job, log = plan_inputs(here)
    with open(log, "a") as handle:
        handle.write("{not json\n")

    refused(capsys, here, ["plan", job, "--history", log], f"{log}: (line 7): not JSON")


# --------------------------------------------------------------------------- run folders for compare and report


def finished_run(folder: Path) -> Path:
    """A finished run as compare and report read it: summary.json and one job's log."""
    write(folder, "summary.json", json.dumps({
        "run_id": folder.name, "started": "2026-01-01T00:00:00+00:00", "makespan_s": 3.0,
        "jobs": {"tiny": {"submitted": "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T00:00:03+00:00",
                          "jct_s": 3.0, "stop_reason": "max_epochs", "budget": 0.25}}}))
    write(folder, "tiny.jsonl", json.dumps(epoch_record()) + "\n")
    return folder


# (id, change to the run folder, the text the line must start with (after the run folder), a part of the message)
BAD_FINISHED_RUNS = [
    ("jct-a-word", lambda run: edit_json(run / "summary.json", lambda d: d["jobs"]["tiny"].update(jct_s="fast")),
     "summary.json: jobs.tiny.jct_s", "expected a number"),
    ("started-not-a-time", lambda run: edit_json(run / "summary.json", lambda d: d.update(started="yesterday")),
     "summary.json: started", "ISO-8601"),
    ("job-name-escapes", lambda run: edit_json(run / "summary.json", lambda d: d["jobs"].update({"../x": {}})),
     "summary.json: jobs", "not a job name"),
    ("summary-not-json", lambda run: write(run, "summary.json", "{"), "summary.json", "not JSON"),
    ("log-binary-line", lambda run: write(run, "tiny.jsonl", b"\xff\xfe\n"), "tiny.jsonl: (line 1)",
     "not UTF-8 text"),
    ("log-loss-a-word", lambda run: write(run, "tiny.jsonl", json.dumps(epoch_record(loss="low")) + "\n"),
     "tiny.jsonl: (line 1): loss", "expected a number"),
    ("log-missing", lambda run: (run / "tiny.jsonl").unlink(), "tiny.jsonl: (file)",
     "not found (summary.json lists job tiny, its log is missing)"),
    ("jct-1e160", lambda run: edit_json(run / "summary.json", lambda d: d["jobs"]["tiny"].update(jct_s=1e160)),
     "summary.json: jobs.tiny.jct_s", "must be <= 1e+12"),
    ("makespan-1e300", lambda run: edit_json(run / "summary.json", lambda d: d.update(makespan_s=1e300)),
     "summary.json: makespan_s", "must be <= 1e+12"),
    ("total-cost-1e200", lambda run: edit_json(run / "summary.json",
                                               lambda d: d["jobs"]["tiny"].update(total_cost=1e200)),
     "summary.json: jobs.tiny.total_cost", "must be <= 1e+12"),
    ("log-cumulative-cost-1e308", lambda run: write(run, "tiny.jsonl",
                                                    json.dumps(epoch_record(cumulative_cost=1e308)) + "\n"),
     "tiny.jsonl: (line 1): cumulative_cost", "must be <= 1e+12"),
    ("log-workers-10-to-the-400", lambda run: write(run, "tiny.jsonl",
                                                    json.dumps(epoch_record(workers=10**400)) + "\n"),
     "tiny.jsonl: (line 1): workers", "must be <= 1000000000000"),
]


@pytest.mark.parametrize("command", ["compare", "report"])
@pytest.mark.parametrize(("change", "where", "message"), [case[1:] for case in BAD_FINISHED_RUNS],
                         ids=[case[0] for case in BAD_FINISHED_RUNS])
def test_a_bad_run_folder_refuses_compare_and_report(here, capsys, command, change, where, message):
    run = finished_run(here / "run")
    change(run)

    argv = ["compare", run, run, "--out", here / "out"] if command == "compare" else ["report", run]
    line = refused(capsys, here, argv, message)
    assert where in line and str(run) in line


def test_an_experiment_manifest_with_cells_of_the_wrong_type(here, capsys):
    write(here, "exp/manifest.json", json.dumps({"cells": {"a": 1}}))

    refused(capsys, here, ["compare", here / "exp", here / "exp", "--out", here / "out"],
            f"{here / 'exp'}: manifest.json: cells: expected a list")


def test_an_experiment_manifest_whose_run_folder_is_not_a_path(here, capsys):
    write(here, "exp/manifest.json", json.dumps({"cells": [{"cell": "c", "runs": [{"run_dir": 7}]}]}))

    refused(capsys, here, ["compare", here / "exp", here / "exp", "--out", here / "out"],
            f"{here / 'exp'}: manifest.json: cells[0].runs[0].run_dir: expected a path")


# --------------------------------------------------------------------------- command lines


def test_a_path_too_long_for_the_system_is_one_short_line(here, capsys):
    line = refused(capsys, here, ["validate", "a" * 5000], "(file): File name too long")
    assert len(line) < 300


@pytest.fixture
def inputs(here: Path) -> dict[str, Path]:
    """Valid files for the command lines below, so that only the malformed argument is wrong."""
    job, log = plan_inputs(here)
    run_dir = here / "run"
    write(run_dir, "summary.json", json.dumps({"started": "2026-01-01T00:00:00+00:00", "jobs": {}}))
    return {"job": job, "log": log, "run": run_dir, "file": write(here, "a-file", "x"),
            "matrix": write(here, "matrix.yaml", matrix_yaml())}


# (id, argv with {job}, {log}, {run}, {file}, {matrix} filled in, the option (or text) the line must name)
BAD_COMMAND_LINES = [
    ("run-placement-timeout-nan", ["run", "{job}", "--placement-timeout", "nan"], "argument --placement-timeout",
     "finite"),
    ("run-placement-timeout-inf", ["run", "{job}", "--placement-timeout", "inf"], "argument --placement-timeout",
     "finite"),
    ("run-placement-timeout-zero", ["run", "{job}", "--placement-timeout", "0"], "argument --placement-timeout",
     "must be > 0"),
    ("run-placement-timeout-negative", ["run", "{job}", "--placement-timeout=-1"], "argument --placement-timeout",
     "must be > 0"),
    ("run-placement-timeout-a-year", ["run", "{job}", "--placement-timeout", "31536000"],
     "argument --placement-timeout", "must be <= 604800"),
    ("run-placement-timeout-a-word", ["run", "{job}", "--placement-timeout", "soon"], "argument --placement-timeout",
     "expected a number"),
    ("run-scheduler-unknown", ["run", "{job}", "--scheduler", "kube"], "argument --scheduler", "invalid choice"),
    ("run-policy-unknown", ["run", "{job}", "--policy", "greedy"], "argument --policy", "invalid choice"),
    ("run-results-is-a-file", ["run", "{job}", "--results", "{file}"], "--results", "not a folder"),
    ("run-quiet-and-plain", ["run", "{job}", "--quiet", "--plain"], "argument --plain", "not allowed with"),
    ("run-unknown-option", ["run", "{job}", "--workers", "3"], "unrecognized arguments", "--workers"),
    ("run-no-files", ["run"], "coach run", "give job files"),
    ("run-resume-with-files", ["run", "{job}", "--resume", "{run}"], "--resume", "give the run folder only"),
    ("plan-budget-left-nan", ["plan", "{job}", "--history", "{log}", "--budget-left", "nan"],
     "argument --budget-left", "finite"),
    ("plan-budget-left-inf", ["plan", "{job}", "--history", "{log}", "--budget-left", "inf"],
     "argument --budget-left", "finite"),
    ("plan-budget-left-negative", ["plan", "{job}", "--history", "{log}", "--budget-left=-1"],
     "argument --budget-left", "must be >= 0"),
    ("plan-budget-left-1e300", ["plan", "{job}", "--history", "{log}", "--budget-left", "1e300"],
     "argument --budget-left", "must be <= 1e+12"),
    ("plan-free-slots-negative", ["plan", "{job}", "--history", "{log}", "--free-slots=-1"],
     "argument --free-slots", "must be >= 0"),
    ("plan-free-slots-a-float", ["plan", "{job}", "--history", "{log}", "--free-slots", "1e3"],
     "argument --free-slots", "expected an integer"),
    ("plan-free-slots-huge", ["plan", "{job}", "--history", "{log}", "--free-slots", "9" * 30],
     "argument --free-slots", "must be <="),
    ("plan-without-history", ["plan", "{job}"], "--history", "required"),
    ("bench-nodes-zero", ["bench", "scheduler", "--nodes", "0"], "argument --nodes", "must be >= 1"),
    ("bench-nodes-1e6", ["bench", "scheduler", "--nodes", "1e6"], "argument --nodes", "expected an integer"),
    ("bench-nodes-above-1e5", ["bench", "scheduler", "--nodes", "100001"], "argument --nodes", "must be <= 100000"),
    ("bench-pods-negative", ["bench", "scheduler", "--pods=-5"], "argument --pods", "must be >= 1"),
    ("bench-pods-nan", ["bench", "scheduler", "--pods", "nan"], "argument --pods", "expected an integer"),
    ("bench-pods-above-1e6", ["bench", "scheduler", "--pods", "1000001"], "argument --pods", "must be <= 1000000"),
    ("bench-slots-per-node-zero", ["bench", "scheduler", "--slots-per-node", "0"], "argument --slots-per-node",
     "must be >= 1"),
    ("bench-slots-per-node-huge", ["bench", "scheduler", "--slots-per-node", "1000000"],
     "argument --slots-per-node", "must be <= 100000"),
    ("bench-seed-negative", ["bench", "scheduler", "--seed=-1"], "argument --seed", "must be >= 0"),
    ("bench-seed-2-to-the-32", ["bench", "scheduler", "--seed", str(2**32)], "argument --seed", "must be <="),
    ("bench-scheduler-unknown", ["bench", "scheduler", "--scheduler", "kube"], "argument --scheduler",
     "invalid choice"),
    ("bench-without-what", ["bench"], "coach bench", "required"),
    ("bench-kube-nodes-above-5e3", ["bench", "kube-scheduler", "--kubeconfig", "k", "--nodes", "5001"],
     "argument --nodes", "must be <= 5000"),
    ("bench-kube-pods-above-1e4", ["bench", "kube-scheduler", "--kubeconfig", "k", "--pods", "10001"],
     "argument --pods", "must be <= 10000"),
    ("experiment-repeat-zero", ["experiment", "{matrix}", "--repeat", "0"], "argument --repeat", "must be >= 1"),
    ("experiment-repeat-101", ["experiment", "{matrix}", "--repeat", "101"], "argument --repeat", "must be <= 100"),
    ("experiment-repeat-nan", ["experiment", "{matrix}", "--repeat", "nan"], "argument --repeat",
     "expected an integer"),
    ("experiment-results-is-a-file", ["experiment", "{matrix}", "--results", "{file}"], "--results", "not a folder"),
    ("experiment-without-matrix", ["experiment"], "coach experiment", "MATRIX"),
    ("compare-test-unknown", ["compare", "{run}", "{run}", "--test", "ttest"], "argument --test", "invalid choice"),
    ("compare-missing-b", ["compare", "{run}"], "coach compare", "B"),
    ("compare-a-nowhere", ["compare", "nowhere", "{run}"], "nowhere: (argument)", "no such folder"),
    ("compare-out-is-a-file", ["compare", "{run}", "{run}", "--out", "{file}"], "--out", "not a folder"),
    ("report-not-a-run", ["report", "{file}"], "(argument)", "not a run folder"),
    ("report-out-is-a-file", ["report", "{run}", "--out", "{file}"], "--out", "not a folder"),
    ("validate-no-files", ["validate"], "coach validate", "FILE"),
    ("no-command", [], "coach: error", "COMMAND"),
    ("unknown-command", ["train"], "coach: error", "invalid choice: 'train'"),
    ("unknown-top-level-option", ["--verbose", "validate", "{job}"], "coach: error", "--verbose"),
]


@pytest.mark.parametrize(("argv", "option", "message"), [case[1:] for case in BAD_COMMAND_LINES],
                         ids=[case[0] for case in BAD_COMMAND_LINES])
def test_a_malformed_command_line_is_one_line_naming_the_option(here, capsys, inputs, argv, option, message):
    argv = [arg.format(**inputs) for arg in argv]

    refused(capsys, here, argv, option, message)


def test_enough_bad_input_cases_are_covered():
    cases = (BAD_JOB_FILES, BAD_MODELS, BAD_CLUSTERS, BAD_MATRICES, BAD_MANIFESTS, BAD_LOGS, BAD_HISTORIES,
             BAD_FINISHED_RUNS, BAD_COMMAND_LINES)
    assert sum(len(table) for table in cases) >= 120


# --------------------------------------------------------------------------- a real process: no traceback on stderr


def coach_process(folder: Path, *argv) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "coach.ui.cli", *map(str, argv)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("case", ["alias-bomb", "binary-history", "nan-option"])
def test_a_real_process_prints_one_line_and_no_traceback(here, case):
    if case == "alias-bomb":
        job = write(here, "job.yaml", job_yaml() + "optimizer_params:\n" + ALIAS_BOMB)
        argv, expected = ["validate", job], f"{job}: (file): {TOO_MANY_VALUES}"
    elif case == "binary-history":
        job, _ = plan_inputs(here)
        log = write(here, "binary.jsonl", b"\x00\xff" * 100)
        argv, expected = ["plan", job, "--history", log], f"{log}: (line 1): not UTF-8 text"
    else:
        job = write(here, "job.yaml", job_yaml())
        argv, expected = ["run", job, "--placement-timeout", "nan"], "argument --placement-timeout"
    before = snapshot(here)

    done = coach_process(here, *argv)

    assert done.returncode == 2
    assert "Traceback" not in done.stderr + done.stdout
    assert len(done.stderr.splitlines()) == 1 and expected in done.stderr
    assert snapshot(here) == before
