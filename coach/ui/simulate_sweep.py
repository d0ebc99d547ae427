"""`coach simulate W... --policy a,b,c`: several policies (and workloads) in one command, one comparison.

Every (workload, policy) run is written as a single `coach simulate` writes it (its own folder, `coach compare`
reads it); then a sweep folder gets comparison.json and comparison.md (per run: mean, median and p99 JCT,
makespan, mean queueing, restarts, utilization, GPU time in restart delays, fairness; per policy against the
first on the same workload: the paired tests over jobs; with several workloads, also pooled over all their jobs), jct_cdf.png and utilization.png (every run overlaid).
Fairness: each job's slowdown is its JCT over its time alone at its request (coach.simulator.engine.alone_s);
per run, the mean and worst slowdown and Jain's index over the slowdowns; and Themis's finish-time fairness ρ per
job (coach.simulator.fairness: JCT over the JCT alone on a 1/N share), per run its mean, max and share ρ <= 1.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from coach.ui.errors import fail


def _label(policy: str, workload: Path, workloads: int) -> str:
    return policy if workloads == 1 else f"{policy} @ {workload.stem}"


def _row(label: str, policy: str, workload: Path, outcome, summary: dict, per_node: int, restart_s: float) -> dict:
    from coach.analysis.paired import jain
    from coach.simulator import fairness
    from coach.simulator.engine import alone_s

    stats = summary["stats"]
    jobs = summary["jobs"]
    slowdown = {r.name: jobs[r.name]["jct_s"] / alone_s(r, per_node, restart_s) for r in outcome.jobs
                if jobs[r.name]["jct_s"] is not None}
    queued = [j["queued_s"] for j in jobs.values() if j["queued_s"] is not None]
    end_s = max([r.finished_s for r in outcome.jobs if r.finished_s is not None]
                + [outcome.utilization[-1][0] if outcome.utilization else 0.0])
    rho = fairness.finish_time_fairness(outcome.jobs, outcome.total_gpus, per_node, restart_s, end_s)
    return {
        "label": label, "policy": policy, "workload": str(workload),
        "avg_jct_s": stats["avg_jct_s"], "median_jct_s": stats["median_jct_s"], "p99_jct_s": stats["p99_jct_s"],
        "makespan_s": stats["makespan_s"], "avg_queued_s": round(statistics.fmean(queued), 3) if queued else None,
        "restarts_per_job": stats["restarts_per_job"], "restart_gpu_hours": stats["restart_gpu_hours"],
        "thrash_restarts": stats["thrash_restarts"], "utilization": stats["utilization"],
        "avg_slowdown": round(statistics.fmean(slowdown.values()), 4) if slowdown else None,
        "max_slowdown": round(max(slowdown.values()), 4) if slowdown else None,
        "jain_slowdown": jain(list(slowdown.values())),
        **fairness.summary(rho),
        "jct_s": {name: j["jct_s"] for name, j in jobs.items() if j["jct_s"] is not None},
        "slowdown": {name: round(value, 4) for name, value in sorted(slowdown.items())},
        "rho": {name: round(value, 4) for name, value in sorted(rho.items())},
    }


def _pairs(rows: list[dict], policies: list[str]) -> list[dict]:
    """Every policy against the first one, on each workload, paired over jobs."""
    from coach.analysis.stats import paired

    base = {row["workload"]: row for row in rows if row["policy"] == policies[0]}
    found = []
    for row in rows:
        if row["policy"] != policies[0]:
            a = base[row["workload"]]
            found.append({"a": a["label"], "b": row["label"], **paired(a["jct_s"], row["jct_s"])})
    if len(base) > 1:  # several workloads: also pooled over every job of every workload
        def pooled(policy: str) -> dict[str, float]:
            return {f"{Path(r['workload']).stem}/{name}": jct for r in rows if r["policy"] == policy
                    for name, jct in r["jct_s"].items()}
        for policy in policies[1:]:
            found.append({"a": f"{policies[0]} @ all", "b": f"{policy} @ all",
                          **paired(pooled(policies[0]), pooled(policy))})
    return found


def _hours(value) -> str:
    return "-" if value is None else f"{value / 3600:.3f}"


def _table(rows: list[dict], pairs: list[dict]) -> str:
    lines = ["| run | mean JCT h | median h | p99 h | makespan h | queued h | restarts/job | restart GPU-h | "
             "utilization | mean slowdown | max slowdown | Jain (slowdowns) | mean ρ | max ρ | ρ ≤ 1 |",
             "|---" * 15 + "|"]
    for r in rows:
        lines.append(f"| {r['label']} | {_hours(r['avg_jct_s'])} | {_hours(r['median_jct_s'])} | "
                     f"{_hours(r['p99_jct_s'])} | {_hours(r['makespan_s'])} | {_hours(r['avg_queued_s'])} | "
                     f"{r['restarts_per_job']} | {r['restart_gpu_hours']} | {r['utilization']} | {r['avg_slowdown']} | "
                     f"{r['max_slowdown']} | {r['jain_slowdown']} | {r['mean_rho']} | {r['max_rho']} | "
                     f"{r['share_rho_le_1']} |")
    if pairs:
        lines += ["", "Paired over jobs (B - A, JCT): mean difference, paired t-test and Wilcoxon p, the smallest "
                  "mean difference the t-test detects (alpha 0.05, power 0.8).", "",
                  "| A | B | jobs | mean diff h | t-test p | Wilcoxon p | detectable h | verdict |", "|---" * 8 + "|"]
        for p in pairs:
            lines.append(f"| {p['a']} | {p['b']} | {p['pairs']} | {_hours(p['mean_diff_s'])} | {p['t_p']} | "
                         f"{p['wilcoxon_p']} | {_hours(p['detectable_s'])} | {p['verdict']} |")
    return "\n".join(lines) + "\n"


def _write(sweep_dir: Path, rows: list[dict], pairs: list[dict], series: list, settings: dict) -> str:
    """The comparison's files into `sweep_dir` (an empty folder); the table."""
    from coach.analysis import plots
    from coach.storage.results import write_json_atomic

    write_json_atomic(sweep_dir / "comparison.json", {**settings, "runs": rows, "paired": pairs})
    table = _table(rows, pairs)
    (sweep_dir / "comparison.md").write_text(table, encoding="utf-8")
    plots.jct_cdf_plot([(r["label"], list(r["jct_s"].values())) for r in rows], sweep_dir / "jct_cdf.png")
    plots.utilization_overlay_plot(series, sweep_dir / "utilization.png")
    return table


def _same_names(workloads: list[Path]) -> str | None:
    """Why these workloads cannot be compared in one sweep (two of one name: their runs' labels and the pooled
    jobs' keys would collide), or None."""
    seen: dict[str, Path] = {}
    for workload in workloads:
        other = seen.setdefault(workload.stem, workload)
        if other is not workload:
            return (f"{workload}: (WORKLOAD): named {workload.stem!r} as {other} is; the sweep's labels would "
                    f"collide: give each workload its own file name")
    return None


def cmd_sweep(args, cluster) -> int:
    """Run every (workload, policy); write each run and one comparison. Exit code as `coach simulate`'s. Every
    workload and policy is read and checked before the first run: bad input writes nothing."""
    from coach.dl2 import ModelFileError
    from coach.simulator import results
    from coach.simulator.apps import AppTraceError
    from coach.simulator.session import SimulationInputError, check_inputs, name_part, simulate
    from coach.simulator.workloads import WorkloadError
    from coach.storage.folders import CannotWrite, write_whole
    from coach.ui.simulate_output import (progress_bar as _progress, settings_of, unique_dir as _unique_dir,
                                          write_run)

    results_dir, workloads, policies = Path(args.results), [Path(w) for w in args.workload], args.policy
    problem = _same_names(workloads)
    if problem is not None:
        return fail([problem])
    try:
        for workload in workloads:
            check_inputs(settings_of(args, cluster, workload, policies[0]))
        for policy in policies[1:]:
            check_inputs(settings_of(args, cluster, workloads[0], policy))
    except (WorkloadError, SimulationInputError, AppTraceError, ModelFileError) as error:
        return fail([str(error)])
    per_node = max(node.slots for node in cluster.nodes)
    rows, series, total, done = [], [], len(workloads) * len(policies), 0
    for workload in workloads:
        for policy in policies:
            done += 1
            settings = settings_of(args, cluster, workload, policy)
            progress, on_round = _progress(args.quiet, f"run {done}/{total}: {policy} on {workload.stem}")
            started = time.perf_counter()
            try:
                outcome, _ = simulate(settings, on_round)
            except (WorkloadError, SimulationInputError, AppTraceError, ModelFileError) as error:
                return fail([str(error)])
            finally:
                if progress is not None and progress.live.is_started:
                    progress.stop()
            run_dir = _unique_dir(results_dir, settings.run_id)
            try:
                summary = write_run(run_dir, outcome, settings)
            except CannotWrite as error:  # e.g. a full disk: the runs written before stay whole
                return fail([f"{run_dir}: (--results): {error}; nothing of this run was written"])
            label = _label(policy, workload, len(workloads))
            rows.append(_row(label, policy, workload, outcome, summary, per_node, args.restart_s))
            series.append((label, results.thinned(outcome.utilization)))
            if not args.quiet:
                print(f"[{done}/{total}] {label}: {time.perf_counter() - started:.1f} s -> {run_dir}", file=sys.stderr)
    name = f"sweep-{name_part(workloads[0].stem, 60)}-{'-'.join(policies)[:80]}-{args.scheduler}-s{args.seed}"
    sweep_dir = _unique_dir(results_dir, name)
    pairs = _pairs(rows, policies)
    chosen = {"workloads": [str(w) for w in workloads], "policies": policies, "scheduler": args.scheduler,
              "cluster": cluster.name, "interval_s": args.interval, "restart_s": args.restart_s, "seed": args.seed}
    try:
        table = write_whole(sweep_dir, lambda folder: _write(folder, rows, pairs, series, chosen))
    except CannotWrite as error:
        return fail([f"{sweep_dir}: (--results): {error}; the runs above are whole, their comparison was not written"])
    if not args.quiet:
        print(table, end="")
    print(sweep_dir)
    return 0
