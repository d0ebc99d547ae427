"""Experiments: a matrix of runs (model x concurrent jobs x allocation x scheduler), and selecting runs from them.

Why: one run says little about a scheduler. The thesis compared its gang scheduler with the default one over a
matrix of runs; `coach experiment` runs such a matrix, cell by cell, and `coach compare` tests two groups of
its runs against each other.

Matrix file (YAML; paths are relative to the matrix file; unknown fields are errors)::

    name: gang-vs-default            # experiment name, letters/digits/._- (default: the file's stem)
    description: free text           # optional
    models:                          # model name -> model file, or a mapping with `model:` and job fields
      lenet: ../models/lenet.py      #   that override the template below for this model only
      resnet18:
        model: ../models/resnet18.py
        optimizer: adam
        learning_rate: 0.0003
    jobs: [1, 2, 3]                  # concurrent jobs per run (required)
    allocation: [static, dynamic]    # default [static]; static = every job gets `static`'s counts,
    static: {workers: 2, servers: 2} #   dynamic = Coach calibrates and chooses; default (2, 2) as in the thesis
    schedulers: [gang, default]      # scheduler_fork profiles (default [gang])
    repeat: 1                        # runs per cell (`coach experiment --repeat N` overrides)
    cluster: ../clusters/thesis.yaml # optional cluster file (default: the thesis cluster)
    placement_timeout_s: 30          # optional, as `coach run --placement-timeout`
    # the job template: any job-file field except name, model, workers and servers
    batch_size: 64
    optimizer: sgd
    learning_rate: 0.05
    target_loss: 0.15
    max_epochs: 10
    budget: 0.5

Bounds (MATRIX_BOUNDS): `jobs` values 1-100, `repeat` 1-100, `static` counts 1-1024, `placement_timeout_s` finite
in (0, 604800]; at most MAX_RUNS (10,000) runs; the template has the job files' bounds, and every job's seed
(`seed + i - 1`) too. The file has the caps of coach.inputs.limits (1 MiB, 10,000 YAML values after aliases).

Every combination is a *cell*, named `<model>-j<jobs>-<allocation>-<scheduler>` (e.g. `lenet-j2-static-gang`).
A cell's run trains jobs `<model>-1` ... `<model>-<jobs>` concurrently; job i has seed `seed + i - 1`, so the
same job meets every scheduler. Cells run one after another (each run is concurrent inside), and repetitions
are interleaved (every cell once, then every cell again) so slow drift of the machine spreads over all cells.

Layout (`coach experiment --results DIR`, default `results`)::

    DIR/experiments/<name>-<stamp>/manifest.json          the matrix, every cell, its runs and exit codes
    DIR/experiments/<name>-<stamp>/<cell>/jobs/*.yaml     the generated job files
    DIR/experiments/<name>-<stamp>/<cell>/<run-id>/...    what `coach run` writes (summary.json, logs, ...)

Selections (`coach compare A B`), each argument one of::

    RUN_DIR                               one run (a folder with summary.json)
    EXPERIMENT_DIR                        every run of the experiment (a folder with manifest.json)
    EXPERIMENT_DIR/CELL                   every run of one cell
    EXPERIMENT_DIR:KEY=VALUE[,KEY=VALUE]  the runs of the cells matching every condition; KEY is one of
                                          cell, model, jobs, allocation, scheduler; VALUE may list
                                          alternatives with '|' (quote it in a shell): `scheduler=gang|gang-strict`

Side effects: `load_matrix` reads the matrix, model and cluster files (it validates the generated jobs in memory,
with coach.inputs.jobs). `run_experiment` writes the experiment folder and starts runs. `select_runs` only reads.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

from coach.analysis.power import repetitions_to_detect
from coach.domain.cluster import DEFAULT_CLUSTER, ClusterSpec

from coach.inputs.cluster import ClusterFileError, load_cluster
from coach.inputs.jobs import JOB_BOUNDS, JOB_FIELDS, JOB_NAME, YamlLoader  # the job-file format and YAML dialect
from coach.inputs.jobs import check_job, load_jobs
from coach.inputs.limits import (MAX_MATRIX_FILE_BYTES, MAX_MATRIX_VALUES, Bound, FileTooLarge, NotRegularFile,
                                YamlLimitError, YamlValueError, describe, one_line, read_capped, short)
from coach.inputs.runs import RunInputError, check_summary, checked_records, read_json
from coach.inputs.yaml_errors import invalid_yaml_line
from coach.domain.jobs import JobSpec
from coach.storage.results import new_run_id, write_json_atomic
from coach.domain.records import iso

MANIFEST = "manifest.json"
SUMMARY = "summary.json"
EXIT_INTERRUPTED = 130

#: How each allocation turns into job fields. Static jobs get the matrix's `static` counts; dynamic jobs get none.
ALLOCATIONS: dict[str, Callable[[Matrix], dict[str, int]]] = {
    "static": lambda matrix: {"workers": matrix.static_workers, "servers": matrix.static_servers},
    "dynamic": lambda matrix: {},
}

#: Job fields the matrix sets itself, so the template may not.
MATRIX_OWNED_JOB_FIELDS = ("name", "model", "workers", "servers")
TEMPLATE_FIELDS: tuple[str, ...] = tuple(f for f in JOB_FIELDS if f not in MATRIX_OWNED_JOB_FIELDS)
MATRIX_FIELDS: tuple[str, ...] = ("name", "description", "models", "jobs", "allocation", "static", "schedulers",
                                  "repeat", "cluster", "placement_timeout_s")
DEFAULTS: dict[str, Any] = {"allocation": ["static"], "schedulers": ["gang"], "repeat": 1,
                            "static": {"workers": 2, "servers": 2}, "placement_timeout_s": 30.0}
SELECTOR_KEYS: tuple[str, ...] = ("cell", "model", "jobs", "allocation", "scheduler")

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,47}")  # room for `-<stamp>` and `-<i>` suffixes

#: Every number of a matrix file and its bounds (the job template's fields have the job files' JOB_BOUNDS).
MATRIX_BOUNDS: dict[str, Bound] = {
    "jobs": Bound(True, 1, 100),  # each value: concurrent jobs per run
    "repeat": Bound(True, 1, 100),  # runs per cell (also `coach experiment --repeat`)
    "static.workers": JOB_BOUNDS["workers"],
    "static.servers": JOB_BOUNDS["servers"],
    "placement_timeout_s": Bound(False, 0.0, 7 * 24 * 3600, low_exclusive=True),
}
#: Most runs one experiment may have: cells x repeat.
MAX_RUNS = 10_000


class MatrixFileError(Exception):
    """An invalid matrix file; `lines` are `FILE: FIELD: what is wrong`, one per problem."""

    def __init__(self, lines: Sequence[str]):
        super().__init__("\n".join(lines))
        self.lines = list(lines)


class SelectionError(Exception):
    """A `coach compare` argument that selects nothing usable; the message is one line naming the argument."""


@dataclass(frozen=True)
class ModelEntry:
    name: str  # model name, used in cell ids and job names
    model_path: Path  # absolute path of the model file
    overrides: Mapping[str, Any] = field(default_factory=dict)  # job fields for this model only


@dataclass(frozen=True)
class Matrix:
    """A validated matrix file."""

    name: str  # experiment name
    source: Path  # absolute path of the matrix file
    models: tuple[ModelEntry, ...]  # in file order
    jobs: tuple[int, ...]  # concurrent jobs per run
    allocation: tuple[str, ...]  # keys of ALLOCATIONS
    schedulers: tuple[str, ...]  # scheduler_fork profile names
    repeat: int  # runs per cell
    static_workers: int  # counts of static jobs
    static_servers: int
    cluster: ClusterSpec  # where every run places its functions
    placement_timeout_s: float  # as `coach run --placement-timeout`
    template: Mapping[str, Any]  # job fields shared by every model
    raw: Mapping[str, Any]  # the file's mapping as read, for the manifest


@dataclass(frozen=True)
class Cell:
    """One combination of the matrix."""

    cell_id: str  # `<model>-j<jobs>-<allocation>-<scheduler>`, a folder name
    model: str  # ModelEntry.name
    jobs: int  # concurrent jobs per run
    allocation: str  # key of ALLOCATIONS
    scheduler: str  # scheduler_fork profile

    def params(self) -> dict[str, Any]:
        return {"cell": self.cell_id, "model": self.model, "jobs": self.jobs, "allocation": self.allocation,
                "scheduler": self.scheduler}


# --------------------------------------------------------------------------- pure: cells and job files


def cells(matrix: Matrix) -> list[Cell]:
    """Every cell, models outermost, then jobs, allocation and scheduler."""
    return [Cell(f"{m.name}-j{n}-{a}-{s}", m.name, n, a, s)
            for m in matrix.models for n in matrix.jobs for a in matrix.allocation for s in matrix.schedulers]


def job_documents(matrix: Matrix, cell: Cell) -> list[dict[str, Any]]:
    """The job files of one cell's run, as YAML-ready mappings: `<model>-1` ... `<model>-<jobs>`."""
    entry = next(m for m in matrix.models if m.name == cell.model)
    base = {**matrix.template, **entry.overrides}
    seed = base.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):  # not a seed: every job keeps it, and validation says so
        return [{"name": f"{entry.name}-{i}", "model": str(entry.model_path), **base,
                 **ALLOCATIONS[cell.allocation](matrix)} for i in range(1, cell.jobs + 1)]
    return [{"name": f"{entry.name}-{i}", "model": str(entry.model_path), **base, "seed": seed + i - 1,
             **ALLOCATIONS[cell.allocation](matrix)} for i in range(1, cell.jobs + 1)]


def job_file_text(document: Mapping[str, Any]) -> str:
    """The YAML text of a generated job file (`run_experiment` writes it, `load_matrix` validates what it reads)."""
    return yaml.safe_dump(dict(document), sort_keys=False)


# --------------------------------------------------------------------------- reading the matrix file


def _unknown(key: Any, known: Sequence[str]) -> str:
    hint = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    return "unknown field" + (f" (did you mean {hint[0]!r}?)" if hint else "")


def _int_list(value: Any, key: str, minimum: int, problem: Callable[[str, str], None]) -> tuple[int, ...] | None:
    if not isinstance(value, list) or not value:
        problem(key, f"expected a non-empty list of integers, got {short(value)}")
        return None
    bad = [v for v in value if isinstance(v, bool) or not isinstance(v, int) or v < minimum]
    if bad:
        problem(key, f"expected integers >= {minimum}, got {short(bad[0])}")
        return None
    high = MATRIX_BOUNDS[key].high
    if any(v > high for v in value):
        problem(key, f"expected integers <= {high}, got {short(max(value))}")
        return None
    if len(set(value)) != len(value):
        problem(key, f"duplicate values in {short(value)}")
        return None
    return tuple(value)


def _name_list(value: Any, key: str, allowed: Sequence[str], problem) -> tuple[str, ...] | None:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        problem(key, f"expected a non-empty list, one or more of {', '.join(allowed)}; got {short(value)}")
        return None
    for item in value:
        if item not in allowed:
            hint = difflib.get_close_matches(str(item)[:64], allowed, n=1)
            problem(key, f"unknown {key.rstrip('s')} {short(item)}; known: {', '.join(allowed)}"
                         + (f" (did you mean {hint[0]!r}?)" if hint else ""))
            return None
    if len(set(value)) != len(value):
        problem(key, f"duplicate values in {short(value)}")
        return None
    return tuple(value)


class _Loader(YamlLoader):
    """The job files' YAML dialect and bounds."""

    max_values = MAX_MATRIX_VALUES


def _read_yaml(path: Path, shown: str) -> Any:
    try:
        text = read_capped(path, MAX_MATRIX_FILE_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise MatrixFileError([f"{shown}: (file): file not found"]) from None
    except (FileTooLarge, NotRegularFile) as error:
        raise MatrixFileError([f"{shown}: (file): {error}"]) from None
    except (OSError, UnicodeDecodeError) as error:
        raise MatrixFileError([f"{shown}: (file): cannot read: {getattr(error, 'strerror', None) or error}"]) from None
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except (YamlLimitError, YamlValueError) as error:
        raise MatrixFileError([f"{shown}: (file): {error}"]) from None
    except yaml.YAMLError as error:
        raise MatrixFileError([invalid_yaml_line(shown, error, with_problem=False)]) from None


class _Problems:
    """The problem lines of one matrix file, `FILE: FIELD: what is wrong` each; call it with (field, what)."""

    def __init__(self, shown: str):
        self.shown = shown  # the file as the user gave it
        self.lines: list[str] = []

    def __call__(self, key: str, message: str) -> None:
        self.lines.append(f"{self.shown}: {one_line(f'{key}: {message}')}")


def load_matrix(path: str | Path) -> Matrix:
    """Read and validate a matrix file; raise MatrixFileError with every problem, one line each."""
    from scheduler_fork import PROFILES

    shown = str(path)
    source = Path(os.path.abspath(path))
    data = _read_yaml(source, shown)
    if not isinstance(data, dict):
        raise MatrixFileError([f"{shown}: (file): expected a mapping of matrix fields, got {type(data).__name__}"])
    problem = _Problems(shown)
    _check_keys(data, problem)
    values = {**DEFAULTS, **data}
    name = values.get("name", source.stem)
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        problem("name", f"must be 1-48 characters from letters, digits, '.', '_', '-', got {short(name)}")
    if not isinstance(values.get("description", ""), str):
        problem("description", "expected a string")
    jobs = _int_list(values["jobs"], "jobs", 1, problem) if "jobs" in data else None
    allocation = _name_list(values["allocation"], "allocation", list(ALLOCATIONS), problem)
    schedulers = _name_list(values["schedulers"], "schedulers", sorted(PROFILES), problem)
    repeat = values["repeat"]
    _check_count(repeat, "repeat", problem)
    timeout = _placement_timeout_s(values["placement_timeout_s"], problem)
    static_counts = _static_counts(values["static"], problem)
    cluster = _cluster(data.get("cluster"), source, problem)
    models = _models(data.get("models"), source, problem) if "models" in data else []
    if not problem.lines:
        runs = len(models) * len(jobs) * len(allocation) * len(schedulers) * repeat
        if runs > MAX_RUNS:
            problem("(file)", f"{runs} runs (models x jobs x allocation x schedulers x repeat), more than {MAX_RUNS}")
    if problem.lines:
        raise MatrixFileError(problem.lines)
    matrix = Matrix(name=name, source=source, models=tuple(models), jobs=jobs, allocation=allocation,
                    schedulers=schedulers, repeat=repeat, static_workers=static_counts[0],
                    static_servers=static_counts[1], cluster=cluster, placement_timeout_s=float(timeout),
                    template={k: v for k, v in data.items() if k in TEMPLATE_FIELDS}, raw=data)
    lines = _check_job_fields(matrix, shown)
    if lines:
        raise MatrixFileError(lines)
    return matrix


def _check_keys(data: Mapping, problem: _Problems) -> None:
    """Fields the matrix sets itself or does not know (with a hint), then required fields that are missing."""
    known = MATRIX_FIELDS + TEMPLATE_FIELDS
    for key in data:
        if key in MATRIX_OWNED_JOB_FIELDS and key != "name":
            problem(str(key), "set by the matrix (models, allocation, static), not allowed in the template")
        elif key not in known:
            problem(str(key)[:64], _unknown(str(key)[:64], known))
    for key in ("models", "jobs"):
        if key not in data:
            problem(key, "required field missing")


def _check_count(value: Any, key: str, problem: _Problems) -> None:
    """A count (`repeat`, `static.workers`, `static.servers`): an integer from 1 to its MATRIX_BOUNDS high."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problem(key, f"expected an integer >= 1, got {short(value)}")
    elif value > MATRIX_BOUNDS[key].high:
        problem(key, f"must be <= {MATRIX_BOUNDS[key].high}, got {short(value)}")


def _placement_timeout_s(timeout: Any, problem: _Problems) -> Any:
    """The placement timeout as its bound gives it back (a float when valid); problems for a wrong one."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        problem("placement_timeout_s", f"expected a number > 0, got {short(timeout)}")
        return timeout
    timeout, wrong = MATRIX_BOUNDS["placement_timeout_s"].check(timeout)
    if wrong is not None:
        problem("placement_timeout_s", wrong)
    return timeout


def _static_counts(static: Any, problem: _Problems) -> tuple:
    """(workers, servers) of static jobs, each defaulting to DEFAULTS["static"]'s; (2, 2) when not a mapping."""
    if not isinstance(static, dict):
        problem("static", f"expected a mapping with workers and servers, got {short(static)}")
        return (2, 2)
    for key in static:
        if key not in ("workers", "servers"):
            problem(f"static.{key}", _unknown(key, ("workers", "servers")))
    counts = [static.get(k, DEFAULTS["static"][k]) for k in ("workers", "servers")]
    for key, count in zip(("workers", "servers"), counts):
        _check_count(count, f"static.{key}", problem)
    return tuple(counts)


def _cluster(value: Any, source: Path, problem: _Problems) -> ClusterSpec:
    """The cluster file the matrix names (relative to the matrix file), or DEFAULT_CLUSTER when it names none."""
    if value is None:
        return DEFAULT_CLUSTER
    if not isinstance(value, str):
        problem("cluster", f"expected the path of a cluster file, got {short(value)}")
        return DEFAULT_CLUSTER
    cluster_path = source.parent / value
    if not cluster_path.is_file():
        problem("cluster", f"file not found: {os.path.abspath(cluster_path)}")
        return DEFAULT_CLUSTER
    try:
        return load_cluster(cluster_path)
    except ClusterFileError as error:
        problem.lines.extend(error.lines)  # already `FILE: FIELD: ...` lines, of the cluster file
        return DEFAULT_CLUSTER


def _models(value: Any, source: Path, problem) -> list[ModelEntry]:
    if not isinstance(value, dict) or not value:
        problem("models", f"expected a mapping of model name to model file, got {short(value)}")
        return []
    entries = []
    for name, item in value.items():
        key = f"models.{name}"
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            problem(key, "model names must be 1-48 characters from letters, digits, '.', '_', '-'")
            continue
        overrides: dict[str, Any] = {}
        if isinstance(item, dict):
            where = f"{key}.model"
            for field_name in item:
                if field_name == "model":
                    continue
                if field_name in MATRIX_OWNED_JOB_FIELDS:
                    problem(f"{key}.{field_name}", "set by the matrix, not allowed here")
                elif field_name not in TEMPLATE_FIELDS:
                    problem(f"{key}.{field_name}", _unknown(field_name, TEMPLATE_FIELDS + ("model",)))
                else:
                    overrides[field_name] = item[field_name]
            if "model" not in item:
                problem(where, "required field missing")
                continue
            item = item["model"]
        else:
            where = key
        if not isinstance(item, str) or not item.strip():
            problem(where, f"expected the path of a model file, got {short(item)}")
            continue
        model_path = Path(os.path.abspath(source.parent / item))
        if not model_path.is_file():
            problem(where, f"file not found: {model_path}")
            continue
        entries.append(ModelEntry(name, model_path, overrides))
    return entries


def _check_job_fields(matrix: Matrix, shown: str) -> list[str]:
    """Validate the generated jobs with coach.inputs.jobs, in memory, and report problems against the matrix's fields.

    Each job is checked as run_experiment's job file will read back (job_file_text, parsed with the job-file
    dialect), so what passes here is what the runs load.
    """
    lines: list[str] = []
    job = "job"  # the name check_job puts before each problem; replaced by the matrix's
    most = max(matrix.jobs)
    for entry in matrix.models:
        for allocation in matrix.allocation:
            cell = Cell("check", entry.name, most, allocation, matrix.schedulers[0])
            documents = job_documents(matrix, cell)
            # the first job, and the last of the largest cell: only the seed (seed + i - 1) differs between them
            checked: list[str] = []
            for index in sorted({0, len(documents) - 1}):
                parsed = yaml.load(job_file_text(documents[index]), Loader=YamlLoader)  # noqa: S506
                for line in check_job(parsed, job, matrix.source.parent).lines:
                    if index == 0:
                        checked.append(line)
                    elif line.startswith(f"{job}: seed: ") and not any(
                            first.startswith(f"{job}: seed: ") for first in checked):
                        checked.append(f"{line} (the seed of job {index + 1} of {most}: seed + {index})")
            for line in checked:
                text = line.removeprefix(f"{job}: ")
                key, _, message = text.partition(": ")
                top = key.split(".")[0]
                if top in entry.overrides:
                    key = f"models.{entry.name}.{key}"
                elif top == "model":
                    key = f"models.{entry.name}"
                elif top in ("workers", "servers") and allocation == "static":
                    key = f"static.{key}"
                if message == "required field missing":
                    message += f" (give it at the top level or under models.{entry.name})"
                out = f"{shown}: {key}: {message}"
                if out not in lines:
                    lines.append(out)
    return lines


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class ExperimentReport:
    """What `run_experiment` left behind, and how it ended."""

    experiment_id: str  # folder name under <results>/experiments/
    experiment_dir: Path  # the folder the experiment wrote
    manifest: dict  # what manifest.json holds
    exit_code: int  # 0 every run ended normally, 1 a run had a failed job, 130 interrupted


def _exit_code(codes: Sequence[int]) -> int:
    if EXIT_INTERRUPTED in codes:
        return EXIT_INTERRUPTED
    return 0 if all(code == 0 for code in codes) else 1


def _jct_text(summary: Mapping) -> str:
    jobs = summary.get("jobs", {})
    jcts = [job["jct_s"] for job in jobs.values() if job.get("jct_s") is not None]
    reasons: dict[str, int] = {}
    for job in jobs.values():
        reasons[str(job.get("stop_reason"))] = reasons.get(str(job.get("stop_reason")), 0) + 1
    mean = f"{sum(jcts) / len(jcts):.1f} s" if jcts else "-"
    ends = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
    makespan = summary.get("makespan_s")
    return f"makespan {'-' if makespan is None else f'{makespan:.1f} s'}, mean JCT {mean} ({ends})"


def run_experiment(matrix: Matrix, results_root: Path, repeat: int | None = None,
                   say: Callable[[str], None] = lambda line: print(line, flush=True),
                   runner: Callable[..., Any] | None = None, detect: float | None = None,
                   most_repeats: int = 100) -> ExperimentReport:
    """Run every cell `repeat` times (default: the matrix's), sequentially; keep manifest.json current.

    With `detect` (a fraction of the mean JCT), those runs are a pilot: from its variance, the cells are repeated
    as often as `coach compare` needs to detect that difference (coach.analysis.power), at most `most_repeats`.
    `runner` is `coach.app.run.run_jobs` unless a test passes another with the same keyword arguments.
    """
    if runner is None:
        from coach.app.run import run_jobs as runner  # imported here so validation stays fast
    repeat = matrix.repeat if repeat is None else repeat
    experiment_id = f"{matrix.name}-{new_run_id()}"
    experiment_dir = Path(results_root) / "experiments" / experiment_id
    experiment_dir.mkdir(parents=True, exist_ok=False)
    plan = cells(matrix)
    manifest: dict[str, Any] = {
        "experiment_id": experiment_id, "name": matrix.name, "matrix_file": str(matrix.source),
        "matrix": matrix.raw, "repeat": repeat, "cluster": matrix.cluster.to_dict(),
        "placement_timeout_s": matrix.placement_timeout_s, "started": iso(time.time()), "ended": None,
        "exit_code": None, "interrupted": False, "cells": [],
    }
    try:  # until manifest.json exists, the folder is a half experiment: one interrupted here is removed
        entries, specs = _prepare_cells(matrix, plan, experiment_dir, manifest)
        write_json_atomic(experiment_dir / MANIFEST, manifest)
    except BaseException:
        shutil.rmtree(experiment_dir, ignore_errors=True)
        raise

    total, pilot = len(plan) * repeat, repeat
    pilot_of = " (the pilot)" if detect is not None else ""
    say(f"experiment {experiment_id}: {len(plan)} cells x {repeat} repeat(s) = {total} runs{pilot_of} -> "
        f"{experiment_dir}")
    codes: list[int] = []
    jcts: dict[str, list[list[float]]] = {cell.cell_id: [] for cell in plan}  # cell -> each run's JCTs
    step = 0
    finished = False  # False while an unexpected error propagates: the manifest then has no exit code
    try:
        repetition = 0
        while repetition < repeat:
            repetition += 1
            for cell in plan:
                step += 1
                head = f"[{step}/{total}] {cell.cell_id}" + (f" (repeat {repetition}/{repeat})" if repeat > 1 else "")
                say(f"{time.strftime('%H:%M:%S')} {head}: started")
                began_s = time.monotonic()
                report = runner(specs[cell.cell_id], matrix.cluster, experiment_dir / cell.cell_id, view="quiet",
                                scheduler=cell.scheduler, placement_timeout_s=matrix.placement_timeout_s)
                wall_s = time.monotonic() - began_s
                codes.append(report.exit_code)
                jcts[cell.cell_id].append(_finished_jcts(report.summary))
                entries[cell.cell_id]["runs"].append(_run_entry(report, repetition, wall_s, experiment_dir))
                write_json_atomic(experiment_dir / MANIFEST, manifest)
                say(f"{time.strftime('%H:%M:%S')} {head}: exit {report.exit_code} after {wall_s:.1f} s, "
                    f"{_jct_text(report.summary)}")
                if report.exit_code == EXIT_INTERRUPTED:
                    raise KeyboardInterrupt
            if detect is not None and repetition == pilot and "detect" not in manifest:  # plan the rest from it
                found = repetitions_to_detect(detect, jcts, max(pilot, min(most_repeats, MAX_RUNS // len(plan))))
                manifest["detect"] = found
                repeat = manifest["repeat"] = found["repeat"]
                total = len(plan) * repeat
                write_json_atomic(experiment_dir / MANIFEST, manifest)
                say(_detect_text(found, len(plan)))
        finished = True
    except KeyboardInterrupt:  # Ctrl-C between runs, or a run that was interrupted
        codes.append(EXIT_INTERRUPTED)
        manifest["interrupted"] = True
        recorded = sum(len(entry["runs"]) for entry in entries.values())
        say(f"experiment {experiment_id}: interrupted; {recorded} of {total} runs recorded")
        finished = True
    finally:
        manifest["ended"] = iso(time.time())
        manifest["exit_code"] = _exit_code(codes) if finished else None
        write_json_atomic(experiment_dir / MANIFEST, manifest)
    return ExperimentReport(experiment_id, experiment_dir, manifest, manifest["exit_code"])


def _prepare_cells(matrix: Matrix, plan: Sequence[Cell], experiment_dir: Path,
                   manifest: dict[str, Any]) -> tuple[dict[str, dict], dict[str, list[JobSpec]]]:
    """Write every cell's job files and add its entry to `manifest["cells"]`; (entries, job specs) by cell id."""
    entries: dict[str, dict] = {}
    specs: dict[str, list[JobSpec]] = {}
    for cell in plan:
        paths = _write_job_files(matrix, cell, experiment_dir / cell.cell_id / "jobs")
        specs[cell.cell_id] = load_jobs(paths)
        counts = ALLOCATIONS[cell.allocation](matrix)
        entries[cell.cell_id] = {**cell.params(), "workers": counts.get("workers"), "servers": counts.get("servers"),
                                 "job_files": [str(p.relative_to(experiment_dir)) for p in paths], "runs": []}
        manifest["cells"].append(entries[cell.cell_id])
    return entries, specs


def _write_job_files(matrix: Matrix, cell: Cell, jobs_dir: Path) -> list[Path]:
    """Write the job files of one cell's run into `jobs_dir` (made here); their paths, in job order."""
    jobs_dir.mkdir(parents=True)
    paths = []
    for document in job_documents(matrix, cell):
        path = jobs_dir / f"{document['name']}.yaml"
        path.write_text(job_file_text(document))
        paths.append(path)
    return paths


def _finished_jcts(summary: Mapping) -> list[float]:
    """The JCTs of a run's jobs that have one and were not interrupted: what the pilot's variance is taken from."""
    return [job["jct_s"] for job in summary.get("jobs", {}).values()
            if job.get("jct_s") is not None and job.get("stop_reason") != "interrupted"]


def _run_entry(report: Any, repetition: int, wall_s: float, experiment_dir: Path) -> dict[str, Any]:
    """What manifest.json keeps of one run of a cell (its folder relative to the experiment's)."""
    return {"repetition": repetition, "run_id": report.run_id,
            "run_dir": str(Path(report.run_dir).resolve().relative_to(experiment_dir.resolve())),
            "exit_code": report.exit_code, "makespan_s": report.summary.get("makespan_s"),
            "wall_s": round(wall_s, 3)}


def _detect_text(plan: Mapping[str, Any], cells_: int) -> str:
    """One line: what the pilot showed and how many repetitions follow."""
    noisiest = max(plan["cells"].items(), key=lambda item: item[1]["runs_needed"])
    cell, found = noisiest
    why = (f"{cell} has mean JCT {found['mean_jct_s']:.1f} s, sd {found['sd_jct_s']:.1f} s, so d = "
           f"{found['cohens_d']:.2f} needs {found['jobs_needed']} jobs a side" if found["cohens_d"] is not None
           else f"{cell} gave fewer than 2 JCTs (or no spread)")
    capped = f" (capped: {plan['wanted']} wanted)" if plan["capped"] else ""
    return (f"detect {plan['effect'] * 100:g}% (alpha {plan['alpha']:g}, power {plan['power']:g}): {why}; "
            f"{plan['repeat']} repeat(s) of {cells_} cells{capped}")


# --------------------------------------------------------------------------- selecting runs (for compare)


@dataclass(frozen=True)
class RunData:
    """One run as compare sees it."""

    label: str  # short name: `<cell>#<repetition>` for experiment runs, else the run id
    run_dir: Path  # the run's folder
    summary: Mapping[str, Any]  # summary.json
    logs: Mapping[str, list[dict]]  # job name -> its log records
    cell: Mapping[str, Any] | None  # the cell's parameters when the run belongs to an experiment


@dataclass(frozen=True)
class Selection:
    argument: str  # as the user gave it
    label: str  # short name for tables and plots
    base_dir: Path  # experiment folder, or the run folder's parent: where compare writes by default
    runs: tuple[RunData, ...]  # at least one


def _read_json(path: Path, argument: str) -> Any:
    try:
        return read_json(path)
    except FileNotFoundError:
        raise SelectionError(f"{argument}: {path.name}: file not found: {path}") from None
    except (FileTooLarge, NotRegularFile) as error:
        raise SelectionError(f"{argument}: {path.name}: cannot read: {error}") from None
    except OSError as error:
        raise SelectionError(f"{argument}: {path.name}: cannot read: {error.strerror or error}") from None
    except ValueError as error:
        raise SelectionError(f"{argument}: {path.name}: not JSON: {one_line(str(error), 200)}") from None


def read_run(run_dir: Path, argument: str, label: str | None = None, cell: Mapping | None = None) -> RunData:
    """A run folder's summary.json and job logs; every problem is a one-line SelectionError."""
    summary = _read_json(run_dir / SUMMARY, argument)
    if not isinstance(summary, dict) or not isinstance(summary.get("jobs"), dict) or "started" not in summary:
        raise SelectionError(f"{argument}: {SUMMARY}: expected a run summary with 'started' and 'jobs' in {run_dir}")
    problem = check_summary(summary)
    if problem is not None:
        raise SelectionError(f"{argument}: {SUMMARY}: {problem[0]}: {problem[1]} (in {run_dir})")
    logs = {}
    for job in summary["jobs"]:
        if not JOB_NAME.fullmatch(job):
            raise SelectionError(f"{argument}: {SUMMARY}: jobs: {short(job)} is not a job name (in {run_dir})")
        path = run_dir / f"{job}.jsonl"
        if not path.exists() and not path.is_symlink():  # every run writes each job's log before its summary
            raise SelectionError(f"{argument}: {path}: (file): not found ({SUMMARY} lists job {job}, its log is "
                                 "missing)")
        try:
            logs[job] = checked_records(path)
        except RunInputError as error:
            raise SelectionError(f"{argument}: {error}") from None
    return RunData(label or run_dir.name, run_dir, summary, logs, cell)


def _manifest_cells(manifest: Any, argument: str) -> list[dict]:
    """The cells of an experiment's manifest.json, each checked for what selecting runs reads of it."""
    def wrong(where: str, message: str) -> SelectionError:
        return SelectionError(f"{argument}: {MANIFEST}: {where}: {message}")

    if not isinstance(manifest, dict):
        raise wrong("(file)", f"expected a JSON object, got {type(manifest).__name__}")
    cells_ = manifest.get("cells", [])
    if not isinstance(cells_, list):
        raise wrong("cells", f"expected a list, got {describe(cells_)}")
    for i, cell in enumerate(cells_):
        if not isinstance(cell, dict):
            raise wrong(f"cells[{i}]", f"expected a mapping, got {describe(cell)}")
        if not isinstance(cell.get("cell"), str):
            raise wrong(f"cells[{i}].cell", f"expected a string, got {describe(cell.get('cell'))}")
        runs = cell.get("runs", [])
        if not isinstance(runs, list):
            raise wrong(f"cells[{i}].runs", f"expected a list, got {describe(runs)}")
        for j, run in enumerate(runs):
            where = f"cells[{i}].runs[{j}]"
            if not isinstance(run, dict):
                raise wrong(where, f"expected a mapping, got {describe(run)}")
            if not isinstance(run.get("run_dir"), str) or "\0" in run["run_dir"]:
                raise wrong(f"{where}.run_dir", f"expected a path, got {describe(run.get('run_dir'))}")
    return cells_


def _experiment_runs(experiment_dir: Path, argument: str, keep: Callable[[dict], bool]) -> list[RunData]:
    manifest = _read_json(experiment_dir / MANIFEST, argument)
    runs = []
    for cell in _manifest_cells(manifest, argument):
        if not keep(cell):
            continue
        params = {key: cell.get(key) for key in SELECTOR_KEYS}
        for run in cell.get("runs", []):
            runs.append(read_run(experiment_dir / run["run_dir"], argument,
                                 label=f"{cell['cell']}#{run.get('repetition', 1)}", cell=params))
    return runs


def parse_selector(text: str, argument: str) -> dict[str, set[str]]:
    """`scheduler=gang,jobs=1|2` -> {"scheduler": {"gang"}, "jobs": {"1", "2"}}."""
    conditions: dict[str, set[str]] = {}
    for part in text.split(","):
        key, equals, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not equals or not key or not value:
            raise SelectionError(f"{argument}: (selector): expected KEY=VALUE[,KEY=VALUE...], got {short(part)}")
        if key not in SELECTOR_KEYS:
            raise SelectionError(f"{argument}: {key}: unknown selector key; known: {', '.join(SELECTOR_KEYS)}")
        conditions.setdefault(key, set()).update(v.strip() for v in value.split("|"))
    return conditions


def select_runs(argument: str) -> Selection:
    """Resolve one `coach compare` argument (see the module docstring) to its runs."""
    path = Path(argument)
    if path.is_dir():
        if (path / SUMMARY).exists():  # a summary.json that is not a regular file is named so by read_run
            return Selection(argument, path.name, path.parent, (read_run(path, argument),))
        if (path / MANIFEST).is_file():
            runs = _experiment_runs(path, argument, lambda cell: True)
            return _selection(argument, path.name, path, runs)
        if (path.parent / MANIFEST).is_file():
            runs = _experiment_runs(path.parent, argument, lambda cell: cell.get("cell") == path.name)
            return _selection(argument, path.name, path.parent, runs)
        raise SelectionError(f"{argument}: (argument): not a run folder ({SUMMARY}), an experiment folder "
                             f"({MANIFEST}) or a cell of one")
    head, colon, selector = argument.rpartition(":")
    experiment_dir = Path(head)
    if not colon or not (experiment_dir / MANIFEST).is_file():
        if colon and "=" in selector:
            raise SelectionError(f"{argument}: (argument): {head} is not an experiment folder (no {MANIFEST})")
        raise SelectionError(f"{argument}: (argument): no such folder")
    conditions = parse_selector(selector, argument)
    manifest = _read_json(experiment_dir / MANIFEST, argument)
    for key, wanted in conditions.items():
        present = sorted({str(cell.get(key)) for cell in _manifest_cells(manifest, argument)})
        missing = sorted(wanted - set(present))
        if missing:
            raise SelectionError(f"{argument}: {key}: no cell has {key} {'|'.join(missing)}; "
                                 f"present: {', '.join(present)}")

    def keep(cell: dict) -> bool:
        return all(str(cell.get(key)) in wanted for key, wanted in conditions.items())

    return _selection(argument, selector, experiment_dir, _experiment_runs(experiment_dir, argument, keep))


def _selection(argument: str, label: str, base_dir: Path, runs: list[RunData]) -> Selection:
    if not runs:
        raise SelectionError(f"{argument}: (argument): selects no finished run")
    return Selection(argument, label, base_dir, tuple(runs))
