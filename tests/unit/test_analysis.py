"""The statistics of `coach compare`, and the command itself on run folders written here.

The descriptive table matches numpy's percentiles (linear interpolation) and pandas' sample standard deviation;
the tests give scipy's statistics and p-values; Cohen's d and the rank-biserial correlation are checked by hand.
Run folders are synthetic but in the real format (EpochRecord lines, summary_dict summaries).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from coach.analysis.stats import (TESTS, cohens_d, compare, describe, jct_samples, mean_by_epoch, epoch_times,
                            rank_biserial, run_test, run_times)
from coach.ui.cli import main
from coach.domain.records import EpochRecord, JobOutcome, iso, summary_dict

T0_S = 1_800_000_000.0  # a fixed run start, in epoch seconds

# --------------------------------------------------------------------------- describe


def test_describe_gives_the_thesis_table_with_numpy_linear_percentiles():
    table = describe([8.0, 1.0, 4.0, 2.0])

    assert table == {"count": 4, "mean": 3.75, "std": pytest.approx(math.sqrt(28.75 / 3)), "min": 1.0,
                     "25%": 1.75, "50%": 3.0, "75%": 5.0, "max": 8.0}
    # positions (n - 1) * q between sorted samples 1, 2, 4, 8: 0.75 -> 1.75, 1.5 -> 3.0, 2.25 -> 5.0
    assert [table["25%"], table["50%"], table["75%"]] == list(np.percentile([1, 2, 4, 8], [25, 50, 75]))
    assert table["std"] == pytest.approx(float(np.std([1, 2, 4, 8], ddof=1)))


def test_describe_of_one_sample_has_no_std_and_of_none_has_only_a_count():
    assert describe([5.0]) == {"count": 1, "mean": 5.0, "std": None, "min": 5.0, "25%": 5.0, "50%": 5.0,
                               "75%": 5.0, "max": 5.0}
    assert describe([]) == {"count": 0, "mean": None, "std": None, "min": None, "25%": None, "50%": None,
                            "75%": None, "max": None}


# --------------------------------------------------------------------------- tests and effect sizes

A = [10.0, 14.0, 12.0, 16.0]
B = [20.0, 22.0, 18.0, 24.0, 25.5]

SCIPY = {  # what each registered test must equal
    "welch": lambda a, b: stats.ttest_ind(a, b, equal_var=False),
    "student": lambda a, b: stats.ttest_ind(a, b, equal_var=True),
    "mannwhitney": lambda a, b: stats.mannwhitneyu(a, b, alternative="two-sided"),
}


def test_every_registered_test_has_a_scipy_reference():
    assert set(TESTS) == set(SCIPY)


@pytest.mark.parametrize("name", sorted(SCIPY))
def test_statistic_and_p_value_equal_scipys(name):
    result = run_test(name, A, B)
    expected = SCIPY[name](A, B)

    assert (result.statistic, result.p_value) == (pytest.approx(expected.statistic, abs=0, rel=1e-12),
                                                  pytest.approx(expected.pvalue, abs=0, rel=1e-12))
    assert result.reason is None


def test_welch_t_by_hand():
    va, vb = np.var(A, ddof=1), np.var(B, ddof=1)
    t = (np.mean(A) - np.mean(B)) / math.sqrt(va / len(A) + vb / len(B))

    assert run_test("welch", A, B).statistic == pytest.approx(t)


def test_student_t_by_hand_uses_the_pooled_variance():
    pooled = ((len(A) - 1) * np.var(A, ddof=1) + (len(B) - 1) * np.var(B, ddof=1)) / (len(A) + len(B) - 2)
    t = (np.mean(A) - np.mean(B)) / math.sqrt(pooled * (1 / len(A) + 1 / len(B)))

    assert run_test("student", A, B).statistic == pytest.approx(t)


def test_cohens_d_by_hand():
    # means 4 and 2, variances 4 and 1: pooled std sqrt((2*4 + 2*1) / 4) = sqrt(2.5)
    assert cohens_d([2.0, 4.0, 6.0], [1.0, 2.0, 3.0]) == pytest.approx(2 / math.sqrt(2.5))
    assert cohens_d([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == pytest.approx(-2 / math.sqrt(2.5))


def test_mann_whitney_fully_separated_samples():
    result = run_test("mannwhitney", [1.0, 2.0, 3.0], [4.0, 5.0, 6.0])

    # U of A is 0: no A sample beats a B sample. Exact p: 2 orderings of C(6, 3) = 20 are this extreme.
    assert (result.statistic, result.p_value) == (0.0, pytest.approx(0.1))
    assert result.effect_sizes["rank_biserial"] == -1.0
    assert rank_biserial(9.0, 3, 3) == 1.0 and rank_biserial(4.5, 3, 3) == 0.0


def test_t_tests_report_cohens_d_only_and_mann_whitney_adds_the_rank_biserial():
    assert set(run_test("welch", A, B).effect_sizes) == {"cohens_d"}
    assert set(run_test("mannwhitney", A, B).effect_sizes) == {"cohens_d", "rank_biserial"}


@pytest.mark.parametrize("name", sorted(SCIPY))
def test_too_few_samples_give_no_result_and_a_reason(name):
    result = run_test(name, [12.0], [20.0, 22.0, 18.0])

    assert (result.statistic, result.p_value) == (None, None)
    assert result.reason == "needs at least 2 samples per side, got 1 and 3"
    assert all(value is None for value in result.effect_sizes.values())


def test_constant_samples_give_no_t_statistic():
    result = run_test("welch", [3.0, 3.0], [5.0, 5.0])

    assert result.p_value is None
    assert result.reason == "both samples are constant, so the t statistic is undefined"
    assert result.effect_sizes == {"cohens_d": None}


# --------------------------------------------------------------------------- runs -> samples


def summary_for(run_id: str, jcts_s: dict[str, float | None], stop_reason: str = "max_epochs") -> dict:
    """summary.json of a run started at T0_S whose jobs finished after the given seconds (None: unfinished)."""
    outcomes = {}
    for job, jct_s in jcts_s.items():
        finished = None if jct_s is None else T0_S + jct_s
        outcomes[job] = JobOutcome(submitted_s=T0_S, finished_s=finished, epochs=2, final_loss=0.5,
                                   stop_reason=None if jct_s is None else stop_reason, total_cost=0.01, budget=1.0,
                                   workers=2, servers=2)
    return summary_dict(run_id, T0_S, outcomes, {"cluster": "thesis-3-nodes", "scheduler": "gang"})


def test_run_times_are_first_and_last_completion_after_the_run_start():
    summary = summary_for("r", {"j1": 14.0, "j2": 10.0, "j3": 12.5})

    assert run_times(summary).__dict__ == {"first_job_done_s": 10.0, "last_job_done_s": 14.0, "makespan_s": 14.0}


def test_unfinished_and_interrupted_jobs_are_left_out_of_the_samples():
    unfinished = summary_for("r1", {"j1": 10.0, "j2": None})
    interrupted = summary_for("r2", {"j1": 3.0}, stop_reason="interrupted")

    samples, excluded = jct_samples("r1", unfinished)
    assert [(s.job, s.jct_s) for s in samples] == [("j1", 10.0)]
    assert excluded == [{"run": "r1", "job": "j2", "reason": "no jct_s (the job did not finish)"}]
    assert jct_samples("r2", interrupted) == ([], [{"run": "r2", "job": "j1", "reason": "stop_reason interrupted"}])
    assert run_times(unfinished).makespan_s is None


GANG_RUNS = [("g1", summary_for("g1", {"m-1": 10.0, "m-2": 14.0})),
             ("g2", summary_for("g2", {"m-1": 12.0, "m-2": 16.0}))]
DEFAULT_RUNS = [("d1", summary_for("d1", {"m-1": 20.0, "m-2": 22.0})),
                ("d2", summary_for("d2", {"m-1": 18.0, "m-2": 24.0}))]


def test_compare_two_sides_exactly():
    result = compare(GANG_RUNS, DEFAULT_RUNS)

    a, b = result["a"], result["b"]
    assert a["jct_s"] == {"count": 4, "mean": 13.0, "std": pytest.approx(math.sqrt(20 / 3)), "min": 10.0,
                          "25%": 11.5, "50%": 13.0, "75%": 14.5, "max": 16.0}
    assert b["jct_s"] == {"count": 4, "mean": 21.0, "std": pytest.approx(math.sqrt(20 / 3)), "min": 18.0,
                          "25%": 19.5, "50%": 21.0, "75%": 22.5, "max": 24.0}
    assert (a["runs"], a["first_job_done_s"], a["last_job_done_s"], a["makespan_s"]) == (2, 11.0, 15.0, 15.0)
    assert (b["runs"], b["first_job_done_s"], b["last_job_done_s"], b["makespan_s"]) == (2, 19.0, 23.0, 23.0)
    assert result["difference_a_minus_b"] == {"mean_jct_s": -8.0, "median_jct_s": -8.0, "first_job_done_s": -8.0,
                                              "last_job_done_s": -8.0, "makespan_s": -8.0}
    test = result["test"]
    assert test["test"] == "welch"
    assert test["statistic"] == pytest.approx(-8 / math.sqrt(10 / 3))  # equal variances 20/3, n = 4 each
    assert test["p_value"] == pytest.approx(stats.ttest_ind([10, 14, 12, 16], [20, 22, 18, 24],
                                                            equal_var=False).pvalue)
    assert test["effect_sizes"] == {"cohens_d": pytest.approx(-8 / math.sqrt(20 / 3))}
    assert a["stop_reasons"] == {"max_epochs": 4}


def test_epoch_times_keep_training_epochs_only_and_average_per_epoch():
    records = [{"phase": "calibration", "epoch": 0, "epoch_time_s": 0.4},
               {"phase": "training", "epoch": 1, "epoch_time_s": 1.0},
               {"phase": "training", "epoch": 1, "epoch_time_s": 2.0},
               {"phase": "retry", "epoch": 2, "epoch_time_s": 9.0},
               {"phase": "training", "epoch": 2, "epoch_time_s": 1.5}]

    assert epoch_times(records) == [(1, 1.0), (1, 2.0), (2, 1.5)]
    assert mean_by_epoch(epoch_times(records)) == [(1, 1.5), (2, 1.5)]


# --------------------------------------------------------------------------- `coach compare` on run folders


def record(job: str, epoch: int, start_s: float, epoch_time_s: float, run_id: str = "r") -> str:
    """One training line in the real format (EpochRecord)."""
    return EpochRecord(run_id=run_id, job=job, phase="training", epoch=epoch, workers=2, servers=2,
                       placement={f"{job}-worker-0": "node-1"}, loss=1.0 / epoch, val_loss=1.2 / epoch,
                       accuracy=0.9, train_accuracy=0.9, samples=1400, epoch_time_s=epoch_time_s, compute_s=0.2,
                       start=iso(start_s), end=iso(start_s + epoch_time_s), cost=0.001 * epoch,
                       cumulative_cost=0.001 * epoch * (epoch + 1) / 2, budget=1.0).to_json()


def write_run(folder: Path, jcts_s: dict[str, float]) -> Path:
    """A run folder: summary.json plus one two-epoch log per job, each epoch lasting a quarter of its JCT."""
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(summary_for(folder.name, jcts_s)))
    for job, jct_s in jcts_s.items():
        lines = [record(job, epoch, T0_S + jct_s / 2 + (epoch - 1) * jct_s / 4, jct_s / 4, folder.name)
                 for epoch in (1, 2)]
        (folder / f"{job}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def write_experiment(folder: Path) -> Path:
    """An experiment folder as `coach experiment` leaves it: two cells of two runs each, and the manifest."""
    cells = []
    for scheduler, runs in (("gang", GANG_RUNS), ("default", DEFAULT_RUNS)):
        cell = f"m-j2-static-{scheduler}"
        entries = []
        for repetition, (run_id, summary) in enumerate(runs, start=1):
            write_run(folder / cell / run_id, {job: outcome["jct_s"] for job, outcome in summary["jobs"].items()})
            entries.append({"repetition": repetition, "run_id": run_id, "run_dir": f"{cell}/{run_id}",
                            "exit_code": 0})
        cells.append({"cell": cell, "model": "m", "jobs": 2, "allocation": "static", "scheduler": scheduler,
                      "runs": entries})
    (folder / "manifest.json").write_text(json.dumps({"experiment_id": folder.name, "cells": cells}))
    return folder


def test_compare_groups_of_an_experiment_by_selector(tmp_path, capsys):
    experiment = write_experiment(tmp_path / "exp")
    out = tmp_path / "out"

    code = main(["compare", f"{experiment}:scheduler=gang", f"{experiment}:scheduler=default", "--out", str(out)])

    assert code == 0
    data = json.loads((out / "compare.json").read_text())
    assert (data["a"]["label"], data["b"]["label"]) == ("scheduler=gang", "scheduler=default")
    assert data["a"]["jct_s"]["mean"] == 13.0 and data["b"]["jct_s"]["mean"] == 21.0
    assert data["a"]["makespan_s"] == 15.0 and data["b"]["makespan_s"] == 23.0
    assert [s["run"] for s in data["a"]["sources"]] == ["m-j2-static-gang#1", "m-j2-static-gang#2"]
    assert data["test"]["p_value"] == pytest.approx(stats.ttest_ind([10, 14, 12, 16], [20, 22, 18, 24],
                                                                     equal_var=False).pvalue)
    assert data["plots"] == {"jct_box": "jct_box.png", "epoch_time": "epoch_time.png",
                             "runtime_bars": "runtime_bars.png"}
    assert all((out / name).stat().st_size > 0 for name in data["plots"].values())
    shown = capsys.readouterr().out
    assert "Welch's t-test: t = -4.3818" in shown
    assert "A: scheduler=gang" in shown and "13.000" in shown


def test_compare_two_run_folders_with_mann_whitney(tmp_path):
    a = write_run(tmp_path / "a", {"m-1": 10.0, "m-2": 14.0, "m-3": 12.0})
    b = write_run(tmp_path / "b", {"m-1": 20.0, "m-2": 22.0, "m-3": 18.0})

    assert main(["compare", str(a), str(b), "--test", "mannwhitney", "--out", str(tmp_path / "out")]) == 0

    test = json.loads((tmp_path / "out" / "compare.json").read_text())["test"]
    assert (test["statistic"], test["p_value"]) == (0.0, pytest.approx(0.1))
    assert test["effect_sizes"]["rank_biserial"] == -1.0


def test_cells_and_whole_experiments_are_selections_too(tmp_path):
    experiment = write_experiment(tmp_path / "exp")

    assert main(["compare", str(experiment / "m-j2-static-gang"), str(experiment), "--out", str(tmp_path / "o")]) == 0

    data = json.loads((tmp_path / "o" / "compare.json").read_text())
    assert (data["a"]["jct_s"]["count"], data["b"]["jct_s"]["count"]) == (4, 8)


def test_one_run_per_side_gives_a_table_but_no_test(tmp_path, capsys):
    a = write_run(tmp_path / "a", {"m-1": 10.0})
    b = write_run(tmp_path / "b", {"m-1": 20.0})

    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "out")]) == 0

    test = json.loads((tmp_path / "out" / "compare.json").read_text())["test"]
    assert (test["p_value"], test["reason"]) == (None, "needs at least 2 samples per side, got 1 and 1")
    assert "not computed: needs at least 2 samples per side" in capsys.readouterr().out


def test_default_out_is_a_compare_folder_beside_a(tmp_path):
    experiment = write_experiment(tmp_path / "exp")

    assert main(["compare", f"{experiment}:scheduler=gang", f"{experiment}:scheduler=default"]) == 0

    assert len(list(experiment.glob("compare-*/compare.json"))) == 1


@pytest.mark.parametrize("argument, message", [
    ("{e}:scheduler=gnag", "{e}:scheduler=gnag: scheduler: no cell has scheduler gnag; present: default, gang"),
    ("{e}:color=red", "{e}:color=red: color: unknown selector key; known: cell, model, jobs, allocation, scheduler"),
    ("{e}:scheduler", "{e}:scheduler: (selector): expected KEY=VALUE[,KEY=VALUE...], got 'scheduler'"),
    ("{t}/x:scheduler=gang", "{t}/x:scheduler=gang: (argument): {t}/x is not an experiment folder (no manifest.json)"),
    ("{e}:scheduler=", "{e}:scheduler=: (selector): expected KEY=VALUE[,KEY=VALUE...], got 'scheduler='"),
    ("{t}/nowhere", "{t}/nowhere: (argument): no such folder"),
    ("{t}", "{t}: (argument): not a run folder (summary.json), an experiment folder (manifest.json) or a cell of one"),
])
def test_bad_selections_are_one_line_and_exit_2(tmp_path, capsys, argument, message):
    experiment = write_experiment(tmp_path / "exp")
    argument = argument.format(e=experiment, t=tmp_path)

    assert main(["compare", argument, str(experiment), "--out", str(tmp_path / "out")]) == 2

    assert capsys.readouterr().err == message.format(e=experiment, t=tmp_path) + "\n"
    assert not (tmp_path / "out").exists()


def test_a_broken_log_is_one_line_and_exit_2(tmp_path, capsys):
    a = write_run(tmp_path / "a", {"m-1": 10.0})
    with open(a / "m-1.jsonl", "a") as log:
        log.write("{not json\n")

    assert main(["compare", str(a), str(a)]) == 2

    assert capsys.readouterr().err.startswith(f"{a}: {a / 'm-1.jsonl'}: (line 3): not JSON")
