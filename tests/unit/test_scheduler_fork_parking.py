"""scheduler_fork's parked pods: a job behind the first in line is not tried again until its turn, and that
changes no placement; reasons stay current; a call's pending reasons are the ones at its end."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_fork import PLUGINS, PROFILES, Node, Pod, PodGroup, Scheduler
from scheduler_fork.framework import job_pods


def _line(scheduler: Scheduler, jobs: int, workers: int = 1) -> None:
    for j in range(jobs):
        pods = job_pods(f"j{j}", j, workers=workers, first_seq=10 * j)
        scheduler.submit(pods, PodGroup(f"j{j}", whole=len(pods)))


def test_a_line_of_jobs_behind_the_first_costs_a_later_pass_only_the_first_jobs_pods():
    scheduler = Scheduler([Node("n1", 3)], profile="gang")
    _line(scheduler, 50)

    first = scheduler.schedule(0.0)
    assert sorted(first.bound) == ["j0-scheduler", "j0-server-0", "j0-worker-0"]
    assert first.attempts == 3 + 49 * 3  # every pod tried once; the 49 jobs behind are parked

    assert scheduler.schedule(60.0).attempts == 3  # only the first in line's pods are tried again
    scheduler.delete(["j0-scheduler", "j0-server-0", "j0-worker-0"])
    second = scheduler.schedule(120.0)
    assert sorted(second.bound) == ["j1-scheduler", "j1-server-0", "j1-worker-0"]
    assert second.attempts == 3 + 3  # j1's pods, and then those of j2, first in line once j1 started
    assert len(scheduler.pending) == scheduler.pending_count == 48 * 3


def test_the_next_job_starts_in_the_same_pass_as_the_one_before_it():
    scheduler = Scheduler([Node("n1", 6)], profile="gang")
    _line(scheduler, 3)

    assert sorted(scheduler.schedule(0.0).bound) == sorted(
        f"j{j}-{role}" for j in (0, 1) for role in ("scheduler", "server-0", "worker-0"))


def test_a_parked_pods_reason_names_the_job_first_in_line_now():
    scheduler = Scheduler([Node("n1", 3)], profile="gang")
    _line(scheduler, 4)
    scheduler.schedule(0.0)
    assert scheduler.pending["j3-worker-0"] == "HeadOfLine: behind job j1, first in line"

    scheduler.delete(["j0-scheduler", "j0-server-0", "j0-worker-0"])
    assert sorted(scheduler.schedule(60.0).bound) == ["j1-scheduler", "j1-server-0", "j1-worker-0"]

    assert scheduler.queue.is_parked("j3-worker-0")  # not tried again, yet its reason is current
    assert scheduler.pending["j3-worker-0"] == "HeadOfLine: behind job j2, first in line"
    assert scheduler.pending["j2-worker-0"] == "0/1 nodes are available: 1 Insufficient slots."


def test_a_calls_pending_reasons_are_those_at_its_end_even_when_read_after_later_changes():
    scheduler = Scheduler([Node("n1", 3)], profile="gang")
    _line(scheduler, 3)
    first = scheduler.schedule(0.0)

    scheduler.delete(["j0-scheduler", "j0-server-0", "j0-worker-0"])
    later = scheduler.schedule(60.0)

    assert first.pending["j2-worker-0"] == "HeadOfLine: behind job j1, first in line"
    assert "j1-worker-0" in first.pending and "j1-worker-0" not in later.pending
    assert later.pending["j2-worker-0"] == "0/1 nodes are available: 1 Insufficient slots."


def test_a_new_node_wakes_every_parked_pod():
    scheduler = Scheduler([Node("n1", 3)], profile="gang")
    _line(scheduler, 3)
    scheduler.schedule(0.0)

    scheduler.set_node(Node("n2", 6))

    assert len(scheduler.schedule(60.0).bound) == 6


# ---- differential: parking changes no placement --------------------------------------------------------------


class _Unhinted:
    """HeadOfLine without its queueing hint: every pod behind the first in line is tried again every pass."""

    name = "HeadOfLine"

    def pre_filter(self, state, pod):
        return PLUGINS["HeadOfLine"].pre_filter(state, pod)


@st.composite
def plays(draw):
    jobs = draw(st.integers(2, 8))
    specs = [(draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.booleans())) for _ in range(jobs)]
    capacities = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    largest = max(1 + servers + workers for servers, workers, _ in specs)
    capacities[-1] += max(0, largest - sum(capacities))
    arrivals = draw(st.lists(st.integers(0, jobs - 1), min_size=jobs, max_size=jobs, unique=True))
    steps_s = draw(st.lists(st.sampled_from([10.0, 11.0, 60.0]), min_size=1, max_size=5))
    run_steps = draw(st.lists(st.integers(0, 4), min_size=jobs, max_size=jobs))
    return specs, capacities, arrivals, steps_s, run_steps, draw(st.integers(0, 3))


@settings(max_examples=150, deadline=None)
@given(plays(), st.sampled_from(["gang", "gang-pack"]))
def test_parking_places_exactly_what_trying_every_pod_every_pass_places(play, profile):
    """Passes at least the longest backoff (10 s) apart, as the simulator's rounds: every pod the control tries
    again has backed off. (With shorter passes a woken pod's next backoff counts its fewer attempts, as kube's.)"""
    specs, capacities, arrivals, steps_s, run_steps, seed = play
    nodes = [Node(f"n{i}", slots) for i, slots in enumerate(capacities)]
    with mock.patch.dict(PLUGINS, {"HeadOfLineUnhinted": _Unhinted()}):
        plain = PROFILES[profile]
        unhinted = replace(plain, pre_filter=tuple("HeadOfLineUnhinted" if n == "HeadOfLine" else n
                                                   for n in plain.pre_filter))
        hinted, control = Scheduler(nodes, profile, seed=seed), Scheduler(nodes, unhinted, seed=seed)
        done: dict[str, int] = {}
        now_s, step = 0.0, 0
        while len(done) < len(specs) and step < 400:
            if step < len(arrivals):
                j = arrivals[step]
                servers, workers, whole = specs[j]
                pods = job_pods(f"j{j}", j, servers=servers, workers=workers, first_seq=10 * j)
                group = PodGroup(f"j{j}", whole=len(pods) if whole else None)
                for scheduler in (hinted, control):
                    scheduler.submit(pods, group)
            a, b = hinted.schedule(now_s), control.schedule(now_s)
            assert (dict(a.bound), dict(a.waiting), dict(a.rejected)) == (dict(b.bound), dict(b.waiting),
                                                                           dict(b.rejected))
            assert set(a.pending) == set(b.pending) and a.attempts <= b.attempts
            for job, ledger in list(hinted.state.jobs.items()):
                if ledger.n_bound and ledger.runnable and ledger.n_pending + ledger.n_reserved == 0:
                    done.setdefault(job, step)
                    if step - done[job] >= run_steps[int(job[1:])]:
                        names = sorted(ledger.names)
                        for scheduler in (hinted, control):
                            scheduler.delete(names)
            now_s += steps_s[step % len(steps_s)]
            step += 1
        assert len(done) == len(specs)


def test_a_parked_job_found_started_elsewhere_is_tried_again():
    """A pod of a parked job taken in as bound (kube: found bound after a restart) starts its job: its parked pods
    no longer wait for a turn."""
    scheduler = Scheduler([Node("n1", 3)], profile="gang")
    _line(scheduler, 3)
    scheduler.schedule(0.0)
    assert scheduler.queue.is_parked("j2-worker-0")

    scheduler.restore([Pod("j2-worker-1", "j2", "worker", seq=29, job_seq=2)], None, {"j2-worker-1": "n1"})
    scheduler.schedule(60.0)

    assert not scheduler.queue.is_parked("j2-worker-0")
    assert scheduler.pending["j2-worker-0"] == ("QuorumFirst: keeping 2 free slots for job j2's quorum "
                                                "(scheduler, server)")
