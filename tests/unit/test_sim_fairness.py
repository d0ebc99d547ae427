"""Themis's finish-time fairness ρ of a simulated run (coach.simulator.fairness), on hand-computed cases."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from coach.simulator.engine import JobRun
from coach.simulator.fairness import contention, finish_time_fairness, summary
from coach.simulator.workloads import SimJob


@dataclass(frozen=True)
class Linear:
    """100 samples/s per GPU, whatever the batch or nodes; efficiency 1."""

    name: str = "linear"
    init_batch: int = 1
    max_batch: int = 1024
    max_local_batch: int = 1024
    max_gpus: int = 64

    def throughput(self, gpus: int, nodes: int, batch: int) -> float:
        return 100.0 * gpus

    def efficiency(self, batch: int, progress: float) -> float:
        return 1.0

    def best_batch(self, gpus: int, nodes: int, progress: float) -> tuple[int, float]:
        return self.max_batch, self.throughput(gpus, nodes, self.max_batch)


def run(name: str, arrival_s: float, finished_s: float | None, gpus: int, work: float) -> JobRun:
    return JobRun(SimJob(name, arrival_s, "linear", gpus, 64), Linear(), work, None, finished_s=finished_s)


def test_contention_is_the_time_average_of_the_jobs_present_over_each_jobs_life():
    jobs = [run("a", 0.0, 100.0, 1, 1.0), run("b", 50.0, 150.0, 1, 1.0), run("c", 60.0, None, 1, 1.0)]
    n = contention(jobs, end_s=200.0)
    # a: alone 0-50, with b 50-60, with b and c 60-100: (50*1 + 10*2 + 40*3) / 100
    assert n["a"] == pytest.approx(1.9)
    # b: with a 50-60, with a and c 60-100, with c 100-150: (10*2 + 40*3 + 50*2) / 100
    assert n["b"] == pytest.approx(2.4)
    assert "c" not in n  # not finished: no ρ


def test_rho_is_the_jct_over_the_jct_alone_on_a_1_over_n_share():
    # two 4-GPU jobs on 4 GPUs, together all their lives: each's share is 2 GPUs, alone there 10 s + restart
    jobs = [run("a", 0.0, 40.0, 4, 2000.0), run("b", 0.0, 40.0, 4, 2000.0)]
    rho = finish_time_fairness(jobs, total_gpus=4, gpus_per_node=4, restart_s=0.0, end_s=40.0)
    assert rho == {"a": pytest.approx(40.0 / 10.0), "b": pytest.approx(4.0)}
    # a share below one GPU time-shares it: 8 one-GPU jobs on 2 GPUs, each 1 s alone, share 1/4 GPU -> 4 s
    many = [run(f"j{i}", 0.0, 4.0, 1, 100.0) for i in range(8)]
    assert finish_time_fairness(many, 2, 2, 0.0, 4.0)["j0"] == pytest.approx(1.0)
    assert summary({"a": 0.5, "b": 2.0}) == {"mean_rho": 1.25, "max_rho": 2.0, "share_rho_le_1": 0.5}
