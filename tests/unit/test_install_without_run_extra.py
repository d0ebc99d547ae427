"""`coach scheduler` and the light commands work in an install without the `run` extra (the scheduler image:
deploy/scheduler.Dockerfile), and a command that needs the extra says so in one line.

An install without the extra is imitated by refusing to import every top-level module the `run` extra's
distributions provide, read from the installed metadata, in a child process running the real `coach` entry point.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions, requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
MXNET_STACK = {"mxnet", "numpy", "scipy", "matplotlib"}

IMITATION = """
import sys
BLOCKED = set(sys.argv[1].split(","))
class WithoutRunExtra:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, WithoutRunExtra())
what = sys.argv[2]
if what == "--import":
    import importlib, pkgutil
    import coach.kube_scheduler as package
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)
    print("imported")
else:
    from coach.ui.cli import main
    sys.exit(main(sys.argv[2:]))
"""


def run_extra_modules() -> set[str]:
    """Top-level import names of the distributions only the `run` extra installs."""
    run = {Requirement(text).name.lower() for text in requires("coach") or []
           if Requirement(text).marker is not None and Requirement(text).marker.evaluate({"extra": "run"})}
    return {module for module, dists in packages_distributions().items()
            if any(dist.lower().replace("_", "-") in run for dist in dists)}


def without_run_extra(*argv: str) -> subprocess.CompletedProcess:
    blocked = ",".join(sorted(run_extra_modules()))
    return subprocess.run([sys.executable, "-c", IMITATION, blocked, *argv], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


def test_the_base_install_holds_nothing_of_mxnet_and_the_run_extra_holds_it():
    base = {Requirement(text).name.lower() for text in PYPROJECT["dependencies"]}
    run = {Requirement(text).name.lower() for text in PYPROJECT["optional-dependencies"]["run"]}
    assert not base & MXNET_STACK
    assert MXNET_STACK <= run
    assert MXNET_STACK <= run_extra_modules()  # what the imitation refuses, read from the installed metadata


def test_every_module_of_the_scheduler_imports_without_the_run_extra():
    done = without_run_extra("--import")
    assert (done.returncode, done.stdout.strip()) == (0, "imported"), done.stderr


@pytest.mark.parametrize("argv", [["--version"], ["scheduler", "--help"], ["bench", "kube-scheduler", "--help"],
                                  ["validate", "jobs/lenet-mnist.yaml"], ["status", "--help"], ["submit", "--help"],
                                  ["stop", "--help"]])
def test_the_scheduler_and_the_light_commands_run_without_the_run_extra(argv):
    done = without_run_extra(*argv)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("argv, where", [(["run", "jobs/lenet-mnist.yaml"], "coach run"),
                                         (["simulate", "workload.csv", "--policy", "fifo"], "coach")])
def test_a_command_that_needs_the_run_extra_says_what_to_install_in_one_line(argv, where):
    done = without_run_extra(*argv)
    assert done.returncode == 3
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{where}: needs Coach's `run` extra (no module named ")
    assert line.endswith(": pip install 'coach[run]'")


@pytest.mark.parametrize("dockerfile, extra", [("deploy/scheduler.Dockerfile", "."),
                                                ("deploy/controller.Dockerfile", "'.[run]'")])
def test_the_images_install_what_they_need_and_no_test_code(dockerfile, extra):
    lines = (REPO / dockerfile).read_text().splitlines()
    copied = [line.split()[1] for line in lines if line.startswith("COPY ")]
    assert not [source for source in copied if source.startswith("tests")]
    installs = [line for line in lines if "pip install" in line]
    assert installs and all(line.split("pip install", 1)[1].split()[0] == extra for line in installs)
    if dockerfile == "deploy/scheduler.Dockerfile":
        assert "coach_functions" not in copied


def test_the_scheduler_deployment_runs_the_scheduler_image():
    deployment = (REPO / "deploy/scheduler-deployment.yaml").read_text()
    assert "image: coach-scheduler" in deployment and "scheduler.Dockerfile" in deployment
