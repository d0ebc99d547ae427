"""Small helpers every cluster-level policy shares: packing, batch limits, grant checks. Pure.

Why it exists: the policies differ in who gets how many GPUs, not in how a GPU count becomes a legal Grant;
keeping that in one place means every policy respects the same application limits. It sits beside the policies'
package, not in it, so that a policy registered there from elsewhere (coach.dl2.cluster_policy) imports it without
running the registry.
"""

from __future__ import annotations

from typing import Mapping

from coach.simulator.view import AppModel, ClusterSnapshot, Grant, ClusterJobView


def batch_bounds(app: AppModel, gpus: int) -> tuple[int, int]:
    """Smallest and largest legal total batch on `gpus` GPUs: [max(init, gpus), max(max_batch, gpus)].

    A per-GPU batch above max_local_batch is legal: the GPU accumulates gradients over several micro-batches, as
    the Pollux artifact does (for Pollux's own batch choice and for the user's batch on fewer GPUs) and as the
    application model prices it (slower steps). Policies that must stay in GPU memory use `memory_bounds`.
    """
    high = max(app.max_batch, gpus)
    low = min(max(app.init_batch, gpus), high)
    return low, high


def memory_bounds(app: AppModel, gpus: int) -> tuple[int, int]:
    """Like `batch_bounds`, but every GPU holds its whole share at once: at most max_local_batch per GPU."""
    low, high = batch_bounds(app, gpus)
    high = max(min(high, app.max_local_batch * gpus), gpus)
    return min(low, high), high


def fit_batch(app: AppModel, gpus: int, batch: int) -> int:
    """`batch` moved into the legal range for `gpus` GPUs (e.g. beyond max_batch, or fewer than one per GPU)."""
    low, high = batch_bounds(app, gpus)
    return min(max(int(batch), low), high)


def gpu_cap(job: ClusterJobView, total_gpus: int) -> int:
    """The most GPUs a job may get this round: its own limit, never more than the cluster."""
    return max(min(job.max_gpus, total_gpus), 0)


def requested_gpus(job: ClusterJobView, total_gpus: int) -> int:
    """What the user asked for, capped so that a job asking for more than the cluster can still run."""
    return max(min(job.requested_gpus, gpu_cap(job, total_gpus)), 1)


def requested_grant(job: ClusterJobView, gpus: int) -> Grant:
    """`gpus` GPUs at the user's batch size (fitted to the GPUs): what non-batch-tuning policies grant."""
    return Grant(gpus, fit_batch(job.app, gpus, job.requested_batch))


def stage(job: ClusterJobView) -> float:
    """What a job's goodputs depend on besides its application: the epoch of its progress when the application
    says (App.epoch: statistical efficiency changes only between epochs, and best_batch is cached per epoch), else
    the progress itself. Policies key the goodputs they keep from round to round by it."""
    epoch = getattr(job.app, "epoch", None)
    return job.progress if epoch is None else epoch(job.progress)


def check_grants(snapshot: ClusterSnapshot, grants: Mapping[str, Grant], queued: bool = False) -> None:
    """Raise ValueError naming the first grant that breaks the ClusterPolicy contract (tests and the engine use it).
    `queued`: the grants are requests to the scheduler's queue (a rigid policy's), which may exceed the cluster."""
    _check_each(snapshot, grants)
    if not queued:
        _check_total(snapshot, grants)


class GrantChecker:
    """check_grants for one simulation, remembering the grant each job last passed with: a job's limits (its
    application, its GPU limit) do not change while it is active, so the same grant passes again and only new ones
    are checked in full (the engine checks every round's grants: tens of millions over the Philly trace)."""

    def __init__(self) -> None:
        self.passed: dict[str, Grant] = {}

    def check(self, snapshot: ClusterSnapshot, grants: Mapping[str, Grant], queued: bool = False) -> None:
        jobs, passed = snapshot.jobs_by_name, self.passed
        fresh = {name: grant for name, grant in grants.items() if passed.get(name) != grant or name not in jobs}
        _check_each(snapshot, fresh)
        if not queued:
            _check_total(snapshot, grants)
        passed.update(fresh)


def _check_each(snapshot: ClusterSnapshot, grants: Mapping[str, Grant]) -> None:
    jobs = snapshot.jobs_by_name
    for name, grant in grants.items():
        job = jobs.get(name)
        if job is None:
            raise ValueError(f"grant for unknown job {name!r}")
        if grant.gpus < 1 or grant.gpus > job.max_gpus:
            raise ValueError(f"job {name!r}: gpus {grant.gpus} outside [1, {job.max_gpus}]")
        low, high = batch_bounds(job.app, grant.gpus)
        if not low <= grant.batch <= high:
            raise ValueError(f"job {name!r}: batch {grant.batch} outside [{low}, {high}] on {grant.gpus} GPUs")


def _check_total(snapshot: ClusterSnapshot, grants: Mapping[str, Grant]) -> None:
    total = sum(grant.gpus for grant in grants.values())
    if total > snapshot.total_gpus:
        raise ValueError(f"grants total {total} GPUs > {snapshot.total_gpus} in the cluster")
