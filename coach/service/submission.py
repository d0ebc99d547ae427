"""A submitted job's text, checked as `coach run` checks a job file, and kept to the server's model folders.

A job names its model file, which Coach parses and the workers import: a client could otherwise make the server
read any file. So `model` must resolve (symbolic links followed) to a file under one of the folders the server was
started with: an absolute path under one, or a path relative to them (tried in order). Nothing outside is read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

from coach.domain.jobs import JobSpec
from coach.inputs.jobs import check_job_text

SHOWN = "request"  # what starts an error line about a request body


def inside(path: Path, folders: Sequence[Path]) -> bool:
    real = Path(os.path.realpath(path))
    return any(real.is_relative_to(os.path.realpath(folder)) for folder in folders)


def usable_models(folders: Sequence[Path], limit: int = 200) -> list[str]:
    """Model files a job may name, relative to their folder: regular .py files whose real path is inside."""
    found: set[str] = set()
    for folder in folders:
        try:
            for path in sorted(folder.rglob("*.py")):
                if len(found) >= limit:
                    break
                if inside(path, folders) and Path(os.path.realpath(path)).is_file():
                    found.add(str(path.relative_to(folder)))
        except OSError:  # a folder that went away, or a loop of links: list what was found
            continue
    return sorted(found)


def _without_model(data: Mapping) -> dict:
    """The job without its model: the rest is still checked, so that every problem is told at once, and the refused
    model file is never read."""
    return {key: value for key, value in data.items() if key != "model"}


def model_vet(folders: Sequence[Path]):
    def vet(data: Mapping) -> tuple[Mapping | None, list[tuple[str, str]]]:
        model = data.get("model")
        if not isinstance(model, str) or not model.strip():
            return data, []  # the job check says what is wrong with it
        try:
            return _resolved(data, model)
        except (OSError, ValueError) as error:  # a name too long, a NUL byte, a loop of links
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            return _without_model(data), [("model", f"cannot use {model[:100]!r}: {reason}")]

    def _resolved(data: Mapping, model: str) -> tuple[Mapping | None, list[tuple[str, str]]]:
        given = Path(model)
        candidates = [given] if given.is_absolute() else [folder / given for folder in folders]
        for candidate in candidates:
            if inside(candidate, folders) and candidate.exists():
                return {**data, "model": str(Path(os.path.realpath(candidate)))}, []
        shown = ", ".join(str(folder) for folder in folders)
        if given.is_absolute() and not inside(given, folders):
            return _without_model(data), [("model", f"{model} is outside the server's model folders ({shown})")]
        return _without_model(data), [("model", f"no file {model} in the server's model folders ({shown})")]

    return vet


def checked_submission(text: str, folders: Sequence[Path]) -> tuple[JobSpec | None, list[str]]:
    """The job spec, or the problems (one `request: FIELD: what is wrong` line each)."""
    folder = folders[0] if folders else Path.cwd()
    checked = check_job_text(text, SHOWN, folder, model_vet(folders))
    lines, model_lines = [], 0
    for line in checked.lines:  # the vet's line about the model comes first; the check's "missing" would repeat it
        model_lines += line.startswith(f"{SHOWN}: model: ")
        if model_lines <= 1 or not line.startswith(f"{SHOWN}: model: "):
            lines.append(line)
    return (checked.spec if not lines else None), lines
