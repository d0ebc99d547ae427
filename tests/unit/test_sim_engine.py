"""The cluster simulator's engine and replica placement on hand-made cases: exact times, money, deadlocks."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from coach.domain.cluster import ClusterSpec, NodeSpec
from coach.simulator.engine import RESTART_S, Simulator
from coach.simulator.placement import ReplicaPlacement
from coach.simulator.view import Grant
from coach.simulator.workloads import SimJob


@dataclass
class LinearApp:
    """100 samples/s per GPU, minus 10% per extra node; efficiency 1 (progress = samples)."""

    name: str = "linear"
    init_batch: int = 32
    max_batch: int = 1024
    max_local_batch: int = 256

    def throughput(self, gpus, nodes, batch):
        return 100.0 * gpus * (0.9 ** (nodes - 1)) if gpus else 0.0

    def efficiency(self, batch, progress):
        return 1.0

    def best_batch(self, gpus, nodes, progress):
        return 32 * gpus, self.throughput(gpus, nodes, 32 * gpus)


class Requested:
    """Every waiting job its request; the scheduler's queue decides who runs (like the `fifo` policy)."""

    elastic = False

    def allocate(self, snapshot):
        return {job.name: Grant(job.requested_gpus, job.requested_batch) for job in snapshot.jobs}


class EveryRound:
    """Elastic: every active job its request each round, asked every round."""

    elastic = True

    def allocate(self, snapshot):
        return {job.name: Grant(job.requested_gpus, job.requested_batch) for job in snapshot.jobs}


def cluster(nodes: int, gpus: int, price: float = 0.001) -> ClusterSpec:
    return ClusterSpec(f"{nodes}x{gpus}", tuple(NodeSpec(f"n{i}", gpus, price) for i in range(nodes)))


def run(jobs, totals, spec, policy, profile="gang", budgets=None, interval_s=60.0):
    apps = {"linear": LinearApp()}
    return Simulator(jobs, apps, totals, spec, policy, profile, interval_s, budgets=budgets).run()


def test_one_job_finishes_after_the_restart_delay_plus_its_work_at_its_throughput():
    job = SimJob("a", 0.0, "linear", 2, 64)
    outcome = run([job], {"a": 60_000.0}, cluster(1, 4), Requested())
    (result,) = outcome.jobs
    # 2 GPUs on one node: 200 samples/s -> 300 s of work, after the 30 s restart delay
    assert result.finished_s == pytest.approx(RESTART_S + 300.0)
    assert result.stop_reason == "completed"
    assert result.spent == pytest.approx(2 * (RESTART_S + 300.0) * 0.001)  # 2 GPUs held the whole time
    assert result.segments[0]["nodes"] == {"n0": 2}


def test_elastic_and_event_driven_simulation_agree_on_a_job_that_is_never_resized():
    job = SimJob("a", 30.0, "linear", 3, 96)
    fixed = run([job], {"a": 123_456.0}, cluster(2, 4), Requested()).jobs[0]
    asked = run([job], {"a": 123_456.0}, cluster(2, 4), EveryRound()).jobs[0]
    assert fixed.finished_s == pytest.approx(asked.finished_s)
    nodes = len(fixed.segments[0]["nodes"])  # where the gang profile put the 3 replicas
    assert fixed.segments[0]["nodes"] == asked.segments[0]["nodes"]
    # it starts at the first round after its arrival at 30 s
    assert fixed.finished_s == pytest.approx(60.0 + RESTART_S + 123_456.0 / LinearApp().throughput(3, nodes, 96))


def test_a_second_job_waits_for_the_gpus_of_the_first_and_starts_at_the_next_round():
    jobs = [SimJob("a", 0.0, "linear", 4, 64), SimJob("b", 0.0, "linear", 4, 64)]
    outcome = run(jobs, {"a": 40_000.0, "b": 40_000.0}, cluster(1, 4), Requested())
    a, b = sorted(outcome.jobs, key=lambda r: r.name)
    assert a.finished_s == pytest.approx(RESTART_S + 100.0)  # 400 samples/s
    assert b.started_s == 180.0  # the first round after a ended at 130 s
    assert b.finished_s == pytest.approx(180.0 + RESTART_S + 100.0)
    assert not b.deadlocked and b.held_gpu_s == 0.0


def test_no_job_spends_more_than_its_budget():
    job = SimJob("a", 0.0, "linear", 2, 64)
    outcome = run([job], {"a": 1e9}, cluster(1, 4), Requested(), budgets={"a": 1.0})
    (result,) = outcome.jobs
    assert result.stop_reason == "budget"
    assert result.spent == pytest.approx(1.0)
    assert result.spent <= 1.0 + 1e-9
    assert result.finished_s == pytest.approx(1.0 / (2 * 0.001))  # 500 s of 2 GPUs at 0.001


def test_a_job_larger_than_the_cluster_stops_as_unschedulable_at_once():
    outcome = run([SimJob("big", 0.0, "linear", 9, 64)], {"big": 1.0}, cluster(2, 4), Requested())
    (result,) = outcome.jobs
    assert result.stop_reason.startswith("unschedulable: needs 9 GPUs")
    assert result.finished_s == 0.0 and result.segments == []


def test_placement_gang_holds_the_head_job_partly_and_blocks_the_next_default_binds_pod_by_pod():
    spec = cluster(2, 2)
    for profile, expected in (("gang", (2, 0)), ("default", (2, 0)), ("gang-strict", (0, 0))):
        placement = ReplicaPlacement(spec, profile)
        placement.register("x")
        placement.submit("x", 2)
        placement.schedule(0.0)
        placement.register("a")
        placement.submit("a", 3)
        placement.register("b")
        placement.submit("b", 1)
        placement.schedule(1.0)
        assert (placement.bound("a"), placement.bound("b")) == expected, profile


def test_default_placement_deadlocks_two_partly_placed_jobs_that_gang_keeps_apart():
    """a holds 2 of its 3 replicas and backs off; b arrives, takes the last 2 GPUs: neither can ever run."""
    spec = cluster(2, 2)
    placement = ReplicaPlacement(spec, "default")
    placement.register("x")
    placement.submit("x", 2)
    placement.schedule(0.0)
    placement.register("a")
    placement.submit("a", 3)
    placement.schedule(0.1)  # a: 2 bound, its third pod backs off for 1 s
    placement.release("x")
    placement.register("b")
    placement.submit("b", 3)
    placement.schedule(0.5)  # a's pod is still backing off: b takes both free GPUs
    assert (placement.bound("a"), placement.bound("b")) == (2, 2)
    assert set(placement.deadlocked(5.0)) == {"a", "b"}

    gang = ReplicaPlacement(spec, "gang")
    for job, gpus in (("x", 2), ("a", 3)):
        gang.register(job)
        gang.submit(job, gpus)
    gang.schedule(0.1)
    gang.release("x")
    gang.register("b")
    gang.submit("b", 3)
    gang.schedule(0.5)
    gang.schedule(2.0)
    assert (gang.bound("a"), gang.bound("b")) == (3, 1)  # head of line: a first, then b takes what is left
    assert gang.deadlocked(5.0) == ()


def test_a_simulated_deadlock_is_counted_and_broken_by_the_placement_timeout():
    """1-second rounds, so that pod backoff matters as it does live: default deadlocks, gang does not.

    x holds 2 of the 4 GPUs until 31.2 s; a takes the other 2 at 30 s, its third replica fails at 30 s and 31 s
    and backs off till 33 s; b arrives as x ends, and under the default profile its fresh replicas take x's GPUs."""
    jobs = [SimJob("x", 0.0, "linear", 2, 64), SimJob("a", 29.5, "linear", 3, 64), SimJob("b", 31.5, "linear", 3, 64)]
    totals = {"x": 240.0, "a": 30_000.0, "b": 30_000.0}
    default = {r.name: r for r in run(jobs, totals, cluster(2, 2), Requested(), "default", interval_s=1.0).jobs}
    gang = {r.name: r for r in run(jobs, totals, cluster(2, 2), Requested(), "gang", interval_s=1.0).jobs}
    assert all(r.stop_reason == "completed" for r in gang.values())
    assert not any(r.deadlocked for r in gang.values())
    assert default["a"].deadlocked and default["b"].deadlocked
    assert default["a"].requeues == 1 and default["b"].requeues == 0  # a waited longest: it gives its GPUs back
    assert default["b"].started_s < default["a"].started_s  # so b runs first, then a
    assert all(r.stop_reason == "completed" for r in default.values())
    # a held 2 GPUs from 30 s until its placement timeout at 60 s without running
    assert default["a"].held_gpu_s >= 2 * 30.0
    assert gang["a"].started_s < gang["b"].started_s


def test_fifo_under_the_gang_profile_holds_a_small_job_behind_the_first_that_does_not_fit():
    from coach.simulator.policies import CLUSTER_POLICIES

    jobs = [SimJob("a", 0.0, "linear", 6, 64), SimJob("b", 10.0, "linear", 4, 64), SimJob("c", 20.0, "linear", 1, 64)]
    totals = {"a": 60_000.0, "b": 1_000.0, "c": 1_000.0}
    runs = {r.name: r for r in run(jobs, totals, cluster(2, 4), CLUSTER_POLICIES["fifo"](0)).jobs}
    a_end = runs["a"].finished_s
    # c would fit in the 2 GPUs a leaves free, but b is first in line: both start only once a has ended
    assert runs["b"].started_s >= a_end and runs["c"].started_s >= a_end
    assert runs["b"].held_gpu_s > 0  # meanwhile b holds the 2 free GPUs it got (gang's reservation)
    assert all(r.stop_reason == "completed" for r in runs.values())


class GrowingBatch:
    """Elastic: 2 GPUs always, the batch doubling every round (as Pollux adapts it to the progress)."""

    elastic = True

    def __init__(self):
        self.rounds = 0

    def allocate(self, snapshot):
        self.rounds += 1
        return {job.name: Grant(2, 32 * 2 ** min(self.rounds, 4)) for job in snapshot.jobs}


def test_a_new_batch_size_on_the_same_gpus_changes_in_place_without_a_restart():
    outcome = run([SimJob("a", 0.0, "linear", 2, 64)], {"a": 100_000.0}, cluster(1, 4), GrowingBatch())
    (result,) = outcome.jobs
    assert result.restarts == 0 and len(result.segments) == 1
    assert result.segments[0]["batch"] == 512  # the last batch size it ran at
    assert result.finished_s == pytest.approx(RESTART_S + 100_000.0 / 200.0)  # one restart delay, at the start


def test_a_job_that_finishes_its_work_within_a_large_budget_is_completed_not_budget():
    import random

    rng = random.Random(7)
    for policy in (Requested(), EveryRound()):
        for _ in range(50):
            total = rng.uniform(1e4, 1e7)
            (result,) = run([SimJob("a", 0.0, "linear", 2, 64)], {"a": total}, cluster(1, 4), policy,
                            budgets={"a": 1e12}).jobs
            assert result.stop_reason == "completed" and result.progress == total


def test_utilization_is_averaged_over_time_however_many_rounds_were_skipped():
    from coach.simulator.results import summary

    job = SimJob("a", 0.0, "linear", 4, 64)
    shares = []
    for policy in (Requested(), EveryRound()):  # the rigid run visits 3 rounds, the elastic one 602
        outcome = run([job], {"a": 400.0 * 36_000}, cluster(1, 4), policy)
        shares.append(summary(outcome, "r", {})["stats"]["utilization"])
    assert shares[0] == pytest.approx(shares[1], abs=0.01) and shares[0] > 0.99


def test_gpus_held_by_a_partly_placed_job_count_from_when_it_got_them():
    """a holds the 4 GPUs until 10030 s; then b binds 3 and c 1, which c holds until b ends and it starts."""
    jobs = [SimJob("a", 0.0, "linear", 4, 128), SimJob("b", 0.0, "linear", 3, 96), SimJob("c", 0.0, "linear", 3, 96)]
    runs = {r.name: r for r in run(jobs, {"a": 4e6, "b": 3e6, "c": 3e4}, cluster(1, 4), Requested(), "default").jobs}
    assert runs["c"].started_s == 20160.0
    assert runs["c"].held_gpu_s == pytest.approx(1 * (20160.0 - 10080.0))


@dataclass
class StalledApp(LinearApp):
    def throughput(self, gpus, nodes, batch):
        return 0.0


def test_a_job_that_would_train_at_no_speed_stops_instead_of_holding_its_gpus_for_ever():
    for policy in (Requested(), EveryRound()):
        outcome = Simulator([SimJob("a", 0.0, "linear", 3, 96)], {"linear": StalledApp()}, {"a": 1e6},
                            cluster(1, 4), policy, "gang").run()
        assert outcome.jobs[0].stop_reason == "unschedulable: no progress on 3 GPUs at batch 96"


def test_skipping_quiet_rounds_changes_no_answer_under_any_profile():
    import random

    class EveryRoundVisited(Simulator):
        def _next_round(self, now_s, next_arrival_s):
            return now_s + self.interval_s

    apps = {"linear": LinearApp()}
    for seed in range(12):
        rng = random.Random(seed)
        profile = ("default", "gang", "gang-strict")[seed % 3]
        jobs = [SimJob(f"j{i}", rng.uniform(0, 3000), "linear", rng.randint(1, 6), 64) for i in range(8)]
        totals = {j.name: rng.uniform(1e4, 3e5) for j in jobs}
        skipped = Simulator(jobs, apps, totals, cluster(2, 4), Requested(), profile).run()
        visited = EveryRoundVisited(jobs, apps, totals, cluster(2, 4), Requested(), profile).run()
        for a, b in zip(skipped.jobs, visited.jobs):
            assert (a.name, a.stop_reason, a.restarts, a.requeues) == (b.name, b.stop_reason, b.restarts, b.requeues)
            assert a.finished_s == pytest.approx(b.finished_s) and a.held_gpu_s == pytest.approx(b.held_gpu_s)


def test_a_policy_granting_more_than_the_cluster_is_stopped_with_its_job_named():
    class Greedy:
        elastic = True

        def allocate(self, snapshot):
            return {job.name: Grant(snapshot.total_gpus + 1, 64) for job in snapshot.jobs}

    with pytest.raises(ValueError, match=r"job 'a': gpus 5 outside \[1, 4\]"):
        run([SimJob("a", 0.0, "linear", 2, 64)], {"a": 1e5}, cluster(1, 4), Greedy())


class Alternating:
    """Elastic: one job alternating between 1 and 2 GPUs every round (allocation thrash)."""

    elastic = True

    def __init__(self):
        self.rounds = 0

    def allocate(self, snapshot):
        self.rounds += 1
        gpus = 1 + self.rounds % 2
        return {job.name: Grant(gpus, 32 * gpus) for job in snapshot.jobs}


def test_restart_delays_are_not_training_and_are_reported_apart():
    from coach.simulator.results import summary

    outcome = run([SimJob("a", 0.0, "linear", 1, 32)], {"a": 1_000_000.0}, cluster(1, 2), Alternating())
    (result,) = outcome.jobs
    stats = summary(outcome, "r", {})["stats"]
    # every 60-s round restarts the job: 30 s of loading, 30 s of training, on 2 or 1 of the 2 GPUs
    assert result.restarts == len(result.segments) - 1  # placements after the first, as the artifact counts them
    assert result.restart_gpu_s == pytest.approx(result.training_gpu_s, rel=0.02)
    assert stats["utilization"] == pytest.approx(0.75 / 2, abs=0.02)  # half of the 1.5 GPUs held, of 2
    assert stats["restart_share"] == pytest.approx(stats["utilization"], abs=0.02)
    assert stats["restart_gpu_hours"] == pytest.approx(result.restart_gpu_s / 3600, abs=0.01)
    assert stats["thrash_restarts"] == len(result.segments) - 2  # every restart after the second goes back


def test_gang_pack_puts_a_job_on_as_few_nodes_as_it_needs_its_own_first():
    placement = ReplicaPlacement(cluster(4, 4), "gang-pack", seed=3)
    for job, gpus in (("a", 4), ("b", 2), ("c", 6), ("d", 2)):
        placement.register(job)
        placement.submit(job, gpus)
    placement.schedule(0.0)
    nodes = {job: dict(placement.nodes_of(job)) for job in "abcd"}
    assert sorted(nodes["a"].values()) == [4]  # one whole node
    assert sorted(nodes["c"].values()) == [2, 4]  # a whole node, then the two left beside b
    assert sorted(nodes["b"].values()) == [2] and sorted(nodes["d"].values()) == [2]
    assert set(nodes["b"]) & set(nodes["c"]) and set(nodes["d"]).isdisjoint(nodes["c"])


def test_the_gang_profile_spreads_where_gang_pack_packs():
    spread = ReplicaPlacement(cluster(4, 4), "gang", seed=0)
    spread.register("a")
    spread.submit("a", 4)
    spread.schedule(0.0)
    assert len(spread.nodes_of("a")) > 1  # JobIsolation rates an empty node and the job's own alike


def test_results_list_jobs_as_the_workload_gives_them_whatever_their_arrival_order():
    """The engine orders the jobs by arrival for its rounds; the outcome keeps the workload's order."""
    late, early = SimJob("late", 60.0, "linear", 4, 128), SimJob("early", 0.0, "linear", 4, 128)
    outcome = run([late, early], {"late": 60_000.0, "early": 60_000.0}, cluster(2, 4), EveryRound())
    assert [r.name for r in outcome.jobs] == ["late", "early"]
    assert [(r.started_s, r.stop_reason) for r in outcome.jobs] == [(60.0, "completed"), (0.0, "completed")]
