"""A deadline that comes before the end of an epoch gives a partial epoch, over real processes (issue 13, part 1).

Two real LeNet workers and one server on loopback: the workers leave their training loop after the same step
(their stop vote, coach_functions/deadline.py), rank 0 validates and saves, the servers and the PS scheduler end, and
every function answers 200 before the deadline; the next epoch trains on from that checkpoint. Then a whole
`coach run` whose budget cuts its first epoch records the partial epoch and ends with `budget`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coach.app.run import run_jobs
from coach.domain.cluster import DEFAULT_CLUSTER
from coach.domain.contracts import WorkerReply
from coach.domain.invocation import Reply
from coach.storage.results import read_log

from .conftest import LENET, host_processes
from .test_runtime_epochs import Epochs


@pytest.fixture(scope="module")
def epochs(tmp_path_factory):
    runner = Epochs(tmp_path_factory.mktemp("partial"))
    yield runner
    runner.close()


def worker_replies(epochs, results) -> list[WorkerReply]:
    assert all(isinstance(r, Reply) for r in results.values()), results  # 200 from all four: nobody hung
    return sorted((WorkerReply.from_dict(r.body) for r in epochs.workers(results)), key=lambda r: r.rank)


def test_two_workers_stop_at_the_same_step_before_their_deadline_and_rank_0_saves(epochs):
    whole = worker_replies(epochs, epochs.run(LENET, learning_rate=0.05, deadline_s=120.0))
    assert [(r.samples, r.shard_samples, r.stopped_early) for r in whole] == [(2000, 2000, False)] * 2
    # half the training loop's time, plus room for the fixed part: the deadline falls inside the loop, also on a
    # machine that other jobs slow down
    deadline_s = max(1.5, 0.5 * max(r.compute_s for r in whole) + 1.0)

    results = epochs.run(LENET, learning_rate=0.05, checkpoint_load=whole[0].checkpoint_saved, deadline_s=deadline_s)

    cut = worker_replies(epochs, results)
    assert [r.stopped_early for r in cut] == [True, True]
    assert cut[0].samples == cut[1].samples and 0 < cut[0].samples < 2000  # the same step, inside the shard
    assert cut[0].samples % 32 == 0 and cut[0].shard_samples == 2000
    assert all(r.duration_s < deadline_s for r in results.values())  # every function answered in time
    saved = cut[0].checkpoint_saved
    assert saved and Path(saved + ".params").exists() and Path(saved + ".states").exists()
    assert cut[0].val_loss is not None and cut[1].checkpoint_saved is None

    # the next epoch starts from the partial epoch's checkpoint and trains on
    after = worker_replies(epochs, epochs.run(LENET, learning_rate=0.05, checkpoint_load=saved, deadline_s=120.0))
    assert [r.stopped_early for r in after] == [False, False]
    assert after[0].val_loss < whole[0].val_loss


def test_a_budget_that_cuts_the_first_lenet_epoch_records_the_partial_epoch_and_stops_with_budget(tmp_path,
                                                                                                    make_job, marker):
    # 4 slots at 0.0001: 0.002 pays 5 s, so the deadline is 5 x 0.9 - 0.5 = 4 s; with batches of 4, a LeNet epoch
    # (2 workers, 4,000 digits) trains 500 steps per worker, longer than that even with no one else on this machine
    # (batches of 8, 250 steps, can finish within it on a fast machine), and its loop stops at 3.5 s at the latest
    # (1-2 s earlier when other jobs slow the set-up down)
    job = make_job(f"{marker}-cut", model=LENET, workers=2, servers=1, max_epochs=3, budget=0.002, batch_size=4,
                   optimizer_params={})
    report = run_jobs([job], DEFAULT_CLUSTER, tmp_path / "results", view="quiet")

    records = read_log(report.run_dir / f"{job.name}.jsonl")
    first = records[0]
    assert (first["phase"], first["epoch"], first["stopped_early"]) == ("training", 1, True)
    assert 0 < first["epoch_fraction"] < 1 and first["data_fraction"] == first["epoch_fraction"]
    assert 0 < first["samples"] < 4000 and first["loss"] > 0 and first["val_loss"] > 0
    assert first["checkpoint"] and Path(first["checkpoint"] + ".params").exists()
    assert records[-1]["stop_reason"] == "budget"
    assert all(0 < r["cumulative_cost"] <= job.budget for r in records)
    assert report.summary["jobs"][job.name]["stop_reason"] == "budget" and report.exit_code == 0
    assert host_processes(marker) == []
