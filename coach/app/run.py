"""A run: every job of `coach run` at once, each in its own thread, over one platform and one cluster.

Side effects: creates `results/<run-id>/` (manifest, per-job logs, checkpoints, function logs, summary),
starts and stops function hosts, installs SIGINT/SIGTERM handlers for the run's duration.
"""

from __future__ import annotations

import json
import secrets
import signal
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Sequence

from coach.domain.cluster import ClusterSpec
from coach.controller import JobRunner, RunContext
from coach.domain.jobs import JobSpec
from coach.domain.invocation import Platform
from coach.platforms.local import LocalPlatform
from coach.ui.progress import VIEWS
from coach.placement.fork import Allocator
from coach.domain.records import JobOutcome, iso, summary_dict
from coach.storage.results import LogFileError, drop_torn_tail, new_run_id, read_log_checked, write_json_atomic
from coach.storage.checkpoints import CheckpointStore

NORMAL_ENDINGS = frozenset({"target_loss", "max_epochs", "budget"})


@dataclass(frozen=True)
class RunReport:
    run_id: str  # results/<run_id>
    run_dir: Path  # the folder the run wrote
    summary: dict  # what summary.json holds
    exit_code: int  # 0 all jobs ended normally, 1 a job failed, 130 interrupted


def exit_code_for(reasons: Sequence[str | None]) -> int:
    if any(r == "interrupted" for r in reasons):
        return 130
    return 0 if all(r in NORMAL_ENDINGS for r in reasons) else 1


def run_jobs(specs: Sequence[JobSpec], cluster: ClusterSpec, results_root: Path, view: str = "plain",
             scheduler: str = "gang", run_id: str | None = None, placement_timeout_s: float = 30.0,
             platform_factory: Callable[[Path, str], Platform] | None = None) -> RunReport:
    """A new run of every job, concurrently, in `results_root/<run-id>/`."""
    run_id = run_id or new_run_id()
    run_dir = results_root / run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    started_s = time.time()
    write_json_atomic(run_dir / "run.json", {
        "run_id": run_id, "command": sys.argv, "started": iso(started_s), "scheduler": scheduler,
        "placement_timeout_s": placement_timeout_s, "cluster": cluster.to_dict(),
        "jobs": [spec.to_dict() for spec in specs]})
    outcomes = {spec.name: JobOutcome(submitted_s=started_s, budget=spec.budget) for spec in specs}
    return _execute(run_id, run_dir, started_s, cluster, scheduler, placement_timeout_s, view,
                    [(spec, []) for spec in specs], outcomes, platform_factory)


class ResumeError(Exception):
    """A run folder that cannot be resumed; the message is one `PATH: FIELD: what is wrong` line."""


def resume_run(run_dir: Path, view: str = "plain",
               platform_factory: Callable[[Path, str], Platform] | None = None) -> RunReport:
    """Continue every unfinished job of a run (killed, or interrupted) from its last log line and checkpoint.

    Finished jobs are left untouched; the others append to their own logs, with epochs numbered on from the
    last one logged and the cumulative cost carried on.
    """
    try:
        manifest = json.loads((run_dir / "run.json").read_text())
        specs = [JobSpec.from_dict(job) for job in manifest["jobs"]]
        cluster = ClusterSpec.from_dict(manifest["cluster"])
        scheduler, placement_timeout_s = manifest["scheduler"], float(manifest["placement_timeout_s"])
    except OSError as error:
        raise ResumeError(f"{run_dir / 'run.json'}: (file): {error.strerror or error}") from None
    except (ValueError, KeyError, TypeError) as error:
        raise ResumeError(f"{run_dir / 'run.json'}: (file): not a Coach run manifest ({error})") from None
    try:
        old = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        old = {"jobs": {}}
    started_s = _timestamp(old.get("started")) or _timestamp(manifest.get("started")) or time.time()
    outcomes, pending = {}, []
    for spec in specs:
        log = run_dir / f"{spec.name}.jsonl"
        try:
            if log.exists():
                drop_torn_tail(log)
            records = read_log_checked(log) if log.exists() else []
        except LogFileError as error:
            raise ResumeError(str(error)) from None
        before = old.get("jobs", {}).get(spec.name, {})
        outcome = JobOutcome(submitted_s=_timestamp(before.get("submitted")) or started_s, budget=spec.budget)
        outcomes[spec.name] = outcome
        last = records[-1] if records else {}
        if last.get("stop_reason") not in (None, "interrupted"):  # finished for good: keep it as it was
            trained = [r for r in records if r.get("phase") == "training"]
            outcome.finished_s = _timestamp(before.get("finished")) or _timestamp(last.get("end"))
            outcome.epochs = len(trained)
            outcome.final_loss = trained[-1]["loss"] if trained else None
            outcome.final_val_loss = trained[-1].get("val_loss") if trained else None
            outcome.stop_reason = last["stop_reason"]
            outcome.total_cost = float(last.get("cumulative_cost") or 0.0)
            outcome.workers, outcome.servers = int(last.get("workers") or 0), int(last.get("servers") or 0)
        else:
            pending.append((spec, records))
    run_id = manifest.get("run_id", run_dir.name)
    return _execute(run_id, run_dir, started_s, cluster, scheduler, placement_timeout_s, view, pending, outcomes,
                    platform_factory)


def _timestamp(text: str | None) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp() if text else None
    except ValueError:
        return None


def _execute(run_id: str, run_dir: Path, started_s: float, cluster: ClusterSpec, scheduler: str,
             placement_timeout_s: float, view: str, jobs: Sequence[tuple[JobSpec, list[dict]]],
             outcomes: dict[str, JobOutcome], platform_factory) -> RunReport:
    """Run `jobs` (each with the log lines it already has) concurrently; keep summary.json current."""
    token = secrets.token_hex(16)
    platform = (platform_factory or (lambda logs, tok: LocalPlatform(logs, tok)))(run_dir / "logs", token)
    summary_lock = threading.Lock()
    extra = {"cluster": cluster.name, "scheduler": scheduler}

    def write_summary() -> dict:
        with summary_lock:
            summary = summary_dict(run_id, started_s, outcomes, extra)
            write_json_atomic(run_dir / "summary.json", summary)
            return summary

    with VIEWS[view](run_id) as shown:
        ctx = RunContext(run_id=run_id, run_dir=run_dir, cluster=cluster, platform=platform,
                         allocator=Allocator(cluster, scheduler),
                         store=CheckpointStore(run_dir / "checkpoints"), view=shown,
                         placement_timeout_s=placement_timeout_s)
        ctx.allocator.register(spec.name for spec, _ in jobs)  # submission order is the FIFO order
        runners = []
        for spec, records in jobs:
            runner = JobRunner(spec, ctx, outcomes[spec.name], write_summary)
            runner.adopt(records)
            runners.append(runner)
        threads = [threading.Thread(target=r.run, name=f"job-{r.spec.name}", daemon=True) for r in runners]

        def interrupt(signum, frame):
            ctx.stop.set()
            platform.close()  # in-flight epochs fail at once; job threads record `interrupted`

        # signals reach only the main thread; a run started from another thread is stopped by its caller
        in_main = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
        try:
            write_summary()
            for runner, thread in zip(runners, threads):
                thread.start()
                while not runner.queued.wait(0.2):  # pods reach the scheduler in submission order (FIFO)
                    pass
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        finally:
            platform.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        summary = write_summary()
        shown.final()
    return RunReport(run_id, run_dir, summary, exit_code_for([o.stop_reason for o in outcomes.values()]))
