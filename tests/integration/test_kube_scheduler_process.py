"""`coach scheduler` as a real process against the suite's real kube-apiserver: it binds pods, answers /healthz, and a
SIGTERM (or Ctrl-C) stops it cleanly: exit code 130, the Lease given up, nothing left running."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests

from coach.domain.kube import LEASE_NAME
from tests.contract.kube_scheduler_support import kube, wait_for  # noqa: F401 (a fixture)

COACH = str(Path(sys.executable).with_name("coach"))


@pytest.fixture
def cluster(control_plane, kube, tmp_path):
    return control_plane.write_kubeconfig(tmp_path / "kubeconfig", namespace=kube.ns), kube


@pytest.mark.parametrize("stop_with", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_scheduler_process_binds_pods_and_stops_cleanly(cluster, stop_with):
    config, kube = cluster
    kube.node("n1", slots=4)
    process = subprocess.Popen([COACH, "scheduler", "--kubeconfig", str(config), "--profile", "gang",
                                "--metrics-port", "0", "--metrics-address", "127.0.0.1", "--lease-duration", "3",
                                "--id", "the-process"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        port_line = wait_for("the metrics port", lambda: next(
            (line for line in lines if "serving /metrics and /healthz on port" in line), None), timeout_s=30)
        port = int(re.search(r"port (\d+)", port_line).group(1))
        names = kube.job("a")
        wait_for("the job bound", lambda: kube.bound(names), timeout_s=20)
        assert requests.get(f"http://127.0.0.1:{port}/healthz").text == "ok"
        assert kube.leases.read_namespaced_lease(LEASE_NAME, kube.ns).spec.holder_identity == "the-process"
        process.send_signal(stop_with)
        assert process.wait(timeout=30) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join(10)
        process.stdout.close()
        stderr = process.stderr.read()
        process.stderr.close()
    assert lines[-1] == "coach scheduler: stopped after binding 3 pods\n", (lines, stderr)
    assert "Traceback" not in stderr
    assert kube.leases.read_namespaced_lease(LEASE_NAME, kube.ns).spec.holder_identity in ("", None)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
