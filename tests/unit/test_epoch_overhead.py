"""benchmarks/epoch_overhead.py: the order of its two sides from round to round."""

from __future__ import annotations

import os

import pytest

from tests.support import benchmark_script


@pytest.fixture(scope="module")
def overhead():
    saved = os.environ.get("PYTHONPATH")  # the script puts the repository on it for the hosts it starts
    try:
        yield from benchmark_script("epoch_overhead")
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def test_the_side_that_runs_first_alternates_so_a_steady_drift_cancels(overhead):
    sides = ["coach", "bare"]

    assert [overhead.side_order(sides, n) for n in (1, 2, 3, 4)] == [
        ["coach", "bare"], ["bare", "coach"], ["coach", "bare"], ["bare", "coach"]]
    assert sides == ["coach", "bare"]  # the caller's list is left as it was
