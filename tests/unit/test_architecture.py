"""The architecture contracts in pyproject.toml ([tool.importlinter]) hold, and say what the design says.

The contracts: the pure core (coach.estimates, coach.policy, coach.lifecycle, coach.domain) imports no file system,
randomness, clock, thread, process, network or signal module, through any path; the cluster simulator's decisions
touch no clock, thread, process or network; coach's packages form layers that import only downwards; the Nuclio
functions and scheduler_fork import nothing of coach but coach.domain; `coach scheduler` imports neither the
drivers, the simulator nor MXNet's stack; and no product code imports the tests. `lint-imports` prints the report.
"""

from __future__ import annotations

import pkgutil
import sys
from pathlib import Path

import grimp
from importlinter.api import read_configuration
from importlinter.cli import EXIT_STATUS_SUCCESS, lint_imports

import coach

PYPROJECT = str(Path(__file__).resolve().parents[2] / "pyproject.toml")
CONFIG = read_configuration(PYPROJECT)
CONTRACTS = {options["id"]: options for options in CONFIG["contracts_options"]}


def test_every_architecture_contract_is_kept(capsys, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # lint_imports puts the working folder on sys.path

    exit_code = lint_imports(config_filename=PYPROJECT, no_cache=True, no_logo=True)

    report = capsys.readouterr().out
    assert exit_code == EXIT_STATUS_SUCCESS, f"import-linter reports broken contracts:\n{report}"
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in report


def test_the_linter_sees_standard_library_imports_so_the_pure_core_contract_can_break():
    # A forbidden module that is not in the graph is skipped, so without standard-library modules in the graph
    # the pure-core contract would be kept whatever the code imports.
    graph = grimp.build_graph(*CONFIG["session_options"]["root_packages"], include_external_packages=True,
                              cache_dir=None)

    assert {"time", "threading", "subprocess", "socket", "signal"} <= set(graph.modules)
    assert set(CONTRACTS["pure-core"]["forbidden_modules"]) >= {"time", "threading", "subprocess", "signal"}


def test_the_functions_contract_forbids_every_coach_package_but_domain():
    packages = {f"coach.{module.name}" for module in pkgutil.iter_modules(coach.__path__)}

    assert set(CONTRACTS["functions"]["forbidden_modules"]) == packages - {"coach.domain"}


def test_the_pure_core_may_not_touch_the_file_system_randomness_a_clock_or_the_network():
    contract = CONTRACTS["pure-core"]
    assert set(contract["source_modules"]) == {"coach.estimates", "coach.policy", "coach.lifecycle", "coach.domain"}
    assert {"os", "random", "time", "threading", "subprocess", "socket"} <= set(contract["forbidden_modules"])
    assert contract.get("allow_indirect_imports", "False") in ("False", False)  # through any path, not only directly


def test_the_scheduler_may_import_neither_the_drivers_nor_the_simulator_nor_mxnet():
    contract = CONTRACTS["scheduler"]
    assert contract["source_modules"] == ["coach.kube_scheduler"]
    assert {"coach.drivers", "coach.simulator", "coach.app", "mxnet", "numpy", "scipy"} <= set(
        contract["forbidden_modules"])


def test_every_top_level_package_is_the_source_of_a_contract_and_none_may_import_the_tests():
    sources = {module.split(".")[0] for options in CONTRACTS.values() for module in options.get("source_modules", [])}
    assert sources >= set(CONFIG["session_options"]["root_packages"]) == {"coach", "coach_functions", "scheduler_fork"}
    assert CONTRACTS["product-not-tests"]["forbidden_modules"] == ["tests"]
    assert set(CONTRACTS["product-not-tests"]["source_modules"]) == set(CONFIG["session_options"]["root_packages"])


def test_scheduler_fork_may_import_no_coach_package_but_domain():
    packages = {f"coach.{module.name}" for module in pkgutil.iter_modules(coach.__path__)}

    assert packages - {"coach.domain"} <= set(CONTRACTS["scheduler-fork"]["forbidden_modules"])
