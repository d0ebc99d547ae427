"""What a cluster-level policy (the simulator's) sees and answers: plain data, no clock, no I/O.

A policy is asked once per scheduling round with a `ClusterSnapshot` and answers a `Grant` (GPUs and total batch
size) for every job it wants to run; a job it leaves out gets nothing this round (it waits, or is preempted).
The run level (the workers and servers of a `coach run`) has its own: coach.policy.run_policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple, Protocol


def packed_nodes(gpus: int, gpus_per_node: int) -> int:
    """Nodes `gpus` replicas span when packed onto as few nodes as possible (placement is the engine's job)."""
    if gpus <= 0:
        return 0
    return -(-gpus // max(gpus_per_node, 1))


class AppModel(Protocol):
    """How one application trains, from its measured traces (coach.simulator.apps)."""

    name: str
    init_batch: int  # M0: the batch size that progress is counted in (statistical efficiency 1)
    max_batch: int  # the largest total batch size the application may use
    max_local_batch: int  # the largest batch one GPU holds

    def throughput(self, gpus: int, nodes: int, batch: int) -> float:
        """Samples per second with `gpus` replicas over `nodes` nodes at total batch size `batch` (0 if 0 GPUs)."""
        ...

    def efficiency(self, batch: int, progress: float) -> float:
        """Statistical efficiency in (0, 1] of `batch` against `init_batch` at this progress (M0-samples done)."""
        ...

    def best_batch(self, gpus: int, nodes: int, progress: float) -> tuple[int, float]:
        """(total batch size, goodput in M0-samples/s) that maximises goodput on this allocation."""
        ...


class ClusterJobView(NamedTuple):
    """One active (arrived, unfinished) job, as a policy sees it. A named tuple: the engine makes one per running
    job every round (millions over the Philly trace), and a tuple is made in a fraction of a frozen dataclass's
    time; it is as immutable."""

    name: str
    arrival_s: float  # simulated seconds since the start of the workload
    app: AppModel
    requested_gpus: int  # what the user asked for (the workload's num_replicas)
    requested_batch: int  # the user's total batch size
    progress: float  # M0-samples done so far
    total_progress: float  # M0-samples to finish
    attained_gpu_s: float  # GPU-seconds the job has held so far (Tiresias's attained service)
    gpus: int  # GPUs it holds now (0: waiting)
    batch: int  # its current total batch size
    remaining_budget: float  # money left (the `coach` policy spends within it); inf when unlimited
    max_gpus: int  # the most GPUs it may use (its app's and the user's limits)

    @property
    def remaining_progress(self) -> float:
        return max(self.total_progress - self.progress, 0.0)


@dataclass(frozen=True)
class ClusterSnapshot:
    now_s: float  # simulated seconds since the start of the workload
    node_gpus: tuple[int, ...]  # GPUs of every node
    price_per_gpu_s: float  # money per GPU-second
    interval_s: float  # the length of a scheduling round
    jobs: tuple[ClusterJobView, ...]  # active jobs in arrival order (ties: by name)
    # the same jobs by name, when whoever builds the snapshot keeps them so (the engine, for a queue of thousands);
    # read it during the call it is given to, not later
    index: Mapping[str, ClusterJobView] | None = field(default=None, compare=False, repr=False)

    @property
    def jobs_by_name(self) -> Mapping[str, ClusterJobView]:
        """The jobs by name: the given index, else built (once per call: ask once per round)."""
        return self.index if self.index is not None else {job.name: job for job in self.jobs}

    @property
    def total_gpus(self) -> int:
        return sum(self.node_gpus)

    @property
    def gpus_per_node(self) -> int:
        return max(self.node_gpus, default=0)


class Grant(NamedTuple):
    """What a policy gives a job for the round (a named tuple, as the views: policies make one per job per round)."""

    gpus: int  # >= 1
    batch: int  # total batch size, >= gpus


class ClusterPolicy(Protocol):
    """Decides every round; may keep its own deterministic state between rounds (round-robin's turn).

    An elastic policy sees every active job each round and its grants fit the cluster. A rigid one (`elastic`
    False, like `fifo`) is asked only about jobs without a grant, and its grants are requests that queue at the
    scheduler, as live: they may exceed the free GPUs, and the scheduler profile decides who runs first."""

    elastic: bool  # True when it may change a running job's GPUs (rounds cannot be skipped)

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        """GPUs and batch size for the jobs to run; see the class docstring for the total."""
        ...


#: A policy's constructor: seed -> a fresh ClusterPolicy for one simulation.
ClusterPolicyFactory = Callable[[int], ClusterPolicy]
