"""JobSpec: one validated training job, as plain frozen data. Built by coach.inputs.jobs from a job file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

#: A job that misses its quorum this often stops as unschedulable (the live lifecycle's rule, which the cluster
#: simulator follows).
MAX_REQUEUES = 5

#: MXNet optimizer names a job may use (``mx.optimizer.create(name, ...)``).
OPTIMIZERS: frozenset[str] = frozenset({"sgd", "nag", "adam", "rmsprop", "adagrad", "adadelta"})


@dataclass(frozen=True)
class JobSpec:
    """One validated training job; built by coach.inputs.jobs (`check_job`, `load_job`, `load_jobs`)."""

    name: str                   # job name, safe as a file name
    source: Path                # absolute path of the job file
    model_path: Path            # absolute path of the model file
    batch_size: int             # per-worker mini-batch size (the job file's `per_worker`)
    optimizer: str              # one of OPTIMIZERS
    optimizer_params: Mapping[str, float] = field(hash=False)  # extra optimizer kwargs (a dict copy)
    learning_rate: float
    target_loss: float
    consecutive: int            # epochs in a row at or below target_loss to stop (default 3)
    max_epochs: int
    budget: float               # money units (price per slot-second x slot-seconds)
    workers: int | None         # static counts; both None -> dynamic job
    servers: int | None
    max_workers: int | None     # optional upper limits for dynamic jobs
    max_servers: int | None
    seed: int                   # default 0
    epoch_timeout_s: float      # deadline of one epoch invocation, default 600
    calibration_fraction: float = 0.25  # share of the training data each calibration mini-epoch uses (about)
    max_retries: int = 3        # retries of a failed epoch (fresh functions, from the last checkpoint)
    batch_scaling: str = "fixed"  # how the global batch follows the workers: a key of coach.estimates.batch_size.SCALINGS

    @property
    def fixed_counts(self) -> tuple[int, int] | None:
        """(workers, servers) when the job file fixes both, else None: the run's policy chooses them."""
        if self.workers is None or self.servers is None:
            return None
        return self.workers, self.servers

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        """The inverse of to_dict, for a run's manifest (already validated when the run started)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["source"], values["model_path"] = Path(values["source"]), Path(values["model_path"])
        values["optimizer_params"] = dict(values.get("optimizer_params") or {})
        if isinstance(values.get("batch_size"), Mapping):  # as to_dict writes a scaling other than fixed
            batch = values["batch_size"]
            values["batch_size"], values["batch_scaling"] = batch["per_worker"], batch.get("scaling", "fixed")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable copy (paths as str, optimizer_params as a new dict), with the job file's fields: a
        batch scaling other than fixed is written as the job file writes it, `batch_size: {per_worker, scaling}`."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "batch_scaling":
                if self.batch_scaling != "fixed":
                    out["batch_size"] = {"per_worker": self.batch_size, "scaling": self.batch_scaling}
                continue
            value = getattr(self, f.name)
            if isinstance(value, Path):
                value = str(value)
            elif isinstance(value, Mapping):
                value = dict(value)
            out[f.name] = value
        return out
