"""One `coach simulate`: read the workload, the applications' traces and the cluster, simulate, name the run.

The edge of the simulator: files are read here and nowhere below. Everything that decides (policies, placement,
the engine) receives plain data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, UTC
from pathlib import Path
from typing import Callable

from threadpoolctl import threadpool_limits

from coach.domain.cluster import ClusterSpec, NodeSpec
from coach.inputs.cluster import load_cluster
from coach.simulator.apps import App, job_total_progress, load_apps
from coach.simulator.engine import RESTART_S, Outcome, Simulator
from coach.simulator.policies import CLUSTER_POLICIES
from coach.simulator.results import START_S
from coach.simulator.view import packed_nodes
from coach.simulator.workloads import SimJob, WorkloadError, load_workload

#: Money per GPU-second of a `--cluster NxG` node: 3 per GPU-hour, an on-demand cloud GPU's order of magnitude.
PRICE_PER_GPU_S = 3.0 / 3600
SHAPE = re.compile(r"([1-9][0-9]{0,4})x([1-9][0-9]{0,3})")
MAX_SHAPE_GPUS = 1_000_000  # also the most GPUs a cluster file may hold in all
#: The latest simulated second results can date (9999-12-31, the last day `datetime` knows).
MAX_SIMULATED_S = datetime(9999, 12, 31, tzinfo=UTC).timestamp() - START_S


class SimulationInputError(ValueError):
    """A one-line problem with an input of `coach simulate` (file and field named)."""


def cluster_from(argument: str) -> ClusterSpec:
    """`16x4` (16 nodes of 4 GPUs) or a cluster file (the format of `coach run --cluster`: slots are GPUs)."""
    shape = SHAPE.fullmatch(argument)
    if shape:
        nodes, gpus = int(shape[1]), int(shape[2])
        if nodes * gpus > MAX_SHAPE_GPUS:
            raise SimulationInputError(f"--cluster: {argument}: at most {MAX_SHAPE_GPUS} GPUs")
        return ClusterSpec(argument, tuple(NodeSpec(f"n{i:02d}", gpus, PRICE_PER_GPU_S) for i in range(nodes)),
                           source=f"--cluster {argument}")
    if re.fullmatch(r"[0-9]+x[0-9]+", argument):
        raise SimulationInputError(f"--cluster: {argument}: expected NODESxGPUS with 1..99999 nodes and 1..9999 GPUs")
    cluster = load_cluster(argument)
    if cluster.total_slots > MAX_SHAPE_GPUS:
        raise SimulationInputError(f"{argument}: nodes: at most {MAX_SHAPE_GPUS} GPUs (slots) in all, got "
                                   f"{cluster.total_slots}")
    return cluster


def traces_dir_for(workload: Path, traces: Path | None) -> Path:
    """Where the applications' traces are: --traces, else beside the workload (`traces/` of the Pollux layout).
    A folder with any application counts: a missing one is then named by the check of the workload's applications."""
    candidates = [traces] if traces is not None else [workload.parent, workload.parent.parent / "traces"]
    for candidate in candidates:
        if candidate is not None and candidate.is_dir() and any(candidate.glob("*/placements.csv")):
            return candidate
    where = traces if traces is not None else workload.parent.parent / "traces"
    raise SimulationInputError(f"{where}: (traces): no application traces here (expected <app>/placements.csv); "
                               f"give the folder with --traces")


def name_part(text: str, max_bytes: int) -> str:
    """`text` as part of a folder name: control characters (a newline would split the printed path) as `_`, and at
    most `max_bytes` bytes of UTF-8, cut between characters, so that the whole name stays within the file system's
    255 bytes however many bytes each character takes."""
    cleaned = "".join("_" if ord(ch) < 32 or ord(ch) == 127 else ch for ch in text)
    return cleaned.encode("utf-8", errors="replace")[:max_bytes].decode("utf-8", errors="ignore")


@dataclass(frozen=True)
class Settings:
    workload: Path
    cluster: ClusterSpec
    policy: str
    scheduler: str
    interval_s: float = 60.0
    seed: int = 0
    traces: Path | None = None
    budget_factor: float | None = None  # each job may spend this many times its cost at its request; None: no limit
    restart_s: float = RESTART_S  # seconds a (re)started job loads its checkpoint before training

    @property
    def run_id(self) -> str:
        """Deterministic, so that the same command writes the same summary."""
        return f"sim-{name_part(self.workload.stem, 100)}-{self.policy}-{self.scheduler}-s{self.seed}"

    def as_dict(self) -> dict:
        return {"workload": str(self.workload), "cluster": self.cluster.name, "gpus": self.cluster.total_slots,
                "policy": self.policy, "scheduler": self.scheduler, "interval_s": self.interval_s, "seed": self.seed,
                "budget_factor": self.budget_factor, "restart_s": self.restart_s}


def _budgets(jobs: list[SimJob], apps, totals, price_per_gpu_s: float, factor: float, gpus_per_node: int) -> dict:
    """factor x what the job costs on its own request, packed, at its own batch size (mid-way efficiency)."""
    budgets = {}
    for job in jobs:
        app = apps[job.app]
        goodput = app.throughput(job.gpus, packed_nodes(job.gpus, gpus_per_node), job.batch) * app.efficiency(job.batch, totals[job.name] / 2)
        seconds = totals[job.name] / goodput if goodput > 0 else 0.0
        budgets[job.name] = factor * price_per_gpu_s * job.gpus * seconds
    return budgets


def _inputs(settings: Settings) -> tuple[list[SimJob], dict[str, App]]:
    """The workload's jobs and the applications they run; WorkloadError / AppTraceError when either is bad."""
    jobs = load_workload(settings.workload, seed=settings.seed)
    apps = load_apps(traces_dir_for(settings.workload, settings.traces))
    unknown = sorted({job.app for job in jobs} - set(apps))
    if unknown:
        raise WorkloadError(f"{settings.workload}: application: no traces for {', '.join(unknown)} (no "
                            f"<traces>/<app>/placements.csv)")
    return jobs, apps


def check_inputs(settings: Settings) -> None:
    """Read and check what `simulate` would read before its first round: the workload, its applications' traces
    and the policy (a learned one's model file). WorkloadError, AppTraceError or ModelFileError, one line each; a
    sweep checks every run's before it runs any."""
    _inputs(settings)
    CLUSTER_POLICIES[settings.policy](settings.seed)


def _simulate(settings: Settings, on_round: Callable[[float, int], None] | None) -> tuple[Outcome, int]:
    jobs, apps = _inputs(settings)
    per_node = max(node.slots for node in settings.cluster.nodes)
    totals = {job.name: job_total_progress(job, apps[job.app], per_node) for job in jobs}
    cluster = settings.cluster
    price = max(node.price_per_slot_s for node in cluster.nodes)
    budgets = None if settings.budget_factor is None else _budgets(
        jobs, apps, totals, price, settings.budget_factor, per_node)
    policy = CLUSTER_POLICIES[settings.policy](settings.seed)
    if hasattr(policy, "restart_s"):  # a policy that prices restarts (pollux) prices the simulated ones
        policy.restart_s = settings.restart_s
    simulator = Simulator(jobs, apps, totals, cluster, policy, settings.scheduler, settings.interval_s, settings.seed,
                          budgets, restart_s=settings.restart_s, on_round=on_round)
    outcome = simulator.run()
    latest_s = max((r.finished_s if r.finished_s is not None else r.updated_s for r in outcome.jobs), default=0.0)
    if not latest_s <= MAX_SIMULATED_S:  # results date every event: refuse before writing any of them
        raise SimulationInputError(f"{settings.workload}: time: the simulation reached {latest_s:.3g} s, later "
                                   f"than results can date (year 9999)")
    return outcome, len(jobs)


def simulate(settings: Settings, on_round: Callable[[float, int], None] | None = None) -> tuple[Outcome, int]:
    """Run the simulation; (outcome, number of jobs). WorkloadError / SimulationInputError for bad input.

    On one BLAS thread: the simulator's numpy and scipy calls are tiny, and OpenBLAS's thread pool, spinning for
    cores that other processes hold, made a single interpolation take seconds on a loaded 2-core machine."""
    with threadpool_limits(limits=1):
        return _simulate(settings, on_round)
