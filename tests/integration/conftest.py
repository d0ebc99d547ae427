"""Shared helpers for tests that run real function hosts and real MXNet training on loopback."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
import yaml

from coach.domain.cluster import ClusterSpec, NodeSpec
from tests.fakes.stack import LoopbackStack
from coach.inputs.jobs import load_job
from tests.support import stderr_of

MODELS = Path(__file__).parent / "models"
LENET = Path(__file__).resolve().parents[2] / "jobs" / "models" / "lenet.py"


def host_processes(marker: str) -> list[str]:
    """Live function hosts (and their epoch children) whose name contains `marker`, as `pid log-file`.

    Hosts are forked by the template process, so they carry its command line; what names a host is its stderr,
    the function's log file `<run>/logs/<job>-<role>-<index>.log`, which its epoch children inherit."""
    found = []
    for process in Path("/proc").glob("[0-9]*"):
        try:
            args = (process / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (process / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # the process ended while we looked
            continue
        log = stderr_of(process.name)
        if "coach.platforms" in args and marker in Path(log).name and state != "Z":
            found.append(f"{process.name} {log}")
    return found


def wait_until(predicate, timeout_s: float, step_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return predicate()


@pytest.fixture
def chromium() -> str:
    """The Chromium Playwright launches: Debian's (`make chromium`), or COACH_CHROMIUM. A test that uses it is marked
    `browser` (tests/conftest.py)."""
    return os.environ.get("COACH_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture
def marker() -> str:
    """A unique prefix for job names, so process checks only see this test's hosts."""
    return f"t{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_job(tmp_path):
    def make(name: str, model: Path = MODELS / "tiny_mlp.py", **fields):
        data = {"name": name, "model": str(model), "batch_size": 64, "optimizer": "sgd",
                "optimizer_params": {"momentum": 0.9}, "learning_rate": 0.05, "target_loss": 0.0,
                "max_epochs": 3, "budget": 10.0, "workers": 2, "servers": 1, "epoch_timeout_s": 120}
        data.update(fields)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return load_job(path)

    return make


@pytest.fixture
def stack(tmp_path, monkeypatch, control_plane):
    """Kubernetes + Nuclio on loopback (the session's control plane, the dashboard's test double, moto's S3,
    `coach scheduler` in its own process) with one node of 4 slots, in a namespace of its own."""
    cluster = ClusterSpec(name="one-node", nodes=(NodeSpec("node-1", slots=4, price_per_slot_s=0.0001),))
    running = LoopbackStack(tmp_path / "stack", cluster, namespace=f"s-{uuid.uuid4().hex[:10]}", plane=control_plane,
                            setenv=monkeypatch.setenv).start()
    try:
        yield running
    finally:
        running.stop()
