"""The drivers' contract: one fixture, `drive`, runs the same jobs through the live driver (real function hosts,
real MXNet, the wall clock) or the virtual-time driver (simulated platform, simulated clock), and answers with
what both write: the run summary and every job's log lines.

Both halves read their results back from disk (`summary.json`, `<job>.jsonl`), so the suite also checks that a
simulated run writes the same files as a live one. The live half is marked `slow`.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pytest

from coach.domain.cluster import ClusterSpec
from coach.domain.jobs import JobSpec
from coach.storage.results import read_log

TINY_MLP = Path(__file__).resolve().parents[1] / "integration" / "models" / "tiny_mlp.py"
PLACEMENT_TIMEOUT_S = 60.0  # generous: a job that waits for another's slots must not be requeued on a slow machine


@dataclass
class Drive:
    """`drive(specs, cluster, policy=..., scheduler=..., stop_after_s=None) -> (summary, {job: records})`."""

    name: str  # "virtual" or "live"
    root: Path  # where the runs write their folders
    runs: int = 0

    def __call__(self, specs: Sequence[JobSpec], cluster: ClusterSpec, policy: str = "static",
                 scheduler: str = "gang", stop_after_s: float | None = None) -> tuple[dict, dict[str, list[dict]]]:
        self.runs += 1
        run_dir = (self._live if self.name == "live" else self._virtual)(
            specs, cluster, policy, scheduler, stop_after_s, self.root / f"run-{self.runs}")
        summary = json.loads((run_dir / "summary.json").read_text())
        return summary, {spec.name: read_log(run_dir / f"{spec.name}.jsonl") for spec in specs}

    @staticmethod
    def _virtual(specs, cluster, policy, scheduler, stop_after_s, run_dir: Path) -> Path:
        from coach.app.virtual_run import run_virtual

        run_dir.mkdir(parents=True)
        run_virtual(specs, cluster, policy=policy, scheduler=scheduler, placement_timeout_s=PLACEMENT_TIMEOUT_S,
                    run_dir=run_dir, stop_at_s=stop_after_s)
        return run_dir

    @staticmethod
    def _live(specs, cluster, policy, scheduler, stop_after_s, run_dir: Path) -> Path:
        from coach.app.run import run_jobs

        stop = threading.Event()
        timer = threading.Timer(stop_after_s, stop.set) if stop_after_s is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            report = run_jobs(specs, cluster, run_dir.parent, view="quiet", scheduler=scheduler, policy=policy,
                              run_id=run_dir.name, placement_timeout_s=PLACEMENT_TIMEOUT_S, stop_event=stop)
        finally:
            if timer is not None:
                timer.cancel()
        return report.run_dir


@pytest.fixture(params=["virtual", pytest.param("live", marks=pytest.mark.slow)])
def drive(request, tmp_path) -> Drive:
    return Drive(request.param, tmp_path / "results")


@pytest.fixture
def job(tmp_path):
    """`job(name, **fields)`: a tiny real job (the MLP on 8x8 digits), 2 workers and 1 server, 2 epochs.

    Names get a unique prefix, so the function hosts of a live run are this test's own.
    """
    prefix = f"c{uuid.uuid4().hex[:6]}"

    def make(name: str, **fields) -> JobSpec:
        values = dict(name=f"{prefix}-{name}", source=tmp_path / f"{name}.yaml", model_path=TINY_MLP, batch_size=64,
                      optimizer="sgd", optimizer_params={"momentum": 0.9}, learning_rate=0.05, target_loss=0.0,
                      consecutive=3, max_epochs=2, budget=10.0, workers=2, servers=1, max_workers=None,
                      max_servers=None, seed=0, epoch_timeout_s=120.0)
        values.update(fields)
        return JobSpec(**values)

    return make
