"""A simulation's results in `coach run`'s format: per-job JSON lines and summary.json, plus two PNGs.

`coach compare` and `coach report` read them unchanged: every job's JCT is in summary.json (`jobs.<name>.jct_s`),
every placement a job trained on is one `phase: "simulated"` line of its log (workers = its GPUs, no servers), and
its last line says why it stopped. Simulated times are written as real ones from a fixed start (START_S), so two
runs of the same command write byte-identical files.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

import numpy as np

from coach.domain.records import iso
from coach.simulator.engine import JobRun, Outcome
from coach.storage.results import standard_json, write_json_atomic

START_S = 1_700_000_000.0  # the simulated workload's time 0, as a date (fixed: reproducible files)


def _round(value: float, digits: int = 3) -> float:
    return round(float(value), digits)


def job_records(run: JobRun, run_id: str) -> list[dict]:
    """The job's log: one line per placement it trained on, then the line that says why it stopped."""
    lines, spent = [], 0.0
    budget = None if run.budget is None else _round(run.budget, 6)
    for number, segment in enumerate(run.segments, start=1):
        held_s = segment["end_s"] - segment["start_s"]
        cost = segment["cost"]
        spent += cost
        lines.append({
            "run_id": run_id, "job": run.name, "phase": "simulated", "epoch": number, "workers": segment["gpus"],
            "servers": 0, "placement": segment["nodes"], "loss": None, "val_loss": None, "accuracy": None,
            "train_accuracy": None, "samples": 0, "epoch_time_s": _round(held_s), "compute_s": None,
            "start": iso(START_S + segment["start_s"]), "end": iso(START_S + segment["end_s"]),
            "cost": _round(cost, 6), "cumulative_cost": _round(spent, 6), "budget": budget, "stop_reason": None,
            "attempt": 1, "checkpoint": None, "batch_size": segment["batch"],
        })
    end_s = run.finished_s if run.finished_s is not None else run.updated_s
    lines.append({
        "run_id": run_id, "job": run.name, "phase": "stopped", "epoch": len(run.segments),
        "workers": run.segments[-1]["gpus"] if run.segments else 0, "servers": 0, "placement": {},
        "loss": None, "val_loss": None, "accuracy": None, "train_accuracy": None, "samples": 0,
        "epoch_time_s": 0.0, "compute_s": None, "start": iso(START_S + end_s), "end": iso(START_S + end_s),
        "cost": 0.0, "cumulative_cost": _round(run.spent, 6), "budget": budget,
        "stop_reason": run.stop_reason or "unfinished", "attempt": 1, "checkpoint": None,
        "progress": _round(run.progress), "total_progress": _round(run.total_progress), "restarts": run.restarts,
    })
    return lines


def _jct_s(run: JobRun) -> float | None:
    if run.finished_s is None or run.stop_reason != "completed":
        return None
    return _round(run.finished_s - run.spec.arrival_s)


def _time_weighted(samples: list[tuple[float, float]], end_s: float) -> float | None:
    """The mean share of GPUs training over time: each sample holds until the next (rounds a rigid policy
    skips are long ones), the last until the last job ends."""
    if not samples:
        return None
    times = [t_s for t_s, _ in samples] + [max(end_s, samples[-1][0])]
    span_s = times[-1] - times[0]
    if span_s <= 0:
        return _round(samples[-1][1], 4)
    return _round(sum(share * (times[i + 1] - times[i]) for i, (_, share) in enumerate(samples)) / span_s, 4)


def _span_s(samples: list[tuple[float, float]], end_s: float) -> float:
    """The time utilization is measured over: from the first round to the end (as `_time_weighted`)."""
    return max(end_s, samples[-1][0]) - samples[0][0] if samples else 0.0


def thrash(run: JobRun) -> int:
    """Restarts that went back to the allocation before the last one (A -> B -> A in GPUs): allocation thrash."""
    gpus = [segment["gpus"] for segment in run.segments]
    return sum(1 for i in range(2, len(gpus)) if gpus[i] == gpus[i - 2] != gpus[i - 1])


def _gpu_time(outcome: Outcome, runs: list[JobRun], end_s: float) -> dict:
    """Utilization as GPU time spent training (restart delays apart), and what restarts cost, per run."""
    span_s = _span_s(outcome.utilization, end_s)
    capacity = outcome.total_gpus * span_s
    training = sum(r.training_gpu_s for r in runs)
    restart = sum(r.restart_gpu_s for r in runs)
    if capacity > 0:
        utilization = _round(training / capacity, 4)
        restart_share = _round(restart / capacity, 4)
    else:  # no cluster size given (an Outcome built by hand): the rounds' samples
        utilization, restart_share = _time_weighted(outcome.utilization, end_s), None
    return {
        "utilization": utilization,
        "restart_share": restart_share,
        "restart_gpu_hours": _round(restart / 3600),
        "restarts_per_job": _round(sum(r.restarts for r in runs) / len(runs)) if runs else None,
        "max_restarts": max((r.restarts for r in runs), default=0),
        "thrash_restarts": sum(thrash(r) for r in runs),
    }


def summary(outcome: Outcome, run_id: str, settings: Mapping) -> dict:
    """summary.json: the run's makespan and statistics, then every job's outcome (in arrival order)."""
    runs = sorted(outcome.jobs, key=lambda r: (r.spec.arrival_s, r.name))
    finished = [r.finished_s for r in runs if r.finished_s is not None]
    ended_s = max(finished) if finished and len(finished) == len(runs) else None  # None: some job never ended
    first_s = min((r.spec.arrival_s for r in runs), default=0.0)
    stats = _stats(outcome, runs, max([*finished, *(t_s for t_s, _ in outcome.utilization)], default=0.0),
                   None if ended_s is None else _round(ended_s - first_s))
    return {
        "run_id": run_id,
        "started": iso(START_S + first_s),
        "ended": None if ended_s is None else iso(START_S + ended_s),
        "makespan_s": stats["makespan_s"],
        **settings,
        "stats": stats,
        "jobs": {run.name: _job_summary(run) for run in runs},
    }


def _stats(outcome: Outcome, runs: list[JobRun], end_s: float, makespan_s: float | None) -> dict:
    """summary.json's `stats`: JCTs of the completed jobs, makespan, utilization until `end_s`, and what was lost."""
    jcts = np.array([j for j in (_jct_s(r) for r in runs) if j is not None], dtype=float)
    return {
        "jobs": len(runs),
        "completed": int(len(jcts)),
        **_jct_stats(jcts),
        "makespan_s": makespan_s,
        **_gpu_time(outcome, runs, end_s),
        "deadlocked_jobs": sum(1 for r in runs if r.deadlocked),
        "deadlock_rounds": outcome.deadlocks,
        "held_gpu_hours": _round(sum(r.held_gpu_s for r in runs) / 3600),
        "restarts": sum(r.restarts for r in runs),
        "total_cost": _round(sum(r.spent for r in runs), 6),
        "rounds": outcome.rounds,
        "events": outcome.events,
    }


def _jct_stats(jcts: np.ndarray) -> dict:
    """Mean, median and 99th percentile of the JCTs; None each when no job completed."""
    if not len(jcts):
        return {"avg_jct_s": None, "median_jct_s": None, "p99_jct_s": None}
    return {"avg_jct_s": _round(jcts.mean()), "median_jct_s": _round(np.median(jcts)),
            "p99_jct_s": _round(np.percentile(jcts, 99))}


def _job_summary(run: JobRun) -> dict:
    """One job's entry in summary.json."""
    return {
        "submitted": iso(START_S + run.spec.arrival_s),
        "finished": None if run.finished_s is None else iso(START_S + run.finished_s),
        "jct_s": _jct_s(run), "epochs": len(run.segments), "final_loss": None, "final_val_loss": None,
        "stop_reason": run.stop_reason or "unfinished", "total_cost": _round(run.spent, 6),
        "budget": None if run.budget is None else _round(run.budget, 6),
        "workers": run.segments[-1]["gpus"] if run.segments else 0, "servers": 0,
        "application": run.spec.app, "requested_gpus": run.spec.gpus, "restarts": run.restarts,
        "restart_gpu_s": _round(run.restart_gpu_s), "thrash": thrash(run),
        "held_gpu_s": _round(run.held_gpu_s), "deadlocked": run.deadlocked,
        "queued_s": None if run.started_s is None else _round(run.started_s - run.spec.arrival_s),
    }


def write(run_dir: Path, outcome: Outcome, run_id: str, settings: Mapping) -> dict:
    """Write the logs, summary.json, utilization.png and jct_cdf.png into run_dir; return the summary."""
    from coach.analysis import plots  # here: matplotlib is a third of `coach simulate`'s start-up

    run_dir.mkdir(parents=True, exist_ok=True)
    for run in outcome.jobs:
        text = "".join(standard_json(line, f"{run.name}.jsonl") + "\n" for line in job_records(run, run_id))
        (run_dir / f"{run.name}.jsonl").write_text(text, encoding="utf-8")
    data = summary(outcome, run_id, settings)
    write_json_atomic(run_dir / "summary.json", data)
    label = f"{settings.get('policy')} / {settings.get('scheduler')}"
    plots.utilization_plot(thinned(outcome.utilization), run_dir / "utilization.png",
                           f"Cluster utilization: {label}")
    plots.jct_cdf_plot([(label, [j["jct_s"] for j in data["jobs"].values() if j["jct_s"] is not None])],
                       run_dir / "jct_cdf.png")
    return data


def thinned(samples: list[tuple[float, float]], most: int = 5000) -> list[tuple[float, float]]:
    """At most `most` samples (every k-th), so a months-long trace still plots in a second."""
    step = max(1, math.ceil(len(samples) / most))
    return samples[::step]
