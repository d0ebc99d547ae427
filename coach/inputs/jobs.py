"""Job files -> validated, frozen :class:`JobSpec` objects.

Why this module exists: a job file is written by a person, and a mistake in it
(a misspelt key, ``batch_size: "64"``, a budget of ``-1``, a model file that
does not define ``build_model``) must be caught *before* any worker is started
or any money is spent.  Every problem is reported as one clean line::

    FILE: FIELD: what is wrong

where FILE is the path exactly as the user gave it and FIELD is the YAML key
(dotted for nested keys, ``(file)`` for problems with the file as a whole).
All problems of all files are collected and raised together in one
:class:`JobFileError`, so a user fixes everything in one round.

Every number has a bound (``JOB_BOUNDS``), every optimizer parameter must be one
MXNet 1.9.1's optimizer takes (``OPTIMIZER_PARAMS``), and the file itself has the
caps of :mod:`coach.inputs.limits` (size, YAML values after expanding aliases,
nesting), so no job file costs more than a one-line error to refuse.

Side effects: none besides *reading* the job files and the model files they
name.  The model file is parsed with :mod:`ast` and never imported or executed,
and this module does not import mxnet, so validation stays fast.
"""

from __future__ import annotations

import ast
import difflib
import math
import os
import re
import warnings
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from coach.domain.jobs import OPTIMIZERS, JobSpec
from coach.estimates.batch_size import SCALINGS
from coach.inputs.limits import (MAX_JOB_FILE_BYTES, MAX_JOB_VALUES, MAX_MESSAGE, MAX_MODEL_FILE_BYTES, Bound,
                                BoundedLoader, FileTooLarge, NotRegularFile, YamlLimitError, YamlValueError,
                                describe, field_name, one_line, read_capped, short)
from coach.inputs.yaml_errors import FILE_FIELD, invalid_yaml  # FILE_FIELD: FIELD of problems with the whole file

__all__ = ["OPTIMIZERS", "OPTIMIZER_PARAMS", "JOB_BOUNDS", "JOB_FIELDS", "JobCheck", "JobFileError", "JobSpec",
           "YamlLoader", "check_job", "load_job", "load_jobs"]

#: Top-level functions a model file must define.
MODEL_FUNCTIONS: tuple[str, ...] = ("build_model", "load_data")

# The job name becomes a file name (results/<name>/...), so no separators,
# no leading dot, no spaces.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

_REQUIRED: tuple[str, ...] = (
    "name", "model", "batch_size", "optimizer",
    "learning_rate", "target_loss", "max_epochs", "budget",
)
# Every known key, in the order problems are reported.
_KNOWN: tuple[str, ...] = (
    "name", "model", "batch_size", "optimizer", "optimizer_params",
    "learning_rate", "target_loss", "consecutive", "max_epochs", "budget",
    "workers", "servers", "max_workers", "max_servers", "seed", "epoch_timeout_s",
    "calibration_fraction", "max_retries",
)
_DEFAULTS: dict[str, Any] = {
    "optimizer_params": {},
    "consecutive": 3,
    "workers": None,
    "servers": None,
    "max_workers": None,
    "max_servers": None,
    "seed": 0,
    "epoch_timeout_s": 600.0,
    "calibration_fraction": 0.25,
    "max_retries": 3,
}
# Optional fields whose default is "not given": an explicit YAML null is accepted.
_NULLABLE = frozenset({"workers", "servers", "max_workers", "max_servers"})

#: Largest count of workers (or servers) of one job: each is a process on this machine.
MAX_FUNCTIONS_PER_ROLE = 1024
#: Largest amount of money (a job's budget, `coach plan --budget-left`, a run's recorded costs): finite, and far
#: beyond any real job.
MAX_MONEY = 1e12
#: Every numeric field of a job file and its bounds, checked at validation (docs/job-files.md, "Job files", lists them).
#: `consecutive` is also at most `max_epochs`, and `workers`/`servers` at most `max_workers`/`max_servers`.
JOB_BOUNDS: dict[str, Bound] = {
    "batch_size": Bound(True, 1, 1_000_000),
    "consecutive": Bound(True, 1, 1_000_000),
    "max_epochs": Bound(True, 1, 1_000_000),
    "workers": Bound(True, 1, MAX_FUNCTIONS_PER_ROLE),
    "servers": Bound(True, 1, MAX_FUNCTIONS_PER_ROLE),
    "max_workers": Bound(True, 1, MAX_FUNCTIONS_PER_ROLE),
    "max_servers": Bound(True, 1, MAX_FUNCTIONS_PER_ROLE),
    "seed": Bound(True, 0, 2**32 - 1),
    "max_retries": Bound(True, 0, 100),
    "learning_rate": Bound(False, 0.0, 1e6, low_exclusive=True),
    "target_loss": Bound(False, 0.0, 1e12),
    "budget": Bound(False, 0.0, MAX_MONEY, low_exclusive=True),
    "epoch_timeout_s": Bound(False, 0.0, 7 * 24 * 3600, low_exclusive=True),
    "calibration_fraction": Bound(False, 0.0, 1.0, low_exclusive=True),
}

# The keyword arguments of MXNet 1.9.1's optimizers: each class's own `__init__` parameters plus those of
# `mxnet.optimizer.Optimizer.__init__`, which every one passes its **kwargs to (read from mxnet 1.9.1 once and
# written here, so validation never imports mxnet; tests/unit/test_jobs.py compares the table with mxnet).
_MXNET_OPTIMIZER_BASE = ("rescale_grad", "param_idx2name", "wd", "clip_gradient", "learning_rate", "lr_scheduler",
                         "sym", "begin_num_update", "multi_precision", "param_dict")
MXNET_OPTIMIZER_KWARGS: dict[str, tuple[str, ...]] = {
    "sgd": ("momentum", "lazy_update") + _MXNET_OPTIMIZER_BASE,
    "nag": ("momentum",) + _MXNET_OPTIMIZER_BASE,
    "adam": ("learning_rate", "beta1", "beta2", "epsilon", "lazy_update") + _MXNET_OPTIMIZER_BASE,
    "rmsprop": ("learning_rate", "gamma1", "gamma2", "epsilon", "centered", "clip_weights") + _MXNET_OPTIMIZER_BASE,
    "adagrad": ("eps",) + _MXNET_OPTIMIZER_BASE,
    "adadelta": ("rho", "epsilon") + _MXNET_OPTIMIZER_BASE,
}
# MXNet keyword arguments a job file cannot set: they take Python objects (or Coach's runtime sets them).
_OBJECT_KWARGS = frozenset({"param_idx2name", "lr_scheduler", "sym", "param_dict"})
#: optimizer -> the names its `optimizer_params` may use (numbers; the learning rate is the top-level field).
OPTIMIZER_PARAMS: dict[str, tuple[str, ...]] = {
    name: tuple(sorted(set(kwargs) - _OBJECT_KWARGS - {"learning_rate"}))
    for name, kwargs in MXNET_OPTIMIZER_KWARGS.items()
}
# Common wrong names that difflib would not match.
_ALIASES: dict[str, str] = {
    "lr": "learning_rate",
    "model_path": "model",
    "model_file": "model",
    "epochs": "max_epochs",
    "timeout": "epoch_timeout_s",
    "epoch_timeout": "epoch_timeout_s",
}
_LR_KEYS = frozenset({"learning_rate", "lr"})


class JobFileError(Exception):
    """One or more invalid job files.

    ``lines`` holds one line per problem, each ``"FILE: FIELD: what is wrong"``;
    ``str(error)`` is those lines joined by newlines.
    """

    def __init__(self, lines: Sequence[str]):
        self.lines: list[str] = [_one_line(line) for line in lines]
        super().__init__("\n".join(self.lines))


def load_job(path: str | Path) -> JobSpec:
    """Read and validate one job file; raise :class:`JobFileError` listing every problem."""
    result = _load_one(path)
    if result.spec is None:
        raise JobFileError(result.lines)
    return result.spec


def load_jobs(paths: Sequence[str | Path]) -> list[JobSpec]:
    """Validate all job files; raise one :class:`JobFileError` with the problems of all of them.

    Job names must be unique across the files (they name result folders).
    """
    if isinstance(paths, (str, os.PathLike)):
        raise TypeError("load_jobs() takes a sequence of paths; use load_job() for one path")
    lines: list[str] = []
    specs: list[JobSpec] = []
    first_with_name: dict[str, str] = {}
    for path in paths:
        result = _load_one(path)
        lines.extend(result.lines)
        if result.name is not None:
            shown = str(path)
            if result.name in first_with_name:
                lines.append(
                    f"{shown}: name: duplicate job name {result.name!r} "
                    f"(also in {first_with_name[result.name]})"
                )
            else:
                first_with_name[result.name] = shown
        if result.spec is not None:
            specs.append(result.spec)
    if lines:
        raise JobFileError(lines)
    return specs


# --------------------------------------------------------------------------- internals


def _one_line(text: str) -> str:
    return " ".join(text.splitlines()) if ("\n" in text or "\r" in text) else text


_describe = describe  # ``str '64'``, ``float 2.5``, ``bool True``, ``null`` -- never the repr of a huge value


@dataclass(frozen=True)
class JobCheck:
    """What validating one job gave: the spec, or the problems (never both)."""

    lines: tuple[str, ...]  # one `SHOWN: FIELD: what is wrong` line per problem; empty when spec is given
    spec: JobSpec | None = None  # the validated job, when there is no problem
    name: str | None = None  # the job name if that field alone was valid (load_jobs finds duplicates with it)


class _Problems:
    def __init__(self, shown: str):
        self.shown = shown
        self.lines: list[str] = []

    def add(self, key: str, message: str) -> None:
        self.lines.append(f"{_one_line(self.shown)}: {one_line(f'{key}: {message}', MAX_MESSAGE)}")


class _Loader(BoundedLoader):
    """SafeLoader that also reads YAML 1.2 floats such as ``1e-3`` (YAML 1.1 reads a string), with the bounds of
    :class:`~coach.inputs.limits.BoundedLoader` (depth, values after expanding aliases)."""

    max_values = MAX_JOB_VALUES


_Loader.yaml_implicit_resolvers = {
    key: list(value) for key, value in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _duplicate_keys(node: yaml.Node, prefix: str, seen: set[int]) -> list[tuple[str, int, int]]:
    """(dotted key, first line, repeated line) for every repeated key in the node tree."""
    if id(node) in seen:
        return []
    seen.add(id(node))
    found: list[tuple[str, int, int]] = []
    if isinstance(node, yaml.MappingNode):
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = None
            if isinstance(key_node, yaml.ScalarNode):
                key = f"{prefix}{key_node.value}"
                line = key_node.start_mark.line + 1
                if key in first_line:
                    found.append((key, first_line[key], line))
                else:
                    first_line[key] = line
            found.extend(_duplicate_keys(value_node, f"{key}." if key else prefix, seen))
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            found.extend(_duplicate_keys(item, prefix, seen))
    return found


def _read_mapping(path: Path, problems: _Problems) -> tuple[Any, set[str]]:
    """The job file's top-level value (None when it could not be read) and its duplicated top-level keys."""
    if not path.exists():
        problems.add(FILE_FIELD, "file not found")
        return None, set()
    if path.is_dir():
        problems.add(FILE_FIELD, "is a directory, expected a YAML job file")
        return None, set()
    try:
        text = read_capped(path, MAX_JOB_FILE_BYTES).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        problems.add(FILE_FIELD, f"not UTF-8 text (byte {exc.start})")
        return None, set()
    except (FileTooLarge, NotRegularFile) as exc:
        problems.add(FILE_FIELD, str(exc))
        return None, set()
    except OSError as exc:
        problems.add(FILE_FIELD, f"cannot read file: {exc.strerror or exc}")
        return None, set()
    return parse_job_text(text, problems)


def parse_job_text(text: str, problems: _Problems) -> tuple[Any, set[str]]:
    """A job document's top-level value (None when it is not one) and its duplicated top-level keys; YAML, so
    JSON too. Its problems go to `problems`."""
    loader = None
    try:
        loader = _Loader(text)  # the reader refuses control characters already here
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None  # checks the bounds first
        duplicates = _duplicate_keys(node, "", set()) if node is not None else []
    except (YamlLimitError, YamlValueError) as exc:
        problems.add(FILE_FIELD, str(exc))
        return None, set()
    except yaml.YAMLError as exc:
        problems.add(FILE_FIELD, invalid_yaml(exc))
        return None, set()
    finally:
        if loader is not None:
            loader.dispose()

    if data is None:
        problems.add(FILE_FIELD, "file is empty, expected a mapping of job fields")
        return None, set()
    if not isinstance(data, dict):
        return data, set()  # check_job reports that the top level must be a mapping
    for key, first, again in duplicates:
        problems.add(key, f"duplicate key (lines {first} and {again})")
    return data, {key for key, _, _ in duplicates if "." not in key}


def _check_number(key: str, value: Any, problems: _Problems) -> int | float | None:
    """The value of a numeric field when JOB_BOUNDS[key] allows it (floats as float), else None and a problem."""
    checked, problem = JOB_BOUNDS[key].check(value)
    if problem is not None:
        problems.add(key, problem)
    return checked


def _as_number(value: Any) -> float | None:
    """float(value) for finite YAML ints/floats; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _check_name(value: Any, problems: _Problems) -> str | None:
    if not isinstance(value, str):
        problems.add("name", f"expected a string, got {_describe(value)}")
        return None
    if not _NAME_RE.fullmatch(value):
        problems.add(
            "name",
            "must be 1-64 characters from letters, digits, '.', '_', '-' starting with "
            f"a letter or digit (it is used as a file name), got {short(value, 80)}",
        )
        return None
    return value


def _check_optimizer(value: Any, problems: _Problems) -> str | None:
    if not isinstance(value, str):
        problems.add("optimizer", f"expected a string, got {_describe(value)}")
        return None
    if value not in OPTIMIZERS:
        allowed = ", ".join(sorted(OPTIMIZERS))
        hint = difflib.get_close_matches(value.lower()[:64], sorted(OPTIMIZERS), n=1)
        suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
        problems.add("optimizer", f"unknown optimizer {short(value)}, allowed: {allowed}{suffix}")
        return None
    return value


def _unknown_optimizer_param(key: str, optimizer: str) -> str | None:
    """What is wrong with `optimizer_params.<key>` for `optimizer`, or None when MXNet's optimizer takes it."""
    allowed = OPTIMIZER_PARAMS[optimizer]
    if key in allowed:
        return None
    if key in MXNET_OPTIMIZER_KWARGS[optimizer]:
        return f"cannot be set in a job file (MXNet's {optimizer!r} takes a Python object there)"
    hint = difflib.get_close_matches(key[:64], allowed, n=1)
    return (f"unknown parameter of optimizer {optimizer!r}; allowed: {', '.join(allowed)}"
            + (f" (did you mean {hint[0]!r}?)" if hint else ""))


def _check_optimizer_params(value: Any, problems: _Problems, optimizer: str | None = None) -> dict[str, float] | None:
    """Names (checked against OPTIMIZER_PARAMS[optimizer] when the optimizer is known) and finite numbers."""
    if not isinstance(value, dict):
        problems.add(
            "optimizer_params",
            f"expected a mapping of parameter name to number, got {_describe(value)}",
        )
        return None
    params: dict[str, float] = {}
    ok = True
    for key, item in value.items():
        if not isinstance(key, str):
            problems.add("optimizer_params", f"parameter names must be strings, got {_describe(key)}")
            ok = False
            continue
        dotted = f"optimizer_params.{field_name(key)}"
        if key in _LR_KEYS:
            problems.add(dotted, "not allowed here, set the top-level 'learning_rate' field instead")
            ok = False
            continue
        unknown = _unknown_optimizer_param(key, optimizer) if optimizer is not None else None
        if unknown is not None:
            problems.add(dotted, unknown)
            ok = False
            continue
        number = _as_number(item)
        if number is None:
            problems.add(dotted, f"expected a number, got {_describe(item)}")
            ok = False
        elif not math.isfinite(number):
            problems.add(dotted, f"must be a finite number, got {number}")
            ok = False
        else:
            params[key] = number
    return params if ok else None


#: The keys of `batch_size` as a mapping: `{per_worker: 64, scaling: fixed|linear|adaptive}`.
BATCH_SIZE_KEYS: tuple[str, ...] = ("per_worker", "scaling")


def _check_batch_size(value: Any, problems: _Problems) -> tuple[int, str] | None:
    """(per-worker batch, scaling): a plain number means `{per_worker: N, scaling: fixed}`, as it always did."""
    if not isinstance(value, Mapping):
        per_worker = _check_number("batch_size", value, problems)
        return None if per_worker is None else (per_worker, "fixed")
    ok = True
    for key in value:
        if key not in BATCH_SIZE_KEYS:
            hint = difflib.get_close_matches(str(key)[:64], BATCH_SIZE_KEYS, n=1)
            problems.add(f"batch_size.{field_name(key)}", "unknown field, allowed: per_worker, scaling"
                         + (f" (did you mean {hint[0]!r}?)" if hint else ""))
            ok = False
    per_worker = None
    if "per_worker" not in value:
        problems.add("batch_size.per_worker", "required field missing")
        ok = False
    else:
        per_worker, problem = JOB_BOUNDS["batch_size"].check(value["per_worker"])
        if problem is not None:
            problems.add("batch_size.per_worker", problem)
            ok = False
    scaling = value.get("scaling", "fixed")
    if not isinstance(scaling, str):
        problems.add("batch_size.scaling", f"expected a string, got {_describe(scaling)}")
        ok = False
    elif scaling not in SCALINGS:
        problems.add("batch_size.scaling", f"unknown scaling {short(scaling)}, allowed: {', '.join(SCALINGS)}")
        ok = False
    return (per_worker, scaling) if ok else None


#: What is wrong with a model path that is not a regular file, by what is there instead.
_NOT_A_FILE: dict[str, str] = {
    "missing": "file not found: {model}",
    "dir": "is a directory, expected a .py file: {model}",
    "other": "not a regular file: {model}",
}


def _check_model(value: Any, job_dir: Path, problems: _Problems) -> Path | None:
    """The model file's absolute path when it is a .py file that defines MODEL_FUNCTIONS; else None and a problem."""
    model = _model_file(value, job_dir, problems)
    tree = None if model is None else _parse_model(model, problems)
    if tree is None:
        return None
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    missing = [name for name in MODEL_FUNCTIONS if name not in defined]
    if missing:
        problems.add(
            "model",
            f"{model} must define top-level function(s) {', '.join(MODEL_FUNCTIONS)}; "
            f"missing: {', '.join(missing)}",
        )
        return None
    return model


def _model_file(value: Any, job_dir: Path, problems: _Problems) -> Path | None:
    """The absolute path `value` names (relative to `job_dir`) when it is a regular .py file; else None."""
    if not isinstance(value, str):
        problems.add("model", f"expected a string (path of a .py file), got {_describe(value)}")
        return None
    if not value.strip():
        problems.add("model", "must not be empty, expected the path of a .py file")
        return None
    try:
        model = Path(os.path.abspath(job_dir / value))
        kind = "missing" if not model.exists() else "dir" if model.is_dir() else "file" if model.is_file() else "other"
    except (OSError, ValueError) as exc:  # a name too long for the file system, a NUL byte
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        problems.add("model", f"cannot use {short(value)}: {reason}")
        return None
    if kind in _NOT_A_FILE:
        problems.add("model", _NOT_A_FILE[kind].format(model=model))
        return None
    if model.suffix != ".py":
        problems.add("model", f"must be a .py file, got {model}")
        return None
    return model


def _parse_model(model: Path, problems: _Problems) -> ast.Module | None:
    """The model file's syntax tree, read with its size cap and never run; None when it cannot be read or parsed."""
    try:
        source = read_capped(model, MAX_MODEL_FILE_BYTES)
    except (FileTooLarge, NotRegularFile) as exc:
        problems.add("model", f"cannot read {model}: {exc}")
        return None
    except OSError as exc:
        problems.add("model", f"cannot read {model}: {exc.strerror or exc}")
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. SyntaxWarning for odd escapes
            return ast.parse(source, filename=str(model))
    except SyntaxError as exc:
        where = f" at line {exc.lineno}" if exc.lineno is not None else ""
        problems.add("model", f"syntax error in {model}{where}: {exc.msg}")
    except ValueError as exc:  # e.g. null bytes
        problems.add("model", f"cannot parse {model}: {exc}")
    except (RecursionError, MemoryError):  # nesting too deep for the parser
        problems.add("model", f"cannot parse {model}: nested too deeply")
    return None


def _unknown_field(key: Any) -> str:
    text = str(key)[:100]
    hint = _ALIASES.get(text) or next(
        iter(difflib.get_close_matches(text, _KNOWN, n=1, cutoff=0.6)), None
    )
    return f" (did you mean {hint!r}?)" if hint else ""


#: A field's own check: (value, problems, the job's folder, the fields checked before it) -> the field's value, or
#: None after adding its problems.
FieldCheck = Callable[[Any, "_Problems", Path, Mapping[str, Any]], Any]

#: The fields that are not plain numbers; every other field is checked against its JOB_BOUNDS.
_FIELD_CHECKS: dict[str, FieldCheck] = {
    "name": lambda value, problems, folder, earlier: _check_name(value, problems),
    "model": lambda value, problems, folder, earlier: _check_model(value, folder, problems),
    "optimizer": lambda value, problems, folder, earlier: _check_optimizer(value, problems),
    "optimizer_params": lambda value, problems, folder, earlier: _check_optimizer_params(
        value, problems, earlier.get("optimizer")),  # after optimizer in _KNOWN
    "batch_size": lambda value, problems, folder, earlier: _check_batch_size(value, problems),
}


def check_job(data: Any, shown: str, folder: str | Path, *, source: str | Path | None = None,
              duplicated: Collection[str] = ()) -> JobCheck:
    """Validate an already-parsed job mapping exactly as :func:`load_job` validates a job file's.

    ``shown`` starts every problem line (``SHOWN: FIELD: what is wrong``), as the file's path does for a job
    file; ``folder`` is the folder a relative ``model`` path is relative to. ``source`` becomes
    :attr:`JobSpec.source` (default: the absolute path of ``folder/shown``). ``duplicated`` names top-level keys
    the document repeated (a parsed mapping cannot show them): the caller reports them, so here they are only
    skipped, and they leave the job without a spec. Reads only the model file.
    """
    problems = _Problems(shown)
    if not isinstance(data, Mapping):
        problems.add(FILE_FIELD, f"top level must be a mapping of job fields, got {type(data).__name__}")
        return JobCheck(tuple(problems.lines))
    folder = Path(folder)
    source = Path(os.path.abspath(folder / shown if source is None else source))
    _check_keys(data, problems)
    values = _check_fields(data, folder, duplicated, problems)
    _check_across_fields(data, values, problems)
    name = values.get("name")
    if problems.lines or duplicated:
        return JobCheck(tuple(problems.lines), name=name)
    return JobCheck((), spec=_job_spec(values, source), name=name)


def _check_keys(data: Mapping, problems: _Problems) -> None:
    """Unknown keys (with a hint), then required keys that are missing."""
    for key in data:
        if key not in _KNOWN:
            problems.add(field_name(key), f"unknown field{_unknown_field(key)}")
    for key in _REQUIRED:
        if key not in data:
            problems.add(key, "required field missing")


def _check_fields(data: Mapping, folder: Path, duplicated: Collection[str], problems: _Problems) -> dict[str, Any]:
    """Every known field that is valid on its own, in _KNOWN's order; a repeated key is skipped (reported already)."""
    values: dict[str, Any] = {}
    for key in _KNOWN:
        if key not in data or key in duplicated:
            continue
        raw = data[key]
        if raw is None and key in _NULLABLE:
            values[key] = None  # explicit "not given"
            continue
        check = _FIELD_CHECKS.get(key)
        checked = check(raw, problems, folder, values) if check else _check_number(key, raw, problems)
        if checked is not None:
            values[key] = checked
    return values


def _check_across_fields(data: Mapping, values: Mapping[str, Any], problems: _Problems) -> None:
    """Rules between fields, only between fields that are present and valid on their own."""
    invalid = {key for key in _KNOWN if key in data and key not in values}
    for own, other in (("workers", "servers"), ("servers", "workers")):
        if (own not in invalid and other not in invalid
                and values.get(own) is not None and values.get(other) is None):
            problems.add(other, f"required when {own} is given (static job)")
    for count, limit in (("workers", "max_workers"), ("servers", "max_servers")):
        if values.get(count) is not None and values.get(limit) is not None and values[count] > values[limit]:
            problems.add(count, f"must be <= {limit} ({values[limit]}), got {values[count]}")
    if "consecutive" in values and "max_epochs" in values and values["consecutive"] > values["max_epochs"]:
        problems.add("consecutive", f"must be <= max_epochs ({values['max_epochs']}), got {values['consecutive']}")


def _job_spec(values: Mapping[str, Any], source: Path) -> JobSpec:
    """The JobSpec of a job whose fields are all valid, with the defaults of the fields it does not give."""
    merged = {**_DEFAULTS, **values}
    if "consecutive" not in values:  # the default never asks for more epochs than the job may train
        merged["consecutive"] = min(merged["consecutive"], merged["max_epochs"])
    return JobSpec(
        name=merged["name"],
        source=source,
        model_path=merged["model"],
        batch_size=merged["batch_size"][0],
        batch_scaling=merged["batch_size"][1],
        optimizer=merged["optimizer"],
        optimizer_params=dict(merged["optimizer_params"]),
        learning_rate=merged["learning_rate"],
        target_loss=merged["target_loss"],
        consecutive=merged["consecutive"],
        max_epochs=merged["max_epochs"],
        budget=merged["budget"],
        workers=merged["workers"],
        servers=merged["servers"],
        max_workers=merged["max_workers"],
        max_servers=merged["max_servers"],
        seed=merged["seed"],
        epoch_timeout_s=float(merged["epoch_timeout_s"]),
        calibration_fraction=float(merged["calibration_fraction"]),
        max_retries=merged["max_retries"],
    )


def check_job_text(text: str, shown: str, folder: str | Path,
                   vet: Callable[[Mapping], tuple[Mapping | None, Sequence[tuple[str, str]]]] = lambda data: (data, ())
                   ) -> JobCheck:
    """Validate a job document given as text (a server's request body) exactly as a job file's; `shown` starts
    every problem line. `vet` may rewrite the parsed mapping or refuse it: (None, [(field, why)...])."""
    problems = _Problems(shown)
    data, duplicated = parse_job_text(text, problems)
    if data is None:
        return JobCheck(tuple(problems.lines))
    if isinstance(data, Mapping):
        data, refused = vet(data)
        for key, message in refused:
            problems.add(key, message)
        if data is None:
            return JobCheck(tuple(problems.lines))
    checked = check_job(data, shown, folder, source=Path(folder) / shown, duplicated=duplicated)
    if problems.lines:
        return JobCheck(tuple(problems.lines) + checked.lines, name=checked.name)
    return checked


def _load_one(path: str | Path) -> JobCheck:
    """Read and validate one job file: problems reading it, else check_job's verdict on its mapping."""
    shown = str(path)
    problems = _Problems(shown)
    source = Path(os.path.abspath(Path(path)))
    data, duplicated = _read_mapping(source, problems)
    if data is None:
        return JobCheck(tuple(problems.lines))
    checked = check_job(data, shown, source.parent, source=source, duplicated=duplicated)
    if problems.lines:  # duplicated keys: the problems of the file come first, and there is no spec
        return JobCheck(tuple(problems.lines) + checked.lines, name=checked.name)
    return checked


#: Every field a job file may have (matrix files of `coach experiment` reuse it).
JOB_FIELDS: tuple[str, ...] = _KNOWN
#: The YAML dialect of job files: safe, with YAML 1.2 floats such as `1e-3`, and bounded (coach.inputs.limits).
YamlLoader = _Loader
#: What a job name may be (it becomes a file name).
JOB_NAME = _NAME_RE
