"""benchmarks/fit_accuracy.py compare: re-fits the forms from a saved points file, and refuses a bad one."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from coach.model.speed_forms import FORMS

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "fit_accuracy.py"


@pytest.fixture(scope="module")
def fit_accuracy():
    spec = importlib.util.spec_from_file_location("fit_accuracy", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] != []
            and line.split()[0] in FORMS and "synthetic" in line}
    assert set(rows) == set(FORMS)
    assert rows["comm"][2:6] == ["0.0%", "0.0%", "0.0%", "0.0%"]  # the warm-up epoch (9.9 s) is dropped
    data = fit_accuracy.load_points(path)
    assert data["measured"][(3, 1)] == pytest.approx(comm_time_s(3, 1))
    errors = fit_accuracy.leave_one_out_errors(FORMS["comm"], data)
    assert max(errors.values()) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(calibration=[]), "calibration: expected a non-empty list"),
    (lambda d: d["points"][1].update(workers=0), "points[1].workers: workers and servers must be integers >= 1"),
    (lambda d: d["points"][2].update(epoch_times_s=[1.0, float("nan")]), "points[2].epoch_times_s: expected more"),
])
def test_a_bad_points_file_is_one_line_naming_the_field_and_exit_2(fit_accuracy, tmp_path, capsys, edit, message):
    path = points_file(tmp_path)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))

    assert fit_accuracy.main(["compare", str(path)]) == 2

    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: {message}")
