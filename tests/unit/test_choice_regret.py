"""benchmarks/choice_regret.py: a dynamic job in virtual time over a measured epoch-time table settles near the best
counts it could afford; bad points files are refused in one line."""

from __future__ import annotations

import json

import pytest

from tests.support import benchmark_script


@pytest.fixture(scope="module")
def bench():
    yield from benchmark_script("choice_regret")


def misled(bench):
    """Calibration says (2,2) is slow; its full epochs are the fastest: only measuring finds it."""
    times = {(1, 1): 3.8, (1, 2): 3.8, (2, 1): 2.96, (2, 2): 2.75, (3, 1): 3.12, (3, 2): 3.12}
    calibration = {(1, 1): 4.7, (1, 2): 4.9, (2, 1): 3.09, (2, 2): 3.23}
    return bench.Table("misled", bench.ROOT / "jobs" / "lenet-dynamic.yaml", times, 0.8, calibration)


def test_tables_give_missing_counts_the_slowest_point_they_contain(bench):
    table = misled(bench)
    assert table.epoch_time_s(2, 2) == 2.75
    assert table.epoch_time_s(4, 2) == 3.8  # contains (1,1), (1,2), ..., (3,2): the slowest is 3.8


def test_measuring_finds_the_counts_calibration_misjudged(bench):
    table = misled(bench)
    before = bench.case(table, (3, 2), "before", seeds=4, noise=0.03)
    after = bench.case(table, (3, 2), "after", seeds=4, noise=0.03)

    assert before["best_s"] == after["best_s"] == 2.75
    assert before["mean_regret"] == pytest.approx(2.96 / 2.75 - 1)  # the fit alone never tries (2,2)
    assert after["mean_regret"] <= bench.GOAL
    assert after["settled"].get("2x2", 0) >= 3


def test_a_bad_points_file_is_one_line_and_exit_code_2(bench, tmp_path, capsys):
    bad = tmp_path / "points.json"
    bad.write_text(json.dumps({"job": "jobs/lenet-dynamic.yaml", "points": [{"workers": 2, "servers": 1,
                                                                             "epoch_times_s": [-1.0]}]}))
    assert bench.main(["--no-lenet", "--points", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"choice_regret.py: {bad}: points[0].epoch_times_s: expected a non-empty list of positive times\n"
