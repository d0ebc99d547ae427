"""The `coach` policy decides from a job's own full epochs where it has them, and its decisions say why."""

from __future__ import annotations

from pathlib import Path

from coach.domain.jobs import JobSpec
from coach.estimates.speed import SpeedObservation
from coach.policy.history import History
from coach.app.run_policies import RUN_POLICIES
from coach.policy.run_policy import RunClusterView, CoachPolicy, Counts, RunJobView

CLUSTER = RunClusterView(total_slots=12, price_per_slot_s=0.0001)


def spec(name: str = "dyn") -> JobSpec:
    return JobSpec(name=name, source=Path(f"/jobs/{name}.yaml"), model_path=Path("/jobs/m.py"), batch_size=64,
                   optimizer="sgd", optimizer_params={}, learning_rate=0.1, target_loss=0.1, consecutive=3,
                   max_epochs=20, budget=10.0, workers=None, servers=None, max_workers=None, max_servers=None,
                   seed=0, epoch_timeout_s=60.0)


def calibrated_speed(w: int, s: int) -> float:
    """What calibration says: best at 3 workers, 1 server (full epochs per second)."""
    return -0.05 * (w - 3) ** 2 - 0.05 * (s - 1) ** 2 + 0.5


def history(*epochs: tuple[int, int, float]) -> History:
    """Calibration at the four points with w <= 2 (a cluster with no room for (3, 1)), then full epochs (workers,
    servers, epoch seconds)."""
    calibration = tuple(SpeedObservation(w, s, calibrated_speed(w, s)) for w, s in ((1, 1), (1, 2), (2, 1), (2, 2)))
    full = tuple(SpeedObservation(w, s, 1 / t) for w, s, t in epochs)
    return History(observations=calibration + full, metrics=tuple(1.0 for _ in epochs), calibration_done=4,
                   epochs_done=len(epochs), steps_done=4 + len(epochs),
                   last_counts=(epochs[-1][0], epochs[-1][1]) if epochs else (2, 2), last_cost=0.001)


def decide(policy, past: History) -> Counts:
    decided = policy.decide(CLUSTER, [RunJobView(spec(), past, 0, True)], 0.0)["dyn"]
    assert isinstance(decided, Counts)
    return decided


def test_before_any_full_epoch_the_fit_decides():
    decided = decide(RUN_POLICIES["coach"], history())
    assert (decided.workers, decided.servers) == (2, 1)  # the `levels` fit: no gain beyond the measured w <= 2
    assert decided.details["speed_fit"]["measured"] == []
    assert decided.details["growth"][0].startswith("(1,1) +1 worker -> (2,1): +")


def test_measured_epochs_slower_than_a_cheaper_measured_config_send_the_job_back():
    # calibration made the fit see 3,1 near its vertex; the job measured it (and 2,2) slower than 2,1
    past = history((3, 1, 2.6), (3, 1, 2.5), (2, 2, 2.4), (2, 1, 2.1))
    decided = decide(RUN_POLICIES["coach"], past)

    assert (decided.workers, decided.servers) == (2, 1)
    assert decided.details["choice"] == ("stays at (2,1): (2,1) 2.1 s per epoch (measured), growth found nothing "
                                         "better")
    [step] = decided.details["growth"]  # (1,1) is the fit's, (2,1) the job's own
    assert step.startswith("(1,1) +1 worker -> (2,1): +") and step.endswith("the money per epoch (measured)")
    assert {(p["workers"], p["servers"]) for p in decided.details["speed_fit"]["measured"]} == {(3, 1), (2, 2),
                                                                                                  (2, 1)}
    assert decided.affordable


def test_a_job_that_measured_one_config_probes_its_neighbour_the_fit_got_wrong():
    # the fit was 20% off about 3,1 before the job ran it, so a neighbour of 2,1 predicted a little slower is probed
    decided = decide(RUN_POLICIES["coach"], history((3, 1, 2.6), (3, 1, 2.5), (2, 1, 2.2)))
    assert (decided.workers, decided.servers) == (2, 2)
    assert decided.details["choice"].startswith("probes (2,2) (+1 server) from (2,1) for one epoch")


def test_the_policy_before_issue_13_trusts_the_fit_alone():
    past = history((3, 1, 2.6), (3, 1, 2.5), (2, 1, 2.1))
    decided = decide(CoachPolicy(measured=False), past)
    assert "measured" not in decided.details["speed_fit"]
    assert decided.details["choice"] == ""
