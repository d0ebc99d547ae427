"""Run-level policies: one signature, one registry; `static` keeps the file's counts, `coach` plans all jobs at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from coach.domain.jobs import JobSpec
from coach.estimates.speed import SpeedObservation
from coach.policy.history import History
from coach.policy.planning import CALIBRATION_POINTS, plan
from coach.app.run_policies import RUN_POLICIES
from coach.policy.run_policy import RunClusterView, Counts, RunJobView, Wait

CLUSTER = RunClusterView(total_slots=12, price_per_slot_s=0.0001)


def spec(name: str, workers: int | None = None, servers: int | None = None, budget: float = 10.0,
         **fields) -> JobSpec:
    values = dict(name=name, source=Path(f"/jobs/{name}.yaml"), model_path=Path("/jobs/m.py"), batch_size=64,
                  optimizer="sgd", optimizer_params={}, learning_rate=0.1, target_loss=0.1, consecutive=3,
                  max_epochs=20, budget=budget, workers=workers, servers=servers, max_workers=None,
                  max_servers=None, seed=0, epoch_timeout_s=60.0)
    values.update(fields)
    return JobSpec(**values)


def speed(w: int, s: int) -> float:
    """Best at 3 workers, 1 server (full epochs per second)."""
    return -0.05 * (w - 3) ** 2 - 0.05 * (s - 1) ** 2 + 0.5


#: A calibration that measured w <= 2 only (a job limited to 2 workers, or a cluster with no room for (3, 1)).
UP_TO_TWO_WORKERS = ((1, 1), (1, 2), (2, 1), (2, 2))


def calibrated(spent: float = 0.0) -> History:
    observations = tuple(SpeedObservation(w, s, speed(w, s)) for w, s in UP_TO_TWO_WORKERS)
    return History(observations=observations, calibration_done=4, steps_done=4, last_counts=(2, 2),
                   last_cost=0.001, spent=spent)


def test_the_registry_has_both_policies_under_their_names():
    assert set(RUN_POLICIES) >= {"static", "coach"}


def test_static_gives_every_asking_job_its_files_counts():
    jobs = [RunJobView(spec("a", 2, 1), History(), 0, True), RunJobView(spec("b", 1, 3), History(), 4, False),
            RunJobView(spec("c", 1, 3), History(), 0, True)]
    decided = RUN_POLICIES["static"].decide(CLUSTER, jobs, 0.0)
    assert decided == {"a": Counts(2, 1, True), "c": Counts(1, 3, True)}


def test_static_needs_counts_and_never_calibrates():
    static = RUN_POLICIES["static"]
    assert static.check(spec("dyn")) == "workers: the static policy needs workers and servers in every job file"
    assert static.check(spec("a", 2, 1)) is None
    assert static.calibration(spec("a", 2, 1)) == ()


def test_a_fixed_job_whose_last_epoch_says_the_next_is_unaffordable_is_told_so():
    history = History(last_counts=(2, 1), last_cost=0.4, spent=9.7, steps_done=3, epochs_done=3)
    decided = RUN_POLICIES["coach"].decide(CLUSTER, [RunJobView(spec("a", 2, 1), history, 4, True)], 0.0)
    assert decided["a"] == Counts(2, 1, affordable=False)


def test_coach_calibrates_only_jobs_without_counts():
    coach = RUN_POLICIES["coach"]
    assert coach.calibration(spec("dyn")) == CALIBRATION_POINTS
    assert coach.calibration(spec("fixed", 2, 1)) == ()
    assert coach.calibration(spec("one", max_workers=1)) == ((1, 1), (1, 2))  # within its limits


def test_coach_alone_decides_what_the_single_job_planner_decides():
    job = spec("dyn")
    decided = RUN_POLICIES["coach"].decide(CLUSTER, [RunJobView(job, calibrated(), 5, True)], 0.0)["dyn"]
    expected = plan(job, calibrated(), 12, 10.0, 0.0001)
    assert isinstance(decided, Counts)
    # calibration measured w <= 2; the `levels` speed model predicts no gain beyond what was measured
    assert (decided.workers, decided.servers) == (expected.allocation.workers, expected.allocation.servers) == (2, 1)
    assert decided.details == expected.to_dict()
    assert decided.affordable


def test_a_growing_job_leaves_the_slots_that_waiting_and_fixed_jobs_hold():
    """What the old `slots_for_growth` workaround did, now a fact of the run-level decision."""
    jobs = [RunJobView(spec("dyn"), calibrated(), 5, True), RunJobView(spec("queued", 4, 4), History(), 9, False)]
    decided = RUN_POLICIES["coach"].decide(CLUSTER, jobs, 0.0)
    assert set(decided) == {"dyn"}  # only the asking job gets an answer; the queued one weighs in
    assert decided["dyn"] == Counts(1, 1, True, decided["dyn"].details)  # 12 - 9 = 3 slots: (1,1) only
    assert decided["dyn"].details["free_slots"] == 3
    assert decided["dyn"].details["stopped_by"] == "capacity"


def test_two_dynamic_jobs_share_the_free_slots_by_marginal_gain():
    jobs = [RunJobView(spec("a"), calibrated(), 5, True), RunJobView(spec("b"), calibrated(), 5, True)]
    decided = RUN_POLICIES["coach"].decide(RunClusterView(8, 0.0001), jobs, 0.0)
    counts = {name: (d.workers, d.servers) for name, d in decided.items()}
    assert sum(w + s + 1 for w, s in counts.values()) <= 8
    assert counts == {"a": (2, 1), "b": (2, 1)}  # (1,1) each, then one worker each: 4 + 4 slots


def test_a_dynamic_job_that_cannot_start_waits_with_the_reason():
    jobs = [RunJobView(spec("big", 4, 4), History(), 9, False), RunJobView(spec("dyn"), calibrated(), 0, True)]
    decided = RUN_POLICIES["coach"].decide(RunClusterView(10, 0.0001), jobs, 0.0)
    assert decided["dyn"] == Wait("(1,1) needs 3 slots but only 1 are free")


def test_an_uncalibrated_dynamic_job_waits():
    decided = RUN_POLICIES["coach"].decide(CLUSTER, [RunJobView(spec("dyn"), History(), 0, True)], 0.0)
    assert decided["dyn"] == Wait("no speed measured yet")


@pytest.mark.parametrize("budget, affordable", [(10.0, True), (1e-9, False)])
def test_coach_says_whether_the_planned_epoch_is_affordable(budget, affordable):
    job = RunJobView(spec("dyn", budget=budget), calibrated(), 5, True)
    decided = RUN_POLICIES["coach"].decide(CLUSTER, [job], 0.0)
    assert decided["dyn"].affordable is affordable


def test_a_fixed_job_whose_budget_is_below_the_cost_floor_is_told_before_its_first_epoch():
    """No measurement yet: the least an epoch can cost (slots x MIN_EPOCH_S x price) decides."""
    cheap = RunJobView(spec("a", 2, 1, budget=4 * 0.3 * 0.0001 * 0.99), History(), 0, True)
    enough = RunJobView(spec("b", 2, 1, budget=4 * 0.3 * 0.0001 * 1.01), History(), 0, True)
    decided = RUN_POLICIES["static"].decide(CLUSTER, [cheap, enough], 0.0)
    assert decided == {"a": Counts(2, 1, False), "b": Counts(2, 1, True)}
