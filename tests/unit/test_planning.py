"""From log records to the next decision: the glue the controller and `coach plan` share."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from coach.ui.cli import main
from coach.inputs.jobs import load_job
from coach.policy.history import full_epoch_time_s, history_from_records, observations, training_metrics
from coach.policy.planning import CALIBRATION_POINTS, plan

# A known surface, in full epochs per second: best at 3 workers, 1 server.
B1, B2, B3, B4, B5 = 0.05, 3.0, 0.05, 1.0, 0.5


def speed(w: int, s: int) -> float:
    return -B1 * (w - B2) ** 2 - B3 * (s - B4) ** 2 + B5


def record(phase: str, epoch: int, w: int, s: int, loss: float, fraction: float = 1.0, cost: float = 0.001) -> dict:
    """A log line as the controller writes it; times come from the known surface."""
    full_s = 1.0 / speed(w, s)
    compute_s = 0.8 * full_s * fraction
    line = {"job": "dyn", "phase": phase, "epoch": epoch, "workers": w, "servers": s, "loss": loss,
            "val_loss": None, "epoch_time_s": 0.2 * full_s + compute_s, "compute_s": compute_s,
            "cost": cost, "cumulative_cost": cost}
    if phase == "calibration":
        line["data_fraction"] = fraction
    return line


def history() -> list[dict]:
    calibration = [record("calibration", 0, w, s, 2.0, fraction=0.25) for w, s in CALIBRATION_POINTS]
    losses = [1 / (0.5 * k + 0.4) + 0.05 for k in range(1, 6)]
    training = [record("training", k, 3, 1, loss) for k, loss in enumerate(losses, start=1)]
    return calibration + training


@pytest.fixture
def job(tmp_path: Path):
    (tmp_path / "model.py").write_text("def build_model():\n    pass\n\n\ndef load_data():\n    pass\n")
    (tmp_path / "dyn.yaml").write_text(
        "name: dyn\nmodel: model.py\nbatch_size: 64\noptimizer: sgd\nlearning_rate: 0.1\n"
        "target_loss: 0.3\nmax_epochs: 30\nbudget: 1.0\n")
    return load_job(tmp_path / "dyn.yaml")


def test_a_mini_epoch_scales_only_its_training_loop_to_a_full_epoch():
    # 0.4 s of fixed cost (rendezvous, checkpoint, validation) + 0.6 s of training on a quarter of the data
    assert full_epoch_time_s(1.0, 0.6, 0.25) == pytest.approx(0.4 + 2.4)
    assert full_epoch_time_s(1.0, None, 0.5) == 2.0  # no split known: the whole time scales
    assert full_epoch_time_s(3.0, 2.0, 1.0) == 3.0


def test_the_warm_up_is_paid_once_not_scaled_with_the_data():
    # 0.4 s fixed + 0.2 s of warm-up + 0.4 s of steps on a quarter of the data: 0.4 + 0.2 + 4 x 0.4
    assert full_epoch_time_s(1.0, 0.6, 0.25, warmup_s=0.2) == pytest.approx(0.4 + 0.2 + 1.6)
    assert full_epoch_time_s(1.0, 0.6, 0.25, warmup_s=None) == pytest.approx(0.4 + 2.4)  # not told
    assert full_epoch_time_s(1.0, 0.6, 0.25, warmup_s=0.9) == pytest.approx(0.4 + 2.4)  # impossible: ignored
    line = {"phase": "calibration", "workers": 2, "servers": 1, "epoch_time_s": 1.0, "compute_s": 0.6,
            "data_fraction": 0.25, "warmup_s": 0.2, "cost": 0.01, "loss": 1.0}
    assert observations([line])[0].epochs_per_s == pytest.approx(1 / 2.2)


def test_calibration_mini_epochs_become_full_epoch_speeds():
    found = observations(history())
    assert len(found) == len(CALIBRATION_POINTS) + 5
    for obs, (w, s) in zip(found, CALIBRATION_POINTS):
        assert (obs.workers, obs.servers) == (w, s)
        assert obs.epochs_per_s == pytest.approx(speed(w, s))


def test_stopped_lines_are_not_observations_and_calibration_is_not_an_epoch():
    lines = history() + [{"job": "dyn", "phase": "stopped", "epoch": 5, "workers": 3, "servers": 1,
                          "epoch_time_s": 0.0, "loss": None}]
    assert len(observations(lines)) == len(CALIBRATION_POINTS) + 5
    assert len(training_metrics(lines)) == 5


def test_the_plan_recovers_the_surface_and_picks_its_best_counts(job):
    decided = plan(job, history_from_records(history()), free_slots=12, budget_left=1.0, price_per_slot_s=0.0001)

    assert decided.speed.epochs_per_s(3, 1) == pytest.approx(speed(3, 1), rel=1e-3)
    # the `levels` speed model predicts no gain beyond the measured w = 3: growth stops there, and the never-run
    # neighbour (4,1), predicted no slower, is probed for one epoch
    assert (decided.allocation.workers, decided.allocation.servers) == (4, 1)
    assert decided.allocation.to_dict()["choice"].startswith("probes (4,1) (+1 worker) from (3,1)")
    assert decided.allocation.stopped_by == "gain"
    # the convergence curve 1/(0.5k + 0.4) + 0.05 reaches 0.3 at k = 7.2: 3 more epochs, + 2 to hold it
    assert decided.remaining.source == "fit"
    assert decided.remaining.epochs == pytest.approx(math.ceil(7.2) - 5 + 2, abs=1)
    assert decided.affordable


def test_a_plan_that_cannot_pay_for_its_epoch_is_not_affordable(job):
    decided = plan(job, history_from_records(history()), free_slots=12, budget_left=1e-6, price_per_slot_s=0.0001)
    assert (decided.allocation.workers, decided.allocation.servers) == (1, 1)
    assert decided.allocation.stopped_by == "budget"
    assert not decided.affordable


def test_the_plan_respects_the_free_slots(job):
    decided = plan(job, history_from_records(history()), free_slots=4, budget_left=1.0, price_per_slot_s=0.0001)
    assert (decided.allocation.workers, decided.allocation.servers) == (2, 1)
    assert decided.allocation.stopped_by == "capacity"


def test_coach_plan_prints_the_fit_and_the_choice_as_json(job, tmp_path, capsys):
    log = tmp_path / "dyn.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in history()))

    assert main(["plan", str(job.source), "--history", str(log), "--free-slots", "4", "--budget-left", "0.5"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["workers"], printed["servers"]) == (2, 1)
    assert printed["stopped_by"] == "capacity"
    assert printed["budget_left"] == 0.5 and printed["free_slots"] == 4
    assert set(printed["speed_fit"]) >= {"form", "observations", "rms_error", "fixed", "notes"}
    assert printed["predicted_remaining_epochs"] >= 1


@pytest.mark.parametrize("scale", [1.0, 1e300])
def test_coach_plan_prints_standard_json_whatever_the_losses_scale(job, tmp_path, capsys, scale):
    """Losses near the largest float (valid numbers in a log) fit as well as any: no overflow warning, no
    `Infinity` in the plan, and the fit's error scales with them."""
    log = tmp_path / "dyn.jsonl"
    records = [{**r, "loss": r["loss"] * scale} for r in history()]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))

    assert main(["plan", str(job.source), "--history", str(log), "--free-slots", "4", "--budget-left", "0.5"]) == 0
    out, err = capsys.readouterr()
    printed = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in the plan"))
    assert err == ""
    assert math.isfinite(printed["convergence_fit"]["rms_error"] / scale)


def test_coach_plan_names_a_broken_log_line(job, tmp_path, capsys):
    log = tmp_path / "dyn.jsonl"
    log.write_text(json.dumps(history()[0]) + "\n{not json\n")

    assert main(["plan", str(job.source), "--history", str(log)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{log}: (line 2): not JSON") and err.count("\n") == 1


def test_calibration_keeps_to_the_job_limits_and_the_cluster_slots():
    from coach.policy.planning import calibration_within

    assert CALIBRATION_POINTS == ((1, 1), (1, 2), (2, 1), (2, 2), (3, 1))
    assert calibration_within(CALIBRATION_POINTS) == CALIBRATION_POINTS
    assert calibration_within(CALIBRATION_POINTS, max_workers=1) == ((1, 1), (1, 2))
    assert calibration_within(CALIBRATION_POINTS, max_workers=2) == ((1, 1), (1, 2), (2, 1), (2, 2))
    assert calibration_within(CALIBRATION_POINTS, max_servers=1) == ((1, 1), (2, 1), (3, 1))
    assert calibration_within(CALIBRATION_POINTS, total_slots=6) == CALIBRATION_POINTS  # (3,2): 6 slots together
    assert calibration_within(CALIBRATION_POINTS, total_slots=5) == CALIBRATION_POINTS[:4]  # (2,2): 5 slots
    assert calibration_within(CALIBRATION_POINTS, total_slots=4) == ((1, 1), (1, 2))
    assert calibration_within(((1, 1), (2, 1), (1, 2)), total_slots=4) == ((1, 1), (2, 1))
    assert calibration_within(CALIBRATION_POINTS, total_slots=2) == ()
