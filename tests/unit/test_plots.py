"""The PNGs of `coach compare` and `coach report`: each is written, decodes, and has the documented size.

A fixed-size figure is 8 x 5 inches at 100 dpi (800 x 500 pixels, RGBA); the runtime bars grow by a quarter inch
per job. Empty inputs still give a readable figure saying there is nothing to show.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import matplotlib.image
import pytest

from coach.analysis import plots
from coach.ui.cli import main
from coach.domain.records import EpochRecord, iso

T0_S = 1_800_000_000.0
FIXED_SHAPE = (500, 800, 4)


def decoded_shape(path: Path) -> tuple[int, ...]:
    return matplotlib.image.imread(path).shape


def line(job: str, phase: str, epoch: int, start_s: float, seconds: float, workers: int, servers: int,
         cumulative_cost: float, val_loss: float | None = 0.5) -> dict:
    """A log record in the real format, as read back from a .jsonl file."""
    return json.loads(EpochRecord(
        run_id="r", job=job, phase=phase, epoch=epoch, workers=workers, servers=servers, placement={},
        loss=2.0 / (epoch + 1), val_loss=val_loss, accuracy=None, train_accuracy=0.5, samples=1000,
        epoch_time_s=seconds, compute_s=seconds / 2, start=iso(T0_S + start_s), end=iso(T0_S + start_s + seconds),
        cost=0.001, cumulative_cost=cumulative_cost, budget=0.01).to_json())


LOGS = {
    "static": [line("static", "training", e, 5.0 + e, 1.0, 2, 2, 0.001 * e) for e in (1, 2, 3)],
    "dynamic": [line("dynamic", "calibration", 0, 5.0 + k * 0.5, 0.5, w, s, 0.0005 * k, val_loss=None)
                for k, (w, s) in enumerate([(1, 1), (1, 2), (2, 1), (2, 2)], start=1)]
               + [line("dynamic", "training", e, 8.0 + e, 1.0, 3, 1, 0.002 + 0.001 * e, val_loss=None)
                  for e in (1, 2)],
}


def test_jct_boxplot(tmp_path):
    path = plots.jct_boxplot([("A: gang", [10.0, 14.0, 12.0]), ("B: default", [20.0, 22.0])], tmp_path / "box.png")

    assert decoded_shape(path) == FIXED_SHAPE


def test_epoch_time_plot(tmp_path):
    path = plots.epoch_time_plot([("A", LOGS["static"]), ("B", LOGS["dynamic"])], tmp_path / "epochs.png")

    assert decoded_shape(path) == FIXED_SHAPE


def test_runtime_bars_grow_with_the_number_of_jobs(tmp_path):
    jobs = [(f"run#1/m-{i}", 10.0 + i) for i in range(30)]

    path = plots.runtime_bars([("A", jobs[:12]), ("B", jobs[12:])], tmp_path / "bars.png")

    assert plots.bars_height_in(30) == 30 * 0.25 + 1.5
    assert decoded_shape(path) == (900, 800, 4)
    assert decoded_shape(plots.runtime_bars([("A", jobs[:2])], tmp_path / "few.png")) == FIXED_SHAPE


def test_runtime_bars_of_thousands_of_jobs_draw_only_the_slowest(tmp_path):
    """A bar per job made a 5,000-job comparison take over a minute (and a figure 1,250 inches high)."""
    jobs = [(f"run#1/m-{i}", float(i % 997)) for i in range(2000)]

    path = plots.runtime_bars([("A", jobs[:1200]), ("B", jobs[1200:])], tmp_path / "bars.png")

    assert decoded_shape(path) == (round(plots.bars_height_in(plots.MAX_BARS) * plots.DPI), 800, 4)
    assert plots.slowest([(0, "A", "x", 1.0), (1, "B", "y", 3.0), (0, "A", "z", 2.0)], 2) == \
        [(1, "B", "y", 3.0), (0, "A", "z", 2.0)]


def test_report_plots(tmp_path):
    budgets = {"static": 0.01, "dynamic": 0.01}
    started = iso(T0_S)

    written = [plots.loss_plot(LOGS, tmp_path / "loss.png"),
               plots.allocation_plot(LOGS, started, tmp_path / "allocation.png"),
               plots.cost_plot(LOGS, budgets, started, tmp_path / "cost.png")]

    assert [decoded_shape(path) for path in written] == [FIXED_SHAPE] * 3


@pytest.mark.parametrize("draw", [
    lambda out: plots.jct_boxplot([("A", []), ("B", [])], out),
    lambda out: plots.epoch_time_plot([("A", [])], out),
    lambda out: plots.runtime_bars([("A", [])], out),
    lambda out: plots.loss_plot({"j": []}, out),
    lambda out: plots.allocation_plot({"j": []}, iso(T0_S), out),
    lambda out: plots.cost_plot({}, {}, iso(T0_S), out),
])
def test_nothing_to_draw_still_gives_a_figure(tmp_path, draw):
    assert decoded_shape(draw(tmp_path / "empty.png")) == FIXED_SHAPE


def test_coach_report_writes_three_plots_into_the_run_folder(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({
        "run_id": "r", "started": iso(T0_S), "makespan_s": 12.0,
        "jobs": {job: {"jct_s": 12.0, "finished": iso(T0_S + 12), "budget": 0.01} for job in LOGS}}))
    for job, records in LOGS.items():
        (run / f"{job}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    assert main(["report", str(run)]) == 0

    names = ["loss.png", "allocation.png", "cost.png"]
    assert capsys.readouterr().out == "".join(f"plot: {run / 'report' / name}\n" for name in names)
    assert [decoded_shape(run / "report" / name) for name in names] == [FIXED_SHAPE] * 3


def test_coach_report_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2

    assert capsys.readouterr().err == f"{tmp_path}: (argument): not a run folder (no summary.json)\n"


@pytest.mark.parametrize("loss", [1e308, -1e308])
def test_a_loss_near_the_largest_float_is_left_out_of_the_loss_plot(tmp_path, loss):
    """A diverged job may log any loss: -1e308 made matplotlib raise (a traceback from `coach report`), 1e308 warn."""
    records = [line("j", "training", e, float(e), 1.0, 1, 1, 0.001 * e) for e in (1, 2, 3)]
    records[1] = {**records[1], "loss": loss, "val_loss": loss}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert decoded_shape(plots.loss_plot({"j": records}, tmp_path / "loss.png")) == FIXED_SHAPE
