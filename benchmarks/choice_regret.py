"""Choice regret of dynamic jobs: do they settle on the fastest counts they could afford? (issue 13, part 3)

Choice regret of one job = epoch time of the counts it settles on (those of its last epoch) / the best epoch
time at any counts it could afford (within its max_workers/max_servers and budget) - 1. Goal: <= 3% for LeNet
and ResNet-18.

To be cheap and repeatable it drives the real lifecycle, the `coach` policy and scheduler_fork placement in
virtual time (the pieces of coach.app.virtual_run.run_virtual) over measured epoch-time tables, with seeded
measurement noise on every epoch (calibration mini-epochs too):
- `lenet`: a measured table kept in this script (LENET_TABLE: full LeNet epochs at ten (w, s), 2 cores);
- every `--points` file written by `benchmarks/fit_accuracy.py measure` (e.g. benchmarks/data/
  fit_points_resnet18.json): the median measured epoch time per point.
Counts a table lacks take the time of the slowest table point they contain (w' <= w, s' <= s): on two cores
more functions never made an epoch faster than the slowest smaller configuration did. An epoch at fraction q of
the data takes fixed + (T - fixed) q, so calibration mini-epochs scale back to T as Coach assumes.

Each case runs under two policies: `before`, the fit alone (CoachPolicy(measured=False): the decision before
issue 13), and `after`, the default `coach` policy (measured speeds override the fit; settling rule). Every
job runs max_epochs (target_loss 0).

    .venv/bin/python benchmarks/choice_regret.py                       # lenet, 20 seeds, 3% noise
    .venv/bin/python benchmarks/choice_regret.py --points benchmarks/data/fit_points_resnet18.json
    .venv/bin/python benchmarks/choice_regret.py --seeds 50 --noise 0.05 --out results.jsonl

Prints one row per (table, limits, policy): mean, median and max regret of the settled counts, the share of jobs
within 3%, the regret against the best counts each job itself ran, the epochs spent away from the settled counts,
the count changes per job, the latest epoch at which any job changed its counts, and the settled counts seen.
`--out` appends one JSON line per case (append-only, no NaN). Bad input: one line naming the file and field, exit
code 2.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import random
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coach.app.compose import PLACEMENTS, Site  # noqa: E402
from coach.app.virtual_run import START_S  # noqa: E402
from coach.domain.cluster import ClusterSpec, NodeSpec  # noqa: E402
from coach.domain.contracts import EpochRequest  # noqa: E402
from coach.domain.jobs import JobSpec  # noqa: E402
from coach.drivers.core import Ports  # noqa: E402
from coach.drivers.fanout import SequentialFanOut  # noqa: E402
from coach.drivers.virtual import VirtualDriver  # noqa: E402
from coach.inputs.jobs import load_job  # noqa: E402
from coach.lifecycle import events as ev  # noqa: E402
from coach.lifecycle.job import JobLifecycle  # noqa: E402
from coach.estimates.speed_forms import CHOSEN_FORM  # noqa: E402
from coach.platforms.virtual import VirtualJobModel, VirtualPlatform  # noqa: E402
from coach.policy.history import full_epoch_time_s  # noqa: E402
from coach.policy.run_policy import RunClusterView, CoachPolicy, RunPolicy  # noqa: E402
from coach.storage.checkpoints import MemoryCheckpointStore  # noqa: E402
from coach.storage.results import MemorySink  # noqa: E402
from coach.views.terminal import QuietView  # noqa: E402

GOAL = 0.03
#: The built-in LeNet table, kept in this script: full-epoch seconds at (workers, servers) that
#: `fit_accuracy.py measure` measured on 2 cores.
LENET_TABLE = {(1, 1): 1.940, (1, 2): 1.937, (2, 1): 1.429, (2, 2): 1.515, (3, 1): 1.602, (1, 3): 1.953,
               (3, 2): 1.571, (2, 3): 1.417, (4, 1): 1.670, (3, 3): 1.551}
#: The same measurement's calibration at the four points it sampled (before (3,1) was a calibration point): what
#: the calibration mini-epochs said, scaled. Points calibrated that this lacks, (3,1), take the table's full epoch
#: time.
LENET_CALIBRATION = {(1, 1): 1.993, (1, 2): 2.039, (2, 1): 1.412, (2, 2): 1.435}
LENET_FIXED_S = 0.35  # the per-epoch fixed part, as benchmarks/epoch_overhead.py measures it
#: One node, as the default cluster, with slots to spare: the job's limits, not capacity, bound the choice.
CLUSTER = ClusterSpec("regret-bench", (NodeSpec("node-0", 16, 0.0001),))
POLICIES: Mapping[str, RunPolicy] = {"before": CoachPolicy(measured=False), "after": CoachPolicy()}


class BadInput(Exception):
    """A points file that cannot be used: one line naming the file and the field."""


@dataclass(frozen=True)
class Table:
    name: str
    job: Path  # the job file whose model and hyper-parameters the table measured
    times_s: Mapping[tuple[int, int], float]  # full-epoch seconds per measured (workers, servers)
    fixed_s: float  # per-epoch part that does not scale with the data fraction
    #: what a calibration mini-epoch measured there, scaled to a full epoch (as coach.policy.history does): the
    #: mini-epochs of a real run are biased against full epochs, and the first decision rests on them
    calibration_s: Mapping[tuple[int, int], float] = field(default_factory=dict)

    def epoch_time_s(self, workers: int, servers: int) -> float:
        """The table's time, or for counts it lacks the slowest table point they contain."""
        if (workers, servers) in self.times_s:
            return self.times_s[(workers, servers)]
        inside = [t for (w, s), t in self.times_s.items() if w <= workers and s <= servers]
        return max(inside) if inside else max(self.times_s.values())


@dataclass(frozen=True)
class NoisyTableModel(VirtualJobModel):
    """coach.platforms.virtual's VirtualJobModel with epoch times from a table, noisy per step and seeded."""

    table: Table | None = None
    seed: int = 0
    noise: float = 0.0  # standard deviation of the relative noise on every epoch
    state: dict = field(default_factory=dict, compare=False)  # {"step": the step being run}, set by NoisyPlatform

    def _factor(self) -> float:
        rng = random.Random(f"{self.table.name}:{self.seed}:{self.state.get('step', 0)}")
        return max(1.0 + self.noise * rng.gauss(0.0, 1.0), 0.5)

    def compute_s(self, workers: int, servers: int, fraction: float) -> float:
        full = self.table.epoch_time_s(workers, servers)
        if fraction < 1:
            full = self.table.calibration_s.get((workers, servers), full)
        return max(full - self.table.fixed_s, 0.0) * fraction * self._factor()

    def epoch_s(self, workers: int, servers: int, fraction: float) -> float:
        return self.table.fixed_s * self._factor() + self.compute_s(workers, servers, fraction)


class NoisyPlatform(VirtualPlatform):
    """The simulated platform, telling each job's model which step it runs (so every epoch draws its noise)."""

    def invoke(self, ref, request, timeout_s):
        if isinstance(request, EpochRequest):
            self.models[ref.fid.job].state["step"] = request.step
        return super().invoke(ref, request, timeout_s)


def run_job(spec: JobSpec, table: Table, policy: RunPolicy, seed: int, noise: float) -> list[dict]:
    """One dynamic job alone in virtual time: its training log lines (as coach.app.virtual_run composes a run)."""
    store = MemoryCheckpointStore()
    model = NoisyTableModel(fixed_s=table.fixed_s, table=table, seed=seed, noise=noise)
    platform = NoisyPlatform(store, {spec.name: model})
    sink = MemorySink()
    ports = Ports(placement=PLACEMENTS["scheduler_fork"](CLUSTER, "gang", platform, Site()), platform=platform, store=store,
                  sinks={spec.name: sink}, view=QuietView("regret"))
    lifecycle = JobLifecycle(spec, "regret", CLUSTER, policy.calibration(spec), 30.0)
    driver = VirtualDriver([lifecycle], policy, RunClusterView(CLUSTER.total_slots, 0.0001), ports,
                           SequentialFanOut(), lambda lc, now_s: None, start_s=START_S)
    driver.run([(spec.name, ev.Start(START_S))])
    if sink.records[-1].get("stop_reason") != "max_epochs":  # every job must run to max_epochs
        raise RuntimeError(f"seed {seed}: the job ended with {sink.records[-1].get('stop_reason')!r}")
    return [r for r in sink.records if r.get("phase") == "training"]


def affordable_best_s(spec: JobSpec, table: Table) -> float:
    """The best epoch time at counts within the job's limits whose whole run the budget pays for."""
    best = math.inf
    for workers in range(1, (spec.max_workers or 4) + 1):
        for servers in range(1, (spec.max_servers or 3) + 1):
            time_s = table.epoch_time_s(workers, servers)
            cost = (workers + servers + 1) * time_s * CLUSTER.nodes[0].price_per_slot_s * spec.max_epochs
            if cost <= spec.budget:
                best = min(best, time_s)
    return best


def case(table: Table, limits: tuple[int, int], policy_name: str, seeds: int, noise: float) -> dict:
    """Regret of `seeds` seeded jobs on one table with one (max_workers, max_servers) under one policy."""
    base = load_job(table.job)
    spec = replace(base, name=f"{table.name}-dynamic", workers=None, servers=None, max_workers=limits[0],
                   max_servers=limits[1], target_loss=0.0, max_epochs=max(base.max_epochs, 15), budget=1e6)
    best_s = affordable_best_s(spec, table)
    regrets, own, away, changes, last_change, settled = [], [], [], [], [], collections.Counter()
    for seed in range(seeds):
        epochs = run_job(spec, table, POLICIES[policy_name], seed, noise)
        counts = [(r["workers"], r["servers"]) for r in epochs]
        final = counts[-1]
        settled[final] += 1
        regrets.append(table.epoch_time_s(*final) / best_s - 1)
        own.append(table.epoch_time_s(*final) / min(table.epoch_time_s(*c) for c in set(counts)) - 1)
        away.append(sum(c != final for c in counts))
        changes.append(sum(a != b for a, b in zip(counts, counts[1:])))
        last_change.append(max((i + 2 for i, (a, b) in enumerate(zip(counts, counts[1:])) if a != b), default=1))
    return {"table": table.name, "max_workers": limits[0], "max_servers": limits[1], "policy": policy_name,
            "speed_form": CHOSEN_FORM, "seeds": seeds, "noise": noise, "epochs": spec.max_epochs,
            "best_s": round(best_s, 4), "mean_regret": statistics.fmean(regrets),
            "mean_regret_vs_run": statistics.fmean(own), "max_regret_vs_run": max(own),
            "median_regret": statistics.median(regrets), "max_regret": max(regrets),
            "within_goal": sum(r <= GOAL for r in regrets) / len(regrets),
            "epochs_away": statistics.fmean(away), "changes": statistics.fmean(changes),
            "last_change_epoch": max(last_change),
            "settled": {f"{w}x{s}": n for (w, s), n in settled.most_common()}}


def load_table(path: Path) -> Table:
    """A table from a `fit_accuracy.py measure` file: median epoch time per point, fixed = median(epoch - compute)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise BadInput(f"{path}: (file): {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("points"), list) or not data["points"]:
        raise BadInput(f"{path}: points: expected a non-empty list")
    job = data.get("job")
    if not isinstance(job, str) or not (ROOT / job).is_file():
        raise BadInput(f"{path}: job: expected the path of a job file under {ROOT}")
    times, fixed = {}, []
    for i, point in enumerate(data["points"]):
        where = f"points[{i}]"
        if not isinstance(point, dict):
            raise BadInput(f"{path}: {where}: expected an object")
        workers, servers = point.get("workers"), point.get("servers")
        if not (isinstance(workers, int) and isinstance(servers, int) and workers >= 1 and servers >= 1):
            raise BadInput(f"{path}: {where}.workers: workers and servers must be integers >= 1")
        epoch_s = point.get("epoch_times_s")
        if not (isinstance(epoch_s, list) and epoch_s and all(_positive(t) for t in epoch_s)):
            raise BadInput(f"{path}: {where}.epoch_times_s: expected a non-empty list of positive times")
        times[(workers, servers)] = statistics.median(epoch_s)
        compute = point.get("compute_s") or []
        fixed += [t - c for t, c in zip(epoch_s, compute) if _positive(c) and c < t]
    calibration = {}
    for i, line in enumerate(data.get("calibration") or []):
        try:
            q, epoch_s, compute_s = float(line["data_fraction"]), float(line["epoch_time_s"]), float(line["compute_s"])
            counts = (int(line["workers"]), int(line["servers"]))
        except (KeyError, TypeError, ValueError):
            raise BadInput(f"{path}: calibration[{i}]: expected workers, servers, epoch_time_s, compute_s and "
                           f"data_fraction") from None
        calibration[counts] = full_epoch_time_s(epoch_s, compute_s, q, line.get("warmup_s"))
    model = data.get("model") if isinstance(data.get("model"), str) else path.stem
    return Table(f"{model} ({path.name})", ROOT / job, times, statistics.median(fixed) if fixed else 0.0,
                 calibration)


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def parse_limits(text: str) -> list[tuple[int, int]]:
    limits = []
    for item in text.split(","):
        w, _, s = item.partition("x")
        if not (w.isdigit() and s.isdigit() and int(w) >= 1 and int(s) >= 1):
            raise argparse.ArgumentTypeError(f"expected WxS[,WxS...], e.g. 4x2,3x3; got {text!r}")
        limits.append((int(w), int(s)))
    return limits


def report(rows: Sequence[dict]) -> None:
    print(f"| table | limits | policy | regret mean | median | max | jobs <= {GOAL:.0%} | vs its own runs: mean "
          f"| max | epochs away | changes | last change at epoch | settled on (jobs) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        settled = ", ".join(f"{k} ({n})" for k, n in r["settled"].items())
        print(f"| {r['table']} | {r['max_workers']}x{r['max_servers']} | {r['policy']} | "
              f"{r['mean_regret']:.1%} | {r['median_regret']:.1%} | {r['max_regret']:.1%} | "
              f"{r['within_goal']:.0%} | {r['mean_regret_vs_run']:.1%} | {r['max_regret_vs_run']:.1%} | "
              f"{r['epochs_away']:.1f} | {r['changes']:.1f} | {r['last_change_epoch']} | {settled} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=Path, nargs="*", default=[],
                        help="fit_accuracy.py measure files to use as tables (besides the LeNet table kept here)")
    parser.add_argument("--no-lenet", action="store_true", help="leave out the LeNet table kept in this script")
    parser.add_argument("--limits", type=parse_limits, default=[(4, 2), (3, 3)],
                        help="max_workers x max_servers of the jobs, e.g. 4x2,3x3 (default)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--noise", type=float, default=0.03, help="relative noise on every epoch (default 3%%)")
    parser.add_argument("--out", type=Path, help="append one JSON line per case to this file")
    args = parser.parse_args(argv)
    if args.seeds < 1 or not (0 <= args.noise < 0.5):
        print("choice_regret.py: --seeds must be >= 1 and --noise in [0, 0.5)", file=sys.stderr)
        return 2
    try:
        tables = [] if args.no_lenet else [Table("lenet", ROOT / "jobs" / "lenet-dynamic.yaml", LENET_TABLE,
                                                 LENET_FIXED_S, LENET_CALIBRATION)]
        tables += [load_table(path) for path in args.points]
    except BadInput as error:
        print(f"choice_regret.py: {error}", file=sys.stderr)
        return 2
    rows = []
    for table in tables:
        for limits in args.limits:
            for policy in POLICIES:
                rows.append(case(table, limits, policy, args.seeds, args.noise))
    report(rows)
    if args.out:
        with args.out.open("a") as out:
            for row in rows:
                out.write(json.dumps(row, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
