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

    def prefix(self, job: str, epoch: int, attempt: int = 1) -> str:
        """Where epoch `epoch` of `job` saves; attempts get their own prefix so a failed one never overwrites."""
        folder = self.root / job
        folder.mkdir(parents=True, exist_ok=True)
        tail = "" if attempt == 1 else f"-attempt{attempt}"
        return str(folder / f"epoch-{epoch:04d}{tail}")

    @staticmethod
    def complete(prefix: str | None) -> bool:
        """True when both files of a checkpoint exist (rank 0 renames each into place when done)."""
        return bool(prefix) and all(Path(prefix + s).is_file() for s in SUFFIXES)

    def prune(self, job: str, keep: str) -> int:
        """Delete the job's checkpoints other than `keep` (the newest complete one); returns files removed."""
        removed = 0
        for path in (self.root / job).glob("epoch-*"):
            if not str(path).startswith(keep + "."):
                path.unlink(missing_ok=True)
                removed += 1
        return removed
