"""`coach experiment`: the matrix file, the experiment folder it writes, and a real tiny matrix end to end.

Most tests here are fast: matrix validation reads files only, and the layout tests run the experiment with a fake
runner that writes run folders in the real format. The last test trains for real (jobs/experiments/tiny.yaml:
a small MLP, 2 epochs, 4 runs, with one worker and one server per job) and compares its two scheduler groups.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

import matplotlib.image
import pytest
import yaml

from coach.ui.cli import main
from coach.experiments.matrix import MatrixFileError, cells, load_matrix, run_experiment
from coach.domain.records import JobOutcome, summary_dict

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "jobs" / "experiments" / "tiny.yaml"
MODEL = "def build_model():\n    return None\n\n\ndef load_data():\n    return None\n"
T0_S = 1_800_000_000.0

MATRIX = {
    "name": "demo",
    "models": {"m": "model.py"},
    "jobs": [1, 2],
    "allocation": ["static", "dynamic"],
    "schedulers": ["gang", "default"],
    "batch_size": 16,
    "optimizer": "sgd",
    "learning_rate": 0.1,
    "target_loss": 0.0,
    "max_epochs": 2,
    "budget": 1.0,
    "seed": 10,
}


def write_matrix(folder: Path, **changes) -> Path:
    (folder / "model.py").write_text(MODEL)
    data = {**MATRIX, **changes}
    data = {key: value for key, value in data.items() if value is not None}
    path = folder / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# --------------------------------------------------------------------------- the matrix file


def test_a_valid_matrix_has_one_cell_per_combination(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path))

    assert [c.cell_id for c in cells(matrix)] == [
        "m-j1-static-gang", "m-j1-static-default", "m-j1-dynamic-gang", "m-j1-dynamic-default",
        "m-j2-static-gang", "m-j2-static-default", "m-j2-dynamic-gang", "m-j2-dynamic-default"]
    assert (matrix.static_workers, matrix.static_servers, matrix.repeat) == (2, 2, 1)


def test_the_shipped_matrices_are_valid():
    assert len(cells(load_matrix(TINY))) == 4
    assert len(cells(load_matrix(REPO / "jobs" / "experiments" / "thesis-table1.yaml"))) == 24


@pytest.mark.parametrize("changes, message", [
    ({"schedulers": ["gang", "kube"]},
     "schedulers: unknown scheduler 'kube'; known: default, gang, gang-pack, gang-strict, gang-thesis"),
    ({"allocation": ["auto"]}, "allocation: unknown allocation 'auto'; known: static, dynamic"),
    ({"repeats": 2}, "repeats: unknown field (did you mean 'repeat'?)"),
    ({"workers": 2}, "workers: set by the matrix (models, allocation, static), not allowed in the template"),
    ({"models": {"m": "missing.py"}}, "models.m: file not found: {folder}/missing.py"),
    ({"models": {"m": {"model": "model.py", "learning_rate": -1}}}, "models.m.learning_rate: must be > 0, got -1.0"),
    ({"batch_size": "64"}, "batch_size: expected an integer, got str '64'"),
    ({"budget": None}, "budget: required field missing (give it at the top level or under models.m)"),
    ({"jobs": [1, 0]}, "jobs: expected integers >= 1, got 0"),
    ({"static": {"workers": 2, "server": 1}}, "static.server: unknown field (did you mean 'servers'?)"),
    ({"cluster": "nowhere.yaml"}, "cluster: file not found: {folder}/nowhere.yaml"),
    ({"jobs": None}, "jobs: required field missing"),
])
def test_bad_matrices_give_one_line_per_problem(tmp_path, changes, message):
    path = write_matrix(tmp_path, **changes)

    with pytest.raises(MatrixFileError) as error:
        load_matrix(path)

    assert error.value.lines == [f"{path}: {message.format(folder=tmp_path)}"]


def test_coach_experiment_refuses_a_bad_matrix_with_exit_2_and_writes_nothing(tmp_path, capsys):
    path = write_matrix(tmp_path, schedulers=["gnag"])

    assert main(["experiment", str(path), "--results", str(tmp_path / "results")]) == 2

    assert capsys.readouterr().err == (f"{path}: schedulers: unknown scheduler 'gnag'; known: default, gang, gang-pack, "
                                       "gang-strict, gang-thesis (did you mean 'gang'?)\n")
    assert not (tmp_path / "results").exists()
    assert main(["experiment", str(TINY), "--repeat", "0"]) == 2
    assert capsys.readouterr().err == "coach experiment: error: argument --repeat: must be >= 1, got 0\n"


def test_dry_run_lists_the_cells(tmp_path, capsys):
    path = write_matrix(tmp_path, allocation=["static"], schedulers=["gang"])

    assert main(["experiment", str(path), "--dry-run", "--repeat", "3", "--results", str(tmp_path / "r")]) == 0

    assert capsys.readouterr().out == (
        f"{path}: ok: 2 cells x 3 repeat(s) = 6 runs on thesis-3-nodes (12 slots)\n"
        "  m-j1-static-gang: 1 x m, static (2 workers, 2 servers), scheduler gang\n"
        "  m-j2-static-gang: 2 x m, static (2 workers, 2 servers), scheduler gang\n")
    assert not (tmp_path / "r").exists()


# --------------------------------------------------------------------------- the experiment folder (fake runs)


@dataclass(frozen=True)
class FakeReport:
    run_id: str
    run_dir: Path
    summary: dict
    exit_code: int


class FakeRunner:
    """Stands in for coach.app.run.run_jobs: writes summary.json in the real format; remembers every call."""

    def __init__(self, exit_codes=()):
        self.calls = []
        self.exit_codes = list(exit_codes)

    def __call__(self, specs, cluster, results_root, view, scheduler, placement_timeout_s):
        run_id = f"run{len(self.calls) + 1:02d}"
        self.calls.append((results_root.name, scheduler, [(s.name, s.seed, s.workers, s.servers) for s in specs]))
        run_dir = results_root / run_id
        run_dir.mkdir()
        outcomes = {s.name: JobOutcome(submitted_s=T0_S, finished_s=T0_S + 10.0 * (i + 1), stop_reason="max_epochs")
                    for i, s in enumerate(specs)}
        summary = summary_dict(run_id, T0_S, outcomes, {"scheduler": scheduler})
        (run_dir / "summary.json").write_text(json.dumps(summary))
        code = self.exit_codes.pop(0) if self.exit_codes else 0
        return FakeReport(run_id, run_dir, summary, code)


def test_experiment_folder_manifest_and_job_files(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path, allocation=["static", "dynamic"], schedulers=["gang"], jobs=[2]))
    runner = FakeRunner()
    said = []

    report = run_experiment(matrix, tmp_path / "results", repeat=2, say=said.append, runner=runner)

    # repetitions are interleaved: every cell once, then every cell again
    assert [(cell, scheduler) for cell, scheduler, _ in runner.calls] == [
        ("m-j2-static-gang", "gang"), ("m-j2-dynamic-gang", "gang")] * 2
    # job i is `<model>-i` with seed + i - 1; static jobs get (2, 2), dynamic ones no counts
    assert runner.calls[0][2] == [("m-1", 10, 2, 2), ("m-2", 11, 2, 2)]
    assert runner.calls[1][2] == [("m-1", 10, None, None), ("m-2", 11, None, None)]

    folder = report.experiment_dir
    assert folder.parent == tmp_path / "results" / "experiments" and folder.name.startswith("demo-")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest == report.manifest
    assert (manifest["exit_code"], manifest["interrupted"], manifest["repeat"]) == (0, False, 2)
    assert manifest["matrix"]["models"] == {"m": "model.py"}
    static = manifest["cells"][0]
    assert {k: static[k] for k in ("cell", "model", "jobs", "allocation", "scheduler", "workers", "servers")} == {
        "cell": "m-j2-static-gang", "model": "m", "jobs": 2, "allocation": "static", "scheduler": "gang",
        "workers": 2, "servers": 2}
    assert static["job_files"] == ["m-j2-static-gang/jobs/m-1.yaml", "m-j2-static-gang/jobs/m-2.yaml"]
    assert static["runs"] == [
        {"repetition": 1, "run_id": "run01", "run_dir": "m-j2-static-gang/run01", "exit_code": 0, "makespan_s": 20.0,
         "wall_s": static["runs"][0]["wall_s"]},
        {"repetition": 2, "run_id": "run03", "run_dir": "m-j2-static-gang/run03", "exit_code": 0, "makespan_s": 20.0,
         "wall_s": static["runs"][1]["wall_s"]}]
    assert (folder / "m-j2-static-gang" / "run01" / "summary.json").is_file()
    assert yaml.safe_load((folder / "m-j2-dynamic-gang" / "jobs" / "m-2.yaml").read_text())["seed"] == 11
    assert said[0] == f"experiment {folder.name}: 2 cells x 2 repeat(s) = 4 runs -> {folder}"
    assert said[1].endswith("[1/4] m-j2-static-gang (repeat 1/2): started")
    assert re.fullmatch(r"\d\d:\d\d:\d\d \[1/4\] m-j2-static-gang \(repeat 1/2\): exit 0 after \d+\.\d s, "
                        r"makespan 20\.0 s, mean JCT 15\.0 s \(2 max_epochs\)", said[2])


def test_a_failed_run_makes_exit_1_and_an_interrupted_one_stops_the_experiment(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path, allocation=["static"]))

    failed = run_experiment(matrix, tmp_path / "a", say=lambda line: None, runner=FakeRunner([0, 1]))
    runner = FakeRunner([0, 130])
    interrupted = run_experiment(matrix, tmp_path / "b", say=lambda line: None, runner=runner)

    assert failed.exit_code == 1 and sum(len(c["runs"]) for c in failed.manifest["cells"]) == 4
    assert interrupted.exit_code == 130 and len(runner.calls) == 2
    assert interrupted.manifest["interrupted"] is True
    assert [len(c["runs"]) for c in interrupted.manifest["cells"]] == [1, 1, 0, 0]


def test_an_unexpected_error_leaves_a_manifest_without_an_exit_code(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path, allocation=["static"], schedulers=["gang"], jobs=[1]))

    def broken(*args, **kwargs):
        raise RuntimeError("platform exploded")

    with pytest.raises(RuntimeError):
        run_experiment(matrix, tmp_path / "r", say=lambda line: None, runner=broken)

    manifest = json.loads(next((tmp_path / "r" / "experiments").glob("*/manifest.json")).read_text())
    assert (manifest["exit_code"], manifest["cells"][0]["runs"]) == (None, [])
    assert manifest["ended"] is not None


def test_an_interrupt_before_the_manifest_leaves_no_experiment_folder(tmp_path, monkeypatch):
    """Ctrl-C while the cells' job files are written: no half experiment folder (issue 37, 3b)."""
    from coach.experiments import matrix as matrices

    matrix = load_matrix(write_matrix(tmp_path, allocation=["static"]))
    written = []

    def interrupted_at_the_second_cell(matrix, cell, jobs_dir):
        if written:
            raise KeyboardInterrupt
        written.append(cell)
        return original(matrix, cell, jobs_dir)

    original = matrices._write_job_files
    monkeypatch.setattr(matrices, "_write_job_files", interrupted_at_the_second_cell)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(matrix, tmp_path / "r", say=lambda line: None, runner=FakeRunner([0]))

    assert len(written) == 1 and list((tmp_path / "r" / "experiments").iterdir()) == []


# --------------------------------------------------------------------------- for real


def test_tiny_matrix_end_to_end_then_compare_its_schedulers(tmp_path, capsys):
    # the shipped matrix with static (1, 1) instead of (2, 2): the same four runs, jobs and epochs on three function
    # hosts per job instead of five (a host's start, importing MXNet, costs ~3 s of CPU and dominates this test)
    matrix = replace(load_matrix(TINY), static_workers=1, static_servers=1)

    report = run_experiment(matrix, tmp_path / "results")

    said = capsys.readouterr().out.splitlines()
    assert report.exit_code == 0
    assert len(said) == 9 and all(": exit 0 after " in line for line in said[2::2])
    folder = report.experiment_dir
    manifest = json.loads((folder / "manifest.json").read_text())
    assert [(c["cell"], len(c["runs"]), c["runs"][0]["exit_code"]) for c in manifest["cells"]] == [
        ("mlp-j1-static-gang", 1, 0), ("mlp-j1-static-default", 1, 0),
        ("mlp-j2-static-gang", 1, 0), ("mlp-j2-static-default", 1, 0)]
    for cell in manifest["cells"]:
        run_dir = folder / cell["runs"][0]["run_dir"]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["scheduler"] == cell["scheduler"]
        assert {job: outcome["stop_reason"] for job, outcome in summary["jobs"].items()} == {
            f"mlp-{i}": "max_epochs" for i in range(1, cell["jobs"] + 1)}
        assert all((run_dir / f"{job}.jsonl").is_file() for job in summary["jobs"])

    out = tmp_path / "compare"
    assert main(["compare", f"{folder}:scheduler=gang", f"{folder}:scheduler=default", "--out", str(out)]) == 0

    data = json.loads((out / "compare.json").read_text())
    assert (data["a"]["runs"], data["b"]["runs"]) == (2, 2)
    assert (data["a"]["jct_s"]["count"], data["b"]["jct_s"]["count"]) == (3, 3)
    assert data["test"]["p_value"] is not None
    for name in ("jct_box.png", "epoch_time.png", "runtime_bars.png"):
        assert matplotlib.image.imread(out / name).shape == (500, 800, 4)
    print("\n".join(said), capsys.readouterr().out, sep="\n")  # what the experiment and compare printed, for -s


class JctRunner(FakeRunner):
    """FakeRunner whose runs give the JCTs of a list, one run after the other (job i of a run: its i-th value)."""

    def __init__(self, jcts_per_run):
        super().__init__()
        self.jcts = list(jcts_per_run)

    def __call__(self, specs, cluster, results_root, view, scheduler, placement_timeout_s):
        report = super().__call__(specs, cluster, results_root, view, scheduler, placement_timeout_s)
        jcts = self.jcts[(len(self.calls) - 1) % len(self.jcts)]
        for outcome, jct in zip(report.summary["jobs"].values(), jcts):
            outcome["jct_s"] = jct
        return report


def test_detect_runs_a_pilot_then_as_many_repeats_as_the_pilots_spread_needs(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path, allocation=["static"], schedulers=["gang"], jobs=[2]))
    # one cell; pilot JCTs 100, 110 then 90, 100: mean 100 s, sd 8.16 s; 10% of 100 s is d = 1.22, which a
    # two-sided t-test at alpha 0.05 detects with power 0.8 from 12 jobs a side (power 0.818; 11 give 0.780)
    runner = JctRunner([(100.0, 110.0), (90.0, 100.0)])
    said = []
    report = run_experiment(matrix, tmp_path / "r", repeat=2, say=said.append, runner=runner, detect=0.10)
    manifest = report.manifest
    assert manifest["repeat"] == 6 and manifest["detect"]["pilot"] == 2 and not manifest["detect"]["capped"]
    cell = manifest["detect"]["cells"]["m-j2-static-gang"]
    assert (cell["jobs_needed"], cell["runs_needed"]) == (12, 6)
    assert cell["mean_jct_s"] == pytest.approx(100.0) and cell["sd_jct_s"] == pytest.approx(8.165, abs=1e-3)
    assert len(runner.calls) == 6  # 6 repeats of the cell, the pilot's 2 included
    assert [len(entry["runs"]) for entry in manifest["cells"]] == [6]
    assert ("detect 10% (alpha 0.05, power 0.8): m-j2-static-gang has mean JCT 100.0 s, sd 8.2 s, so d = 1.22 "
            "needs 12 jobs a side; 6 repeat(s) of 1 cells") in said


def test_detect_is_capped_and_says_so(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path, allocation=["static"], schedulers=["gang"], jobs=[2]))
    # JCTs 10 s and 20 s in every run: sd 5.8 s against 1.5 s to detect, over 100 repeats would be needed
    report = run_experiment(matrix, tmp_path / "r", repeat=2, say=lambda line: None, runner=FakeRunner(),
                            detect=0.10, most_repeats=4)
    assert report.manifest["detect"]["capped"] and report.manifest["detect"]["wanted"] > 100
    assert report.manifest["repeat"] == 4
    assert all(len(entry["runs"]) == 4 for entry in report.manifest["cells"])


def test_detect_option_bounds_and_dry_run(tmp_path, capsys):
    path = write_matrix(tmp_path, allocation=["static"], schedulers=["gang"])
    assert main(["experiment", str(path), "--detect", "10%", "--dry-run", "--repeat", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"{path}: ok: 2 cells x 2 repeat(s) = 4 runs as a pilot, then up to 100 repeats to detect 10% on "
        "thesis-3-nodes (12 slots)")
    for bad in ("0%", "101", "nan%", "ten"):
        assert main(["experiment", str(path), "--detect", bad, "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("coach experiment: error: argument --detect: ") and err.count("\n") == 1
