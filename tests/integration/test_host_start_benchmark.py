"""benchmarks/host_start.py: a short run end to end, and its option checked."""

from __future__ import annotations

import os
import re

import pytest

from tests.support import benchmark_script


@pytest.fixture(scope="module")
def bench():
    yield from benchmark_script("host_start")


def test_two_hosts_each_way_give_a_row_per_way_with_times_and_memory(bench, capsys, monkeypatch):
    monkeypatch.chdir(os.getcwd())  # the benchmark runs from the project's root
    assert bench.main(["--hosts", "2"]) == 0
    out = capsys.readouterr().out
    fresh = re.search(r"\| fresh process \| ([0-9.]+) s .*\| ([0-9]+) MiB \|", out)
    later = re.search(r"\| template, the next 1 \| ([0-9]+) ms .*\| ([0-9]+) MiB \|", out)
    assert fresh and later, out
    # a fresh host imports MXNet; a forked one does not: far quicker, whatever the machine
    assert float(fresh.group(1)) > 10 * int(later.group(1)) / 1000
    assert int(fresh.group(2)) > 0 and int(later.group(2)) > 0
    assert bench.pss_mib(os.getpid()) > 0


def test_fewer_than_two_hosts_is_a_one_line_error(bench, capsys):
    with pytest.raises(SystemExit) as leaving:
        bench.main(["--hosts", "1"])
    assert leaving.value.code == 2
    assert "argument --hosts: must be >= 2, got 1" in capsys.readouterr().err
