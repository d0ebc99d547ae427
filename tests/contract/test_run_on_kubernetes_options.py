"""`coach run --platform nuclio`: every wrong option is one line naming it and exit code 2, before anything runs.

The site is checked against live servers over loopback (the suite's real kube-apiserver, the dashboard's test
double, or a port where nothing listens), so "does not answer" is what a user would see, not a mock's idea of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coach.platforms.local import free_port
from coach.ui.cli import main
from tests.fakes.nuclio_dashboard import FakeDashboard

REPO = Path(__file__).resolve().parents[2]
LENET = REPO / "jobs" / "lenet-mnist.yaml"


@pytest.fixture
def apiserver(control_plane, kube_namespace, tmp_path):
    return control_plane, control_plane.write_kubeconfig(tmp_path / "kubeconfig", namespace=kube_namespace)


def run(capsys, *args) -> tuple[int, str]:
    code = main(["run", *map(str, args), "--quiet", "--results", "unused-results"])
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize("args, message", [
    (["--platform", "nuclio", "--kubeconfig", "k"], "--dashboard: required with --platform nuclio"),
    (["--platform", "nuclio", "--dashboard", "http://127.0.0.1:1"], "--kubeconfig: required with --platform nuclio"),
    (["--platform", "nuclio", "--dashboard", "http://127.0.0.1:1", "--kubeconfig", "missing"],
     "--kubeconfig: missing: not a file"),
    (["--dashboard", "http://127.0.0.1:1"], "--dashboard: only with --platform nuclio"),
])
def test_missing_or_misplaced_site_options_are_one_line_and_exit_2(capsys, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    code, err = run(capsys, LENET, *args)
    assert (code, err) == (2, message)
    assert not (tmp_path / "unused-results").exists()


@pytest.mark.parametrize("option, value, says", [
    ("--dashboard", "ftp://host", "expected http://host:port"),
    ("--namespace", "Not_A_Label", "expected a DNS-1123 label"),
    ("--platform", "kubernetes", "invalid choice"),
])
def test_malformed_values_are_refused_by_the_parser(capsys, option, value, says):
    assert main(["run", str(LENET), option, value]) == 2
    err = capsys.readouterr().err
    assert f"argument {option}" in err and says in err


def test_an_apiserver_that_does_not_answer_is_named(capsys, tmp_path, monkeypatch, apiserver):
    plane, kubeconfig = apiserver
    monkeypatch.chdir(tmp_path)
    kubeconfig.write_text(kubeconfig.read_text().replace(plane.url, f"https://127.0.0.1:{free_port()}"))
    code, err = run(capsys, LENET, "--platform", "nuclio", "--dashboard", "http://127.0.0.1:1",
                    "--kubeconfig", kubeconfig)
    assert code == 2
    assert err.startswith(f"--kubeconfig: {kubeconfig}: the kube-apiserver does not answer"), err


def test_a_dashboard_that_does_not_answer_is_named(capsys, tmp_path, monkeypatch, apiserver):
    _, kubeconfig = apiserver
    monkeypatch.chdir(tmp_path)
    nobody = f"http://127.0.0.1:{free_port()}"
    code, err = run(capsys, LENET, "--platform", "nuclio", "--dashboard", nobody, "--kubeconfig", kubeconfig)
    assert code == 2
    assert err == f"--dashboard: {nobody}: does not answer (connection refused)"


def test_a_job_name_that_cannot_name_kubernetes_objects_is_refused(capsys, tmp_path, monkeypatch, apiserver):
    _, kubeconfig = apiserver
    monkeypatch.chdir(tmp_path)
    job = tmp_path / "upper.yaml"
    job.write_text(LENET.read_text().replace("name: lenet-mnist", "name: LeNet_MNIST").replace(
        "models/lenet.py", str(REPO / "jobs" / "models" / "lenet.py")))
    with FakeDashboard(kubeconfig, log_dir=tmp_path / "logs") as dashboard:
        code, err = run(capsys, job, "--platform", "nuclio", "--dashboard", dashboard.url, "--kubeconfig", kubeconfig)
    assert code == 2
    assert err.startswith(f"{job}: name: 'LeNet_MNIST' cannot name Kubernetes objects"), err


def test_a_resume_keeps_the_platform_its_manifest_names(capsys, tmp_path):
    code = main(["run", "--resume", str(tmp_path), "--platform", "nuclio"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "--platform: a resumed run uses the platform its manifest names; give the run folder only")
