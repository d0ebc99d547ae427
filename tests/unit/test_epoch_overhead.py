"""benchmarks/epoch_overhead.py: the order of its two sides from round to round."""

from __future__ import annotations

import os
import subprocess
import sys

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


GRANDCHILD_BURNS = """
import os, sys, time
pid = os.fork()
if pid == 0:  # the grandchild: 0.4 s of CPU, then gone
    end = time.process_time() + 0.4
    while time.process_time() < end:
        pass
    os._exit(0)
os.waitpid(pid, 0)  # reaped by the child, as the template reaps the hosts
print("done", flush=True)
time.sleep(60)
"""


def test_the_cpu_of_a_grandchild_reaped_by_a_live_child_counts_as_this_process_trees(overhead):
    tick = os.sysconf("SC_CLK_TCK")
    before = overhead.descendants_cpu_s(os.getpid(), tick)
    child = subprocess.Popen([sys.executable, "-c", GRANDCHILD_BURNS], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "done\n"
        assert overhead.descendants_cpu_s(os.getpid(), tick) - before >= 0.35
        assert overhead.descendants_cpu_s(child.pid, tick) == 0.0  # the grandchild is gone: the child holds its time
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
