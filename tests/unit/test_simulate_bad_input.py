"""`coach simulate` on bad input: one line naming the file and field, exit code 2, no traceback, no hang, and
nothing written (earlier results intact). Every case runs on copies in tmp_path."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support import pollux_data, require
from coach.ui.cli import main

DATA = pollux_data()
POLLUX = "name,time,application,num_replicas,batch_size\n"
PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n"


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    """One writable copy of the published traces, shared by the workload cases (apps are fitted once)."""
    folder = tmp_path_factory.mktemp("data") / "traces"
    shutil.copytree(require(DATA / "traces"), folder, ignore=shutil.ignore_patterns("philly.csv"))
    for path in folder.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def simulate(capsys, workload: Path, traces: Path, results: Path, *extra: str) -> tuple[int, str, str]:
    code = main(["simulate", str(workload), "--policy", "fifo", "--traces", str(traces), "--results", str(results),
                 "--quiet", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, workload: Path, traces: Path, tmp_path: Path, *extra: str) -> str:
    """The one error line of a refused run, after checking that nothing was written."""
    results = tmp_path / "results"
    code, out, err = simulate(capsys, workload, traces, results, *extra)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not results.exists()
    return err.strip()


def write(tmp_path: Path, text: str | bytes, name: str = "w.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


WORKLOAD_CASES = [
    ("header only", POLLUX, "2:1: no jobs after the header line"),
    ("philly header only", PHILLY, "2:1: no jobs after the header line"),
    ("huge time", POLLUX + "a,1e308,ncf,1,256\n", "2:2: time must be <= 1e+10, got '1e308'"),
    ("arrival 1e12", POLLUX + "a,0,ncf,1,256\nb,1e12,ncf,1,256\n", "3:2: time must be <= 1e+10, got '1e12'"),
    ("huge replicas", POLLUX + "a,0,ncf,1e308,1e308\n", "2:4: num_replicas must be <= 1e+06, got '1e308'"),
    ("huge batch", POLLUX + "a,0,ncf,1,1e18\n", "2:5: batch_size must be <= 1e+09, got '1e18'"),
    ("name with a path", POLLUX + "../../evil,0,ncf,1,256\n", "2:1: name must be 1-128 letters"),
    ("name with a NUL", POLLUX + "a\x00b,0,ncf,1,256\n", "2:1: name must be 1-128 letters"),
    ("name too long", POLLUX + "x" * 300 + ",0,ncf,1,256\n", "2:1: name must be 1-128 letters"),
    ("philly huge duration", PHILLY + "2017-10-09 07:01:55,1e308,1,66,c\n",
     "2:2: duration must be <= 1e+07, got '1e308'"),
    ("philly 1e300 gpus", PHILLY + "2017-10-09 07:01:55,66,1e300,66,c\n", "2:3: num_gpus must be <= 1e+06, got '1e300'"),
    ("philly timestamps 8000 years apart", PHILLY + "0001-01-01 00:00:00,66,1,66,c\n9999-12-31 23:59:59,66,1,66,c\n",
     "3:1: timestamp is 3.16e+11 s after the earliest one, at most 1e+10 s: '9999-12-31 23:59:59'"),
]


@pytest.mark.parametrize(("case", "content", "message"), WORKLOAD_CASES, ids=[c[0] for c in WORKLOAD_CASES])
def test_a_bad_workload_field_is_one_line_naming_file_line_and_column(tmp_path, capsys, traces, case, content,
                                                                      message):
    path = write(tmp_path, content)
    assert refused(capsys, path, traces, tmp_path).startswith(f"{path}:{message}")
    assert not (tmp_path.parent / "evil.jsonl").exists()


def test_a_fifo_and_a_sparse_2gb_file_are_refused_without_reading_them(tmp_path, capsys, traces):
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    assert refused(capsys, fifo, traces, tmp_path) == f"{fifo}:0:0: not a regular file (a FIFO)"
    sparse = tmp_path / "sparse.csv"
    with open(sparse, "wb") as handle:
        handle.truncate(2 << 30)
    assert refused(capsys, sparse, traces, tmp_path) == f"{sparse}:0:0: file is larger than 67108864 bytes (the limit)"


def test_a_job_larger_than_the_cluster_ends_unschedulable_and_a_far_arrival_is_jumped_to(tmp_path, capsys, traces):
    path = write(tmp_path, POLLUX + "big,0,cifar10,9,1152\nlate,1e10,ncf,1,256\n")
    # one-second rounds up to 1e10 s would never end (the suite's timeout would say so): the idle time is jumped
    code, out, err = simulate(capsys, path, traces, tmp_path / "r", "--cluster", "2x4", "--interval", "1")
    assert code == 0, err
    jobs = json.loads((Path(out.strip()) / "summary.json").read_text())["jobs"]
    assert jobs["big"]["stop_reason"] == "unschedulable: needs 9 GPUs, the cluster has 8"
    assert jobs["late"]["stop_reason"] == "completed"


def test_the_summary_says_how_many_jobs_could_not_be_placed_and_why(tmp_path, capsys, traces):
    """Exit 0 (the simulation did what it was asked; summary.json has each job's reason), but a line says so."""
    path = write(tmp_path, POLLUX + "big,0,cifar10,9,1152\nbigger,0,cifar10,10,1280\nsmall,0,ncf,1,256\n")
    code = main(["simulate", str(path), "--policy", "fifo", "--traces", str(traces), "--results", str(tmp_path / "r"),
                 "--cluster", "2x4"])
    out = capsys.readouterr().out
    assert code == 0
    assert "2 jobs could not be placed (unschedulable: needs 10 GPUs, the cluster has 8; ...)" in out


def fresh_traces(tmp_path: Path, traces: Path) -> Path:
    copy = tmp_path / "traces"
    shutil.copytree(traces, copy)
    return copy


TRACE_CASES = [
    ("bert/placements.csv", "22,4,1e300,0\n", "placements.csv:{n}:3: step_time must be within 0..86400: '1e300'"),
    ("bert/placements.csv", "22,4,0.1,5\n", "placements.csv:{n}:4: sync_time 5 is longer than step_time 0.1"),
    ("bert/placements.csv", "22,1e300,0.1,0.01\n", "placements.csv:{n}:2: local_bsz must be within 1..1e+06"),
    ("bert/scalability.csv", "1.5,4,4,0.1,0.01\n", "scalability.csv:{n}:1: num_nodes must be a whole number"),
    ("bert/scalability.csv", "4,2,4,0.1,0.01\n", "scalability.csv:{n}:2: fewer replicas (2) than nodes (4)"),
    ("bert/scalability.csv", "0,4,4,0.1,0.01\n", "scalability.csv:{n}:1: num_nodes must be within 1..1e+06"),
    ("cifar10/validation-256.csv", "0.5,2,3,4,5\n", "validation-256.csv:{n}:1: progress must be > 0 and grow"),
    ("cifar10/validation-256.csv", "1e300,2,3,4,5\n", "validation-256.csv:{n}:1: progress must be within 0..1e+08"),
    ("cifar10/validation-256.csv", "1e7,2,3,1e308,5\n", "validation-256.csv:{n}:4: grad_sqr must be within 0..1e+30"),
]


@pytest.mark.parametrize(("file", "row", "message"), TRACE_CASES, ids=[f"{c[0]}:{c[1].strip()}" for c in TRACE_CASES])
def test_a_bad_trace_row_is_one_line_naming_file_line_and_column(tmp_path, capsys, traces, file, row, message):
    copy = fresh_traces(tmp_path, traces)
    with open(copy / file, "a") as handle:
        handle.write(row)
    line = len((copy / file).read_text().splitlines())
    workload = write(tmp_path, POLLUX + "a,0,ncf,1,256\n")
    assert refused(capsys, workload, copy, tmp_path).startswith(f"{copy / file.split('/')[0]}/{message.format(n=line)}")


def test_trace_files_that_are_fifos_huge_duplicated_or_missing_are_refused(tmp_path, capsys, traces):
    copy = fresh_traces(tmp_path, traces)
    workload = write(tmp_path, POLLUX + "a,0,cifar10,1,128\n")
    os.mkfifo(copy / "cifar10" / "validation-64.csv")
    assert refused(capsys, workload, copy, tmp_path) == f"{copy}/cifar10/validation-64.csv:0:0: not a regular file (a FIFO)"
    (copy / "cifar10" / "validation-64.csv").unlink()
    shutil.copy(copy / "cifar10" / "validation-128.csv", copy / "cifar10" / "validation-0128.csv")
    assert refused(capsys, workload, copy, tmp_path).endswith("a second validation file for batch size 128")
    (copy / "cifar10" / "validation-0128.csv").unlink()
    (copy / "cifar10" / "validation-99999999999999999999.csv").write_text("")
    assert "batch size in the file name must be within 1..1000000000" in refused(capsys, workload, copy, tmp_path)
    (copy / "cifar10" / "validation-99999999999999999999.csv").unlink()
    with open(copy / "cifar10" / "scalability.csv", "r+b") as handle:
        handle.truncate(2 << 30)
    assert refused(capsys, workload, copy, tmp_path).endswith("scalability.csv:0:0: file is larger than 16777216 "
                                                              "bytes (the limit)")
    shutil.rmtree(copy / "cifar10")
    assert refused(capsys, workload, copy, tmp_path) == (f"{workload}: application: no traces for cifar10 (no "
                                                         f"<traces>/<app>/placements.csv)")


def test_a_cluster_file_over_a_million_gpus_is_refused(tmp_path, capsys, traces):
    cluster = write(tmp_path, "price_per_slot_s: 1\nnodes:\n" + "".join(
        f"  - {{name: n{i}, slots: 100000}}\n" for i in range(11)), "cluster.yaml")
    workload = write(tmp_path, POLLUX + "a,0,ncf,1,256\n")
    assert refused(capsys, workload, traces, tmp_path, "--cluster", str(cluster)) == (
        f"{cluster}: nodes: at most 1000000 GPUs (slots) in all, got 1100000")


def test_results_under_a_file_is_refused_before_simulating_and_earlier_results_stay(tmp_path, capsys, traces):
    workload = write(tmp_path, POLLUX + "a,0,ncf,1,256\n")
    code, _, err = simulate(capsys, workload, traces, workload / "sub")
    assert code == 2 and err.strip() == f"{workload / 'sub'}: (--results): {workload} is not a folder"
    results = tmp_path / "r"
    first = simulate(capsys, workload, traces, results)[1].strip()
    before = (Path(first) / "summary.json").read_bytes()
    second = simulate(capsys, workload, traces, results)[1].strip()
    assert second == first + "-2" and (Path(first) / "summary.json").read_bytes() == before
    assert sorted(p.name for p in results.iterdir()) == [Path(first).name, Path(second).name]  # no probe left
