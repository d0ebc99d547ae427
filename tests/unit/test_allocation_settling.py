"""coach.policy.allocation, rules 3 and 4: gain per slot and money across jobs; a job settles on measured counts.

The LeNet case of issue 13 on two cores: the fit predicts (3,1) fastest (1.444 s per epoch), but the job's own
full epochs took 1.60 s at (3,1) and 1.37 s at (2,1). With its measurements in the speed model it goes back to
(2,1) and says why; it then stays, probes each unmeasured neighbour the fit does not rule out at most once, and
settles.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coach.estimates.speed import SpeedObservation
from coach.policy.allocation import CAPACITY, GAIN, JobDemand, allocate, money_ratio
from coach.policy.measured import MeasuredOrFitted, measured_points


@dataclass(frozen=True)
class Times:
    """A fit given as epoch seconds per (workers, servers); `default_s` elsewhere."""

    times_s: dict = field(hash=False)
    default_s: float = 3.0

    def epochs_per_s(self, workers: int, servers: int) -> float:
        return 1.0 / self.times_s.get((workers, servers), self.default_s)

    def to_dict(self) -> dict:
        return {}


#: what calibration makes the fit say about LeNet on two cores: (3,1) fastest
LENET_FIT = Times({(1, 1): 1.993, (1, 2): 2.039, (2, 1): 1.53, (2, 2): 1.50, (3, 1): 1.444, (3, 2): 1.47,
                   (4, 1): 1.5, (1, 3): 2.2, (2, 3): 1.5})


def measured(fit, *epochs: tuple[int, int, float]) -> MeasuredOrFitted:
    return MeasuredOrFitted(fit, measured_points([SpeedObservation(w, s, 1 / t) for w, s, t in epochs]))


def demand(speed, current=None, job="a", probe_margin=0.0, **fields) -> JobDemand:
    values = dict(remaining_epochs=10, remaining_budget=1000.0, price_per_slot_s=1.0, current=current,
                  measured=getattr(speed, "measured", frozenset()), probe_margin=probe_margin)
    values.update(fields)
    return JobDemand(job, speed, **values)


def test_the_fit_alone_picks_3_1():
    allocation = allocate([demand(LENET_FIT)], free_slots=12)["a"]
    assert (allocation.workers, allocation.servers) == (3, 1)
    assert allocation.growth == (
        "(1,1) +1 worker -> (2,1): +30.3% speed for 1 slot, 1.02x the money per epoch (predicted)",
        "(2,1) +1 worker -> (3,1): +6.0% speed for 1 slot, 1.18x the money per epoch (predicted)",
    )
    assert allocation.choice == ""  # no full epoch yet: nothing to settle on


def test_a_job_that_measured_2_1_faster_than_3_1_goes_back_to_2_1_and_says_why():
    speed = measured(LENET_FIT, (3, 1, 1.61), (3, 1, 1.60), (2, 1, 1.37))
    allocation = allocate([demand(speed, current=(3, 1))], free_slots=12)["a"]

    assert (allocation.workers, allocation.servers) == (2, 1)
    assert allocation.growth == (
        "(1,1) +1 worker -> (2,1): +45.5% speed for 1 slot, 0.92x the money per epoch (measured)",)
    assert allocation.choice == ("goes back to (2,1): (2,1) 1.37 s per epoch (measured), its fastest measured, "
                                 "not the last (3,1) 1.605 s")
    assert allocation.stopped_by == GAIN


def test_the_same_job_at_2_1_stays_there():
    speed = measured(LENET_FIT, (3, 1, 1.61), (3, 1, 1.60), (2, 1, 1.37))
    allocation = allocate([demand(speed, current=(2, 1))], free_slots=12)["a"]

    assert (allocation.workers, allocation.servers) == (2, 1)
    assert allocation.choice == "stays at (2,1): (2,1) 1.37 s per epoch (measured), growth found nothing better"


def test_counts_never_run_are_explored_when_the_fit_says_they_are_clearly_faster():
    speed = measured(LENET_FIT, (3, 1, 1.61))  # only (3,1) run so far: (2,1) is the fit's 1.53 s
    allocation = allocate([demand(speed, current=(3, 1))], free_slots=12)["a"]

    assert (allocation.workers, allocation.servers) == (2, 1)
    assert allocation.choice == ("explores (2,1) from (3,1): (3,1) 1.61 s per epoch (measured) against (2,1) "
                                 "1.53 s (predicted); (2,1) is faster by 5.2%")


@pytest.mark.parametrize("current_s, expected", [
    (1.40, (3, 1)),  # 3,1 measured 2.1% faster than the grown 2,2 (same slots): not 5% -> stays
    (1.55, (2, 2)),  # the grown 2,2 is 7.6% faster -> moves
])
def test_between_counts_of_equal_slots_a_job_moves_only_for_min_gain(current_s, expected):
    fit = Times({(1, 1): 2.0, (2, 1): 1.6, (1, 2): 1.9, (2, 2): 1.43, (3, 1): 1.7, (3, 2): 1.6, (2, 3): 1.6})
    speed = measured(fit, (2, 2, 1.43), (3, 1, current_s))
    allocation = allocate([demand(speed, current=(3, 1))], free_slots=12)["a"]
    assert (allocation.workers, allocation.servers) == expected


@pytest.mark.parametrize("current_s, expected", [
    (1.38, (3, 2)),  # 3.6% faster than the grown 2,2 for one more slot (>= 2.5%): stays
    (1.41, (2, 2)),  # 1.4% faster: not worth its extra slot, back to the cheaper 2,2
])
def test_a_job_keeps_extra_slots_only_when_they_are_clearly_faster(current_s, expected):
    fit = Times({(1, 1): 2.0, (2, 1): 1.6, (1, 2): 1.9, (2, 2): 1.43, (3, 1): 1.7, (2, 3): 1.6, (3, 2): 1.5})
    speed = measured(fit, (2, 2, 1.43), (3, 2, current_s))
    allocation = allocate([demand(speed, current=(3, 2))], free_slots=12)["a"]
    assert (allocation.workers, allocation.servers) == expected


def test_current_counts_that_no_longer_fit_are_left():
    speed = measured(LENET_FIT, (2, 1, 1.60), (3, 1, 1.20))  # 3,1 is much faster, but a limit now forbids it
    allocation = allocate([demand(speed, current=(3, 1), max_workers=2)], free_slots=12)["a"]
    assert (allocation.workers, allocation.servers) == (2, 2)  # where growth within the limit goes
    assert allocation.choice.endswith("(3,1) no longer fits the job's limits, budget or the free slots")


def test_a_settled_job_probes_an_unmeasured_neighbour_within_its_margin_once():
    speed = measured(LENET_FIT, (3, 1, 1.61), (2, 1, 1.37))  # 2,2 predicted 1.50 s: 8.7% slower than 2,1
    probing = allocate([demand(speed, current=(2, 1), probe_margin=0.1)], free_slots=12)["a"]
    assert (probing.workers, probing.servers) == (2, 2)
    assert probing.choice == ("probes (2,2) (+1 server) from (2,1) for one epoch: never run at full epochs, "
                              "predicted 1.5 s per epoch against (2,1) 1.37 s per epoch (measured), within the "
                              "probe margin 10.0%")
    # outside the margin, without a free slot, or once measured slower: no probe
    assert (allocate([demand(speed, current=(2, 1), probe_margin=0.08)], 12)["a"].servers) == 1
    assert (allocate([demand(speed, current=(2, 1), probe_margin=0.1)], 4)["a"].servers) == 1
    probed = measured(LENET_FIT, (3, 1, 1.61), (2, 1, 1.37), (2, 2, 1.52))
    back = allocate([demand(probed, current=(2, 2), probe_margin=0.1)], free_slots=12)["a"]
    assert (back.workers, back.servers) == (2, 1)
    assert back.choice.startswith("goes back to (2,1): ")
    again = allocate([demand(probed, current=(2, 1), probe_margin=0.1)], free_slots=12)["a"]
    assert (again.workers, again.servers) == (2, 1)


def epochs_until_settled(times_s: dict, fit: Times, seed: int, noise: float, epochs: int = 40,
                         limits: tuple[int, int] = (4, 3)) -> list[tuple[int, int]]:
    """A job alone: allocate before every epoch with its measurements, run the epoch with seeded noise."""
    rng = random.Random(seed)
    observed: list[SpeedObservation] = []
    counts: list[tuple[int, int]] = []
    for _ in range(epochs):
        speed = MeasuredOrFitted(fit, measured_points(observed))
        chosen = allocate([demand(speed, current=counts[-1] if counts else None, probe_margin=0.2,
                                  max_workers=limits[0], max_servers=limits[1])], free_slots=12)["a"]
        point = (chosen.workers, chosen.servers)
        counts.append(point)
        observed.append(SpeedObservation(*point, 1 / (times_s[point] * (1 + noise * rng.gauss(0, 1)))))
    return counts


@pytest.mark.parametrize("seed", range(20))
def test_exploration_is_bounded_and_the_job_settles(seed):
    rng = random.Random(1000 + seed)
    times_s = {(w, s): rng.uniform(1.0, 3.0) for w in range(1, 5) for s in range(1, 4)}
    fit = Times({point: t * rng.uniform(0.8, 1.2) for point, t in times_s.items()})  # off by up to 20%
    counts = epochs_until_settled(times_s, fit, seed, noise=0.03)

    changes = sum(a != b for a, b in zip(counts, counts[1:]))
    explored = len(set(counts))
    # every change either runs counts never run before (at most once each) or returns to measured ones
    assert changes <= 2 * explored
    # it has settled: the last 15 epochs run at one (workers, servers)
    assert len(set(counts[-15:])) == 1


def test_the_last_slot_goes_to_the_larger_gain_per_slot_then_to_the_smaller_money_ratio():
    # both gain 10% from the last slot; b (at 2,1: 4 slots) adds less money per epoch than a (at 1,1: 3 slots)
    a = Times({(1, 1): 1.0, (2, 1): 1 / 1.1, (1, 2): 2.0})
    b = Times({(1, 1): 1.0, (2, 1): 1 / 1.5, (3, 1): 1 / 1.65, (2, 2): 2.0})
    allocations = allocate([demand(a, job="a"), demand(b, job="b")], free_slots=8)

    assert (allocations["a"].workers, allocations["b"].workers) == (1, 3)
    assert allocations["a"].stopped_by == CAPACITY
    assert allocations["b"].growth[-1] == ("(2,1) +1 worker -> (3,1): +10.0% speed for 1 slot, 1.14x the money "
                                           "per epoch (predicted)")
    assert money_ratio(1.0, 1.1, 3, 4) == pytest.approx(4 / 3 / 1.1)
    assert money_ratio(1.5, 1.65, 4, 5) == pytest.approx(5 / 4 / 1.1)


# --------------------------------------------------------------------------- properties

points = st.tuples(st.integers(1, 5), st.integers(1, 4))


@st.composite
def settling_demands(draw) -> list[JobDemand]:
    count = draw(st.integers(1, 3))
    out = []
    for i in range(count):
        times_s = draw(st.dictionaries(points, st.floats(0.5, 5.0), min_size=1, max_size=12))
        fit = Times(times_s, default_s=draw(st.floats(0.5, 5.0)))
        ran = draw(st.lists(st.tuples(points, st.floats(0.5, 5.0)), max_size=5))
        speed = measured(fit, *[(w, s, t) for (w, s), t in ran])
        current = ran[-1][0] if ran else None
        out.append(JobDemand(f"job-{i}", speed, remaining_epochs=draw(st.floats(1, 30)),
                             remaining_budget=draw(st.floats(0, 200)), price_per_slot_s=draw(st.floats(0, 1)),
                             max_workers=draw(st.one_of(st.none(), st.integers(1, 5))),
                             max_servers=draw(st.one_of(st.none(), st.integers(1, 4))),
                             current=current, measured=speed.measured,
                             probe_margin=draw(st.floats(0, 0.3))))
    return out


@settings(derandomize=True, max_examples=150, deadline=None)
@given(demands=settling_demands(), free_slots=st.integers(0, 24))
def test_settling_and_probing_respect_slots_limits_and_budgets(demands, free_slots):
    allocations = allocate(demands, free_slots)

    assert sum(a.slots for a in allocations.values()) <= free_slots
    assert allocations == allocate(demands, free_slots)
    for d in demands:
        a = allocations[d.job]
        assert a.stopped_by in (GAIN, "budget", CAPACITY, "limit") and a.reason
        if a.workers == 0:
            continue
        assert d.max_workers is None or a.workers <= d.max_workers
        assert d.max_servers is None or a.servers <= d.max_servers
        if (a.workers, a.servers) != (1, 1):
            assert a.predicted_epoch_cost is not None and a.predicted_epoch_cost <= a.per_epoch_budget
        if d.current is not None and (a.workers, a.servers) != (1, 1):
            assert a.choice  # a job with current counts is always told why it stays or moves
