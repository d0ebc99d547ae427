"""`coach run --policy dl2`: the learned network deciding a live run's workers and servers (one more worker, one
more server, or both, at a time), within the free slots and each job's money; fixed and uncalibrated jobs as under
`coach`."""

from __future__ import annotations

import pytest

from coach.app.run_policies import RUN_POLICIES
from coach.dl2.run_policy import Dl2RunPolicy, asking_round
from coach.policy.history import History
from coach.policy.run_policy import RunClusterView, Counts, RunJobView, Wait
from coach.dl2.run_round import COUNTS_SHAPE
from coach.dl2.network import new_network
from tests.unit.test_run_policy import CLUSTER, calibrated, spec


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "dl2.params"
    new_network(seed=3, shape=COUNTS_SHAPE).save_parameters(str(path))
    return path


def test_the_run_registry_offers_dl2_beside_the_pure_policies():
    assert set(RUN_POLICIES) == {"coach", "static", "dl2"}


def test_a_missing_model_is_a_one_line_check_problem(tmp_path):
    policy = Dl2RunPolicy(tmp_path / "none.params")

    problem = policy.check(spec("a"))

    assert problem.startswith(f"policy: {tmp_path / 'none.params'}: ") and "\n" not in problem


def test_counts_fit_the_free_slots_and_the_job_limits(model):
    policy = Dl2RunPolicy(model)
    jobs = [RunJobView(spec(name, max_servers=2, max_workers=3), calibrated(), 0, True) for name in ("a", "b", "c")]

    decided = policy.decide(CLUSTER, jobs, 0.0)

    assert set(decided) == {"a", "b", "c"}
    counts = [d for d in decided.values() if isinstance(d, Counts)]
    assert counts, decided
    assert sum(c.workers + c.servers + 1 for c in counts) <= CLUSTER.total_slots
    assert all(1 <= c.servers <= 2 and 1 <= c.workers <= 3 and c.affordable for c in counts)
    assert all(c.details["by"] == "network" and set(c.details["actions"]) <= {"worker", "server", "both"}
               and c.details["actions"][0] == "both" for c in counts)
    assert all(isinstance(d, Wait) and d.reason.startswith("dl2:") for d in decided.values()
               if not isinstance(d, Counts))


def test_slots_of_jobs_mid_epoch_are_not_given_again(model):
    policy = Dl2RunPolicy(model)
    running = RunJobView(spec("running"), calibrated(), 9, False)  # 9 of 12 slots held by a job not asking
    asking = RunJobView(spec("asking"), calibrated(), 0, True)

    decided = policy.decide(CLUSTER, [running, asking], 0.0)

    assert "running" not in decided
    chosen = decided["asking"]
    assert isinstance(chosen, Wait) or chosen.workers + chosen.servers + 1 <= 3
    asked, held, round_ = asking_round(CLUSTER, [running, asking])
    assert asked == [asking] and held == 9 and round_.free_slots == 3


def test_fixed_and_uncalibrated_jobs_are_decided_as_under_coach(model):
    policy = Dl2RunPolicy(model)
    jobs = [RunJobView(spec("fixed", 2, 1), History(), 0, True), RunJobView(spec("new"), History(), 0, True)]

    decided = policy.decide(CLUSTER, jobs, 0.0)

    assert decided["fixed"] == Counts(2, 1, True)
    assert decided["new"] == Wait("no speed measured yet")
    assert policy.calibration(spec("new")) == RUN_POLICIES["coach"].calibration(spec("new"))


def test_an_epoch_the_money_left_cannot_pay_is_not_affordable(model):
    policy = Dl2RunPolicy(model)
    poor = RunJobView(spec("poor", budget=1e-6), calibrated(), 0, True)

    decided = policy.decide(RunClusterView(12, 0.0001), [poor], 0.0)["poor"]

    assert isinstance(decided, Counts) and not decided.affordable


def test_a_full_cluster_leaves_learned_jobs_waiting(model):
    policy = Dl2RunPolicy(model)
    holder = RunJobView(spec("holder", 8, 3), History(), 12, False)
    waiting = RunJobView(spec("w"), calibrated(), 0, True)

    assert isinstance(policy.decide(CLUSTER, [holder, waiting], 0.0)["w"], Wait)


def test_a_run_under_dl2_calibrates_then_trains_every_job_with_the_shipped_model(tmp_path):
    """`coach run --policy dl2` end to end over the simulated platform: the shipped network decides the workers."""
    from coach.app.run import run_jobs
    from coach.domain.cluster import DEFAULT_CLUSTER
    from coach.storage.results import read_log
    from tests.support import Scripted, factory
    from tests.unit.test_resume import spec as sim_spec

    jobs = [sim_spec(tmp_path, name, workers=None, servers=None, max_workers=4, max_servers=2, max_epochs=4)
            for name in ("one", "two")]

    report = run_jobs(jobs, DEFAULT_CLUSTER, tmp_path / "results", view="quiet", policy="dl2",
                      platform_factory=factory(Scripted()))

    assert report.exit_code == 0, report.summary
    for job in jobs:
        records = read_log(report.run_dir / f"{job.name}.jsonl")
        trained = [r for r in records if r["phase"] == "training"]
        assert [r["epoch"] for r in trained] == [1, 2, 3, 4]
        assert all(r["decision"]["policy"] == "dl2" and 1 <= r["workers"] <= 4 and 1 <= r["servers"] <= 2
                   for r in trained)
        assert max(r["cumulative_cost"] for r in records) <= job.budget
