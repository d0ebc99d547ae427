"""A long `coach simulate` says once how long it expects to take; a short one says nothing."""

from __future__ import annotations

import coach.ui.simulate_output as output
from coach.ui.simulate_output import ESTIMATE_AFTER_S, expected_left_s, saying_how_long


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def rounds(monkeypatch, steps: list[tuple[float, int]]) -> tuple[list[str], list[tuple[float, int]]]:
    """(lines said, rounds passed on) for rounds at (wall seconds since the start, jobs left)."""
    clock = Clock()
    monkeypatch.setattr(output.time, "monotonic", clock)
    said: list[str] = []
    passed: list[tuple[float, int]] = []
    each = saying_how_long(lambda now_s, left: passed.append((now_s, left)), "coach simulate", said.append)
    for wall_s, left in steps:
        clock.now_s = 100.0 + wall_s
        each(wall_s * 10, left)
    return said, passed


def test_the_pace_is_counted_from_the_first_round_not_from_reading_the_workload(monkeypatch):
    # 10 s of reading, then 100 of 1,000 jobs in 3 s: 27 s more, not the 117 s the reading would make it look
    said, _ = rounds(monkeypatch, [(10.0, 1000), (10.0 + ESTIMATE_AFTER_S, 900)])
    assert said == []
    said, _ = rounds(monkeypatch, [(10.0, 100_000), (10.0 + ESTIMATE_AFTER_S, 99_900)])
    assert said == ["coach simulate: 100000 jobs, about 50 min more at this pace (Ctrl-C stops it and writes "
                    "nothing)"]


def test_the_pace_so_far_gives_the_time_left():
    assert expected_left_s(done=250, total=1000, elapsed_s=5.0) == 15.0
    assert expected_left_s(done=0, total=1000, elapsed_s=5.0) is None


def test_a_run_of_hours_says_so_once_and_every_round_still_reaches_the_progress_bar(monkeypatch):
    steps = [(0.0, 1_000_000), (1.0, 999_990), (ESTIMATE_AFTER_S, 999_900), (ESTIMATE_AFTER_S + 1, 999_800)]
    said, passed = rounds(monkeypatch, steps)
    assert said == ["coach simulate: 1000000 jobs, about 500 min more at this pace (Ctrl-C stops it and writes "
                    "nothing)"]
    assert passed == [(wall_s * 10, left) for wall_s, left in steps]


def test_a_run_that_has_finished_no_job_yet_says_that(monkeypatch):
    said, _ = rounds(monkeypatch, [(0.0, 500), (ESTIMATE_AFTER_S, 500)])
    assert said == ["coach simulate: 500 jobs, no job has finished yet at this pace (Ctrl-C stops it and writes "
                    "nothing)"]


def test_a_run_of_seconds_says_nothing(monkeypatch):
    said, _ = rounds(monkeypatch, [(0.0, 160), (ESTIMATE_AFTER_S, 40), (ESTIMATE_AFTER_S + 0.5, 0)])
    assert said == []


def test_a_long_run_says_every_minute_how_far_it_is_at_the_last_minutes_pace(monkeypatch):
    # a trace that gets slower as its queue builds: 100 jobs in the first 3 s, then 9,900 in the next minute, then
    # none in the minute after
    steps = [(0.0, 100_000), (ESTIMATE_AFTER_S, 99_900), (ESTIMATE_AFTER_S + 30, 95_000),
             (ESTIMATE_AFTER_S + output.UPDATE_EVERY_S, 90_000), (ESTIMATE_AFTER_S + 2 * output.UPDATE_EVERY_S, 90_000)]
    said, passed = rounds(monkeypatch, steps)
    assert said == [
        "coach simulate: 100000 jobs, about 50 min more at this pace (Ctrl-C stops it and writes nothing)",
        "coach simulate: 10000 of 100000 jobs done, 0.2 h simulated, about 9 min more at the last 1 min's pace",
        "coach simulate: 10000 of 100000 jobs done, 0.3 h simulated, no job finished in the last interval"]
    assert len(passed) == len(steps)


def test_a_run_that_looked_short_says_nothing_later_either(monkeypatch):
    steps = [(0.0, 1000), (ESTIMATE_AFTER_S, 900), (ESTIMATE_AFTER_S + output.UPDATE_EVERY_S, 899)]
    said, _ = rounds(monkeypatch, steps)
    assert said == []
