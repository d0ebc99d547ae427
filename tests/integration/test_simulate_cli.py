"""`coach simulate` end to end on the Pollux artifact's data: results format, reproducibility, compare and report,
and one-line errors for bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support import needs, pollux_data
from coach.ui.cli import main

DATA = pollux_data()
HALF_LOAD = DATA / "workloads-0.5" / "workload-1.csv"  # 80 jobs
pytestmark = needs(DATA)


def simulate(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["simulate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_simulated_run_writes_the_results_format_of_coach_run_with_its_plots(tmp_path, capsys):
    code, out, _ = simulate(capsys, str(HALF_LOAD), "--policy", "tiresias", "--results", str(tmp_path), "--quiet")
    assert code == 0
    run_dir = Path(out.strip())
    assert run_dir == tmp_path / "sim-workload-1-tiresias-gang-pack-s0"  # replicas packed by default
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["policy"], summary["scheduler"], summary["gpus"]) == ("tiresias", "gang-pack", 64)
    assert len(summary["jobs"]) == 80 and summary["stats"]["completed"] == 80
    jcts = [job["jct_s"] for job in summary["jobs"].values()]
    assert all(jct > 0 for jct in jcts)
    assert summary["stats"]["avg_jct_s"] == pytest.approx(sum(jcts) / len(jcts), abs=1e-3)
    assert summary["makespan_s"] >= max(jcts)
    assert 0 < summary["stats"]["utilization"] <= 1
    stats = summary["stats"]  # restart delays are not training: reported apart
    assert stats["restart_gpu_hours"] == pytest.approx(sum(j["restart_gpu_s"] for j in summary["jobs"].values()) / 3600,
                                                       abs=0.01)
    assert stats["restarts_per_job"] == pytest.approx(stats["restarts"] / 80, abs=1e-3)
    logs = sorted(run_dir.glob("*.jsonl"))
    assert len(logs) == 80
    lines = [json.loads(line) for line in logs[0].read_text().splitlines()]
    assert [line["phase"] for line in lines[:-1]] == ["simulated"] * (len(lines) - 1)
    assert lines[-1]["phase"] == "stopped" and lines[-1]["stop_reason"] == "completed"
    assert all(sum(line["placement"].values()) == line["workers"] for line in lines[:-1])
    assert lines[-1]["cumulative_cost"] == pytest.approx(sum(line["cost"] for line in lines[:-1]), abs=1e-5)
    for png in ("utilization.png", "jct_cdf.png"):
        assert (run_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_same_command_twice_writes_byte_identical_summaries_and_never_overwrites(tmp_path, capsys):
    args = [str(HALF_LOAD), "--policy", "pollux", "--seed", "3", "--results", str(tmp_path), "--quiet"]
    first = Path(simulate(capsys, *args)[1].strip())
    second = Path(simulate(capsys, *args)[1].strip())
    assert second == first.parent / f"{first.name}-2"  # the first run's folder is left as it was
    assert (first / "summary.json").read_bytes() == (second / "summary.json").read_bytes()
    for log in first.glob("*.jsonl"):
        assert log.read_bytes() == (second / log.name).read_bytes()


def test_gang_and_default_placement_compare_with_coach_compare_and_report(tmp_path, capsys):
    runs = {}
    for profile in ("gang", "default"):
        code, out, _ = simulate(capsys, str(HALF_LOAD), "--policy", "fifo", "--scheduler", profile,
                                "--results", str(tmp_path), "--quiet")
        assert code == 0
        runs[profile] = Path(out.strip())
    gang, default = (json.loads((runs[p] / "summary.json").read_text()) for p in ("gang", "default"))
    assert gang["stats"]["completed"] == default["stats"]["completed"] == 80
    assert gang["stats"]["deadlocked_jobs"] == 0  # head of line: gang never deadlocks
    assert main(["compare", str(runs["gang"]), str(runs["default"]), "--out", str(tmp_path / "cmp")]) == 0
    compared = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert len(compared["a"]["samples"]) == len(compared["b"]["samples"]) == 80
    assert compared["test"]["p_value"] is not None
    assert main(["report", str(runs["gang"]), "--out", str(tmp_path / "report")]) == 0
    assert sorted(p.name for p in (tmp_path / "report").glob("*.png")) == ["allocation.png", "cost.png", "loss.png"]


def test_a_summary_line_tells_jobs_per_second_and_the_statistics(tmp_path, capsys):
    code, out, _ = simulate(capsys, str(HALF_LOAD), "--policy", "drf", "--results", str(tmp_path))
    assert code == 0
    assert "80 jobs, policy drf, scheduler gang-pack, cluster 16x4 (64 GPUs): 80 completed in" in out
    assert "jobs/s" in out and "events/s" in out and "avg JCT" in out and "p99" in out
    assert out.strip().splitlines()[-1] == f"results: {tmp_path / 'sim-workload-1-drf-gang-pack-s0'}"


def test_a_malformed_workload_is_one_line_naming_file_line_and_column(tmp_path, capsys):
    bad = tmp_path / "workloads" / "bad.csv"
    bad.parent.mkdir()
    good = HALF_LOAD.read_text().splitlines()
    fields = good[3].split(",")
    fields[3] = "three"
    bad.write_text("\n".join(good[:3] + [",".join(fields)] + good[4:]) + "\n")
    code, out, err = simulate(capsys, str(bad), "--policy", "fifo", "--traces", str(DATA / "traces"),
                              "--results", str(tmp_path / "results"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"{bad}:4:4: ")
    assert "num_replicas" in err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("args, expected", [
    (["--cluster", "0x4"], "--cluster: 0x4: expected NODESxGPUS"),
    (["--cluster", "16x4", "--interval", "0"], "argument --interval"),
    (["--policy", "nope"], "argument --policy: unknown policy 'nope'; known: fifo,"),
    (["--policy", "tiresias,nope"], "argument --policy: unknown policy 'nope'"),
    (["--policy", "drf,drf"], "argument --policy: a policy named twice"),
    (["--restart-s", "-1"], "argument --restart-s"),
    (["--seed", "-1"], "argument --seed"),
    (["--budget-factor", "nan"], "argument --budget-factor"),
    (["--traces", ""], "argument --traces: expected a path, got an empty one"),
    (["--cluster", ""], "argument --cluster: expected a path, got an empty one"),
    (["--traces", "t" * 256], "argument --traces: a name of 256 bytes in"),
    (["--traces", "t/" * 2100], "argument --traces: a path of 4200 bytes, longer than 4096 (the limit)"),
])
def test_bad_options_are_one_line_and_exit_code_2(tmp_path, capsys, args, expected):
    argv = [str(HALF_LOAD), "--results", str(tmp_path)] + (args if "--policy" in args else ["--policy", "fifo", *args])
    code, out, err = simulate(capsys, *argv)
    assert code == 2 and out == ""
    assert expected in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, expected", [
    (["", "--results", "out"], "argument WORKLOAD: expected a path, got an empty one"),
    ([str(HALF_LOAD), "--results", ""], "argument --results: expected a path, got an empty one"),
    ([str(HALF_LOAD), "--results", "r" * 300], "argument --results: a name of 300 bytes in"),
])
def test_an_empty_or_overlong_path_is_refused_naming_its_argument(tmp_path, capsys, monkeypatch, argv, expected):
    """An empty --results would write into the current folder, and a name past the file system's limit would fail
    only after the simulation, naming a file instead of the option."""
    monkeypatch.chdir(tmp_path)
    code, out, err = simulate(capsys, *argv, "--policy", "fifo")
    assert code == 2 and out == ""
    assert expected in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_workload_without_traces_beside_it_says_where_they_were_looked_for(tmp_path, capsys):
    alone = tmp_path / "here" / "workload.csv"
    alone.parent.mkdir()
    shutil.copy(HALF_LOAD, alone)
    code, _, err = simulate(capsys, str(alone), "--policy", "fifo", "--results", str(tmp_path / "r"))
    assert code == 2
    assert err.strip() == (f"{tmp_path / 'traces'}: (traces): no application traces here (expected "
                           f"<app>/placements.csv); give the folder with --traces")


def test_a_budget_factor_caps_every_jobs_spending(tmp_path, capsys):
    code, out, _ = simulate(capsys, str(HALF_LOAD), "--policy", "coach", "--budget-factor", "1.5",
                            "--results", str(tmp_path), "--quiet")
    assert code == 0
    summary = json.loads((Path(out.strip()) / "summary.json").read_text())
    for job in summary["jobs"].values():
        assert job["total_cost"] <= job["budget"] + 1e-6
    assert summary["stats"]["completed"] > 0


def test_simulate_imports_no_mxnet_even_for_the_learned_policy(tmp_path):
    """dl2 reads its model file without MXNet (coach.dl2.params_file): its start-up costs what any policy's does."""
    import subprocess
    import sys

    code = ("import sys; from coach.ui.cli import main; "
            f"assert main(['simulate', {str(HALF_LOAD)!r}, '--policy', 'tiresias,pollux,dl2', '--results', "
            f"{str(tmp_path)!r}, '--quiet']) == 0; "
            "print('mxnet' in sys.modules, 'matplotlib' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "False True"  # no MXNet; matplotlib for the plots, at the end


def test_several_policies_in_one_command_write_every_run_and_one_paired_comparison(tmp_path, capsys):
    code, out, _ = simulate(capsys, str(HALF_LOAD), "--policy", "tiresias,drf", "--results", str(tmp_path),
                            "--restart-s", "10", "--interval", "120")
    assert code == 0
    sweep = Path(out.strip().splitlines()[-1])
    assert sweep == tmp_path / "sweep-workload-1-tiresias-drf-gang-pack-s0"
    assert {p.name for p in sweep.iterdir()} == {"comparison.json", "comparison.md", "jct_cdf.png", "utilization.png"}
    data = json.loads((sweep / "comparison.json").read_text())
    assert [row["policy"] for row in data["runs"]] == ["tiresias", "drf"]
    assert (data["restart_s"], data["interval_s"]) == (10.0, 120.0)
    for row in data["runs"]:
        run = json.loads((tmp_path / f"sim-workload-1-{row['policy']}-gang-pack-s0" / "summary.json").read_text())
        assert (run["restart_s"], run["interval_s"]) == (10.0, 120.0)
        assert row["avg_jct_s"] == run["stats"]["avg_jct_s"]
        assert 0 < row["jain_slowdown"] <= 1 and row["max_slowdown"] >= row["avg_slowdown"] >= 0.99
    (pair,) = data["paired"]
    assert (pair["a"], pair["b"], pair["pairs"]) == ("tiresias", "drf", 80)
    assert pair["verdict"] in ("B faster", "B slower", "no detectable difference") and pair["detectable_s"] > 0
    assert "| tiresias |" in out and "Paired over jobs" in out
    # the same command writes the same comparison
    again_dir = tmp_path / "again"
    assert simulate(capsys, str(HALF_LOAD), "--policy", "tiresias,drf", "--results", str(again_dir),
                    "--restart-s", "10", "--interval", "120")[0] == 0
    assert (again_dir / sweep.name / "comparison.json").read_bytes() == (sweep / "comparison.json").read_bytes()



def _tiny_workload(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("name,time,application,num_replicas,batch_size\njob0,0,cifar10,1,128\njob1,60,cifar10,2,256\n")
    return path


@pytest.mark.parametrize("second", ["bad", "missing", "same name"])
def test_a_sweep_checks_every_workload_and_policy_before_it_runs_any(tmp_path, capsys, second):
    """A bad second workload (or a missing one, or one named as the first, whose runs' labels would collide) is one
    line and exit 2 before the first run: nothing is written."""
    first = _tiny_workload(tmp_path / "a" / "w.csv")
    other = {"bad": tmp_path / "b" / "bad.csv", "missing": tmp_path / "missing.csv",
             "same name": _tiny_workload(tmp_path / "b" / "w.csv")}[second]
    if second == "bad":
        _tiny_workload(other).write_text("name,time,application,num_replicas,batch_size\njob0,-1,cifar10,1,128\n")
    out_dir = tmp_path / "out"
    code, out, err = simulate(capsys, str(first), str(other), "--policy", "fifo,drf", "--results", str(out_dir),
                              "--traces", str(DATA / "traces"), "--quiet")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and str(other) in err, err
    assert not out_dir.exists()


def test_a_link_named_as_the_run_is_never_written_through(tmp_path, capsys):
    """A link by the run's name, even one pointing nowhere, is an earlier entry: the run takes the next name."""
    workload = _tiny_workload(tmp_path / "w.csv")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "sim-w-fifo-gang-pack-s0").symlink_to(tmp_path / "nowhere")
    code, out, _ = simulate(capsys, str(workload), "--policy", "fifo", "--results", str(out_dir),
                              "--traces", str(DATA / "traces"), "--quiet")
    assert code == 0 and Path(out.strip()) == out_dir / "sim-w-fifo-gang-pack-s0-2"
    assert (out_dir / "sim-w-fifo-gang-pack-s0").is_symlink() and not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("stem", ["€" * 80, "a\nb", "tab\there"], ids=["multibyte", "newline", "tab"])
def test_any_legal_workload_file_name_gives_a_run_folder_on_one_line(tmp_path, capsys, stem):
    """The run's folder takes at most 100 bytes of the workload's name (a 240-byte name of 3-byte characters is
    legal; the folder name must stay within 255 bytes), and control characters become `_`."""
    workload = _tiny_workload(tmp_path / f"{stem}.csv")
    code, out, err = simulate(capsys, str(workload), "--policy", "fifo", "--results", str(tmp_path / "out"),
                              "--traces", str(DATA / "traces"), "--quiet")
    assert code == 0, err
    (line,) = out.splitlines()
    run_dir = Path(line)
    assert run_dir.is_dir() and len(run_dir.name.encode()) <= 255
    assert run_dir.name.startswith("sim-" + stem.replace("\n", "_").replace("\t", "_")[:33])
