"""Property: under `gang` and `gang-strict` no state is ever a deadlock, and every job completes.

Random workloads: 1-6 jobs of one scheduler, 1-3 servers and 1-4 workers, each needing its minimum set or its
whole set; the pods arrive in a random interleaving, a few at a time, with a scheduling call after each batch and
random time steps (shorter and longer than the backoffs and the Permit timeout); 1-4 nodes of 1-6 slots, every
job fitting the cluster alone; and the same on nodes of cpu instead of slots, each job's pods asking one cpu amount.
A job is *complete* when its quorum (its minimum set, or its whole set when the
group requires it) is bound and all its pods have arrived; it then runs for 0-3 steps and is deleted, pods and
all, as the controller does when a job finishes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_fork import Node, Pod, PodGroup, Scheduler
from scheduler_fork.framework import job_pods

MAX_STEPS = 2000


@dataclass(frozen=True)
class Workload:
    groups: dict  # job -> PodGroup
    run_steps: dict  # job -> steps the job runs once complete
    sizes: dict  # job -> pods
    batches: list  # lists of pods, in arrival order
    nodes: list  # Node
    steps_s: list  # time steps, cycled
    seed: int  # the scheduler's seed


@st.composite
def workloads(draw):
    n_jobs = draw(st.integers(1, 6))
    templates, groups, run_steps, sizes = [], {}, {}, {}
    for j in range(n_jobs):
        job = f"j{j}"
        pods = job_pods(job, 0, servers=draw(st.integers(1, 3)), workers=draw(st.integers(1, 4)))
        templates += pods
        groups[job] = PodGroup(job, whole=len(pods) if draw(st.booleans()) else None)
        run_steps[job] = draw(st.integers(0, 3))
        sizes[job] = len(pods)
    order = draw(st.permutations(templates))
    first: dict[str, int] = {}
    arrivals = []
    for seq, pod in enumerate(order):
        first.setdefault(pod.job, seq)
        arrivals.append(Pod(pod.name, pod.job, pod.role, seq, first[pod.job]))
    batches = []
    while arrivals:
        size = draw(st.integers(1, 4))
        batches.append(arrivals[:size])
        arrivals = arrivals[size:]
    capacities = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    capacities[-1] += max(0, max(sizes.values()) - sum(capacities))  # every job fits the cluster alone
    nodes = [Node(f"n{i}", slots) for i, slots in enumerate(capacities)]
    steps_s = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, 7.0, 40.0]), min_size=1, max_size=6))
    return Workload(groups, run_steps, sizes, batches, nodes, steps_s, draw(st.integers(0, 3)))


def run_to_the_end(profile: str, work: Workload) -> list[str]:
    """Play the workload; check the invariants after every call; return the jobs in the order they finished."""
    scheduler = Scheduler(work.nodes, profile=profile, seed=work.seed)
    batches = list(work.batches)
    arrived = dict.fromkeys(work.groups, 0)
    complete_at: dict[str, int] = {}
    finished: list[str] = []
    now = 0.0
    for step in range(MAX_STEPS):
        if len(finished) == len(work.groups):
            return finished
        if batches:
            for pod in batches.pop(0):
                scheduler.submit([pod], work.groups[pod.job])
                arrived[pod.job] += 1
        scheduler.schedule(now)

        scheduler.state.check()  # slots never over-committed, indexes consistent
        deadlock = scheduler.deadlock(now)
        assert deadlock is None, deadlock.reason
        if profile == "gang-strict":  # all or nothing: no job holds bound pods it cannot run with
            for ledger in scheduler.state.jobs.values():
                assert ledger.n_bound == 0 or ledger.runnable, ledger

        for job in work.groups:
            ledger = scheduler.state.jobs.get(job)
            if job in finished or ledger is None or arrived[job] < work.sizes[job]:
                continue
            if ledger.n_bound and ledger.runnable:
                complete_at.setdefault(job, step)
                if step - complete_at[job] >= work.run_steps[job]:
                    scheduler.delete(sorted(ledger.names))  # the job ran and finished
                    finished.append(job)
        now += work.steps_s[step % len(work.steps_s)]
    raise AssertionError(f"after {MAX_STEPS} steps, finished only {finished}; pending: {dict(scheduler.pending)}")


@st.composite
def resource_workloads(draw):
    """As `workloads`, on nodes of cpu and pods (no slot cap) and with each job's pods asking one cpu amount:
    pods of a job alike, as Coach's functions of one job are; the largest node holds any job alone."""
    work = draw(workloads())
    cpu_m = {job: draw(st.sampled_from([250, 500, 1000, 1500])) for job in work.groups}
    batches = [[replace(pod, requests={"cpu": cpu_m[pod.job]}) for pod in batch] for batch in work.batches]
    nodes = [Node(f"n{i}", allocatable={"cpu": draw(st.sampled_from([1000, 2000, 3000])), "pods": 110})
             for i in range(draw(st.integers(1, 4)))]
    biggest = max(cpu_m[job] * work.sizes[job] for job in work.groups)
    nodes[-1] = Node(nodes[-1].name, allocatable={"cpu": max(biggest, 1000), "pods": 110})
    return replace(work, batches=batches, nodes=nodes)


@settings(derandomize=True, max_examples=100, deadline=None)
@given(resource_workloads())
def test_gang_never_deadlocks_and_completes_every_job_on_cpu(work):
    assert sorted(run_to_the_end("gang", work)) == sorted(work.groups)


@settings(derandomize=True, max_examples=100, deadline=None)
@given(resource_workloads())
def test_gang_strict_never_deadlocks_and_completes_every_job_on_cpu(work):
    assert sorted(run_to_the_end("gang-strict", work)) == sorted(work.groups)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(workloads())
def test_gang_strict_never_deadlocks_and_completes_every_job(work):
    assert sorted(run_to_the_end("gang-strict", work)) == sorted(work.groups)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(workloads())
def test_gang_never_deadlocks_and_completes_every_job(work):
    assert sorted(run_to_the_end("gang", work)) == sorted(work.groups)
