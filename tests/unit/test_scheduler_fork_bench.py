"""scheduler_fork.bench: the throughput benchmark builds the documented jobs and places every pod that fits."""

from __future__ import annotations

import pytest

from scheduler_fork.bench import bench_jobs, run_bench


def test_bench_jobs_are_a_scheduler_a_server_and_two_workers_cut_at_the_pod_count():
    jobs = bench_jobs(6)

    assert [[p.name for p in pods] for _, pods in jobs] == [
        ["job-00000-scheduler", "job-00000-server-0", "job-00000-worker-0", "job-00000-worker-1"],
        ["job-00001-scheduler", "job-00001-server-0"],
    ]
    assert [p.seq for _, pods in jobs for p in pods] == [0, 1, 2, 3, 4, 5]
    assert [p.job_seq for _, pods in jobs for p in pods] == [0, 0, 0, 0, 1, 1]


@pytest.mark.parametrize("profile", ["gang", "gang-strict", "default"])
def test_run_bench_places_every_pod_when_the_cluster_has_room(profile):
    result = run_bench(nodes=60, pods=200, profile=profile)

    assert result.pods_placed == 200
    assert result.seconds > 0 and result.pods_per_s == pytest.approx(200 / result.seconds)


@pytest.mark.parametrize("profile, placed", [("gang", 40), ("gang-strict", 40), ("default", 40)])
def test_run_bench_stops_when_the_cluster_is_full(profile, placed):
    assert run_bench(nodes=10, pods=60, profile=profile).pods_placed == placed  # 10 nodes x 4 slots
