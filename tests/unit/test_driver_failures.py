"""A port failing one job (here its log refusing a record) stops that job as an internal error; the run goes on."""

from __future__ import annotations

from pathlib import Path

import coach.app.virtual_run as virtual_run
from coach.domain.cluster import DEFAULT_CLUSTER
from coach.domain.jobs import JobSpec
from coach.storage.results import MemorySink


def spec(name: str) -> JobSpec:
    return JobSpec(name=name, source=Path(f"/jobs/{name}.yaml"), model_path=Path("/jobs/m.py"), batch_size=64,
                   optimizer="sgd", optimizer_params={}, learning_rate=0.1, target_loss=0.0, consecutive=3,
                   max_epochs=3, budget=10.0, workers=1, servers=1, max_workers=None, max_servers=None, seed=0,
                   epoch_timeout_s=60.0)


class RefusingSink(MemorySink):
    """Job `a`'s log refuses its second epoch's record, as a full disk or a non-finite value would."""

    def append(self, record) -> None:
        if record.job == "a" and record.phase == "training" and record.epoch == 2:
            raise OSError(28, "No space left on device")
        super().append(record)


def test_a_sink_failing_one_job_stops_it_as_an_internal_error_and_the_other_job_finishes(monkeypatch):
    monkeypatch.setattr(virtual_run, "MemorySink", RefusingSink)

    sim = virtual_run.run_virtual([spec("a"), spec("b")], DEFAULT_CLUSTER, policy="static")

    a, b = sim.summary["jobs"]["a"], sim.summary["jobs"]["b"]
    assert a["stop_reason"] == "failed: internal error: OSError: [Errno 28] No space left on device"
    # epoch 2 ran and was paid for: the closing line says so, though its own record could not be written
    assert [(r["phase"], r["epoch"]) for r in sim.records["a"]] == [("training", 1), ("stopped", 2)]
    assert sim.records["a"][1]["cumulative_cost"] == a["total_cost"] > sim.records["a"][0]["cumulative_cost"]
    assert (b["stop_reason"], b["epochs"]) == ("max_epochs", 3)
