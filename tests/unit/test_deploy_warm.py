"""A deploy warms the new workers, and they tell the training set's size: the first calibration step then trains
whole batches, as every later one does (coach.policy.planning.calibration_fraction)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import coach.app.virtual_run as virtual_run
from coach.domain.cluster import DEFAULT_CLUSTER
from coach.domain.contracts import SCHEMA
from coach.domain.invocation import Reply
from coach.domain.jobs import JobSpec
from coach.drivers.core import _told_train_samples
from coach.platforms.virtual import VirtualJobModel
from coach.policy.planning import calibration_fraction


def warm(body: dict) -> Reply:
    return Reply("lenet-worker-0", body, 0.1)


def test_the_size_is_the_one_every_warmed_worker_tells():
    told = {"schema": SCHEMA, "warm": True, "train_samples": 1000, "role": "worker"}
    assert _told_train_samples([warm(told), warm(told)]) == 1000
    assert _told_train_samples([warm(told), warm({**told, "train_samples": 999})]) is None  # they disagree
    assert _told_train_samples([warm(told), warm({"warm": True, "role": "worker"})]) is None  # one reply does not tell it
    assert _told_train_samples([warm(told), warm({**told, "train_samples": -1})]) is None  # not a size
    assert _told_train_samples([]) is None


def test_a_simulated_dynamic_jobs_first_calibration_step_trains_whole_batches_of_the_told_size():
    spec = JobSpec(name="a", source=Path("/jobs/a.yaml"), model_path=Path("/jobs/m.py"), batch_size=64,
                   optimizer="sgd", optimizer_params={}, learning_rate=0.1, target_loss=0.0, consecutive=3,
                   max_epochs=2, budget=10.0, workers=None, servers=None, max_workers=None, max_servers=None, seed=0,
                   epoch_timeout_s=60.0)
    spec = replace(spec, calibration_fraction=0.01)  # 50 of 5000 samples: less than one batch of 64
    sim = virtual_run.run_virtual([spec], DEFAULT_CLUSTER, policy="coach")

    first = next(r for r in sim.records["a"] if r["phase"] == "calibration")
    assert (first["workers"], first["calibration_step"]) == (1, 1)
    assert first["data_fraction"] == calibration_fraction(0.01, 1, 64, VirtualJobModel().samples) == 255 / 5000
