"""Power of the two-sample t-test, against the published tables (Cohen 1988; G*Power 3.1)."""

from __future__ import annotations

import math

import pytest

from coach.analysis import stats
from coach.analysis.power import detectable_effect, power, repetitions_to_detect, samples_needed
from coach.analysis.stats import detectable


@pytest.mark.parametrize("d, n", [(0.8, 26), (0.5, 64), (0.2, 394)])  # Cohen's table gives 393 for 0.2
def test_samples_per_side_for_the_conventional_effects_match_the_tables(d, n):
    assert samples_needed(d) == n
    assert power(d, n, n) >= 0.8 > power(d, n - 1, n - 1)


def test_the_smallest_detectable_effect_of_20_jobs_a_side_is_d_0_91():
    assert detectable_effect(20, 20) == pytest.approx(0.9091, abs=1e-3)  # G*Power: 0.9091
    assert detectable_effect(64, 64) == pytest.approx(0.4991, abs=1e-3)
    assert power(detectable_effect(7, 12), 7, 12) == pytest.approx(0.8, abs=1e-4)


def test_no_effect_is_rejected_at_the_rate_alpha_and_one_job_a_side_detects_nothing():
    assert power(0.0, 10, 10) == pytest.approx(0.05, abs=1e-9)
    assert detectable_effect(1, 30) is None
    assert samples_needed(0.0) == samples_needed(math.nan) == 1_000_000


def test_compare_reports_the_smallest_difference_it_could_detect_in_seconds_and_percent():
    a = [100.0, 110.0, 90.0, 100.0]
    b = [105.0, 95.0, 100.0, 100.0]
    found = detectable(a, b)
    sd = math.sqrt((200 + 50) / 6)  # pooled: squares 200 and 50 over 4 + 4 - 2
    assert found["cohens_d"] == pytest.approx(detectable_effect(4, 4))
    assert found["jct_s"] == pytest.approx(found["cohens_d"] * sd)
    assert found["percent_of_a_mean"] == pytest.approx(found["jct_s"])  # A's mean is 100 s
    summary = {"started": "2026-01-01T00:00:00.000+00:00", "makespan_s": 1.0,
               "jobs": {f"j{i}": {"jct_s": jct, "stop_reason": "max_epochs", "finished": None}
                        for i, jct in enumerate(a)}}
    compared = stats.compare([("a", summary)], [("b", summary)])
    assert compared["detectable"]["n_a"] == compared["detectable"]["n_b"] == 4


def test_the_repetitions_to_detect_come_from_the_noisiest_cell_and_are_capped():
    pilot = {"quiet": [[100.0, 101.0], [99.0, 100.0]], "noisy": [[100.0, 110.0], [90.0, 100.0]]}
    found = repetitions_to_detect(0.10, pilot, most=100)
    assert found["cells"]["noisy"]["jobs_needed"] == 12 and found["repeat"] == 6
    assert found["cells"]["quiet"]["runs_needed"] == 1  # d = 12.2: one run of 2 jobs would do; the pilot ran 2
    capped = repetitions_to_detect(0.01, pilot, most=10)
    assert capped["capped"] and capped["repeat"] == 10 and capped["wanted"] > 10


@pytest.mark.parametrize("jobs", [5_000, 82_000])
def test_thousands_of_jobs_a_side_have_a_power_and_a_detectable_effect(jobs):
    """scipy's noncentral t cdf is NaN far in its lower tail: with 5,000 jobs a side compare's power was NaN and
    its root finder raised (a traceback)."""
    assert power(0.2, jobs, jobs) == pytest.approx(1.0)
    d = detectable_effect(jobs, jobs)
    assert d == pytest.approx(2.8016 / math.sqrt(jobs / 2), rel=0.01)  # (z 0.975 + z 0.8) / sqrt(n / 2)
