"""The simulator's scheduling policies, each on hand-made snapshots that show its defining behaviour.

A tiny fake application stands in for the measured ones: throughput = gpus * 100 * scale^(gpus-1), optionally
faster with a larger local batch, and a Pollux-style statistical efficiency (phi + 1) / (phi + batch / init).
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

import numpy as np
import pytest

from coach.simulator.policies import CLUSTER_POLICIES
from coach.simulator.grants import GrantChecker, batch_bounds, check_grants, fit_batch, memory_bounds
from coach.simulator.policies.elastic_batch_dp import ElasticBatchDp, solve
from coach.simulator.policies.coach_policy import Coach
from coach.simulator.policies.pollux import Pollux
from coach.simulator.policies.tiresias import Tiresias
from coach.simulator.view import ClusterSnapshot, Grant, ClusterJobView


@dataclass(frozen=True)
class FakeApp:
    name: str = "fake"
    init_batch: int = 32
    max_batch: int = 1024
    max_local_batch: int = 128
    scale: float = 0.9  # throughput factor per extra GPU
    half_local: float = 0.0  # > 0: a local batch of this size runs at half speed (larger batches run faster)
    phi: float | None = None  # gradient noise ratio; None: statistical efficiency 1 at every batch

    def throughput(self, gpus: int, nodes: int, batch: int) -> float:
        if gpus <= 0:
            return 0.0
        speed = gpus * 100.0 * self.scale ** (gpus - 1)
        if self.half_local > 0:
            local = batch / gpus
            speed *= local / (local + self.half_local)
        return speed

    def efficiency(self, batch: int, progress: float) -> float:
        if self.phi is None:
            return 1.0
        return (self.phi + 1) / (self.phi + batch / self.init_batch)

    def best_batch(self, gpus: int, nodes: int, progress: float) -> tuple[int, float]:
        low, high = batch_bounds(self, gpus)
        return max(((b, self.throughput(gpus, nodes, b) * self.efficiency(b, progress))
                    for b in range(low, high + 1)), key=lambda pair: (pair[1], -pair[0]))


APP = FakeApp()


def job(name: str, *, arrival_s: float = 0.0, app: FakeApp = APP, gpus_asked: int = 1, batch_asked: int = 64,
        progress: float = 0.0, total: float = 1e6, attained: float = 0.0, gpus: int = 0, batch: int = 0,
        budget: float = math.inf, max_gpus: int = 64) -> ClusterJobView:
    return ClusterJobView(name=name, arrival_s=arrival_s, app=app, requested_gpus=gpus_asked,
                          requested_batch=batch_asked, progress=progress, total_progress=total,
                          attained_gpu_s=attained, gpus=gpus,
                          batch=batch or (fit_batch(app, gpus, batch_asked) if gpus else 0), remaining_budget=budget,
                          max_gpus=max_gpus)


def snap(*jobs: ClusterJobView, nodes: tuple[int, ...] = (4,), now_s: float = 0.0,
         price: float = 1.0) -> ClusterSnapshot:
    return ClusterSnapshot(now_s=now_s, node_gpus=nodes, price_per_gpu_s=price, interval_s=60.0, jobs=tuple(jobs))


def gpus_of(grants) -> dict[str, int]:
    return {name: grant.gpus for name, grant in grants.items()}


def test_the_registry_holds_exactly_the_eleven_policies_and_only_fifo_is_rigid():
    assert sorted(CLUSTER_POLICIES) == sorted(["fifo", "round-robin", "elastic-fifo", "drf", "tiresias", "optimus",
                                               "pollux", "elastic-batch-dp", "coach", "dl2", "dl2-imitation"])
    assert {name: CLUSTER_POLICIES[name](0).elastic for name in CLUSTER_POLICIES} == {
        name: name != "fifo" for name in CLUSTER_POLICIES}


def test_fifo_keeps_running_jobs_and_asks_every_waiting_job_its_request_in_arrival_order():
    policy = CLUSTER_POLICIES["fifo"](0)
    running = job("a", gpus_asked=6, gpus=6, batch=300)
    waiting = [job("b", arrival_s=1, gpus_asked=4), job("c", arrival_s=2, gpus_asked=1)]
    # b and c ask for what they requested even though only 2 GPUs are free: the scheduler's queue decides who runs
    # (the gang profile's head of line holds c behind b: tests/unit/test_sim_engine.py)
    grants = policy.allocate(snap(running, *waiting, nodes=(4, 4)))
    assert grants["a"] == Grant(6, 300)
    assert gpus_of(grants) == {"a": 6, "b": 4, "c": 1}
    assert list(grants) == ["a", "b", "c"]


def test_round_robin_gives_turns_and_sends_jobs_that_ran_to_the_back():
    from coach.simulator.policies.round_robin import RoundRobin

    policy = RoundRobin(quantum_s=0.0)  # a turn of one round
    jobs = [job(name, arrival_s=i, gpus_asked=2) for i, name in enumerate("abc")]
    turns = [sorted(policy.allocate(snap(*jobs))) for _ in range(3)]
    assert turns == [["a", "b"], ["a", "c"], ["b", "c"]]
    # a newcomer joins the back of the queue
    newcomer = job("d", arrival_s=5, gpus_asked=2)
    assert sorted(policy.allocate(snap(*jobs, newcomer))) == ["a", "b"]
    assert sorted(policy.allocate(snap(*jobs, newcomer))) == ["c", "d"]


def test_a_round_robin_turn_lasts_its_quantum_then_the_next_jobs_get_theirs():
    policy = CLUSTER_POLICIES["round-robin"](0)
    assert policy.quantum_s == 600.0
    jobs = [job(name, arrival_s=i, gpus_asked=2) for i, name in enumerate("abc")]
    turns = [sorted(policy.allocate(snap(*jobs, now_s=60.0 * k))) for k in range(12)]
    assert turns[:10] == [["a", "b"]] * 10  # ten rounds of 60 s
    assert turns[10:] == [["a", "c"], ["a", "c"]]  # b's turn and a's ended at 600 s; c waited longest, then a


def test_elastic_fifo_starts_a_job_smaller_than_asked_and_grows_it_back():
    policy = CLUSTER_POLICIES["elastic-fifo"](0)
    first = job("a", gpus_asked=2, gpus=2)
    second = job("b", arrival_s=1, gpus_asked=4, batch_asked=512)
    grants = policy.allocate(snap(first, second))
    assert grants["a"] == Grant(2, 64)
    assert grants["b"] == Grant(2, 512)  # the user's batch, 256 per GPU: accumulated over two 128-micro-batches
    assert policy.allocate(snap(second._replace(gpus=2))) == {"b": Grant(4, 512)}


def test_drf_fills_progressively_to_max_min_fair_shares_capped_at_requests():
    policy = CLUSTER_POLICIES["drf"](0)
    jobs = [job("a", gpus_asked=8), job("b", arrival_s=1, gpus_asked=8), job("c", arrival_s=2, gpus_asked=1)]
    assert gpus_of(policy.allocate(snap(*jobs, nodes=(4, 4)))) == {"a": 4, "b": 3, "c": 1}
    assert gpus_of(policy.allocate(snap(*jobs[:2], job("c", arrival_s=2, gpus_asked=8), nodes=(3, 3, 3)))) == {
        "a": 3, "b": 3, "c": 3}
    # more jobs than GPUs: the earliest arrivals get one each
    many = [job(f"j{i}", arrival_s=i, gpus_asked=2) for i in range(6)]
    assert gpus_of(policy.allocate(snap(*many))) == {"j0": 1, "j1": 1, "j2": 1, "j3": 1}


def test_tiresias_demotes_jobs_past_the_threshold_and_serves_the_lower_queue_first():
    policy = CLUSTER_POLICIES["tiresias"](0)
    old = job("old", gpus_asked=4, attained=3600 * 16 + 1, gpus=4)  # over 16 GPU-hours: demoted to queue 1
    new = job("new", arrival_s=10, gpus_asked=4)
    assert gpus_of(policy.allocate(snap(old, new))) == {"new": 4}  # preempted by the job with less service
    below = old._replace(attained_gpu_s=3600 * 16 - 1)  # still in queue 0: FIFO within the queue
    assert gpus_of(policy.allocate(snap(below, new))) == {"old": 4}
    # a job that does not fit is skipped for a smaller one behind it
    small = job("small", arrival_s=20, gpus_asked=2, attained=3600 * 16 + 5)
    assert gpus_of(policy.allocate(snap(new._replace(requested_gpus=3), small, old))) == {"new": 3}
    assert gpus_of(policy.allocate(snap(new._replace(requested_gpus=2), small, old))) == {"new": 2, "small": 2}


def test_tiresias_starvation_guard_promotes_a_job_that_waited_its_run_time():
    policy = Tiresias(thresholds_gpu_s=(100.0,), starve_factor=1.0)
    hog = job("hog", gpus_asked=4, attained=200.0, gpus=4)  # queue 1, ran one round (60 s)
    fresh = job("fresh", arrival_s=1, gpus_asked=4)
    assert gpus_of(policy.allocate(snap(hog, fresh))) == {"fresh": 4}
    waiting = hog._replace(gpus=0, batch=0)
    running = fresh._replace(gpus=4, attained_gpu_s=50.0)
    assert gpus_of(policy.allocate(snap(waiting, running))) == {"hog": 4}  # waited 60 s >= 1 x 60 s: promoted
    assert policy.queue_of("hog", 200.0) == 0
    assert Tiresias(thresholds_gpu_s=(100.0,)).allocate(snap(waiting, running)).keys() == {"fresh"}


def test_optimus_gives_the_next_gpu_to_the_bigger_reduction_in_remaining_time():
    policy = CLUSTER_POLICIES["optimus"](0)
    good, poor = FakeApp(scale=0.95), FakeApp(scale=0.5)
    jobs = [job("poor", app=poor), job("good", arrival_s=1, app=good)]
    assert gpus_of(policy.allocate(snap(*jobs, nodes=(3,)))) == {"poor": 1, "good": 2}
    # same speed-up, ten times more work left: that job's remaining time drops more
    jobs = [job("short", total=1e5), job("long", arrival_s=1, total=1e6)]
    assert gpus_of(policy.allocate(snap(*jobs, nodes=(3,)))) == {"short": 1, "long": 2}
    # it keeps the user's batch (fitted to the GPUs) and stops when another GPU gains nothing
    flat = FakeApp(scale=0.5)  # 2 GPUs: 2 x 0.5 = 1x, no gain
    assert policy.allocate(snap(job("flat", app=flat, batch_asked=100), nodes=(8,))) == {"flat": Grant(1, 100)}


def test_pollux_grows_the_batch_with_the_gpus():
    app = FakeApp(scale=0.97, half_local=64, phi=50.0)
    one = Pollux(ramp=False).allocate(snap(job("a", app=app), nodes=(1,)))["a"]
    eight = Pollux(ramp=False).allocate(snap(job("a", app=app), nodes=(8,)))["a"]
    assert one.gpus == 1 and eight.gpus == 8
    assert eight.batch > one.batch
    assert (one.batch, eight.batch) == (app.best_batch(1, 1, 0.0)[0], app.best_batch(8, 1, 0.0)[0])


def test_pollux_p_minus_one_is_fairer_than_the_sum_of_speedups():
    perfect, poor = FakeApp(scale=1.0), FakeApp(scale=0.8)
    jobs = [job("perfect", app=perfect), job("poor", arrival_s=1, app=poor)]
    total_speedup = gpus_of(Pollux(p=1.0, ramp=False).allocate(snap(*jobs, nodes=(8,))))
    fair = gpus_of(Pollux(p=-1.0, ramp=False).allocate(snap(*jobs, nodes=(8,))))
    assert total_speedup == {"perfect": 7, "poor": 1}
    assert fair["poor"] > total_speedup["poor"] and sum(fair.values()) == 8


def test_pollux_keeps_a_young_jobs_allocation_but_reallocates_an_old_one():
    jobs = [job("a", gpus=3), job("b", gpus=1)]
    assert gpus_of(Pollux().allocate(snap(*jobs, now_s=100.0))) == {"a": 3, "b": 1}  # a restart costs too much
    assert gpus_of(Pollux().allocate(snap(*jobs, now_s=1e6))) == {"a": 2, "b": 2}  # the fair split pays off


def test_elastic_batch_dp_matches_brute_force_and_picks_the_fastest_batch():
    apps = [FakeApp(scale=0.95, half_local=32), FakeApp(scale=0.7, half_local=8), FakeApp(scale=0.85)]
    jobs = [job(f"j{i}", arrival_s=i, app=app, max_gpus=cap) for i, (app, cap) in enumerate(zip(apps, (4, 3, 5)))]
    policy = ElasticBatchDp()
    grants = policy.allocate(snap(*jobs, nodes=(3, 3)))
    tables = [policy.table(app, cap, 3) for app, cap in zip(apps, (4, 3, 5))]

    def value(counts):
        return sum(tables[j][0][k] for j, k in enumerate(counts))

    brute = max(value(c) for c in itertools.product(range(5), range(4), range(6)) if sum(c) <= 6)
    chosen = [grants[j.name].gpus if j.name in grants else 0 for j in jobs]
    assert sum(chosen) <= 6 and value(chosen) == pytest.approx(brute, abs=1e-8)  # 1e-9 tie bonus
    for j, count in enumerate(chosen):
        if count and apps[j].half_local:  # larger local batches run faster: each runs at its largest batch
            assert grants[jobs[j].name].batch == memory_bounds(apps[j], count)[1]


def test_the_dynamic_program_finds_the_best_counts_and_prefers_fewer_gpus_on_ties():
    rng = np.random.default_rng(5)
    for trial in range(200):
        caps = rng.integers(1, 5, size=int(rng.integers(1, 4)))
        total = int(rng.integers(1, 9))
        values = [np.concatenate([[0.0], np.round(np.cumsum(rng.random(cap)), 1)]) for cap in caps]
        counts = solve(values, total)
        feasible = [c for c in itertools.product(*(range(cap + 1) for cap in caps)) if sum(c) <= total]
        best = max(sum(v[k] for v, k in zip(values, c)) for c in feasible)
        assert sum(counts) <= total and sum(v[k] for v, k in zip(values, counts)) == pytest.approx(best), trial
        # within a job, more GPUs only where they add value: each count's value beats every smaller count's
        assert all(v[k] > max(v[:k]) for v, k in zip(values, counts) if k > 0), trial


def test_the_dynamic_program_gives_the_same_counts_without_the_counts_past_each_peak():
    """ElasticBatchDp leaves out of the table every count past where a job's value first peaks; on values that
    rise, plateau, dip and fall, with ties between jobs and within one, the counts are the same as with them."""
    rng = np.random.default_rng(11)
    for trial in range(300):
        total = int(rng.integers(1, 40))
        values = []
        for _ in range(int(rng.integers(1, 8))):
            steps = rng.choice([0.0, 0.5, 1.0, -0.5, -1.0], size=int(rng.integers(1, 30)))
            values.append(np.concatenate([[0.0], np.maximum(np.round(1.0 + np.cumsum(steps), 1), 0.1)]))
        cut = [v[:int(np.argmax(v)) + 1] for v in values]
        assert solve(cut, total) == solve(values, total), trial


def test_coach_grows_until_the_next_gpu_gains_less_than_min_gain():
    app = FakeApp(scale=0.85)  # relative gain of GPU g+1: (g+1)/g * 0.85 - 1 -> 70%, 27%, 13%, 6.3%, 2%
    assert gpus_of(Coach(min_gain=0.05).allocate(snap(job("a", app=app), nodes=(8, 8)))) == {"a": 5}  # thesis's
    # the simulator's default takes any gain (an idle GPU helps no one): 7 GPUs would be slower than 6
    assert gpus_of(CLUSTER_POLICIES["coach"](0).allocate(snap(job("a", app=app), nodes=(8, 8)))) == {"a": 6}


def test_coach_grows_a_running_job_only_when_the_time_saved_pays_the_restart():
    app = FakeApp(scale=1.0)  # 100 samples/s per GPU
    nearly_done = job("a", app=app, gpus=1, progress=0.0, total=2_000.0)  # 20 s left on 1 GPU: < 30 s restart
    assert gpus_of(Coach().allocate(snap(nearly_done, nodes=(8,)))) == {"a": 1}
    assert gpus_of(Coach(restart_s=0.0).allocate(snap(nearly_done, nodes=(8,)))) == {"a": 8}
    long_one = job("a", app=app, gpus=1, total=1e6)
    assert gpus_of(Coach().allocate(snap(long_one, nodes=(8,)))) == {"a": 8}


def test_coach_never_predicts_spending_more_than_the_remaining_budget():
    app = FakeApp(scale=0.85)  # spend to finish 1000 samples at g GPUs, 1/GPU-s: 10, 11.8, 13.8, 16.3, ...
    policy = CLUSTER_POLICIES["coach"](0)
    grants = policy.allocate(snap(job("a", app=app, total=1000.0, budget=14.0), nodes=(8,)))
    assert gpus_of(grants) == {"a": 3}
    gpus = grants["a"].gpus
    assert gpus * 1.0 * 1000.0 / app.throughput(gpus, 1, grants["a"].batch) <= 14.0
    # cannot afford to finish even on one GPU: not started; more jobs than GPUs: arrival order
    assert policy.allocate(snap(job("a", app=app, total=1000.0, budget=9.0), nodes=(8,))) == {}
    many = [job(f"j{i}", arrival_s=i, app=app) for i in range(3)]
    assert gpus_of(policy.allocate(snap(*many, nodes=(2,)))) == {"j0": 1, "j1": 1}


def _random_snapshot(rng: random.Random) -> ClusterSnapshot:
    nodes = tuple(rng.choice((1, 2, 4)) for _ in range(rng.randint(1, 4)))
    total = sum(nodes)
    jobs, held = [], 0
    for i in range(rng.randint(0, 12)):
        app = FakeApp(scale=rng.uniform(0.5, 1.0), half_local=rng.choice((0.0, 16.0)),
                      phi=rng.choice((None, 10.0)), max_local_batch=rng.choice((32, 128)))
        max_gpus = rng.randint(1, 16)
        gpus = rng.randint(1, min(max_gpus, total - held)) if held < total and rng.random() < 0.5 else 0
        held += gpus
        jobs.append(job(f"j{i}", arrival_s=i, app=app, gpus_asked=rng.randint(1, 20),
                        batch_asked=rng.randint(1, 2048), progress=rng.uniform(0, 1e4), total=2e4,
                        attained=rng.choice((0.0, rng.uniform(0, 1e5))), gpus=gpus,
                        budget=rng.choice((math.inf, rng.uniform(0, 1e4))), max_gpus=max_gpus))
    return ClusterSnapshot(now_s=rng.uniform(0, 1e5), node_gpus=nodes, price_per_gpu_s=0.01, interval_s=60.0,
                           jobs=tuple(jobs))


@pytest.mark.parametrize("name", sorted(CLUSTER_POLICIES))
def test_every_policy_keeps_the_contract_on_random_snapshots_and_is_deterministic(name):
    rng = random.Random(f"policies-{name}")
    snapshots = [_random_snapshot(rng) for _ in range(60)]
    policy = CLUSTER_POLICIES[name](0)
    answers = []
    for snapshot in snapshots:
        grants = policy.allocate(snapshot)
        # known jobs, 1 <= gpus <= max_gpus, legal batch, total <= cluster (a rigid policy's grants queue instead)
        check_grants(snapshot, grants, queued=not policy.elastic)
        assert all(grant.gpus >= 1 for grant in grants.values())
        answers.append(dict(grants))
    again = CLUSTER_POLICIES[name](0)
    assert [dict(again.allocate(snapshot)) for snapshot in snapshots] == answers


def test_check_grants_names_the_broken_rule():
    snapshot = snap(job("a", max_gpus=2))
    with pytest.raises(ValueError, match="grants total 5 GPUs > 4"):
        check_grants(snap(job("a"), job("b")), {"a": Grant(3, 64), "b": Grant(2, 64)})
    with pytest.raises(ValueError, match=r"job 'a': gpus 3 outside \[1, 2\]"):
        check_grants(snapshot, {"a": Grant(3, 96)})
    with pytest.raises(ValueError, match=r"job 'a': batch 16 outside \[32, 1024\] on 1 GPUs"):
        check_grants(snapshot, {"a": Grant(1, 16)})
    with pytest.raises(ValueError, match="unknown job 'z'"):
        check_grants(snapshot, {"z": Grant(1, 64)})


def test_the_engine_s_checker_remembers_passed_grants_but_not_past_a_job_or_the_cluster():
    checker = GrantChecker()
    both = snap(job("a", max_gpus=2), job("b"))
    checker.check(both, {"a": Grant(2, 64), "b": Grant(1, 64)})
    checker.check(both, {"a": Grant(2, 64), "b": Grant(2, 64)})  # the same and a new legal grant pass
    with pytest.raises(ValueError, match=r"job 'a': gpus 3 outside \[1, 2\]"):
        checker.check(both, {"a": Grant(3, 96)})  # a changed grant is checked in full
    with pytest.raises(ValueError, match="grants total 6 GPUs > 4"):
        checker.check(both, {"a": Grant(2, 64), "b": Grant(4, 64)})
    checker.check(both, {"a": Grant(2, 64), "b": Grant(4, 64)}, queued=True)  # requests may exceed the cluster
    with pytest.raises(ValueError, match="unknown job 'a'"):
        checker.check(snap(job("b")), {"a": Grant(2, 64)})  # passed before, but the job has left


@dataclass(frozen=True)
class DipApp(FakeApp):
    """Goodput per GPU count as measured for bert around a node boundary: a dip at 5, far more at 16."""

    def best_batch(self, gpus: int, nodes: int, progress: float) -> tuple[int, float]:
        curve = {1: 1.0, 2: 1.9, 3: 2.9, 4: 4.07, 5: 4.02, 6: 4.1, 7: 4.2, 8: 6.0, 12: 8.5, 16: 10.3}
        known = max(g for g in curve if g <= gpus)
        return max(self.init_batch, gpus), curve[known]


def test_pollux_steps_across_a_goodput_dip_at_a_node_boundary():
    app = DipApp()
    grants = Pollux(ramp=False).allocate(snap(job("bert", app=app, gpus=4), nodes=(4, 4, 4, 4)))
    assert grants["bert"].gpus == 16  # one GPU at a time would stop at 4 (5 is worse)


def test_pollux_ramp_lets_a_job_at_most_double_what_it_has_trained_on():
    app = FakeApp(scale=1.0)
    policy = Pollux()
    assert gpus_of(policy.allocate(snap(job("a", app=app), nodes=(16,)))) == {"a": 1}  # not trained yet: 1
    assert gpus_of(policy.allocate(snap(job("a", app=app, gpus=1), nodes=(16,)))) == {"a": 2}
    assert gpus_of(policy.allocate(snap(job("a", app=app, gpus=2), nodes=(16,)))) == {"a": 4}
    assert gpus_of(policy.allocate(snap(job("a", app=app), nodes=(16,)))) == {"a": 4}  # preempted: remembers 2
    assert gpus_of(Pollux(ramp=False).allocate(snap(job("a", app=app), nodes=(16,)))) == {"a": 16}


def test_coach_steps_across_a_goodput_dip_at_a_node_boundary_as_pollux_does():
    app = DipApp()
    assert gpus_of(Coach().allocate(snap(job("bert", app=app), nodes=(4, 4, 4, 4)))) == {"bert": 16}
    # one GPU at a time (the thesis's greedy) stalls where the fifth GPU, on a second node, is slower than four
    assert gpus_of(Coach(node_steps=False).allocate(snap(job("bert", app=app), nodes=(4, 4, 4, 4)))) == {"bert": 4}


@dataclass(frozen=True)
class EpochApp(FakeApp):
    """An application whose statistical efficiency changes only between epochs of 1,000 samples (as App's)."""

    def epoch(self, progress: float) -> int:
        return int(progress // 1000)

    def efficiency(self, batch: int, progress: float) -> float:
        phi = 5.0 + 10.0 * self.epoch(progress)
        return (phi + 1) / (phi + batch / self.init_batch)


def test_pollux_tables_shared_by_application_and_epoch_change_no_allocation():
    """Jobs of one application in one epoch share a goodput table, kept from round to round; a Pollux that
    starts every round with no table answers the same, round after round."""
    rng = random.Random("pollux-tables")
    apps = [EpochApp(scale=0.85, half_local=16.0), EpochApp(name="other", scale=0.95, max_local_batch=32)]
    shared, fresh = Pollux(), Pollux()
    held: dict[str, int] = {}
    progress = {f"j{i}": rng.uniform(0, 3000) for i in range(10)}
    for round_ in range(40):
        jobs = [job(name, arrival_s=i * 100.0, app=apps[i % 2], progress=progress[name], total=1e5,
                    attained=round_ * 60.0 * held.get(name, 0), gpus=held.get(name, 0), max_gpus=16)
                for i, name in enumerate(progress)]
        snapshot = snap(*jobs, nodes=(4, 4, 4), now_s=round_ * 60.0)
        fresh.tables = {}
        answer = shared.allocate(snapshot)
        assert answer == fresh.allocate(snapshot)
        held = gpus_of(answer)
        for name in progress:
            progress[name] += 40.0 * held.get(name, 0)
    assert len(shared.tables) < len(progress)  # some jobs did share


class _Curve:
    """Goodput by GPU count (0 past its end)."""

    def __init__(self, goodputs: list[float]):
        self.goodputs = goodputs

    def epochs_per_s(self, workers: int, servers: int) -> float:
        return self.goodputs[workers] if workers < len(self.goodputs) else 0.0


def _random_curve(rng: random.Random, per_node: int) -> _Curve:
    """Rising, flat or dipping where a step crosses onto a new node; rounded so that gains sometimes tie."""
    goodputs, speed, digits = [0.0], 1.0, rng.choice([1, 3, 9])
    for gpus in range(1, rng.randint(1, 40) + 1):
        if gpus > 1:
            speed += rng.choice([0.0, 0.5, 1.0, 1.0, 0.25]) * (0.3 if gpus % per_node == 1 else 1.0)
        goodputs.append(round(speed, digits))
    return _Curve(goodputs)


def _counts_with(curves: list[_Curve], free: int, sizes) -> dict[str, tuple[int, int]]:
    from coach.policy.allocation import JobDemand, allocate

    demands = [JobDemand(job=f"j{i}", speed=c, remaining_epochs=1.0, remaining_budget=math.inf,
                         price_per_slot_s=0.0, max_workers=len(c.goodputs) - 1, max_servers=1)
               for i, c in enumerate(curves)]
    return {job: (a.workers, a.servers) for job, a in allocate(demands, free, min_gain=0.0, worker_sizes=sizes).items()}


def test_coach_hands_allocate_only_the_leading_step_sizes_and_gets_the_same_counts():
    """The coach policy gives allocate, for a job without a budget, only the sizes that beat every smaller one on
    gain per GPU; on random goodput curves (dips at node boundaries, plateaus, equal gains) and random free GPUs,
    allocate then chooses the same counts as with every size."""
    from coach.simulator.policies.coach_policy import _Goodputs
    from coach.simulator.policies.pollux import step_sizes

    rng = random.Random("leading-sizes")
    for _ in range(300):
        per_node = rng.choice([2, 4, 8])
        curves = [_random_curve(rng, per_node) for _ in range(rng.randint(1, 4))]
        tables = [_Goodputs(app=None) for _ in curves]  # type: ignore[arg-type]
        free = 3 * len(curves) + rng.randint(0, 60)

        def every(name: str, workers: int, limit: int | None, per_node: int = per_node) -> list[int]:
            return step_sizes(workers, limit if limit is not None else 64, per_node)

        def leading(name: str, workers: int, limit: int | None, per_node: int = per_node,
                    curves: list[_Curve] = curves, tables: list = tables) -> list[int]:
            curve, table = curves[int(name[1:])], tables[int(name[1:])]
            return table.leading_sizes(workers, limit if limit is not None else 64, per_node,
                                       lambda gpus: curve.epochs_per_s(gpus, 1))

        assert _counts_with(curves, free, leading) == _counts_with(curves, free, every)


def test_coach_answers_a_round_that_asks_the_same_from_memory_and_only_then(monkeypatch):
    """Most rounds ask the greedy the same (the same jobs in the same order, each at the same stage of training and
    without a budget): the coach policy then reuses last round's counts. A new stage, a budget's remaining work or
    another order changes the answer, and each is asked afresh."""
    asked: list[int] = []
    original = Coach._counts
    monkeypatch.setattr(Coach, "_counts", lambda self, *args: asked.append(1) or original(self, *args))
    app = EpochApp(scale=0.85, half_local=16.0)
    rounds = [  # (snapshot, GPUs each job gets): each answer differs from the one before, or is remembered
        (snap(job("a", app=app, progress=0.0, total=1e5), nodes=(4, 4, 4)), {"a": 4}),
        (snap(job("a", app=app, progress=900.0, total=1e5), nodes=(4, 4, 4)), {"a": 4}),  # the same stage
        (snap(job("a", app=app, progress=5000.0, total=1e5), nodes=(4, 4, 4)), {"a": 5}),  # a later stage
        # with a budget, the same stage but less left to do: more GPUs are affordable
        (snap(job("a", app=app, progress=0.0, total=1e3, budget=0.15), nodes=(4, 4, 4), price=0.01), {"a": 1}),
        (snap(job("a", app=app, progress=500.0, total=1e3, budget=0.15), nodes=(4, 4, 4), price=0.01), {"a": 3}),
        (snap(job("a", app=app, attained=1.0), job("b", app=app, attained=2.0), nodes=(3,)), {"a": 2, "b": 1}),
        (snap(job("a", app=app, attained=1.0), job("b", app=app, attained=2.0), nodes=(3,)), {"a": 2, "b": 1}),
        (snap(job("a", app=app, attained=2.0), job("b", app=app, attained=1.0), nodes=(3,)), {"a": 1, "b": 2}),
    ]
    remembering = Coach()
    for number, (snapshot, expected) in enumerate(rounds):
        assert gpus_of(remembering.allocate(snapshot)) == expected == gpus_of(Coach().allocate(snapshot)), number
    # remembered: the same stage without a budget (round 1) and the same two jobs in the same order (round 6)
    assert len(asked) == 2 * len(rounds) - 2
