"""benchmarks/fit_accuracy.py compare: re-fits the forms from a saved points file, and refuses a bad one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coach.estimates.speed_forms import FORMS

from tests.support import benchmark_script


@pytest.fixture(scope="module")
def fit_accuracy():
    yield from benchmark_script("fit_accuracy")


def comm_time_s(w: int, s: int) -> float:
    return 0.5 + 3.0 / w + 0.2 * w / s


def points_file(tmp_path: Path) -> Path:
    """A measurement as `measure` saves it, generated from the comm form (full-data calibration steps)."""
    calibration = [{"phase": "calibration", "workers": w, "servers": s, "epoch_time_s": comm_time_s(w, s),
                    "compute_s": None, "data_fraction": 1.0} for w, s in ((1, 1), (1, 2), (2, 1), (2, 2))]
    points = [{"workers": w, "servers": s, "epoch_times_s": [9.9, comm_time_s(w, s), comm_time_s(w, s)],
               "compute_s": [None, None, None]} for w, s in ((1, 1), (3, 1), (2, 3), (4, 2))]
    path = tmp_path / "fit_points_synthetic.json"
    path.write_text(json.dumps({"model": "synthetic", "warm_up_epochs_dropped": 1, "calibration": calibration,
                                "points": points}))
    return path


def test_compare_refits_every_form_and_the_generating_form_is_exact(fit_accuracy, tmp_path, capsys):
    path = points_file(tmp_path)

    assert fit_accuracy.main(["compare", str(path)]) == 0

    out = capsys.readouterr().out
    rows = {}  # the first table's row per form (the pooled table repeats them)
    for line in out.splitlines():
        if line.split()[:1] != [] and line.split()[0] in FORMS and "synthetic" in line:
            rows.setdefault(line.split()[0], line.split())
    assert set(rows) == set(FORMS)
    assert rows["comm"][2:7] == ["0.0%", "0.0%", "0%", "0.0%", "0.0%"]  # the warm-up epoch (9.9 s) is dropped
    data = fit_accuracy.load_points(path)
    assert data["measured"][(3, 1)] == pytest.approx(comm_time_s(3, 1))
    errors = fit_accuracy.leave_one_out_errors(FORMS["comm"], data)
    assert max(errors.values()) == pytest.approx(0.0, abs=1e-6)


def test_every_calibration_is_fitted_alone_and_the_median_is_over_all_of_them(fit_accuracy, tmp_path, capsys):
    path = scaled_file(tmp_path, "three.json", [1.0, 1.5, 1.0])  # the second calibration 50% slow

    loaded = fit_accuracy.load_points(path)
    runs = fit_accuracy.calibration_errors(FORMS["comm"], loaded)

    assert len(runs) == 3
    assert max(error for _, error in runs[0].values()) == pytest.approx(0.0, abs=1e-6)
    assert all(error == pytest.approx(0.5, rel=1e-3) for _, error in runs[1].values())
    assert fit_accuracy.main(["compare", str(path)]) == 0
    out = capsys.readouterr().out
    row = next(line.split() for line in out.splitlines() if line.split()[:2] == ["comm", "synthetic"])
    assert row[2:5] == ["0.0%", "50.0%", "0%/50%/0%"]  # pooled median 0%, the slow one seen in max and its own


def test_two_files_of_one_model_each_show_their_own_predictions(fit_accuracy, tmp_path, capsys):
    exact = points_file(tmp_path)
    data = json.loads(exact.read_text())
    data["calibration"] = [{**line, "epoch_time_s": line["epoch_time_s"] * 2} for line in data["calibration"]]
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(data))

    assert fit_accuracy.main(["compare", str(exact), str(slow)]) == 0

    out = capsys.readouterr().out
    tables = out.split("\nsynthetic (")[1:]
    assert [block.split(")")[0] for block in tables] == [str(exact), str(slow)]
    rows = [next(line.split() for line in block.splitlines() if line.split()[:2] == ["3", "1"]) for block in tables]
    # w, s, measured, then per form: predicted, (error), /, LOO error
    predicted = [float(row[3 + 4 * list(FORMS).index("comm")]) for row in rows]
    assert predicted == [pytest.approx(comm_time_s(3, 1), rel=1e-6), pytest.approx(2 * comm_time_s(3, 1), rel=1e-6)]


def scaled_file(tmp_path: Path, name: str, factors: list[float]) -> Path:
    """A measurement of the synthetic model with one calibration per factor, each calibration that much slow."""
    data = json.loads(points_file(tmp_path).read_text())
    exact = data.pop("calibration")
    data["calibrations"] = [[{**line, "epoch_time_s": line["epoch_time_s"] * factor} for line in exact]
                            for factor in factors]
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_files_of_one_model_are_pooled_with_an_interval_the_share_met_and_the_noise_floor(fit_accuracy, tmp_path,
                                                                                           capsys, monkeypatch):
    exact = scaled_file(tmp_path, "exact.json", [1.0, 1.0])
    slow = scaled_file(tmp_path, "slow.json", [1.2])  # every prediction and every sampled point 20% slow
    files = [fit_accuracy.load_points(exact), fit_accuracy.load_points(slow)]

    runs = [fit_accuracy.calibration_errors(FORMS["comm"], data) for data in files]
    pool = fit_accuracy.pooled(files, runs)["synthetic"]

    assert pool["calibrations"] == 3
    assert pool["median"] == pytest.approx(0.0, abs=1e-6)  # two exact calibrations of three
    assert pool["met_share"] == pytest.approx(2 / 3)
    assert pool["floor"] == pytest.approx(0.0, abs=1e-6)  # the slow one's 20% at its sampled points, 1 of 3
    # calibrations resampled whole: 7 resamples in 27 draw the slow one at least twice, so the interval reaches 20%
    assert (pool["low"], pool["high"]) == (pytest.approx(0.0, abs=1e-6), pytest.approx(0.2, rel=1e-6))
    assert fit_accuracy.pooled(files, runs) == fit_accuracy.pooled(files, runs)  # seeded

    monkeypatch.setattr(fit_accuracy, "CHOSEN_FORM", "comm")  # the verdict is the chosen form's: the exact one here
    assert fit_accuracy.main(["compare", str(exact), str(slow)]) == 0
    out = capsys.readouterr().out
    pooled_table = out.split("\npooled by model")[1]
    row = next(line.split() for line in pooled_table.splitlines() if line.split()[:2] == ["comm", "(chosen)"])[1:]
    assert row[1:] == ["synthetic", "2", "3", "0.0%", "0.0%-20.0%", "67%", "0.0%"]
    verdict = out.strip().splitlines()[-1]
    assert verdict.startswith("chosen form 'comm'")
    assert verdict.endswith("(goal <= 10%: met; the interval reaches past the goal: not robustly)")


def test_the_pooled_verdict_is_not_met_when_most_calibrations_miss(fit_accuracy, tmp_path, capsys, monkeypatch):
    slow = scaled_file(tmp_path, "slow.json", [1.0, 1.2, 1.2])
    monkeypatch.setattr(fit_accuracy, "CHOSEN_FORM", "comm")

    assert fit_accuracy.main(["compare", str(slow)]) == 0

    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    assert "synthetic 20.0% [" in verdict and verdict.endswith("(goal <= 10%: NOT met)")
    # the sampled points of the two slow calibrations are 20% off too: the noise floor says so
    assert "noise floor 20.0%" in verdict


@pytest.mark.parametrize(("points", "calibrations", "slots"), [
    (10, 3, [0, 3, 7]), (10, 1, [0]), (2, 3, [0, 1, 1]), (1, 2, [0, 0]), (5, 5, [0, 1, 2, 3, 4]),
])
def test_calibrations_are_spread_evenly_between_the_points(fit_accuracy, points, calibrations, slots):
    assert fit_accuracy.calibration_slots(points, calibrations) == slots


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(calibrations=[d["calibration"], []]), "calibrations[1]: expected a non-empty list"),
    (lambda d: d.update(calibrations="x"), "calibrations: expected a non-empty list of calibrations"),
    (lambda d: d.update(calibration=[]), "calibration: expected a non-empty list"),
    (lambda d: d["points"][1].update(workers=0), "points[1].workers: workers and servers must be integers >= 1"),
    (lambda d: d["points"][2].update(epoch_times_s=[1.0, float("nan")]), "points[2].epoch_times_s: expected more"),
    (lambda d: d.update(points=d["points"][:1]),  # a measurement under way: only (1,1), which calibration sampled
     "points: every measured point was sampled by calibration, none is left to predict"),
])
def test_a_bad_points_file_is_one_line_naming_the_field_and_exit_2(fit_accuracy, tmp_path, capsys, edit, message):
    path = points_file(tmp_path)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))

    assert fit_accuracy.main(["compare", str(path)]) == 2

    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: {message}")


def test_a_file_that_measured_none_of_the_sampled_counts_has_no_noise_floor(fit_accuracy, tmp_path, capsys):
    path = points_file(tmp_path)
    data = json.loads(path.read_text())
    data["points"] = [point for point in data["points"] if (point["workers"], point["servers"]) != (1, 1)]
    path.write_text(json.dumps(data))

    assert fit_accuracy.main(["compare", str(path)]) == 0

    assert "noise floor none (no sampled count measured)" in capsys.readouterr().out.strip().splitlines()[-1]


def test_every_shipped_measurement_loads_and_a_folder_pools_one_calibration_fraction(fit_accuracy):
    """`compare benchmarks/data/fit_runs/*.json` pools by model: a folder must not mix calibration settings."""
    root = Path(fit_accuracy.__file__).parent / "data" / "fit_runs"
    folders = {root: 0.25, root / "fraction-0.5": 0.5}
    for folder, fraction in folders.items():
        paths = sorted(folder.glob("*.json"))
        assert paths, folder
        for path in paths:
            loaded = fit_accuracy.load_points(path)
            assert len(loaded["calibrations"]) == 3 and len(loaded["measured"]) == 10, path
            assert json.loads(path.read_text())["calibration_fraction"] == fraction, path
