"""Run folders and results logs as input: checked here before anything reads them for real.

Why this module exists: `coach run --resume`, `coach plan`, `coach compare` and `coach report` read what an earlier
run wrote -- `run.json`, `summary.json`, `<job>.jsonl` -- and those files may be torn, edited by hand, or not
Coach's at all. The readers that use them (coach.policy.history, coach.app.run, coach.analysis) trust their types;
so every record, summary and manifest is checked here first, and a problem is one line naming the file, the line
and the field (`FILE: (line N): FIELD: what is wrong`), never a traceback and never a half-resumed run.

Side effects: `read_records`, `log_lines`, `checked_records` and `read_json` read one file each (under the
caps of coach.inputs.limits); the checks read nothing, but
`check_run_manifest` validates the manifest's jobs as job files are validated, so it parses their model files.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from coach.domain.records import MANIFEST_SCHEMA
from coach.inputs.cluster import ClusterFileError, parse_cluster
from coach.inputs.jobs import JOB_FIELDS, MAX_MONEY, check_job
from coach.inputs.limits import (MAX_LOG_BYTES, MAX_RUN_JSON_BYTES, Bound, FileTooLarge, LineTooLong, NotRegularFile,
                                capped_lines, describe, field_name, file_problem, one_line, read_capped, short)

#: Largest run.json / summary.json / manifest.json read, in bytes.
MAX_JSON_BYTES = MAX_RUN_JSON_BYTES
#: Largest number of seconds a record or a summary may hold (~31,700 years; `coach simulate`'s arrivals stop at
#: 1e10 s): far beyond any run, and small enough that sums of squares over millions of jobs stay finite, so the
#: statistics and plots of compare and report never overflow to infinity.
MAX_SECONDS = 1e12
#: Largest count (epochs, workers, samples, attempts) a record or a summary may hold: a float holds it exactly.
MAX_COUNT = 10**12
#: Phases whose records are epochs (or calibration mini-epochs): the ones a job's history is rebuilt from.
SPEED_PHASES = frozenset({"calibration", "training"})


class RunInputError(Exception):
    """A run folder, log or summary that cannot be used; the message is one `FILE: ...: what is wrong` line."""

    def __init__(self, line: str):
        super().__init__(one_line(line, 1000))


# --------------------------------------------------------------------------- reading


def read_records(path: Path, *, allow_torn_tail: bool = False) -> list[tuple[int, dict]]:
    """(line number, record) for every non-blank line of a JSON-lines log; RunInputError at the first bad line.

    The messages: `FILE: (file): ...` (missing, not a regular file, over MAX_LOG_BYTES),
    `FILE: (line N): longer than N bytes (the limit)`, `FILE: (line N): not JSON: ...`,
    `FILE: (line N): expected a JSON object`, `FILE: (line N): not UTF-8 text (byte K)`. With
    `allow_torn_tail`, a last line without its newline (a killed writer's; resume cuts it) is skipped unread.
    """
    return [(number, parsed_line(path, number, raw)) for number, raw in log_lines(path, allow_torn_tail=allow_torn_tail)
            if raw.strip()]


def log_lines(path: Path, *, allow_torn_tail: bool = False, max_bytes: int = MAX_LOG_BYTES) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of a JSON-lines log, streamed under its caps (`capped_lines`: regular files only, at
    most `max_bytes` in all and MAX_LOG_LINE_BYTES a line); a problem with the file is a RunInputError naming it.
    With `allow_torn_tail`, a last line without its newline is left out."""
    try:
        for number, raw in capped_lines(path, max_bytes):
            if allow_torn_tail and not raw.endswith(b"\n"):
                return
            yield number, raw
    except LineTooLong as error:
        raise RunInputError(f"{path}: (line {error.number}): {error}") from None
    except (FileTooLarge, NotRegularFile, OSError) as error:
        raise RunInputError(f"{path}: (file): {file_problem(error)}") from None


def parsed_line(path: Path, number: int, raw: bytes) -> dict:
    """Line `number` of a JSON-lines log as its object; RunInputError naming the file and the line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RunInputError(f"{path}: (line {number}): not UTF-8 text (byte {error.start})") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise RunInputError(f"{path}: (line {number}): not JSON: {error.msg}") from None
    except (ValueError, RecursionError) as error:  # e.g. an integer of 5,000 digits, or [[[[...]]]]
        raise RunInputError(f"{path}: (line {number}): not JSON: {type(error).__name__}") from None
    if not isinstance(record, dict):
        raise RunInputError(f"{path}: (line {number}): expected a JSON object")
    return record


def read_json(path: Path) -> Any:
    """A JSON file's value. Raises OSError, FileTooLarge, NotRegularFile, or ValueError (not UTF-8, not JSON)."""
    data = read_capped(path, MAX_JSON_BYTES)
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("nested too deeply") from None


# --------------------------------------------------------------------------- one value


Check = Callable[[Any], "str | None"]  # what is wrong with a value, or None


def _nullable(check: Check) -> Check:
    return lambda value: None if value is None else check(value)


def _integer(low: int = 0, high: int = MAX_COUNT) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"expected an integer, got {describe(value)}"
        if value < low:
            return f"must be >= {low}, got {short(value)}"
        return None if value <= high else f"must be <= {high}, got {short(value)}"

    return check


def _number(low: float = 0.0, high: float = MAX_SECONDS, low_exclusive: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"expected a number, got {describe(value)}"
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an integer too large for a float
            finite = False
        if not finite:
            return f"must be a finite number, got {short(value)}"
        if (value <= low) if low_exclusive else (value < low):
            return f"must be {'>' if low_exclusive else '>='} {low:g}, got {value!r}"
        return None if value <= high else f"must be <= {high:g}, got {value!r}"

    return check


def _loss(value: Any) -> str | None:
    """A loss: any number (a diverged epoch logs NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected a number, got {describe(value)}"
    return None


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) else f"expected a string, got {describe(value)}"


def _time(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"expected an ISO-8601 time, got {describe(value)}"
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return f"expected an ISO-8601 time, got {describe(value)}"
    return None


def _path(value: Any) -> str | None:
    if not isinstance(value, str) or "\0" in value:
        return f"expected a path, got {describe(value)}"
    return None


def _mapping(value: Any) -> str | None:
    return None if isinstance(value, dict) else f"expected a mapping, got {describe(value)}"


def _flag(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"expected true or false, got {describe(value)}"


#: Every field of a log record that Coach reads back, and what it must be when present (null allowed).
RECORD_FIELDS: dict[str, Check] = {
    "schema": _integer(0), "run_id": _text, "job": _text, "phase": _text, "epoch": _integer(0),
    "calibration_step": _integer(0), "data_fraction": _number(0.0, 1.0, low_exclusive=True),
    "workers": _integer(0), "servers": _integer(0), "placement": _mapping,
    "loss": _loss, "val_loss": _loss, "accuracy": _loss, "train_accuracy": _loss, "samples": _integer(0),
    "epoch_time_s": _number(), "compute_s": _number(), "warmup_s": _number(), "start": _time, "end": _time,
    "cost": _number(high=MAX_MONEY), "cumulative_cost": _number(high=MAX_MONEY), "budget": _number(high=MAX_MONEY),
    "stop_reason": _text, "attempt": _integer(0), "checkpoint": _path, "error": _text, "will_retry": _flag,
    "decision": _mapping, "charged_s": _number(),
}
RECORD_FIELDS = {key: _nullable(check) for key, check in RECORD_FIELDS.items()}


def check_record(record: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, what is wrong) for the first problem of one log record, or None.

    Every known field must have its type; an epoch (phase `calibration` or `training`) must also carry what a
    job's history is rebuilt from: workers and servers >= 1, its cost, its loss, and (training) its epoch number
    and a stop metric (val_loss, else loss).
    """
    for key, check in RECORD_FIELDS.items():
        if key in record:
            wrong = check(record[key])
            if wrong is not None:
                return key, wrong
    if record.get("phase") not in SPEED_PHASES:
        return None
    for key in ("workers", "servers"):
        if not isinstance(record.get(key), int) or record[key] < 1:
            return key, f"an epoch needs {key} >= 1, got {describe(record.get(key))}"
    for key in ("cost", "loss"):
        if key not in record:
            return key, "required field missing (an epoch carries it)"
    if record.get("cost") is None:
        return "cost", "an epoch needs its cost, got null"
    if record["phase"] == "training":
        if record.get("epoch") is None:
            return "epoch", "required field missing (a training epoch carries it)"
        if record.get("val_loss") is None and record.get("loss") is None:
            return "loss", "a training epoch needs loss or val_loss, got null for both"
    if record.get("start") and record.get("end") is None:
        return "end", "required with start"
    return None


def checked_records(path: Path, *, allow_torn_tail: bool = False,
                    keep: Callable[[dict], bool] = lambda record: True) -> list[dict]:
    """read_records, then check_record on every record `keep` selects; RunInputError at the first problem."""
    records = ((number, parsed_line(path, number, raw))  # streamed: only the records kept are held
               for number, raw in log_lines(path, allow_torn_tail=allow_torn_tail) if raw.strip())
    return [checked(path, number, record) for number, record in records if keep(record)]


def checked(path: Path, number: int, record: dict) -> dict:
    """`record` (line `number` of `path`) when check_record finds nothing wrong; else RunInputError naming it."""
    problem = check_record(record)
    if problem is not None:
        raise RunInputError(f"{path}: (line {number}): {problem[0]}: {problem[1]}")
    return record


def checked_line(path: Path, number: int, raw: bytes) -> dict:
    """One raw line of a log, parsed and checked (a reader that streams a large log keeps only what it needs)."""
    return checked(path, number, parsed_line(path, number, raw))


# --------------------------------------------------------------------------- summary.json


_OUTCOME_FIELDS: dict[str, Check] = {
    "submitted": _time, "finished": _time, "jct_s": _number(), "epochs": _integer(0), "final_loss": _loss,
    "final_val_loss": _loss, "stop_reason": _text, "total_cost": _number(high=MAX_MONEY),
    "budget": _number(high=MAX_MONEY),
    "workers": _integer(0), "servers": _integer(0),
}


def check_summary(summary: Any) -> tuple[str, str] | None:
    """(field, what is wrong) for the first problem of a summary.json value, or None (what compare and report
    read: `started`, the makespan, and every job's times, JCT, stop reason and money)."""
    if not isinstance(summary, dict):
        return "(file)", f"expected a JSON object, got {type(summary).__name__}"
    if "started" not in summary:
        return "started", "required field missing"
    if (wrong := _time(summary["started"])) is not None:
        return "started", wrong
    if (wrong := _nullable(_number())(summary.get("makespan_s"))) is not None:
        return "makespan_s", wrong
    jobs = summary.get("jobs", {})
    if not isinstance(jobs, dict):
        return "jobs", f"expected a mapping of job name to outcome, got {describe(jobs)}"
    for name, outcome in jobs.items():
        where = f"jobs.{field_name(name)}"
        if not isinstance(outcome, dict):
            return where, f"expected a mapping, got {describe(outcome)}"
        for key, check in _OUTCOME_FIELDS.items():
            if (wrong := _nullable(check)(outcome.get(key))) is not None:
                return f"{where}.{key}", wrong
    return None


# --------------------------------------------------------------------------- run.json


#: Fields run.json must have.
_MANIFEST_REQUIRED = ("schema", "jobs", "cluster", "scheduler", "policy", "placement_timeout_s")
#: Longest placement timeout a manifest may give, in seconds (a week).
_MAX_PLACEMENT_TIMEOUT_S = 7 * 24 * 3600


def check_run_manifest(manifest: Any, shown: str, *, schedulers: Collection[str], policies: Collection[str],
                       platforms: Collection[str], placements: Collection[str]) -> list[str]:
    """Every problem of a run's manifest (run.json), one `SHOWN: FIELD: what is wrong` line each.

    The jobs are validated as job files are (`check_job`: types, bounds, the model file when it is where the
    manifest says; resume looks for a moved run folder's files itself), the cluster as cluster files are
    (`parse_cluster`), and the run's settings against the names this Coach knows.
    """
    if not isinstance(manifest, dict):
        return [f"{shown}: (file): not a Coach run manifest (expected a JSON object, got {type(manifest).__name__})"]
    known = {"scheduler": schedulers, "policy": policies, "platform": platforms, "placement": placements}
    lines = [_manifest_line(shown, key, message) for key, message in _settings_problems(manifest, known)]
    if "cluster" in manifest:
        lines += _manifest_cluster_lines(manifest["cluster"], shown)
    if "jobs" in manifest:
        lines += _manifest_jobs_lines(manifest["jobs"], shown)
    return lines


def _manifest_line(shown: str, key: str, message: str) -> str:
    return f"{shown}: {one_line(f'{key}: {message}')}"


def _settings_problems(manifest: dict, known: Mapping[str, Collection[str]]) -> list[tuple[str, str]]:
    """(field, what is wrong) for the run's settings: required fields, names this Coach does not know (`known`:
    field -> its names), the placement timeout's bounds, and the strings run_id and started."""
    problems = [(key, "required field missing") for key in _MANIFEST_REQUIRED if key not in manifest]
    schema = manifest.get("schema", MANIFEST_SCHEMA)
    if isinstance(schema, bool) or schema != MANIFEST_SCHEMA:
        problems.append(("schema", f"layout {short(schema)} is not this Coach's ({MANIFEST_SCHEMA}): resume it "
                                   "with the Coach that wrote it"))
    for key, names in known.items():
        value = manifest.get(key)
        if key in manifest and (not isinstance(value, str) or value not in names):
            problems.append((key, f"unknown {key} {describe(value)}; known: {', '.join(sorted(names))}"))
    if "placement_timeout_s" in manifest:
        bound = Bound(False, 0.0, _MAX_PLACEMENT_TIMEOUT_S, low_exclusive=True)
        _, wrong = bound.check(manifest["placement_timeout_s"])
        if wrong is not None:
            problems.append(("placement_timeout_s", wrong))
    problems += [(key, f"expected a string, got {describe(manifest[key])}") for key in ("run_id", "started")
                 if key in manifest and not isinstance(manifest[key], str)]
    return problems


def _manifest_cluster_lines(cluster: Any, shown: str) -> list[str]:
    """The manifest's cluster checked as a cluster file is, and its name required (a file's defaults to its own)."""
    if not isinstance(cluster, dict):
        return [_manifest_line(shown, "cluster", f"expected a mapping, got {describe(cluster)}")]
    marker = "\0cluster"
    try:
        parse_cluster({k: v for k, v in cluster.items() if k != "source"}, marker)
    except ClusterFileError as error:
        return [line.replace(f"{marker}: ", f"{shown}: cluster.", 1) for line in error.lines]
    return [] if "name" in cluster else [_manifest_line(shown, "cluster.name", "required field missing")]


def _manifest_jobs_lines(jobs: Any, shown: str) -> list[str]:
    """The problems of the manifest's jobs, each checked as a job file is, and of their names together."""
    if not isinstance(jobs, list) or not jobs:
        return [_manifest_line(shown, "jobs", f"expected a non-empty list of jobs, got {describe(jobs)}")]
    lines: list[str] = []
    names: set[str] = set()
    for i, job in enumerate(jobs):
        lines += _manifest_job_lines(job, f"jobs[{i}]", shown, names)
    return lines


def _manifest_job_lines(job: Any, where: str, shown: str, names: set[str]) -> list[str]:
    """One job of a manifest checked as a job file is (its `model_path` is a job file's `model`); its valid name
    joins `names`, where a name seen before is a problem."""
    if not isinstance(job, dict):
        return [_manifest_line(shown, where, f"expected a mapping, got {describe(job)}")]
    lines = [_manifest_line(shown, f"{where}.{key}", wrong) for key in ("source", "model_path")
             if (wrong := _path(job.get(key))) is not None]
    if _path(job.get("model_path")) is not None:
        return lines
    data = {("model" if key == "model_path" else key): value for key, value in job.items()
            if key != "source" and key != "model"}
    unknown = [key for key in data if key not in JOB_FIELDS]
    lines += [_manifest_line(shown, f"{where}.{field_name(key)}", "unknown field") for key in unknown]
    checked = check_job({k: v for k, v in data.items() if k not in unknown}, "job", "/")
    lines += [f"{shown}: {where}.{text}" for text in _as_manifest_job(checked.lines)]
    if checked.name is not None:
        if checked.name in names:
            lines.append(_manifest_line(shown, f"{where}.name", f"duplicate job name {checked.name!r}"))
        names.add(checked.name)
    return lines


def _as_manifest_job(job_lines: Sequence[str]) -> list[str]:
    """check_job's lines for a manifest's job, reworded: `model_path` for `model`, and no missing model file
    (resume looks for a moved run folder's files itself)."""
    texts = [line.removeprefix("job: ") for line in job_lines]
    return [text.replace("model:", "model_path:", 1) if text.startswith("model:") else text for text in texts
            if not text.startswith("model: file not found: ")]
