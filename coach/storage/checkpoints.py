"""Checkpoint stores: where a job's parameters and optimizer state live between epochs.

Functions are stateless; worker rank 0 writes `<prefix>.params` and `<prefix>.states` atomically, and the
controller passes the newest complete prefix to every worker of the next epoch. The file store is addressed as
`file:///abs/folder` and hands out absolute path prefixes (what functions on this machine write to); the
`s3://` store (coach.storage.s3) serves functions on many machines. The memory store serves virtual-time runs,
where nothing is written.
Side effects: the file store creates folders and deletes old checkpoints.

A checkpoint's tag names the step that saved it: `calibration-<k>` for calibration mini-epoch k, `epoch-<NNNN>`
for training epoch N. `newest_complete` reads that order back, so a run whose log lost its lines can still go on
from what its checkpoints folder holds (coach.app.run).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

SUFFIXES = (".params", ".states")
_TAG = re.compile(r"(calibration|epoch)-(\d+)")


def tag_step(tag: str) -> tuple[str, int] | None:
    """(`"calibration"`, k) or (`"epoch"`, N) from a checkpoint tag or prefix; None for any other name."""
    found = _TAG.fullmatch(tag.rsplit("/", 1)[-1])
    return (found.group(1), int(found.group(2))) if found else None


def _newest(tags) -> str | None:
    """The tag of the latest step: every epoch comes after every calibration mini-epoch, then by number."""
    ranked = [(kind == "epoch", number, tag) for tag in tags if (step := tag_step(tag)) for kind, number in [step]]
    return max(ranked)[2] if ranked else None


@dataclass(frozen=True)
class FileCheckpointStore:
    root: Path  # <run dir>/checkpoints

    @property
    def url(self) -> str:
        return self.root.resolve().as_uri()

    def check(self) -> str | None:
        """None unless the root is something other than a folder (it is created when missing)."""
        if self.root.exists() and not self.root.is_dir():
            return f"{self.root} is not a folder"
        return None

    def prefix(self, job: str, tag: str) -> str:
        """Where the step `tag` (e.g. `epoch-0003`, `calibration-2`) of `job` saves its checkpoint."""
        folder = self.root / job
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder.resolve() / tag)

    def locate(self, job: str, prefix: str) -> str:
        """A logged prefix as this store has it now: an absolute one where it is complete, else (relative, or gone
        because the run folder moved) the checkpoint of that name in `<root>/<job>/`; as logged when neither."""
        path = Path(prefix)
        if path.is_absolute() and self.complete(prefix):
            return prefix
        moved = self.root.resolve() / job / path.name
        return str(moved) if self.complete(str(moved)) else prefix

    def complete(self, prefix: str | None) -> bool:
        """True when both files of a checkpoint exist (rank 0 renames each into place when done)."""
        return bool(prefix and all(Path(prefix + s).is_file() for s in SUFFIXES))

    def newest_complete(self, job: str) -> str | None:
        """The prefix of the latest step's complete checkpoint in `<root>/<job>/`, or None when there is none."""
        folder = self.root / job
        if not folder.is_dir():
            return None
        tags = {path.name[: -len(suffix)] for path in folder.iterdir() for suffix in SUFFIXES
                if path.name.endswith(suffix)}
        newest = _newest(tag for tag in tags if self.complete(str(folder.resolve() / tag)))
        return None if newest is None else str(folder.resolve() / newest)

    def prune(self, job: str, keep: str) -> int:
        """Delete the job's checkpoints other than `keep` (the newest complete one); returns files removed."""
        removed = 0
        folder = self.root / job
        if not folder.is_dir():
            return 0
        keep = str(Path(keep).resolve())
        for path in folder.iterdir():
            if not str(path.resolve()).startswith(keep + "."):
                path.unlink(missing_ok=True)
                removed += 1
        return removed


@dataclass
class MemoryCheckpointStore:
    """Checkpoints that are only names: a virtual-time worker marks what it 'saved'."""

    saved: dict[str, set[str]] = field(default_factory=dict)  # job -> its saved prefixes

    def check(self) -> str | None:
        return None

    def prefix(self, job: str, tag: str) -> str:
        return f"mem://{job}/{tag}"

    def locate(self, job: str, prefix: str) -> str:
        return prefix

    @staticmethod
    def _job(prefix: str) -> str:
        return prefix[len("mem://"):].rsplit("/", 1)[0]

    def mark_saved(self, prefix: str) -> None:
        self.saved.setdefault(self._job(prefix), set()).add(prefix)

    def complete(self, prefix: str | None) -> bool:
        return bool(prefix and prefix.startswith("mem://") and prefix in self.saved.get(self._job(prefix), ()))

    def newest_complete(self, job: str) -> str | None:
        return _newest(self.saved.get(job, ()))

    def prune(self, job: str, keep: str) -> int:
        mine = self.saved.get(job, set())
        old = mine - {keep}
        mine -= old
        return len(old)
