"""Checkpoint store: where a job's parameters and optimizer state live between epochs.

Functions are stateless; worker rank 0 writes `<prefix>.params` and `<prefix>.states` atomically, and the
controller passes the newest complete prefix to every worker of the next epoch. Side effects: creates folders.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SUFFIXES = (".params", ".states")


@dataclass(frozen=True)
class CheckpointStore:
    root: Path  # <run dir>/checkpoints

    def prefix(self, job: str, tag: str) -> str:
        """Where the step `tag` (e.g. `epoch-0003`, `calibration-2`) of `job` saves its checkpoint."""
        folder = self.root / job
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder / tag)

    @staticmethod
    def complete(prefix: str | None) -> bool:
        """True when both files of a checkpoint exist (rank 0 renames each into place when done)."""
        return bool(prefix) and all(Path(prefix + s).is_file() for s in SUFFIXES)

    def prune(self, job: str, keep: str) -> int:
        """Delete the job's checkpoints other than `keep` (the newest complete one); returns files removed."""
        removed = 0
        for path in (self.root / job).iterdir():
            if not str(path).startswith(keep + "."):
                path.unlink(missing_ok=True)
                removed += 1
        return removed
