"""Workload files -> SimJob lists: the jobs a simulation replays, with their arrival times.

Two formats, told apart by their header line:
- a Pollux workload (`name,time,application,num_replicas,batch_size`): the 160-job 8-hour samples the Pollux paper
  evaluated on; every field is taken as written.
- the Philly trace (`timestamp,duration,num_gpus,gpu_time,cluster`): every row becomes a job arriving at its
  timestamp (seconds since the earliest one) and lasting `duration` at its requested GPUs. Philly has no model names,
  so each job gets one of the six applications by its GPU-time, with the rule Pollux used to sample its workloads
  from this trace (artifact simulator/workload.py): under 1 GPU-hour cifar10 or ncf, 1-10 deepspeech2 or bert
  (Pollux drew deepspeech2 and turned half of them into bert), 10-100 yolov3, 100 and more imagenet; a seeded fair
  coin per job picks within a pair. Its batch is M0 per GPU (weak scaling) kept within the app's measured range.

Reading is the only side effect; every refusal is a `WorkloadError` whose one-line message reads FILE:LINE:COLUMN.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Callable

import numpy as np

from coach.simulator.reading import read_input

#: The six applications of the Pollux traces, with the batch-size range each was measured on (the smallest and
#: largest validation-<bsz>.csv): init batch M0 and max batch. Trace jobs ask for M0 per GPU within that range.
#: tests/unit/test_sim_apps.py checks that these equal what coach.simulator.apps reads from the traces.
APP_BATCH_RANGES: dict[str, tuple[int, int]] = {
    "bert": (12, 384),
    "cifar10": (128, 4096),
    "deepspeech2": (20, 640),
    "imagenet": (200, 12800),
    "ncf": (256, 32768),
    "yolov3": (8, 512),
}

POLLUX_HEADER = ("name", "time", "application", "num_replicas", "batch_size")
PHILLY_HEADER = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
_HOUR_S = 3600.0
#: Bounds that keep a simulation finite and its results writable. The published files are far inside them: the Philly
#: trace is 3.3 MB, spans 3 months (arrivals up to 1e7 s), its longest job ran 4.6e6 s and asked for 128 GPUs.
MAX_WORKLOAD_BYTES = 64 << 20  # a larger file (or a sparse 2 GB one) is refused before it is read into memory
MAX_ARRIVAL_S = 1e10  # ~317 years: later arrivals leave the dates results can write (year 9999) or stall the clock
MAX_DURATION_S = 1e7  # ~116 days per trace job: a longer one would be simulated round by round for minutes
MAX_GPUS = 1_000_000  # per job, as `--cluster NxG` allows at most this many GPUs in all
MAX_BATCH = 10**9  # total batch size of one job
#: A job's name names its log file (`<name>.jsonl` in the results folder): no path separators, no control characters.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")
_APP_NAMES = np.array(sorted(APP_BATCH_RANGES))


class WorkloadError(ValueError):
    """A workload file that cannot be read; the message is one line, `FILE:LINE:COLUMN: what is wrong`."""


@dataclass(frozen=True)
class SimJob:
    name: str  # unique within the workload
    arrival_s: float  # seconds since the start of the workload
    app: str  # one of APP_BATCH_RANGES
    gpus: int  # GPUs the user asked for (>= 1)
    batch: int  # the user's total batch size (>= gpus)
    duration_s: float | None = None  # trace jobs only: how long the job ran at `gpus` GPUs


def load_workload(path: Path, seed: int = 0) -> list[SimJob]:
    """Jobs of a Pollux workload CSV or of the Philly trace, sorted by (arrival_s, name).

    `seed` only matters for Philly, where it draws cifar10-or-ncf and deepspeech2-or-bert (reproducibly)."""
    path = Path(path)
    rows = _read_rows(path)
    if not rows:
        raise WorkloadError(f"{path}:1:1: empty file, expected a header line")
    header = tuple(field.strip() for field in rows[0][1])
    parser = _PARSERS.get(header)
    if parser is None:
        known = " or ".join(",".join(h) for h in _PARSERS)
        raise WorkloadError(f"{path}:1:1: unknown header {','.join(header)!r}, expected {known}")
    if len(rows) == 1:
        raise WorkloadError(f"{path}:{rows[0][0] + 1}:1: no jobs after the header line")
    jobs = parser(path, rows[1:], seed)
    return sorted(jobs, key=attrgetter("arrival_s", "name"))


# ---------------------------------------------------------------------------------------------------------------
# Reading


def _read_rows(path: Path) -> list[tuple[int, list[str]]]:
    """(1-based line number, fields) of every non-blank line."""
    data = read_input(path, MAX_WORKLOAD_BYTES, WorkloadError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        line = data.count(b"\n", 0, exc.start) + 1
        column = data.count(b",", line_start, exc.start) + 1
        raise WorkloadError(f"{path}:{line}:{column}: not UTF-8 (byte 0x{data[exc.start]:02x})") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    rows: list[tuple[int, list[str]]] = []
    # Files here have one record per line (no quoted newlines), so the reader's line count is the file's.
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for fields in reader:
            if fields:
                rows.append((reader.line_num, fields))
    except csv.Error as exc:
        raise WorkloadError(f"{path}:{reader.line_num}:1: bad CSV ({exc})") from None
    return rows


def _check_width(path: Path, line: int, fields: list[str], header: tuple[str, ...]) -> None:
    if len(fields) != len(header):
        raise WorkloadError(f"{path}:{line}:{min(len(fields), len(header)) + 1}: expected {len(header)} fields "
                            f"({','.join(header)}), got {len(fields)}")


def _number(path: Path, line: int, column: int, name: str, text: str, *, minimum: float, strict: bool,
            maximum: float = math.inf) -> float:
    """A finite number >= minimum (> minimum when strict) and <= maximum."""
    try:
        value = float(text)
    except ValueError:
        raise WorkloadError(f"{path}:{line}:{column}: {name} is not a number: {text.strip()!r}") from None
    if not math.isfinite(value):
        raise WorkloadError(f"{path}:{line}:{column}: {name} must be finite, got {text.strip()!r}")
    if value < minimum or (strict and value == minimum):
        relation = ">" if strict else ">="
        raise WorkloadError(f"{path}:{line}:{column}: {name} must be {relation} {minimum:g}, got {text.strip()!r}")
    if value > maximum:
        raise WorkloadError(f"{path}:{line}:{column}: {name} must be <= {maximum:g}, got {text.strip()!r}")
    return value


def _integer(path: Path, line: int, column: int, name: str, text: str, maximum: int) -> int:
    """A whole number in 1..maximum."""
    value = _number(path, line, column, name, text, minimum=0, strict=True, maximum=maximum)
    if value != int(value):
        raise WorkloadError(f"{path}:{line}:{column}: {name} must be a whole number, got {text.strip()!r}")
    return int(value)


def _parse_pollux(path: Path, rows: list[tuple[int, list[str]]], seed: int) -> list[SimJob]:
    del seed  # every field is given
    jobs: list[SimJob] = []
    seen: dict[str, int] = {}
    for line, fields in rows:
        _check_width(path, line, fields, POLLUX_HEADER)
        name = fields[0].strip()
        if not name:
            raise WorkloadError(f"{path}:{line}:1: name is empty")
        if not _NAME.fullmatch(name):
            raise WorkloadError(f"{path}:{line}:1: name must be 1-128 letters, digits, '_', '.', '+' or '-' not "
                                f"starting with '.', '+' or '-' (it names the job's log file), got {name[:40]!r}")
        if name in seen:
            raise WorkloadError(f"{path}:{line}:1: duplicate job name {name!r} (first on line {seen[name]})")
        seen[name] = line
        arrival_s = _number(path, line, 2, "time", fields[1], minimum=0, strict=False, maximum=MAX_ARRIVAL_S)
        app = fields[2].strip()
        if app not in APP_BATCH_RANGES:
            raise WorkloadError(f"{path}:{line}:3: unknown application {app!r}, expected one of "
                                f"{', '.join(sorted(APP_BATCH_RANGES))}")
        gpus = _integer(path, line, 4, "num_replicas", fields[3], MAX_GPUS)
        batch = _integer(path, line, 5, "batch_size", fields[4], MAX_BATCH)
        if batch < gpus:
            raise WorkloadError(f"{path}:{line}:5: batch_size {batch} is smaller than num_replicas {gpus}")
        jobs.append(SimJob(name=name, arrival_s=arrival_s, app=app, gpus=gpus, batch=batch))
    return jobs


def _parse_philly(path: Path, rows: list[tuple[int, list[str]]], seed: int) -> list[SimJob]:
    """Column at a time with numpy (82,247 rows); row by row only to name the first bad field."""
    if not rows:
        return []
    for line, fields in rows:
        if len(fields) != len(PHILLY_HEADER):
            _check_width(path, line, fields, PHILLY_HEADER)
    lines = [line for line, _ in rows]
    columns = list(zip(*(fields for _, fields in rows)))
    durations_s = _number_column(path, lines, columns[1], 2, "duration", MAX_DURATION_S)
    gpus_f = _number_column(path, lines, columns[2], 3, "num_gpus", MAX_GPUS)
    if (gpus_f != np.floor(gpus_f)).any():
        for line, text in zip(lines, columns[2]):
            _integer(path, line, 3, "num_gpus", text, MAX_GPUS)
    gpus = gpus_f.astype(np.int64)
    gpu_times_s = _number_column(path, lines, columns[3], 4, "gpu_time")
    arrivals = _parse_stamps(path, lines, [stamp.strip() for stamp in columns[0]])
    arrivals_s = (arrivals - arrivals.min()).astype(np.int64).astype(float)
    if len(arrivals_s) and arrivals_s.max() > MAX_ARRIVAL_S:
        late = int(np.argmax(arrivals_s))
        raise WorkloadError(f"{path}:{lines[late]}:1: timestamp is {arrivals_s[late]:.3g} s after the earliest one, "
                            f"at most {MAX_ARRIVAL_S:g} s: {columns[0][late].strip()!r}")
    # One fair coin per job, drawn in file order, so a job's application does not depend on the others' GPU-times.
    coins = np.random.default_rng(seed).random(len(rows)) < 0.5
    hours = gpu_times_s / _HOUR_S
    apps = np.select([hours < 1, hours < 10, hours < 100],
                     [np.where(coins, "ncf", "cifar10"), np.where(coins, "bert", "deepspeech2"), "yolov3"],
                     "imagenet")
    init_batch = np.array([APP_BATCH_RANGES[app][0] for app in _APP_NAMES])
    max_batch = np.array([APP_BATCH_RANGES[app][1] for app in _APP_NAMES])
    app_index = np.searchsorted(_APP_NAMES, apps)
    batches = np.maximum(gpus, np.minimum(init_batch[app_index] * gpus, max_batch[app_index]))
    order = np.lexsort((np.array(lines), arrivals_s))
    names, arrival_list, gpu_list = apps[order].tolist(), arrivals_s[order].tolist(), gpus[order].tolist()
    batch_list, duration_list = batches[order].tolist(), durations_s[order].tolist()
    return [SimJob(f"{names[k]}-{k}", arrival_list[k], names[k], gpu_list[k], batch_list[k], duration_list[k])
            for k in range(len(order))]


def _number_column(path: Path, lines: list[int], texts: tuple[str, ...], column: int, name: str,
                   maximum: float = math.inf) -> np.ndarray:
    """A column of finite numbers in (0, maximum]."""
    try:
        values = np.array(texts, dtype=float)
        if np.isfinite(values).all() and (values > 0).all() and (values <= maximum).all():
            return values
    except ValueError:
        pass
    for line, text in zip(lines, texts):
        _number(path, line, column, name, text, minimum=0, strict=True, maximum=maximum)
    raise AssertionError("unreachable: some value failed to check")  # pragma: no cover


def _parse_stamps(path: Path, lines: list[int], stamps: list[str]) -> np.ndarray:
    """Timestamps `YYYY-MM-DD HH:MM:SS` as datetime64[s]; all at once, row by row only to name a bad one."""
    try:
        parsed = np.array(stamps, dtype="datetime64[s]")
        if not np.isnat(parsed).any() and all(len(stamp) == 19 for stamp in stamps):
            return parsed
    except ValueError:
        pass
    for line, stamp in zip(lines, stamps):
        try:
            value = np.datetime64(stamp, "s")
        except ValueError:
            value = np.datetime64("NaT")
        if np.isnat(value) or len(stamp) != 19:
            raise WorkloadError(f"{path}:{line}:1: timestamp is not YYYY-MM-DD HH:MM:SS: {stamp!r}")
    raise AssertionError("unreachable: some timestamp failed to parse")  # pragma: no cover


_Parser = Callable[[Path, list[tuple[int, list[str]]], int], list[SimJob]]
_PARSERS: dict[tuple[str, ...], _Parser] = {POLLUX_HEADER: _parse_pollux, PHILLY_HEADER: _parse_philly}
