"""`make demo-k8s`'s stack leaves nothing behind: interrupted mid-run on a loaded machine, with its scheduler killed
first or still running (its binder too), it stops every process it started (control plane, dashboard hosts,
`coach scheduler`, `coach run`) within a bound, says so in one line and prints no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import MODELS, wait_until

pytestmark = pytest.mark.kube  # its stack starts a control plane of its own, not the `control_plane` fixture's

REPO = Path(__file__).resolve().parents[2]


def in_session(sid: int) -> dict[int, list[str]]:
    """pid -> argv of every live process of session `sid`."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                found[int(entry.name)] = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except (OSError, ValueError, IndexError):
            continue
    return found


def burn() -> subprocess.Popen:
    """A process that keeps a core busy: the load under which the stack must still stop in time."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


@pytest.mark.parametrize("scheduler_dies_first", [True, False], ids=["scheduler-killed-first", "scheduler-alive"])
def test_an_interrupted_stack_stops_everything_it_started_under_load(tmp_path, scheduler_dies_first):
    job = tmp_path / "long.yaml"
    job.write_text(yaml.safe_dump({
        "name": "long", "model": str(MODELS / "tiny_mlp.py"), "batch_size": 64, "optimizer": "sgd",
        "learning_rate": 0.05, "target_loss": 0.0, "max_epochs": 200, "budget": 10.0, "workers": 1, "servers": 1}))
    results = tmp_path / "results"
    stack = subprocess.Popen([sys.executable, "-m", "tests.fakes.stack", str(job), "--results", str(results)],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    burners = []
    try:
        assert wait_until(lambda: any(results.glob("*/long.jsonl")) and
                          "training" in next(results.glob("*/long.jsonl")).read_text(), 240), stack.poll()
        schedulers = [pid for pid, argv in in_session(stack.pid).items()
                      if any(Path(a).name == "coach" and b == "scheduler" for a, b in zip(argv, argv[1:]))]
        assert len(schedulers) == 1, in_session(stack.pid)
        if scheduler_dies_first:
            os.kill(schedulers[0], signal.SIGKILL)  # as a crashed pod
        burners = [burn(), burn()]
        stack.send_signal(signal.SIGTERM)
        out, err = stack.communicate(timeout=120)  # a stack that hangs fails here
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
        if stack.poll() is None:
            os.killpg(stack.pid, signal.SIGKILL)
            stack.wait()
    assert stack.returncode == 130, err
    assert err.splitlines() == ["coach: interrupted"], err  # coach run's line; the stack adds none
    assert wait_until(lambda: in_session(stack.pid) == {}, 10), in_session(stack.pid)
    assert "stack stopped after" in out
