"""benchmarks/machine_noise.py: what it reads from the chunks and /proc/stat, and a short run end to end."""

from __future__ import annotations

import pytest

from tests.support import benchmark_script


@pytest.fixture(scope="module")
def noise():
    yield from benchmark_script("machine_noise")


def test_a_process_slowed_while_it_held_the_cpu_shows_in_its_slowest_chunk_and_cpu_share(noise):
    row = noise.describe([(0.2, 0.2), (0.4, 0.39), (0.2, 0.2)])  # the middle chunk ran at half speed, on CPU

    assert row["median_s"] == 0.2 and row["fastest_s"] == 0.2 and row["slowest_s"] == 0.4
    assert row["cpu_share"] == pytest.approx(0.79 / 0.8)


def test_steal_is_the_eighth_column_share_of_all_ticks(noise):
    before = [100, 0, 10, 50, 0, 0, 0, 5, 0, 0]
    after = [180, 0, 20, 60, 0, 0, 0, 15, 0, 0]

    assert noise.steal_share(before, after) == pytest.approx(10 / 110)
    assert noise.steal_share(None, after) is None
    assert noise.steal_share(before[:4], after[:4]) is None  # a kernel without the steal column


def test_a_short_run_times_every_process_and_refuses_bad_options(noise, capsys):
    assert noise.main(["--chunks", "2", "--work", "1000"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.strip().startswith(("alone", "1 of"))]
    assert len(rows) == 2 and "steal" in out

    with pytest.raises(SystemExit) as exit_info:
        noise.main(["--chunks", "1"])
    assert exit_info.value.code == 2
    assert "--chunks" in capsys.readouterr().err
