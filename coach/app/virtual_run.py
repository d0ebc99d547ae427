"""A run in virtual time: the same lifecycles, run-level policy and scheduler_fork placement as `coach run`, over the
virtual platform (coach.platforms.virtual) and driver (coach.drivers.virtual). What the run-level dl2 trainer
(coach.dl2.learn_run), the drivers' contract suite and the benchmarks build on; `coach simulate` is the cluster
simulator (coach.simulator), a world of its own.

Side effects: writes the same results folder as `coach run` when `run_dir` is given; nothing otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from coach.app.compose import PLACEMENTS, Site
from coach.app.run_policies import RUN_POLICIES
from coach.domain.cluster import ClusterSpec
from coach.domain.jobs import JobSpec
from coach.domain.records import JobOutcome, summary_dict
from coach.drivers.core import Ports
from coach.drivers.fanout import SequentialFanOut
from coach.drivers.virtual import VirtualDriver
from coach.lifecycle import events as ev
from coach.lifecycle.job import JobLifecycle
from coach.policy.history import fill_outcome
from coach.policy.run_policy import DEFAULT_POLICY, RunClusterView, RunPolicy
from coach.platforms.virtual import VirtualJobModel, VirtualPlatform
from coach.storage.checkpoints import MemoryCheckpointStore
from coach.storage.results import MemorySink, ResultLog, write_json_atomic
from coach.views.terminal import QuietView

START_S = 1_700_000_000.0  # a fixed virtual start, so that two runs of the same input are identical


@dataclass
class VirtualRun:
    summary: dict  # what summary.json holds
    records: Mapping[str, list[dict]] = field(default_factory=dict)  # job -> its log lines (in-memory runs)
    events: int = 0  # events the driver delivered
    platform: VirtualPlatform | None = None


def run_virtual(specs: Sequence[JobSpec], cluster: ClusterSpec, policy: str = DEFAULT_POLICY,
                scheduler: str = "gang", models: Mapping[str, VirtualJobModel] | None = None,
                fail: frozenset[tuple[str, int, int]] = frozenset(), placement_timeout_s: float = 30.0,
                run_dir: Path | None = None, run_id: str = "simulated",
                stop_at_s: float | None = None, deciding: RunPolicy | None = None) -> VirtualRun:
    """Every job from START_S in virtual time; `stop_at_s` (seconds after the start) sends a stop to all.
    `deciding`: a policy object instead of the registry's `policy` (one being trained; `policy` still names it in
    the summary)."""
    store = MemoryCheckpointStore()
    platform = VirtualPlatform(store, dict(models or {}), fail)
    sinks = ({spec.name: ResultLog(run_dir / f"{spec.name}.jsonl") for spec in specs} if run_dir
             else {spec.name: MemorySink() for spec in specs})
    chosen = deciding if deciding is not None else RUN_POLICIES[policy]
    outcomes = {spec.name: JobOutcome(submitted_s=START_S, budget=spec.budget) for spec in specs}

    def finished(lc: JobLifecycle, now_s: float) -> None:
        fill_outcome(outcomes[lc.spec.name], lc.history, now_s)

    ports = Ports(placement=PLACEMENTS["scheduler_fork"](cluster, scheduler, platform, Site()), platform=platform,
                  store=store, sinks=sinks, view=QuietView(run_id))
    lifecycles = [JobLifecycle(spec, run_id, cluster, chosen.calibration(spec), placement_timeout_s)
                  for spec in specs]
    view = RunClusterView(cluster.total_slots, max(n.price_per_slot_s for n in cluster.nodes))
    driver = VirtualDriver(lifecycles, chosen, view, ports, SequentialFanOut(), finished, start_s=START_S)
    if stop_at_s is not None:
        driver.stop_at(START_S + stop_at_s)
    driver.run([(spec.name, ev.Start(START_S)) for spec in specs])
    summary = summary_dict(run_id, START_S, outcomes, {"cluster": cluster.name, "scheduler": scheduler,
                                                       "policy": policy})
    if run_dir:
        write_json_atomic(run_dir / "summary.json", summary)
    records = {} if run_dir else {name: sink.records for name, sink in sinks.items()}
    return VirtualRun(summary, records, driver.events, platform)
