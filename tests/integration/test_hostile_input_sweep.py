"""Every `coach` subcommand, given hostile input or a signal, as a real process under a memory and time limit: the
documented exit code, exactly one line on stderr, no traceback, nothing written (issue 37, items 3, 3b and 5).

A case is (argv, setup, expected exit code, what its one stderr line says); `setup` prepares the folder the
command runs in and returns what else it may touch. The table must name every subcommand of `coach --help`
(test_every_subcommand_has_a_case), so a new one cannot be left out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple

import pytest

from coach.ui.cli import build_parser
from tests.support import pollux_data

REPO = Path(__file__).resolve().parents[2]
COACH = [sys.executable, "-m", "coach.ui.cli"]
MEMORY_BYTES = 2 * 1024**3  # RLIMIT_AS of every command: a command must not need more to refuse bad input
TIMEOUT_S = 30.0
JOB = REPO / "jobs" / "lenet-mnist.yaml"
TINY_MATRIX = REPO / "jobs" / "experiments" / "tiny.yaml"


def _limits() -> None:  # preexec_fn: in the child, before exec
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    os.setsid()  # its own process group: a signal case reaches the command and what it started, nothing else


class Case(NamedTuple):
    argv: list[str]
    says: str  # a fragment of the one stderr line
    code: int = 2
    setup: Callable[[Path], None] = lambda _: None


def _fifo(name: str) -> Callable[[Path], None]:
    return lambda folder: os.mkfifo(folder / name)


def _write(name: str, text: str | bytes) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return setup


def _checkpoint(state: object, net: bytes | None = b"", trainer: bytes | None = b"") -> Callable[[Path], None]:
    """A folder m.params.ckpt/ whose state.json is `state` (as settings of `_TRAIN_RUN`) and whose network and
    optimiser files hold the given bytes (None: absent)."""
    def setup(folder: Path) -> None:
        ckpt = folder / "m.params.ckpt"
        ckpt.mkdir()
        (ckpt / "state.json").write_text(json.dumps(state))
        for name, data in (("net.params", net), ("trainer.states", trainer)):
            if data is not None:
                (ckpt / name).write_bytes(data)
    return setup


_TRAIN_RUN = ["train-policy", "--level", "run", "--imitate", "coach", "--imitation-epochs", "1", "--rl-episodes",
              "1", "--teacher-episodes", "1", "--eval-episodes", "1", "--episode-jobs", "4", "--quiet"]
_SETTINGS = {"imitate": "coach", "seed": 0, "nodes": 4, "slots_per_node": 6, "min_jobs": 4, "episode_jobs": 4,
             "hidden": 32, "teacher_episodes": 1, "held_out": 0.2, "imitation_epochs": 1, "batch_size": 128,
             "learning_rate": 0.003, "rl_episodes": 1, "rl_learning_rate": 0.0003, "reward": "progress",
             "gamma": 0.5, "discount_s": 30.0, "entropy": 0.01, "value_weight": 0.5, "eval_episodes": 1,
             "select_every": 250, "checkpoint_every": 10}


def _state(**changes) -> dict:
    state = {"version": 2, "level": "run", "settings": _SETTINGS, "phase": "rl", "done": 0, "imitation_losses": [],
             "train_accuracy": None, "held_out_accuracy": None, "held_out_rounds_same": None,
             "evaluation": {"imitation": {"jct_s": 1.0}}, "episode_rewards": []}
    return {**state, **changes}


#: The unreachable server of the clients (a port nothing listens on: 1 needs root to bind)
NOWHERE = "http://127.0.0.1:1"

CASES: dict[str, list[Case]] = {
    "validate": [Case(["validate", "missing.yaml"], "missing.yaml"),
                 Case(["validate", "fifo.yaml"], "fifo.yaml", setup=_fifo("fifo.yaml"))],
    "run": [Case(["run", "missing.yaml", "--results", "out"], "missing.yaml"),
            Case(["run", str(JOB), "--results", "fifo"], "fifo", setup=_fifo("fifo")),
            Case(["run", "--resume", "nowhere"], "nowhere")],
    "plan": [Case(["plan", str(JOB), "--history", "fifo.jsonl"], "fifo.jsonl", setup=_fifo("fifo.jsonl")),
             Case(["plan", str(JOB), "--history", "log.jsonl"], "log.jsonl", setup=_write("log.jsonl", b"\xff{["))],
    "bench scheduler": [Case(["bench", "scheduler", "--nodes", "0"], "--nodes")],
    "bench kube-scheduler": [Case(["bench", "kube-scheduler", "--kubeconfig", "missing"], "missing"),
                             Case(["bench", "kube-scheduler", "--kubeconfig", "k", "--nodes", "1", "--pods", "9",
                                   "--slots-per-node", "1"], "--pods")],
    "scheduler": [Case(["scheduler", "--kubeconfig", "missing"], "missing")],
    "simulate": [Case(["simulate", "missing.csv", "--policy", "drf"], "missing.csv"),
                 Case(["simulate", "w.csv", "--policy", "drf"], "w.csv", setup=_fifo("w.csv")),
                 Case(["simulate", "w.csv", "--policy", "drf", "--results", "w.csv"], "w.csv",
                      setup=_write("w.csv", "name,time\n"))],
    "serve": [Case(["serve", "--host", "0.0.0.0"], "--token"),
              Case(["serve", "--port", "70000"], "--port")],
    "status": [Case(["status", "--server", NOWHERE], "127.0.0.1:1", code=1)],
    "submit": [Case(["submit", "missing.yaml", "--server", NOWHERE], "missing.yaml"),
               Case(["submit", "fifo.yaml", "--server", NOWHERE], "fifo.yaml", setup=_fifo("fifo.yaml"))],
    "stop": [Case(["stop", "job", "--server", NOWHERE], "127.0.0.1:1", code=1)],
    "logs": [Case(["logs", "job", "--server", NOWHERE], "127.0.0.1:1", code=1)],
    "train-policy": [
        Case([*_TRAIN_RUN, "--out", "fifo"], "special file", setup=_fifo("fifo")),
        Case([*_TRAIN_RUN, "--out", "/proc/m.params"], "/proc"),
        Case([*_TRAIN_RUN, "--out", "."], "is a folder"),
        Case([*_TRAIN_RUN, "--out", "nowhere/m.params"], "no such folder"),
        Case([*_TRAIN_RUN, "--out", "m.params", "--resume"], "state.json", setup=_checkpoint([1, 2])),
        Case([*_TRAIN_RUN, "--out", "m.params", "--resume"], "phase", setup=_checkpoint(_state(phase="bogus"))),
        Case([*_TRAIN_RUN, "--out", "m.params", "--resume"], "done", setup=_checkpoint(_state(done=1e12))),
        Case([*_TRAIN_RUN, "--out", "m.params", "--resume"], "episode_rewards",
             setup=_checkpoint(_state(episode_rewards="x"))),
        Case([*_TRAIN_RUN, "--out", "m.params", "--resume"], "net.params",
             setup=_checkpoint(_state(), net=b"garbage" * 20)),
        Case([*_TRAIN_RUN, "--out", "m.params", "--resume"], "net.params", setup=_checkpoint(_state(), net=None)),
        Case([*_TRAIN_RUN, "--out", "m.params", "--resume"], "trainer.states",
             setup=lambda folder: (_checkpoint(_state(done=1), trainer=None)(folder),
                                   _fifo("m.params.ckpt/trainer.states")(folder))),
        Case(["train-policy", "--imitate", "drf", "--workloads", "w.csv", "--out", "w.csv"],
             "--out: w.csv: is read by this training (--workloads)", setup=_write("w.csv", "name,time\n")),
        Case(["train-policy", "--imitate", "drf", "--workloads", "w-imitation.params", "--out", "w.params"],
             "--out: w-imitation.params: is read by this training (--workloads)",
             setup=_write("w-imitation.params", "name,time\n")),
        Case([*_TRAIN_RUN, "--out", "m.json"], "--out: m.json: its report, m.json, would be written over it"),
        Case([*_TRAIN_RUN, "--out", "m.params"], "--out: m.json: exists and is not the report of a training",
             setup=_write("m.json", "my notes\n")),
        Case([*_TRAIN_RUN, "--out", "m.params"], "--out: m-imitation.params: exists and is not a DL2 model",
             setup=_write("m-imitation.params", "my notes\n")),
        Case([*_TRAIN_RUN, "--out", "m.params"], "--out: m.params.ckpt: is not a folder",
             setup=_write("m.params.ckpt", "x")),
        Case([*_TRAIN_RUN, "--out", "m.params", "--resume"], "--out: m.params.ckpt: is not a folder",
             setup=_write("m.params.ckpt", "x")),
        Case([*_TRAIN_RUN, "--out", "m.params"], "--out: m.params.ckpt/net.params: is a folder",
             setup=lambda folder: (folder / "m.params.ckpt" / "net.params").mkdir(parents=True)),
        Case([*_TRAIN_RUN, "--out", "m.params", "--episode-jobs", "3"],
             "--episode-jobs: must be >= 4 with --level run"),
    ],
    "experiment": [Case(["experiment", "missing.yaml"], "missing.yaml"),
                   Case(["experiment", "m.yaml"], "m.yaml", setup=_write("m.yaml", "- [")),
                   Case(["experiment", str(TINY_MATRIX), "--results", "fifo"], "fifo", setup=_fifo("fifo"))],
    "compare": [Case(["compare", "a", "b"], "a")],
    "report": [Case(["report", "nowhere"], "nowhere"),
               Case(["report", "run"], "summary.json", setup=_write("run/summary.json", "[1, 2"))],
}


def _subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _subcommands(child, (*prefix, name))
            return
    yield " ".join(prefix)


def test_every_subcommand_has_a_case():
    assert sorted(_subcommands(build_parser())) == sorted(CASES)


def _files(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*")}


def _contents(folder: Path) -> dict[Path, bytes]:
    """Every regular file's bytes (a FIFO is never opened: that would block)."""
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file() and not path.is_symlink()}


def _run(argv: list[str], folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*COACH, *argv], cwd=folder, capture_output=True, text=True, timeout=TIMEOUT_S,
                          preexec_fn=_limits, env={**os.environ, "PYTHONPATH": str(REPO)}, stdin=subprocess.DEVNULL)


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize("command,number", [(c, i) for c, cases in CASES.items() for i in range(len(cases))])
def test_hostile_input_is_one_line_and_nothing_written(command, number, tmp_path):
    case = CASES[command][number]
    case.setup(tmp_path)
    before, contents = _files(tmp_path), _contents(tmp_path)
    done = _run(case.argv, tmp_path)
    line = _one_line(done.stderr)
    assert done.returncode == case.code, done.stderr
    assert case.says in line
    assert _files(tmp_path) == before  # nothing half-written (nor whole: the command refused before any work)
    assert _contents(tmp_path) == contents  # nor anything replaced


class Interrupted(NamedTuple):
    argv: list[str]
    begun: Callable[[Path, str], bool]  # (the folder, stdout+stderr so far) -> has the work begun?


def _after(seconds: float) -> Callable[[Path, str], bool]:
    started = time.monotonic()
    return lambda *_: time.monotonic() - started > seconds


TRACES = pollux_data() / "traces"


def _workload(folder: Path) -> None:
    """3,000 jobs of one application: some seconds of simulation, and thousands of logs to write."""
    if not TRACES.is_dir():
        pytest.skip(f"needs the Pollux traces at {TRACES}")
    rows = "\n".join(f"job{i},{i * 30},cifar10,4,128" for i in range(3000))
    (folder / "w.csv").write_text(f"name,time,application,num_replicas,batch_size\n{rows}\n")


TINY_MODEL = REPO / "tests" / "integration" / "models" / "tiny_mlp.py"
#: A job that trains for longer than a test waits: 2 workers and 2 servers of a small MLP on 8x8 digits
_LONG_JOB = f"""name: mlp-1
model: {TINY_MODEL}
batch_size: 64
optimizer: sgd
learning_rate: 0.05
target_loss: 0.0
max_epochs: 200
budget: 10.0
epoch_timeout_s: 120
seed: 0
workers: 2
servers: 2
"""

SIGNALLED: dict[str, tuple[Callable[[Path], None], list[str], str]] = {
    # name: (setup, argv, a fragment of stdout/stderr that says the work has begun ("" = after a while))
    "run": (_write("j.yaml", _LONG_JOB), ["run", "j.yaml", "--plain", "--results", "out"], "(epoch 1 done)"),
    "simulate": (_workload, ["simulate", "w.csv", "--policy", "drf", "--results", "out", "--traces", str(TRACES)],
                 ""),
    "train-policy": (lambda _: None, ["train-policy", "--level", "run", "--imitate", "coach", "--out", "m.params",
                                      "--quiet"], ""),
    "experiment": (lambda _: None, ["experiment", str(TINY_MATRIX), "--results", "out"], ""),
    "serve": (lambda folder: (_write("j.yaml", _LONG_JOB.replace(str(TINY_MODEL), TINY_MODEL.name))(folder),
                              _write(TINY_MODEL.name, TINY_MODEL.read_bytes())(folder)),
              ["serve", "--port", "0", "--results", "out", "--models", "."], "http://"),
}


def _submit_and_wait(folder: Path, output: str) -> None:
    """`coach serve` listens: submit j.yaml, and wait until the job has trained an epoch (at most TIMEOUT_S)."""
    server = next(word for word in output.split() if word.startswith("http://")).rstrip("/")
    submitted = _run(["submit", "j.yaml", "--server", server], folder)
    assert submitted.returncode == 0, submitted.stderr
    deadline = time.monotonic() + TIMEOUT_S
    while not any('"training"' in log.read_text() for log in folder.glob("out/*/mlp-1.jsonl")):
        assert time.monotonic() < deadline, "the submitted job trained no epoch"
        time.sleep(0.1)


#: What to do once the work has begun, before the signal: (the folder, stdout+stderr so far) -> None
THEN: dict[str, Callable[[Path, str], None]] = {"serve": _submit_and_wait}


def _signalled(argv: list[str], folder: Path, marker: str, sig: int,
               then: Callable[[Path, str], None] | None = None) -> tuple[int, str]:
    """Start the command, wait until `marker` shows (or 2.5 s after start without one), send `sig` to its process
    group, and check that nothing of the group outlives it; (exit code, stderr)."""
    log = folder.parent / f"{folder.name}.log"
    with open(log, "w+") as out:
        process = subprocess.Popen([*COACH, *argv], cwd=folder, stdout=out, stderr=subprocess.PIPE, text=True,
                                   preexec_fn=_limits, env={**os.environ, "PYTHONPATH": str(REPO)},
                                   stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + (TIMEOUT_S if marker else 2.5)
        while time.monotonic() < deadline and process.poll() is None:
            if marker and marker in log.read_text():
                break
            time.sleep(0.05)
        assert process.poll() is None, f"{argv} ended before the signal: {process.stderr.read()}"
        if then is not None:
            then(folder, log.read_text())
        os.killpg(process.pid, sig)
        try:
            _, stderr = process.communicate(timeout=TIMEOUT_S)
            left = _group_left(process.pid)
        finally:
            if process.poll() is None or left:
                os.killpg(process.pid, signal.SIGKILL)
        assert not left, f"{argv} left processes behind: {left}"
        return process.returncode, stderr


def _group_left(group: int) -> list[str]:
    """The live processes of a process group (zombies are dead), once it has emptied or after TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        left = []
        for status in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = status.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # gone meanwhile
            if int(fields[2]) == group and fields[0] != "Z":
                left.append(status.parent.name)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _whole_or_marked(folder: Path, left: set[Path]) -> list[str]:
    """What is wrong with what a command left: nothing, or only what it keeps on purpose, each whole and marked as
    interrupted. An experiment folder keeps its manifest (`interrupted`, exit code 130) and every run it lists
    has its summary.json; a run folder (of `coach run` or `coach serve`) keeps run.json and summary.json, every job
    in it `interrupted` or ended and no `retry` line in its logs (a failure the interrupt itself caused is the
    interrupt's); a server keeps its lock and the pointer to the run it resumes."""
    problems = []
    served = folder / "out" / "service.json"
    if served.is_file():
        if not (folder / "out" / json.loads(served.read_text())["run_id"] / "summary.json").is_file():
            problems.append(f"{served}: names a run without summary.json")
        left -= {served, folder / "out" / "service.lock"}
    for manifest_path in folder.glob("out/experiments/*/manifest.json"):
        manifest = json.loads(manifest_path.read_text())
        if (manifest["interrupted"], manifest["exit_code"]) != (True, 130):
            problems.append(f"{manifest_path}: not marked interrupted")
        for cell in manifest["cells"]:
            problems += [f"{run['run_dir']}: no summary.json" for run in cell["runs"]
                         if not (manifest_path.parent / run["run_dir"] / "summary.json").is_file()]
        left = {path for path in left if manifest_path.parent not in path.parents}
    for summary_path in folder.glob("out/*/summary.json"):
        summary = json.loads(summary_path.read_text())
        problems += [f"{summary_path}: {job}: {entry.get('stop_reason')}" for job, entry in summary["jobs"].items()
                     if entry.get("stop_reason") is None]
        problems += [f"{log}: {line[:120]}" for log in summary_path.parent.glob("*.jsonl")
                     for line in log.read_text().splitlines() if json.loads(line)["phase"] == "retry"]
        left = {path for path in left if summary_path.parent not in path.parents}
    return problems + [f"{path}: outside a whole, marked folder" for path in sorted(left)[:5]]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("name", sorted(SIGNALLED))
def test_a_signal_is_exit_130_one_line_and_nothing_half_written(name, sig, tmp_path):
    setup, argv, marker = SIGNALLED[name]
    folder = tmp_path / "work"
    folder.mkdir()
    setup(folder)
    before = _files(folder)
    code, stderr = _signalled(argv, folder, marker, sig, THEN.get(name))
    assert "Traceback" not in stderr, stderr
    assert code == 130, stderr
    assert stderr.splitlines()[-1] == "coach: interrupted", stderr
    assert len(stderr.splitlines()) == 1, stderr
    left = {path for path in _files(folder) - before if not path.is_dir()}
    assert _whole_or_marked(folder, left) == []  # no half run folder, no half model


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_retraining_leaves_the_earlier_model_set_whole(sig, tmp_path):
    """A model, its report and its imitation twin are one set: a second training into the same --out, stopped
    once its imitation is over (its checkpoint says so), leaves the first training's three files as they were."""
    first = _run([*_TRAIN_RUN, "--out", "m.params", "--rl-episodes", "0"], tmp_path)
    assert first.returncode == 0, first.stderr
    names = ("m.params", "m.json", "m-imitation.params")
    earlier = {name: (tmp_path / name).read_bytes() for name in names}
    state = tmp_path / "m.params.ckpt" / "state.json"
    process = subprocess.Popen([*COACH, *_TRAIN_RUN, "--out", "m.params", "--rl-episodes", "100000", "--seed", "1"],
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_limits, env={**os.environ, "PYTHONPATH": str(REPO)},
                               stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while '"seed": 1' not in state.read_text() or '"phase": "rl"' not in state.read_text():
            assert time.monotonic() < deadline and process.poll() is None, "the retraining never reached RL"
            time.sleep(0.05)
        os.killpg(process.pid, sig)
        _, stderr = process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert (process.returncode, _one_line(stderr)) == (130, "coach: interrupted")
    assert {name: (tmp_path / name).read_bytes() for name in names} == earlier
    assert not list(tmp_path.glob(".*.tmp"))


def _catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for the signal yet (the SigCgt mask of /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # it has ended
        return False
    caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.MULTILINE).group(1), 16)
    return bool(caught >> (signum - 1) & 1)


@pytest.mark.parametrize("delay_s", [0.0, 0.05, 0.15])
def test_a_signal_during_start_up_is_one_line_too(delay_s, tmp_path):
    """From the first lines of coach.ui.cli on: the signal is sent `delay_s` after the process has a handler for it,
    while the command's modules still load. The interpreter's own start is before any line of Coach runs, and its
    length depends on the machine's load, so the test waits for the handler rather than guessing a delay."""
    process = subprocess.Popen([sys.executable, "-m", "coach.ui.cli", "simulate", "missing.csv", "--policy", "drf"],
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(REPO)}, preexec_fn=_limits)
    deadline = time.monotonic() + TIMEOUT_S
    while process.poll() is None and not _catches(process.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert process.poll() is None, "the command ended before it had a handler for SIGTERM"
    time.sleep(delay_s)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=TIMEOUT_S)
    assert "Traceback" not in stderr, stderr
    if process.returncode != 2:  # the signal came before the command refused its missing file
        assert (process.returncode, stderr) == (130, "coach: interrupted\n")


SLOW_IMPORT = """
import importlib, pathlib, sys, time
pathlib.Path({marker!r}).write_text("importing")
time.sleep(5)  # the signal comes now, while the command imports its modules
sys.path.remove({folder!r})
del sys.modules["argparse"]
sys.modules["argparse"] = importlib.import_module("argparse")
"""


def _started_with(shadows: Path, marker: Path, argv: list[str], cwd: Path) -> subprocess.Popen:
    """`coach ARGV` with the modules in `shadows` found first, once one of them has written `marker` (it is being
    imported): the moment a test sends its signal."""
    process = subprocess.Popen([sys.executable, "-m", "coach.ui.cli", *argv], cwd=cwd, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, preexec_fn=_limits,
                               env={**os.environ, "PYTHONPATH": f"{shadows}:{REPO}"})
    deadline = time.monotonic() + TIMEOUT_S
    while process.poll() is None and not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert marker.exists(), process.communicate(timeout=TIMEOUT_S)[1]
    return process


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_command_imports_its_modules_is_one_line(signum, tmp_path):
    """The first module coach.ui.cli imports after its start-up handlers is made slow, so the signal lands inside
    the imports every time, whatever the machine's load."""
    folder = tmp_path / "slow"
    folder.mkdir()
    marker = tmp_path / "importing"
    (folder / "argparse.py").write_text(SLOW_IMPORT.format(marker=str(marker), folder=str(folder)))
    process = _started_with(folder, marker, ["simulate", "missing.csv", "--policy", "drf"], tmp_path)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=TIMEOUT_S)
    assert (process.returncode, stderr) == (130, "coach: interrupted\n")


#: A package standing in for one with C extensions: CPython turns a KeyboardInterrupt raised while an extension
#: module initialises into an ImportError ("numpy._core.multiarray failed to import"), and so does this one
INTERRUPTED_IMPORT = """
import pathlib, signal, time
pathlib.Path({marker!r}).write_text(signal.getsignal(signal.SIGTERM).__name__)
try:
    time.sleep(30)  # the signal comes now, while the command imports this package lazily
except KeyboardInterrupt:
    raise ImportError("initialization failed")
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_that_an_import_turns_into_an_import_error_is_one_line(signum, tmp_path):
    """`coach simulate` imports matplotlib only to draw its figures, after the simulation: a signal there surfaces
    as an ImportError, which is still the interruption (exit 130, one line) and leaves no run folder."""
    folder = tmp_path / "slow"
    (folder / "matplotlib").mkdir(parents=True)
    marker = tmp_path / "importing"
    (folder / "matplotlib" / "__init__.py").write_text(INTERRUPTED_IMPORT.format(marker=str(marker)))
    (tmp_path / "w.csv").write_text("name,time,application,num_replicas,batch_size\njob0,0,cifar10,1,128\n")
    process = _started_with(folder, marker, ["simulate", "w.csv", "--policy", "fifo", "--results", "out", "--traces",
                                             str(TRACES), "--quiet"], tmp_path)
    time.sleep(0.05)  # the marker is written before the sleep it interrupts
    assert marker.read_text() == "_interrupt"  # main's handler, not the start-up one: the command is under way
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=TIMEOUT_S)
    assert (process.returncode, stderr) == (130, "coach: interrupted\n")
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
