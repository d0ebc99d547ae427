"""coach.policy.allocation: how many workers and servers each job gets, greedily, across all jobs.

Every job starts at (1 worker, 1 server) = 3 slots (the PS scheduler takes the third), in the order given.
Then the single step (+1 worker or +1 server of some job) with the largest relative speed gain is applied,
again and again, while it gains at least `min_gain`, stays within the job's limits and per-epoch budget, and
a slot is free. `stopped_by` names what held back the job's more useful step: "gain", "limit", "budget" or
"capacity".

Most cases use the surface PEAK, f(w, s) = 2 - 0.1 (w - 3)^2 - 0.2 (s - 2)^2 epochs/s, which peaks at (3,2):

    f(1,1) = 1.4   f(2,1) = 1.7   f(3,1) = 1.8   f(4,1) = 1.7
    f(1,2) = 1.6   f(2,2) = 1.9   f(3,2) = 2.0   f(4,2) = 1.9
    f(1,3) = 1.4   f(2,3) = 1.7   f(3,3) = 1.8

from (1,1) with ample budget and slots it grows:
    (1,1) +1 worker 0.3 / 1.4 = 21.4%  (the server would gain 0.2 / 1.4 = 14.3%)
    (2,1) +1 server 0.2 / 1.7 = 11.8%  (the worker 0.1 / 1.7 = 5.9%)
    (2,2) +1 worker 0.1 / 1.9 =  5.3%  (the server -0.2 / 1.9)
    (3,2) +1 worker would gain -0.1 / 2.0 = -5.0% < 5%: stop, "gain".
With price_per_slot_s = 1 an epoch costs slots / f: (1,1) 3/1.4 = 2.143, (2,1) 4/1.7 = 2.353,
(2,2) 5/1.9 = 2.632, (3,1) 5/1.8 = 2.778, (3,2) 6/2.0 = 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coach.policy.allocation import (
    BUDGET,
    CAPACITY,
    GAIN,
    LIMIT,
    Allocation,
    JobDemand,
    SpeedModel,
    allocate,
    predicted_epoch_cost,
)


@dataclass(frozen=True)
class Quadratic:
    """f(w, s) = b5 - b1 (w - b2)^2 - b3 (s - b4)^2 epochs per second."""

    b1: float
    b2: float
    b3: float
    b4: float
    b5: float

    def epochs_per_s(self, workers: int, servers: int) -> float:
        return self.b5 - self.b1 * (workers - self.b2) ** 2 - self.b3 * (servers - self.b4) ** 2


@dataclass(frozen=True)
class Table:
    """Epochs per second looked up by (workers, servers); `default` everywhere else."""

    values: dict = field(hash=False)
    default: float = 0.5

    def epochs_per_s(self, workers: int, servers: int) -> float:
        return self.values.get((workers, servers), self.default)


PEAK = Quadratic(b1=0.1, b2=3, b3=0.2, b4=2, b5=2.0)

# Gains 15% from a first worker, then 4.3% (+1 worker) and 2.6% (+1 server) from (2,1).
MODEST = Table({(1, 1): 1.0, (2, 1): 1.15, (1, 2): 1.05, (3, 1): 1.2, (2, 2): 1.18})


def demand(job: str = "a", speed: SpeedModel = PEAK, *, remaining_epochs: float = 10,
           remaining_budget: float = 1000.0, price_per_slot_s: float = 1.0, **limits) -> JobDemand:
    """A demand with an ample budget unless told otherwise (per-epoch budget 100)."""
    return JobDemand(job, speed, remaining_epochs=remaining_epochs, remaining_budget=remaining_budget,
                     price_per_slot_s=price_per_slot_s, **limits)


def counts(allocations: dict[str, Allocation]) -> dict[str, tuple[int, int, str]]:
    """(workers, servers, stopped_by) per job."""
    return {job: (a.workers, a.servers, a.stopped_by) for job, a in allocations.items()}


def test_the_stop_reasons_are_four_fixed_strings():
    assert (GAIN, BUDGET, CAPACITY, LIMIT) == ("gain", "budget", "capacity", "limit")


# --------------------------------------------------------------------------- the gain rule


def test_with_ample_budget_and_slots_a_job_grows_to_the_peak_and_stops_on_gain():
    allocation = allocate([demand()], free_slots=100)["a"]

    assert (allocation.workers, allocation.servers) == (3, 2)
    assert allocation.stopped_by == GAIN
    assert allocation.reason == "+1 worker would gain -5.0% < 5%"
    assert allocation.predicted_epochs_per_s == pytest.approx(2.0)
    assert allocation.predicted_epoch_time_s == pytest.approx(0.5)
    assert allocation.predicted_epoch_cost == pytest.approx(6 * 0.5 * 1.0)
    assert allocation.per_epoch_budget == pytest.approx(100.0)
    assert allocation.slots == 6


def test_a_larger_min_gain_stops_before_the_5_3_percent_step():
    allocation = allocate([demand()], free_slots=100, min_gain=0.06)["a"]

    assert (allocation.workers, allocation.servers, allocation.stopped_by) == (2, 2, GAIN)
    assert allocation.reason == "+1 worker would gain 5.3% < 6%"


def test_a_min_gain_of_15_percent_takes_only_the_first_worker():
    allocation = allocate([demand()], free_slots=100, min_gain=0.15)["a"]

    assert (allocation.workers, allocation.servers, allocation.stopped_by) == (2, 1, GAIN)
    assert allocation.reason == "+1 server would gain 11.8% < 15%"


def test_min_gain_zero_still_takes_no_step_that_loses_speed():
    assert counts(allocate([demand()], free_slots=100, min_gain=0.0)) == {"a": (3, 2, GAIN)}


def test_a_flat_surface_never_grows_even_with_min_gain_zero():
    allocation = allocate([demand(speed=Table({}, default=1.0))], free_slots=100, min_gain=0.0)["a"]

    assert (allocation.workers, allocation.servers, allocation.stopped_by) == (1, 1, GAIN)
    assert allocation.reason == "+1 worker would gain 0.0%: no speed-up"


# --------------------------------------------------------------------------- the budget rule


def test_a_small_budget_stops_growth_where_the_next_step_costs_too_much():
    # per-epoch budget 10 / 4 = 2.5: (2,1) costs 2.353, both (2,2) 2.632 and (3,1) 2.778 cost more
    allocation = allocate([demand(remaining_budget=10, remaining_epochs=4)], free_slots=100)["a"]

    assert (allocation.workers, allocation.servers, allocation.stopped_by) == (2, 1, BUDGET)
    assert allocation.reason == "+1 server would gain 11.8% but its predicted epoch cost 2.632 > per-epoch budget 2.5"
    assert allocation.per_epoch_budget == 2.5
    assert allocation.predicted_epoch_cost == pytest.approx(4 / 1.7)


def test_a_job_that_cannot_afford_even_1_1_still_gets_it_and_is_marked_budget():
    # per-epoch budget 2 < 3 / 1.4 = 2.143; the controller decides whether to run an epoch at all
    allocation = allocate([demand(remaining_budget=20, remaining_epochs=10)], free_slots=100)["a"]

    assert (allocation.workers, allocation.servers, allocation.stopped_by) == (1, 1, BUDGET)
    assert allocation.reason == "(1,1) predicted epoch cost 2.143 > per-epoch budget 2"
    assert allocation.predicted_epoch_cost == pytest.approx(3 / 1.4)


def test_a_surface_predicting_no_progress_at_1_1_gets_1_1_marked_budget_without_a_cost():
    allocation = allocate([demand(speed=Table({}, default=0.0))], free_slots=100)["a"]

    assert (allocation.workers, allocation.servers, allocation.stopped_by) == (1, 1, BUDGET)
    assert allocation.reason == "the surface predicts 0 epochs/s at (1,1), so no epoch cost is bounded"
    assert allocation.predicted_epochs_per_s == 0.0
    assert allocation.predicted_epoch_time_s is None
    assert allocation.predicted_epoch_cost is None


def test_a_free_price_makes_every_step_affordable():
    assert counts(allocate([demand(remaining_budget=0, price_per_slot_s=0)], free_slots=100)) == {"a": (3, 2, GAIN)}


# --------------------------------------------------------------------------- the capacity rule


def test_four_free_slots_give_one_extra_worker_then_capacity():
    allocation = allocate([demand()], free_slots=4)["a"]

    assert (allocation.workers, allocation.servers, allocation.stopped_by) == (2, 1, CAPACITY)
    assert allocation.reason == "+1 server would gain 11.8% but no slot is free"


def test_a_job_that_does_not_fit_at_1_1_gets_nothing():
    allocation = allocate([demand()], free_slots=2)["a"]

    assert (allocation.workers, allocation.servers, allocation.stopped_by) == (0, 0, CAPACITY)
    assert allocation.reason == "(1,1) needs 3 slots but only 2 are free"
    assert allocation.predicted_epochs_per_s is None
    assert allocation.predicted_epoch_time_s is None
    assert allocation.predicted_epoch_cost is None
    assert allocation.per_epoch_budget == 100.0
    assert allocation.slots == 0


def test_when_slots_run_out_at_the_second_of_three_jobs_the_first_grows_into_the_rest():
    # 5 slots: "a" starts (3), "b" and "c" do not fit in 2; "a" then takes +1 worker and +1 server
    allocations = allocate([demand("a"), demand("b"), demand("c")], free_slots=5)

    assert counts(allocations) == {"a": (2, 2, CAPACITY), "b": (0, 0, CAPACITY), "c": (0, 0, CAPACITY)}
    assert allocations["a"].reason == "+1 worker would gain 5.3% but no slot is free"


def test_every_job_starts_before_any_grows_so_the_third_of_three_waits():
    # 8 slots: "a" and "b" start (6), "c" does not fit in 2; both 21.4% steps tie, "a" first, then "b"'s
    # 21.4% beats "a"'s 11.8%
    allocations = allocate([demand("a"), demand("b"), demand("c")], free_slots=8)

    assert counts(allocations) == {"a": (2, 1, CAPACITY), "b": (2, 1, CAPACITY), "c": (0, 0, CAPACITY)}


def test_zero_free_slots_start_nothing():
    assert counts(allocate([demand("a"), demand("b")], free_slots=0)) == {"a": (0, 0, CAPACITY),
                                                                          "b": (0, 0, CAPACITY)}


def test_no_jobs_give_no_allocations():
    assert allocate([], free_slots=10) == {}


# --------------------------------------------------------------------------- the job's own limits


def test_max_workers_1_grows_servers_and_blames_the_limit_when_the_worker_was_the_better_step():
    # (1,1): the worker (21.4%) is out, the server gains 14.3% -> (1,2); there the worker would gain
    # (1.9 - 1.6) / 1.6 = 18.75% (a hair below in floating point, so shown 18.7%) while the allowed
    # +1 server would lose 12.5%
    allocation = allocate([demand(max_workers=1)], free_slots=100)["a"]

    assert (allocation.workers, allocation.servers, allocation.stopped_by) == (1, 2, LIMIT)
    assert allocation.reason == "+1 worker would gain 18.7% but max_workers is 1"


def test_max_servers_1_grows_workers_and_blames_the_limit_on_the_server():
    # (1,1) +1 worker 21.4%, (2,1) +1 worker 5.9% (server out), (3,1): the server would gain 0.2 / 1.8
    allocation = allocate([demand(max_servers=1)], free_slots=100)["a"]

    assert (allocation.workers, allocation.servers, allocation.stopped_by) == (3, 1, LIMIT)
    assert allocation.reason == "+1 server would gain 11.1% but max_servers is 1"


def test_a_limit_above_where_the_gain_stops_changes_nothing():
    assert counts(allocate([demand(max_workers=3, max_servers=2)], free_slots=100)) == {"a": (3, 2, GAIN)}


def test_a_limit_is_named_before_budget_and_capacity_when_all_three_hold():
    # at (1,1) with no free slot and a budget below every step, the worker is capped too
    allocation = allocate([demand(max_workers=1, max_servers=1, remaining_budget=22, remaining_epochs=10)],
                          free_slots=3)["a"]

    assert (allocation.workers, allocation.servers, allocation.stopped_by) == (1, 1, LIMIT)
    assert allocation.reason == "+1 worker would gain 21.4% but max_workers is 1"


def test_budget_is_named_before_capacity_when_both_hold():
    # per-epoch budget 2.2: (1,1) costs 2.143, (2,1) 2.353; no slot is free either
    allocation = allocate([demand(remaining_budget=22, remaining_epochs=10)], free_slots=3)["a"]

    assert (allocation.workers, allocation.servers, allocation.stopped_by) == (1, 1, BUDGET)
    assert allocation.reason == "+1 worker would gain 21.4% but its predicted epoch cost 2.353 > per-epoch budget 2.2"


# --------------------------------------------------------------------------- jobs competing for slots


def test_the_larger_relative_gain_gets_the_last_slot_whatever_the_order():
    # 7 slots: both start (6); PEAK's worker gains 21.4%, MODEST's 15%
    allocations = allocate([demand("modest", MODEST), demand("peak")], free_slots=7)

    assert counts(allocations) == {"modest": (1, 1, CAPACITY), "peak": (2, 1, CAPACITY)}
    assert allocations["modest"].reason == "+1 worker would gain 15.0% but no slot is free"
    assert list(allocations) == ["modest", "peak"]


def test_after_its_best_step_a_job_competes_with_its_next_best():
    # 8 slots: peak +1 worker (21.4%), then modest's 15% beats peak's 11.8%; modest's next is 4.3% < 5%
    allocations = allocate([demand("peak"), demand("modest", MODEST)], free_slots=8)

    assert counts(allocations) == {"peak": (2, 1, CAPACITY), "modest": (2, 1, GAIN)}
    assert allocations["modest"].reason == "+1 worker would gain 4.3% < 5%"


def test_equal_gains_go_to_the_earlier_job():
    allocations = allocate([demand("first"), demand("second")], free_slots=7)

    assert counts(allocations) == {"first": (2, 1, CAPACITY), "second": (1, 1, CAPACITY)}


def test_a_job_stopped_by_its_budget_leaves_the_slots_to_the_others():
    # "poor" stops at (1,1) (per-epoch budget 2.2), so "rich" takes both free slots
    allocations = allocate([demand("poor", remaining_budget=22, remaining_epochs=10), demand("rich")], free_slots=8)

    assert counts(allocations) == {"poor": (1, 1, BUDGET), "rich": (2, 2, CAPACITY)}


# --------------------------------------------------------------------------- the pieces


def test_predicted_epoch_cost_is_slots_times_epoch_time_times_price():
    assert predicted_epoch_cost(PEAK, 2, 1, 0.5) == pytest.approx(4 / 1.7 * 0.5)
    assert predicted_epoch_cost(Table({}, default=-1.0), 1, 1, 0.5) == math.inf
    with pytest.raises(ValueError):
        predicted_epoch_cost(PEAK, 0, 1, 0.5)


def test_to_dict_gives_every_field_by_name():
    assert allocate([demand(remaining_budget=10, remaining_epochs=4)], free_slots=100)["a"].to_dict() == {
        "job": "a",
        "workers": 2,
        "servers": 1,
        "predicted_epochs_per_s": pytest.approx(1.7),
        "predicted_epoch_time_s": pytest.approx(1 / 1.7),
        "predicted_epoch_cost": pytest.approx(4 / 1.7),
        "per_epoch_budget": 2.5,
        "stopped_by": BUDGET,
        "reason": "+1 server would gain 11.8% but its predicted epoch cost 2.632 > per-epoch budget 2.5",
        "growth": ["(1,1) +1 worker -> (2,1): +21.4% speed for 1 slot, 1.10x the money per epoch (predicted)"],
        "choice": "",
    }


def test_the_result_is_frozen():
    allocation = allocate([demand()], free_slots=100)["a"]
    with pytest.raises(AttributeError):
        allocation.workers = 7


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("free_slots, min_gain", [(-1, 0.05), (10, -0.01), (10, math.nan)])
def test_negative_free_slots_or_min_gain_are_refused(free_slots, min_gain):
    with pytest.raises(ValueError):
        allocate([demand()], free_slots=free_slots, min_gain=min_gain)


def test_duplicate_job_names_are_refused_and_named():
    with pytest.raises(ValueError, match="duplicate job names: a"):
        allocate([demand("a"), demand("b"), demand("a")], free_slots=100)


@pytest.mark.parametrize("changes", [
    {"remaining_epochs": 0.5},
    {"remaining_epochs": math.inf},
    {"remaining_budget": math.nan},
    {"price_per_slot_s": -1.0},
    {"max_workers": 0},
    {"max_servers": 0},
])
def test_a_demand_outside_its_contract_is_refused(changes):
    with pytest.raises(ValueError):
        demand(**changes)


def test_a_speed_without_epochs_per_s_is_refused():
    with pytest.raises(TypeError):
        JobDemand("a", object(), remaining_epochs=1, remaining_budget=1, price_per_slot_s=1)


# --------------------------------------------------------------------------- properties

surfaces = st.builds(
    Quadratic,
    b1=st.floats(0, 0.5), b2=st.floats(0, 6), b3=st.floats(0, 0.5), b4=st.floats(0, 6), b5=st.floats(-1, 5),
)
limits = st.one_of(st.none(), st.integers(1, 5))


@st.composite
def demand_lists(draw) -> list[JobDemand]:
    count = draw(st.integers(0, 4))
    return [JobDemand(f"job-{i}", draw(surfaces), remaining_epochs=draw(st.floats(1, 50)),
                      remaining_budget=draw(st.floats(0, 100)), price_per_slot_s=draw(st.floats(0, 1)),
                      max_workers=draw(limits), max_servers=draw(limits))
            for i in range(count)]


@settings(derandomize=True, max_examples=100, deadline=None)
@given(demands=demand_lists(), free_slots=st.integers(0, 30), min_gain=st.floats(0, 0.5))
def test_allocations_respect_slots_limits_and_budgets_and_are_deterministic(demands, free_slots, min_gain):
    allocations = allocate(demands, free_slots, min_gain)

    assert list(allocations) == [d.job for d in demands]
    assert sum(a.slots for a in allocations.values()) <= free_slots
    assert allocations == allocate(demands, free_slots, min_gain)
    for d in demands:
        a = allocations[d.job]
        assert a.stopped_by in (GAIN, BUDGET, CAPACITY, LIMIT)
        assert a.reason
        if a.workers == 0:
            assert (a.servers, a.stopped_by) == (0, CAPACITY)
            continue
        assert a.workers >= 1 and a.servers >= 1
        assert d.max_workers is None or a.workers <= d.max_workers
        assert d.max_servers is None or a.servers <= d.max_servers
        if (a.workers, a.servers) != (1, 1):
            assert a.predicted_epoch_cost is not None
            assert a.predicted_epoch_cost <= a.per_epoch_budget
            # every step taken sped the job up
            assert a.predicted_epochs_per_s > d.speed.epochs_per_s(1, 1)


@settings(derandomize=True, max_examples=100, deadline=None)
@given(demands=demand_lists(), free_slots=st.integers(0, 30))
def test_jobs_start_in_the_order_given(demands, free_slots):
    allocations = allocate(demands, free_slots)

    started = [allocations[d.job].workers > 0 for d in demands]
    assert started == sorted(started, reverse=True)
    assert sum(started) == min(len(demands), free_slots // 3)


# --------------------------------------------------------------------------- worker_sizes (the simulator's option)

DIP = Table({(1, 1): 1.0, (2, 1): 1.9, (3, 1): 2.9, (4, 1): 4.07, (5, 1): 4.02, (6, 1): 4.1, (8, 1): 6.0},
            default=0.0)


def test_worker_sizes_let_one_step_cross_a_dip_that_stalls_plus_one_steps():
    def sizes(job: str, workers: int, limit: int | None) -> list[int]:
        return list(range(workers + 1, 9))

    alone = allocate([demand(speed=DIP, max_servers=1)], free_slots=100, min_gain=0.0)["a"]
    assert (alone.workers, alone.stopped_by) == (4, GAIN)  # +1 worker loses speed at 5
    jumped = allocate([demand(speed=DIP, max_servers=1)], free_slots=100, min_gain=0.0, worker_sizes=sizes)["a"]
    assert jumped.workers == 8
    assert jumped.growth[-1].startswith("(4,1) +4 worker -> (8,1): +47.4% speed for 4 slots")


def test_a_step_of_several_workers_that_no_longer_fits_is_chosen_again_within_the_free_slots():
    def sizes(job: str, workers: int, limit: int | None) -> list[int]:
        return list(range(workers + 1, 9))

    # (1,1) takes 3 slots; 3 more give (4,1), and the step to (8,1) does not fit: the job ends at 4 workers
    chosen = allocate([demand(speed=DIP, max_servers=1)], free_slots=6, min_gain=0.0, worker_sizes=sizes)["a"]
    assert (chosen.workers, chosen.servers, chosen.stopped_by) == (4, 1, CAPACITY)
