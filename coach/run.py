"""A run: every job of `coach run` at once, each in its own thread, over one platform and one cluster.

Side effects: creates `results/<run-id>/` (manifest, per-job logs, checkpoints, function logs, summary),
starts and stops function hosts, installs SIGINT/SIGTERM handlers for the run's duration.
"""

from __future__ import annotations

import secrets
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from coach.cluster import ClusterSpec
from coach.controller import JobRunner, RunContext
from coach.jobs import JobSpec
from coach.platforms.base import Platform
from coach.platforms.local import LocalPlatform
from coach.progress import VIEWS
from coach.slots import Allocator
from coach.results import JobOutcome, new_run_id, summary_dict, write_json_atomic
from coach.store import CheckpointStore

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
    run_id = run_id or new_run_id()
    run_dir = results_root / run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    token = secrets.token_hex(16)
    platform = (platform_factory or (lambda logs, tok: LocalPlatform(logs, tok)))(run_dir / "logs", token)
    started_s = time.time()
    write_json_atomic(run_dir / "run.json", {
        "run_id": run_id, "command": sys.argv, "scheduler": scheduler, "placement_timeout_s": placement_timeout_s,
        "cluster": cluster.to_dict(),
        "jobs": [spec.to_dict() for spec in specs]})
    outcomes = {spec.name: JobOutcome(submitted_s=started_s, budget=spec.budget) for spec in specs}
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
        ctx.allocator.register(spec.name for spec in specs)  # submission order is the FIFO order
        runners = [JobRunner(spec, ctx, outcomes[spec.name], write_summary) for spec in specs]
        threads = [threading.Thread(target=r.run, name=f"job-{r.spec.name}", daemon=True) for r in runners]

        def interrupt(signum, frame):
            ctx.stop.set()
            platform.close()  # in-flight epochs fail at once; job threads record `interrupted`

        # signals reach only the main thread; a run started from another thread is stopped by its caller
        in_main = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
        try:
            write_summary()
            for thread in threads:
                thread.start()
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
