"""Adaptive batch size end to end: real LeNet workers measure the gradient noise scale, Coach changes the batch."""

from __future__ import annotations

import math

from coach.app.run import run_jobs
from coach.domain.cluster import DEFAULT_CLUSTER
from coach.estimates.batch_size import BatchInputs, NoiseStats, choose_batch
from coach.storage.results import read_log

from .conftest import LENET, host_processes


def test_an_adaptive_lenet_job_records_its_batch_and_follows_the_measured_noise_scale(tmp_path, make_job, marker):
    job = make_job(f"{marker}-adaptive", model=LENET, max_epochs=2,
                   batch_size={"per_worker": 64, "scaling": "adaptive"})
    report = run_jobs([job], DEFAULT_CLUSTER, tmp_path / "results", view="quiet")

    first, second = read_log(report.run_dir / f"{job.name}.jsonl")
    for line in (first, second):
        assert line["batch_scaling"] == "adaptive" and line["global_batch"] == 2 * line["batch_size"]
        assert math.isfinite(line["grad_noise_scale"]) and line["grad_noise_scale"] > 0
    # before any measurement the job file's batch and learning rate
    assert (first["batch_size"], first["global_batch"], first["learning_rate"]) == (64, 128, 0.05)
    # the second epoch's batch is the chooser's, from what the first epoch measured (noise scale, step time)
    steps = math.ceil(first["samples"] / 2 / 64)
    expected = choose_batch("adaptive", BatchInputs(64, 0.05, 2, NoiseStats(first["grad_noise_scale"], 1.0),
                                                    ((2, 64, first["compute_s"] / steps),), first["samples"]))
    assert (second["batch_size"], second["learning_rate"]) == (expected.batch_size,
                                                                 expected.learning_rate)
    # LeNet's gradients early on are far from noisy (B ~ 10-30 samples < 64): a smaller batch has more goodput
    assert first["grad_noise_scale"] < 32 and second["global_batch"] < 128
    assert second["samples"] == first["samples"] == 4000
    assert report.exit_code == 0
    assert host_processes(marker) == []
