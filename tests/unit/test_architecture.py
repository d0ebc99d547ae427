"""The architecture contracts in pyproject.toml ([tool.importlinter]) hold: import-linter keeps every one.

The contracts: the pure core (coach.estimates, coach.policy, coach.lifecycle, coach.domain) imports no clock, thread,
process, network or signal module; coach's packages form layers that import only downwards; and the Nuclio
functions import nothing of coach but coach.domain. Running `lint-imports` in the repository prints the same report.
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
