"""`coach compare` pairs two single runs of the same jobs (coach.analysis.stats.paired_runs): the test the
simulator's sweep runs too, one implementation."""

from __future__ import annotations

from coach.analysis import paired as sweep_paired
from coach.analysis.stats import compare, paired


def summary(jcts: dict[str, float]) -> dict:
    return {"started": "2026-11-28T00:00:00+00:00",
            "jobs": {name: {"jct_s": jct, "stop_reason": "completed"} for name, jct in jcts.items()}}


def test_two_single_runs_of_the_same_jobs_are_compared_job_by_job():
    a = {f"j{i}": 100.0 + 10 * i for i in range(10)}
    b = {name: jct - 5.0 + (0.5 if i % 2 else -0.5) for i, (name, jct) in enumerate(a.items())}
    result = compare([("a", summary(a))], [("b", summary(b))])
    # the independent-sample test sees nothing in a 5-s shift of JCTs spread over 90 s; the paired one does
    assert result["test"]["p_value"] > 0.05
    assert result["paired"]["pairs"] == 10 and result["paired"]["mean_diff_s"] == -5.0
    assert result["paired"]["verdict"] == "B faster" and result["paired"]["t_p"] < 1e-6
    assert result["paired"] == paired(a, b)
    assert sweep_paired.paired is paired  # the sweep's test is this one


def test_no_paired_test_for_several_runs_a_side_or_too_few_common_jobs():
    a = summary({"x": 1.0, "y": 2.0, "z": 3.0})
    assert compare([("a1", a), ("a2", a)], [("b", a)])["paired"] is None
    assert compare([("a", a)], [("b", summary({"x": 1.0, "y": 2.0, "w": 3.0}))])["paired"] is None
