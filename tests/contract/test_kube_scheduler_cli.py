"""`coach scheduler` and `coach bench kube-scheduler` on bad input, and a small benchmark run end to end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from coach.ui.cli import main
from tests.controlplane.cluster import free_port


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_missing_kubeconfig_is_bad_input(tmp_path, capsys):
    assert main(["scheduler", "--kubeconfig", str(tmp_path / "nope")]) == 2
    assert one_line(capsys.readouterr().err) == f"coach scheduler: --kubeconfig: {tmp_path / 'nope'}: no such file"


def test_a_kubeconfig_that_is_not_one_is_bad_input(tmp_path, capsys):
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [\n")
    assert main(["scheduler", "--kubeconfig", str(broken)]) == 2
    assert one_line(capsys.readouterr().err).startswith(
        f"coach scheduler: --kubeconfig: {broken}: not a usable kubeconfig")


def test_an_unknown_profile_is_bad_input(tmp_path, capsys):
    assert main(["scheduler", "--kubeconfig", str(tmp_path), "--profile", "fastest"]) == 2
    assert "argument --profile: invalid choice: 'fastest'" in one_line(capsys.readouterr().err)


def test_an_apiserver_nobody_answers_at_is_one_line_and_exit_1(control_plane, tmp_path, capsys):
    url = f"https://127.0.0.1:{free_port()}"  # nothing listens there
    config = control_plane.write_kubeconfig(tmp_path / "kubeconfig")
    config.write_text(config.read_text().replace(control_plane.url, url))
    assert main(["scheduler", "--kubeconfig", str(config), "--metrics-port", "0"]) == 1
    assert one_line(capsys.readouterr().err) == (
        f"coach scheduler: cannot reach the apiserver at {url}: [Errno 111] Connection refused")


def test_bench_refuses_more_pods_than_slots(tmp_path, capsys):
    assert main(["bench", "kube-scheduler", "--kubeconfig", str(tmp_path / "k"), "--nodes", "2", "--pods", "9",
                 "--slots-per-node", "4"]) == 2
    assert one_line(capsys.readouterr().err) == "--pods: 9 pods do not fit 2 nodes x 4 slots"


@pytest.mark.parametrize("binder", ["process", "threads"])
def test_bench_binds_every_pod_once_with_both_schedulers_and_says_how_fast(control_plane, podgroup_crd, tmp_path,
                                                                          capsys, binder):
    control_plane.start_kube_scheduler()
    config = control_plane.write_kubeconfig(tmp_path / "kubeconfig")
    assert main(["bench", "kube-scheduler", "--kubeconfig", str(config), "--nodes", "40", "--pods", "120",
                 "--binder", binder]) == 0
    captured = capsys.readouterr()
    result = json.loads(one_line(captured.out))
    assert [(run["scheduler"], run["pods_bound"]) for run in result["runs"]] == [("coach", 120), ("default", 120)]
    coach, default = result["runs"]
    assert coach["conflicts"] == 0 and default["conflicts"] is None
    assert coach["cpu_s"] > 0 and default["cpu_s"] is None
    assert all(run["pods_per_s"] > 0 and run["seconds"] >= run["create_seconds"] > 0 for run in result["runs"])
    assert result["ratio"] == round(coach["pods_per_s"] / default["pods_per_s"], 3)
    assert "coach: 120 of 120 pods bound" in captured.err
    with control_plane.client() as api:  # the bench leaves nothing behind
        from kubernetes import client

        assert [n.metadata.name for n in client.CoreV1Api(api).list_node(label_selector="coach.io/bench").items] == []


def test_bench_without_kube_scheduler_says_what_was_bound_and_exits_1(control_plane, podgroup_crd, tmp_path, capsys,
                                                                      monkeypatch):
    from coach.kube_scheduler import bench

    control_plane.stop_kube_scheduler()
    monkeypatch.setattr(bench, "STALL_S", 3.0)
    config = control_plane.write_kubeconfig(tmp_path / "kubeconfig")
    assert main(["bench", "kube-scheduler", "--kubeconfig", str(config), "--nodes", "2", "--pods", "4",
                 "--schedulers", "default"]) == 1
    captured = capsys.readouterr()
    assert json.loads(one_line(captured.out))["runs"][0]["pods_bound"] == 0
    assert "default: 0 of 4 pods bound" in captured.err


def test_the_command_line_offers_every_binder_of_the_registry():
    from coach.kube_scheduler.loop import BINDERS
    from coach.ui.cli import BINDER_CHOICES

    assert sorted(BINDER_CHOICES) == sorted(BINDERS)


@pytest.mark.parametrize("make, says", [
    (lambda tmp: tmp, "is a folder, not a file"),
    (lambda tmp: (os.mkfifo(tmp / "fifo"), tmp / "fifo")[1], "not a regular file (a FIFO, a socket or a device)"),
    (lambda tmp: Path("/dev/zero"), "not a regular file (a FIFO, a socket or a device)"),
    (lambda tmp: ((tmp / "big").write_bytes(b"#" * (2 << 20)), tmp / "big")[1],
     f"{2 << 20} bytes, more than a kubeconfig's {1 << 20} at most"),
])
def test_a_kubeconfig_that_is_no_regular_small_file_is_named_for_what_it_is(tmp_path, capsys, make, says):
    path = make(tmp_path)
    assert main(["scheduler", "--kubeconfig", str(path)]) == 2  # never read: a FIFO would block, /dev/zero never end
    assert one_line(capsys.readouterr().err) == f"coach scheduler: --kubeconfig: {path}: {says}"


def _bench_objects(core, kind: str) -> list:
    """The bench's nodes (labelled coach.io/bench), or the pods in its namespace (labelled so too)."""
    if kind == "nodes":
        return core.list_node(label_selector="coach.io/bench").items
    return [pod for ns in core.list_namespace(label_selector="coach.io/bench").items
            for pod in core.list_namespaced_pod(ns.metadata.name, limit=1).items]


@pytest.mark.parametrize("when", ["nodes", "pods"])  # while it creates its nodes; while its pods are scheduled
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_an_interrupted_bench_removes_what_it_made_and_exits_130(control_plane, podgroup_crd, tmp_path, sig, when):
    """The signal goes to the bench's whole process group (its `coach scheduler` and binder included), as a
    terminal's Ctrl-C does: what it made is removed, `coach: interrupted` ends its few progress lines, no
    traceback."""
    import signal
    import subprocess
    import sys
    import time

    from kubernetes import client

    config = control_plane.write_kubeconfig(tmp_path / "kubeconfig")
    bench = subprocess.Popen([sys.executable, "-m", "coach.ui.cli", "bench", "kube-scheduler", "--kubeconfig",
                              str(config), "--nodes", "300", "--pods", "1200", "--schedulers", "coach"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    with control_plane.client() as api:
        core = client.CoreV1Api(api)
        deadline = time.monotonic() + 60
        while not _bench_objects(core, when) and time.monotonic() < deadline and bench.poll() is None:
            time.sleep(0.1)
        assert bench.poll() is None, bench.communicate()
        os.killpg(bench.pid, getattr(signal, sig))
        try:
            out, err = bench.communicate(timeout=120)
        finally:
            if bench.poll() is None:
                os.killpg(bench.pid, signal.SIGKILL)
        assert bench.returncode == 130, err
        assert "Traceback" not in err and out == ""
        *progress, last = err.splitlines()  # stderr is the bench's progress channel: a few lines, not thousands
        assert last == "coach: interrupted", err
        assert progress[-1] == "coach bench kube-scheduler: its nodes, pods and namespace are removed", err
        assert len(progress) <= 5 and all(line.startswith("coach bench kube-scheduler: ") for line in progress), err
        assert core.list_node(label_selector="coach.io/bench").items == []
        assert [ns.metadata.name for ns in core.list_namespace(label_selector="coach.io/bench").items
                if ns.status.phase != "Terminating"] == []
