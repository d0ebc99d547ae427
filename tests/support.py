"""Helpers the test folders share: waiting on a condition with a deadline, stopping a child process, a client of
the official `kubernetes` package for a kubeconfig, a simulated platform that writes real checkpoint files, a
benchmark script imported as a module."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest
from kubernetes import client

from coach.placement.kube_connect import connect
from coach.platforms.virtual import VirtualPlatform


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def stderr_of(pid: int | str) -> str:
    """Where process `pid` writes its stderr (a function host: its log file; its epoch children inherit it); ""
    when it has ended or is not ours. Forked hosts carry the template's command line, so this is what names them."""
    try:
        return os.readlink(f"/proc/{pid}/fd/2")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie has ended)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2] not in "ZX"


def benchmark_script(name: str) -> Iterator:
    """For a module-scoped fixture (`yield from`): benchmarks/<name>.py imported as the module `name`, registered
    in sys.modules while the tests use it (dataclasses look their module up by name), removed afterwards."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


def wait_for(condition: Callable[[], object], timeout_s: float = 10.0, what: str = "condition") -> object:
    """The first truthy value of `condition()`, polled until `timeout_s`; AssertionError naming `what` after that."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.02)


def stop_process(process: subprocess.Popen) -> None:
    """Kill `process` if it still runs, reap it and close its pipes (a test never leaves one behind)."""
    if process.poll() is None:
        process.kill()
        process.wait()
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


def kube_client(kubeconfig: str | Path) -> client.ApiClient:
    """An ApiClient configured from `kubeconfig`, as Coach's own parts build theirs (close it when done)."""
    api, problem = connect(str(kubeconfig))
    assert api is not None, problem
    return api


def pollux_data() -> Path:
    """The Pollux artifact's data the simulator's tests read: `../shared/data/pollux` beside the project (where the
    data's README puts it), or beside the repository this one was cloned from (a check clone in /tmp has no
    `../shared`), or `COACH_POLLUX_DATA`. When none exists the first is returned: `needs(path)` and `require(path)`
    skip the tests that read it, naming it (CI provides it; a machine without it skips them)."""
    import os

    root = Path(__file__).resolve().parents[1]
    candidates = [Path(os.environ["COACH_POLLUX_DATA"])] if os.environ.get("COACH_POLLUX_DATA") else []
    candidates.append(root.parent / "shared" / "data" / "pollux")
    origin = subprocess.run(["git", "-C", str(root), "config", "--get", "remote.origin.url"],
                            capture_output=True, text=True).stdout.strip()
    if origin and Path(origin).is_dir():  # a clone of a repository on this machine
        candidates.append(Path(origin).resolve().parent / "shared" / "data" / "pollux")
    return next((path for path in candidates if path.is_dir()), candidates[0])


def _missing(path: Path) -> str:
    return f"missing {path} (the data beside the repository, ../shared/data; CI provides it)"


def needs(path: Path) -> pytest.MarkDecorator:
    """A mark that skips a test (or, as `pytestmark`, a module) when `path` does not exist, naming it."""
    return pytest.mark.skipif(not path.exists(), reason=_missing(path))


def require(path: Path) -> Path:
    """`path`, or skip the test or fixture that asked for it, naming it."""
    if not path.exists():
        pytest.skip(_missing(path))
    return path


class FileMarks:
    """Rank 0 of a simulated epoch 'saves' its checkpoint: both files, as a real worker renames them in."""

    def mark_saved(self, prefix: str) -> None:
        for suffix in (".params", ".states"):
            Path(prefix + suffix).write_bytes(b"weights")


class Scripted(VirtualPlatform):
    """A simulated platform that can stop the run at a step, or have its workers diverge at a step."""

    def __init__(self, stop: threading.Event | None = None, stop_at_step: int | None = None,
                 nan_at_step: int | None = None, **kwargs):
        super().__init__(FileMarks(), **kwargs)
        self.stop, self.stop_at_step, self.nan_at_step = stop, stop_at_step, nan_at_step

    def invoke(self, ref, request, timeout_s):
        reply = super().invoke(ref, request, timeout_s)
        step = getattr(request, "step", None)
        if step is not None and step == self.stop_at_step and self.stop is not None:
            self.stop.set()  # Ctrl-C while this step runs: it still completes and is recorded
        if step is not None and step == self.nan_at_step and isinstance(getattr(reply, "body", None), dict) \
                and "loss_sum" in reply.body:
            # what a worker that saw a non-finite loss answers: no loss (JSON has no NaN), nothing saved
            reply.body.update(diverged=True, loss_sum=None, loss=None, checkpoint_saved=None)
        return reply


def factory(platform):
    return lambda logs, token: platform
