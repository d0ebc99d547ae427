"""A run: every job of `coach run` at once, composed from its configuration and driven live.

Side effects: creates `results/<run-id>/` (manifest, per-job logs, checkpoints, function logs, summary),
starts and stops function hosts, installs SIGINT/SIGTERM handlers for the run's duration.

Paths: a run folder is resolved to an absolute path when the run starts and when it is resumed, and every path
a run folder holds is absolute (job and model files, checkpoint prefixes) or, when a resume meets a relative one
or an absolute one that is gone because the folder moved, resolved against the run folder. So
`coach run --resume RUN_DIR` works from any current directory, with RUN_DIR relative or absolute.
"""

from __future__ import annotations

import secrets
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator, Sequence

from coach.app.compose import PLACEMENT_OF, PLACEMENTS, PLATFORMS, Site, checkpoint_store
from coach.app.run_policies import RUN_POLICIES
from coach.domain.cluster import ClusterSpec
from coach.domain.jobs import JobSpec
from coach.domain.records import MANIFEST_SCHEMA, JobOutcome, iso, summary_dict
from coach.drivers.core import Ports
from coach.drivers.fanout import ThreadFanOut
from coach.drivers.live import LiveDriver
from coach.lifecycle import events as ev
from coach.lifecycle.job import NORMAL_ENDINGS, REQUEUE_BACKOFF_S, USER_STOP, JobLifecycle
from coach.policy.history import (INTERRUPTED, History, fill_outcome, history_from_checkpoint,
                                  history_from_records)
from coach.policy.run_policy import DEFAULT_POLICY, RunClusterView
from coach.ports import CheckpointStore, Platform, View
from coach.storage.checkpoints import tag_step
from coach.inputs.limits import FileTooLarge, NotRegularFile, file_problem
from coach.inputs.runs import RunInputError, check_run_manifest, checked_records, read_json
from coach.storage.results import (ResultLog, drop_torn_tail, new_run_id,
                                   write_json_atomic)
from coach.views.terminal import VIEWS
from scheduler_fork import PROFILES



@dataclass(frozen=True)
class RunReport:
    run_id: str  # results/<run_id>
    run_dir: Path  # the folder the run wrote
    summary: dict  # what summary.json holds
    exit_code: int  # 0 all jobs ended normally, 1 a job failed, 130 interrupted


@dataclass(frozen=True)
class RunConfig:
    """How a run is composed; written to run.json so that a resume composes the same run."""

    scheduler: str = "gang"  # scheduler_fork profile
    policy: str = DEFAULT_POLICY  # a key of RUN_POLICIES
    placement_timeout_s: float = 30.0  # how long a job waits for its quorum before it is requeued
    platform: str = "local"  # a key of PLATFORMS
    placement: str = "scheduler_fork"  # a key of PLACEMENTS
    checkpoints: str | None = None  # the checkpoint store's URL (`s3://bucket/prefix`); None: <run dir>/checkpoints
    site: Site = Site()  # where the functions run (its platform is `platform`)


def store_url(config: RunConfig, run_dir: Path) -> str:
    """The run's checkpoint store: the one its configuration names, else its own folder (which moves with it)."""
    return config.checkpoints or (run_dir / "checkpoints").as_uri()


def manifest_dict(run_id: str, started_s: float, cluster: ClusterSpec, config: RunConfig,
                  specs: Sequence[JobSpec]) -> dict:
    """run.json: what a resume composes the run from again."""
    return {"schema": MANIFEST_SCHEMA, "run_id": run_id, "command": sys.argv, "started": iso(started_s),
            "scheduler": config.scheduler, "policy": config.policy, "placement_timeout_s": config.placement_timeout_s,
            "platform": config.platform, "placement": config.placement, "checkpoints": config.checkpoints,
            "site": config.site.to_dict(), "cluster": cluster.to_dict(), "jobs": [spec.to_dict() for spec in specs]}


def exit_code_for(reasons: Sequence[str | None]) -> int:
    """130 when a job was interrupted; else 0 when every job ended normally or by its user's stop, 1 otherwise
    (failed, unschedulable, diverged)."""
    if any(r == INTERRUPTED for r in reasons):
        return 130
    return 0 if all(r in NORMAL_ENDINGS or r == USER_STOP for r in reasons) else 1


def run_jobs(specs: Sequence[JobSpec], cluster: ClusterSpec, results_root: Path, view: str = "plain",
             scheduler: str = "gang", run_id: str | None = None, placement_timeout_s: float = 30.0,
             platform_factory: Callable[[Path, str], Platform] | None = None,
             policy: str = DEFAULT_POLICY, stop_event: threading.Event | None = None,
             checkpoints: str | None = None, site: Site = Site(),
             first_requeue_backoff_s: float = REQUEUE_BACKOFF_S) -> RunReport:
    """A new run of every job, concurrently, in `results_root/<run-id>/`; setting `stop_event` stops it.
    `checkpoints` is the store's URL (None: the run folder's `checkpoints/`), checked by the caller.
    `first_requeue_backoff_s` (not recorded; a resume uses the default) lets tests of the requeue bound
    wait less."""
    config = RunConfig(scheduler=scheduler, policy=policy, placement_timeout_s=placement_timeout_s,
                       checkpoints=checkpoints, platform=site.platform, placement=PLACEMENT_OF[site.platform],
                       site=site)
    run_id = run_id or new_run_id()
    run_dir = (results_root / run_id).resolve()
    run_dir.mkdir(parents=True, exist_ok=False)
    started_s = time.time()
    write_json_atomic(run_dir / "run.json", manifest_dict(run_id, started_s, cluster, config, specs))
    outcomes = {spec.name: JobOutcome(submitted_s=started_s, budget=spec.budget) for spec in specs}
    return _execute(run_id, run_dir, started_s, cluster, config, view,
                    [(spec, None) for spec in specs], outcomes, platform_factory, stop_event,
                    first_requeue_backoff_s)


class ResumeError(Exception):
    """A run folder that cannot be resumed; the message is one `PATH: FIELD: what is wrong` line."""


def resume_run(run_dir: Path, view: str = "plain",
               platform_factory: Callable[[Path, str], Platform] | None = None) -> RunReport:
    """Continue every unfinished job of a run (killed, or interrupted) from its last log line and checkpoint.

    Finished jobs are left untouched; the others append to their own logs, with epochs numbered on from the
    last one logged and the cumulative cost carried on (see `load_run`).
    """
    run = load_run(run_dir)
    return _execute(run.run_id, run.run_dir, run.started_s, run.cluster, run.config, view, run.pending,
                    run.outcomes, platform_factory)


@dataclass
class LoadedRun:
    """A run folder read back: what `coach run --resume` and a restarted `coach serve` go on from."""

    run_id: str
    run_dir: Path  # absolute
    manifest: dict  # run.json as it is
    cluster: ClusterSpec
    config: RunConfig
    specs: list[JobSpec]  # every job of the manifest, in submission order
    outcomes: dict[str, JobOutcome]  # every job's outcome so far
    pending: list[tuple[JobSpec, History]]  # the unfinished jobs, with the history their logs and checkpoints have
    started_s: float


class RunFolderError(Exception):
    """A run folder that cannot go on: one `PATH: FIELD: what is wrong` line per problem."""

    def __init__(self, lines: Sequence[str]):
        self.lines = list(lines)
        super().__init__("\n".join(self.lines))


def check_run_folder(run_dir: Path) -> dict:
    """The run's manifest (run.json), or RunFolderError naming the first problems of a run folder, before
    load_run reads (or cuts) anything in it.

    The manifest is checked as job and cluster files are (job names included: each names a file of the folder;
    a model file that is not where the manifest says is left to load_run, which looks for it); every log line of
    every job as `coach plan` checks a history (a torn last line excepted: a resume cuts it). summary.json and
    the checkpoints are load_run's to judge.
    """
    manifest_path = run_dir / "run.json"
    try:
        manifest = read_json(manifest_path)
    except (FileTooLarge, NotRegularFile) as error:
        raise RunFolderError([f"{manifest_path}: (file): {error}"]) from None
    except OSError as error:
        raise RunFolderError([f"{manifest_path}: (file): {error.strerror or error}"]) from None
    except ValueError as error:
        raise RunFolderError([f"{manifest_path}: (file): not a Coach run manifest ({error})"]) from None
    lines = check_run_manifest(manifest, str(manifest_path), schedulers=PROFILES, policies=RUN_POLICIES,
                               platforms=PLATFORMS, placements=PLACEMENTS)
    if lines:
        raise RunFolderError(lines)
    for job in manifest["jobs"]:
        log = run_dir / f"{job['name']}.jsonl"
        if not log.exists():
            continue
        try:
            history_from_records(checked_records(log, allow_torn_tail=True))
        except RunInputError as error:
            raise RunFolderError([str(error)]) from None
        except (KeyError, TypeError, ValueError) as error:  # a combination of lines no check foresaw
            raise RunFolderError([f"{log}: (file): cannot rebuild the job's history: {type(error).__name__}"]) \
                from None
    return manifest


def load_run(run_dir: Path) -> LoadedRun:
    """Read a run folder back; raise ResumeError (one `PATH: FIELD: what is wrong` line) when it cannot go on.

    A log that holds no finished step (emptied, cut before
    its first complete record, or only failed attempts) goes on from the newest complete checkpoint in the run's
    store (the manifest's `checkpoints` URL, else the run folder's `checkpoints/<job>/`) instead of from scratch:
    its tag names the step (`epoch-0003`: as if epoch 3 was the last one done; `calibration-k`: no epoch done).
    Such a log's cost so far, with or without a checkpoint, is the larger of what its last line and summary.json
    last said (0 when neither knows; the cost of lost lines that neither recorded is not counted). A job whose
    log is empty but whose summary says it finished is left as the summary says.
    """
    run_dir = run_dir.resolve()
    manifest, specs, cluster, config = _read_manifest(run_dir)
    store = _open_store(config, run_dir)
    old = _old_summary(run_dir)
    old_jobs = old.get("jobs") if isinstance(old.get("jobs"), dict) else {}
    started_s = _timestamp(old.get("started")) or _timestamp(manifest.get("started")) or time.time()
    outcomes, pending = {}, []
    for spec in specs:
        log = run_dir / f"{spec.name}.jsonl"
        records = _read_log(log)
        before = old_jobs.get(spec.name) if isinstance(old_jobs.get(spec.name), dict) else {}
        outcome = JobOutcome(submitted_s=_timestamp(before.get("submitted")) or started_s, budget=spec.budget)
        outcomes[spec.name] = outcome
        history = _history_to_go_on(spec, log, records, before, outcome, store)
        if history is not None:
            pending.append((spec, history))
    return LoadedRun(manifest.get("run_id", run_dir.name), run_dir, manifest, cluster, config, specs, outcomes,
                     pending, started_s)


def _read_manifest(run_dir: Path) -> tuple[dict, list[JobSpec], ClusterSpec, RunConfig]:
    """run.json and the jobs, cluster and configuration it holds; ResumeError when it cannot be read or used."""
    try:
        manifest = read_json(run_dir / "run.json")  # capped, regular files only
        specs = [JobSpec.from_dict(job) for job in manifest["jobs"]]
        cluster = ClusterSpec.from_dict(manifest["cluster"])
        config = RunConfig(scheduler=manifest["scheduler"], policy=manifest.get("policy", DEFAULT_POLICY),
                           placement_timeout_s=float(manifest["placement_timeout_s"]),
                           platform=manifest.get("platform", "local"), placement=manifest.get("placement", "scheduler_fork"),
                           checkpoints=manifest.get("checkpoints"),
                           site=Site.from_dict(manifest.get("site"), manifest.get("platform", "local")))
    except (OSError, FileTooLarge, NotRegularFile) as error:
        raise ResumeError(f"{run_dir / 'run.json'}: (file): {file_problem(error)}") from None
    except (ValueError, KeyError, TypeError) as error:
        raise ResumeError(f"{run_dir / 'run.json'}: (file): not a Coach run manifest ({error})") from None
    return manifest, specs, cluster, config


def _open_store(config: RunConfig, run_dir: Path) -> CheckpointStore:
    """The checkpoint store the manifest names (else the run folder's); ResumeError for one that cannot be used."""
    try:
        if not isinstance(config.checkpoints, (str, type(None))):
            raise ValueError(f"expected a store URL, got {type(config.checkpoints).__name__}")
        return checkpoint_store(store_url(config, run_dir))
    except ValueError as error:
        raise ResumeError(f"{run_dir / 'run.json'}: checkpoints: {config.checkpoints}: {error}") from None


def _old_summary(run_dir: Path) -> dict:
    """summary.json as the run last wrote it; {} when it is missing, unreadable or not a JSON object;
    ResumeError when it is a folder, not a regular file, or over MAX_RUN_JSON_BYTES (read_json's caps)."""
    try:
        old = read_json(run_dir / "summary.json")
    except (FileTooLarge, NotRegularFile, IsADirectoryError) as error:
        raise ResumeError(f"{run_dir / 'summary.json'}: (file): {file_problem(error)}") from None
    except (OSError, ValueError):
        return {}
    return old if isinstance(old, dict) else {}


def _read_log(log: Path) -> list[dict]:
    """A job's checked log records, a torn last line cut first (a side effect); [] when the job has no log."""
    try:
        if not log.exists():
            return []
        records = checked_records(log, allow_torn_tail=True)  # capped and regular-file-only before it is cut
        drop_torn_tail(log)
        return records
    except RunInputError as error:
        raise ResumeError(str(error)) from None


def _history_to_go_on(spec: JobSpec, log: Path, records: list[dict], before: dict, outcome: JobOutcome,
                      store: CheckpointStore) -> History | None:
    """The history a job goes on from (its log's, else its newest complete checkpoint's); None for a job that
    ended for good, whose `outcome` is then filled from its log or, when the log was lost, from the summary."""
    history = history_from_records(records)
    if history.stop_reason not in (None, INTERRUPTED):  # finished for good: keep it as it was
        fill_outcome(outcome, history, _timestamp(before.get("finished")) or _timestamp(history.last_end))
        return None
    if not records and _summary_says_finished(outcome, before):  # its log was lost after it finished
        return None
    if history.checkpoint is None:  # no finished step in the log: the summary and checkpoints may know more
        spent = max(history.spent, _number(before.get("total_cost")))
        history = _from_checkpoints(store, spec.name, spent) or replace(history, spent=spent)
    else:
        history = replace(history, checkpoint=store.locate(spec.name, history.checkpoint))
    if history.checkpoint and not store.complete(history.checkpoint):
        raise ResumeError(f"{log}: checkpoint: {history.checkpoint} of job {spec.name} is missing or incomplete")
    return history


def _timestamp(text: str | None) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp() if text else None
    except (TypeError, ValueError):  # not a time, or not even a string: unknown
        return None


def _number(value, default: float = 0.0) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _from_checkpoints(store: CheckpointStore, job: str, spent: float) -> History | None:
    """The job's history when its log has no finished step: from its newest complete checkpoint, if any."""
    newest = store.newest_complete(job)
    step = tag_step(newest) if newest else None
    if step is None:
        return None
    kind, number = step
    return history_from_checkpoint(newest, number if kind == "epoch" else 0, spent)


def _summary_says_finished(outcome: JobOutcome, before: dict) -> bool:
    """Fill `outcome` from the summary's entry when it says the job ended for good (not interrupted)."""
    reason = before.get("stop_reason")
    if not isinstance(reason, str) or reason == INTERRUPTED:
        return False
    outcome.stop_reason = reason
    outcome.finished_s = _timestamp(before.get("finished"))
    outcome.epochs = int(_number(before.get("epochs")))
    outcome.final_loss = before.get("final_loss") if isinstance(before.get("final_loss"), (int, float)) else None
    outcome.final_val_loss = (before.get("final_val_loss")
                              if isinstance(before.get("final_val_loss"), (int, float)) else None)
    outcome.total_cost = _number(before.get("total_cost"))
    outcome.workers, outcome.servers = int(_number(before.get("workers"))), int(_number(before.get("servers")))
    return True


@contextmanager
def live_ports(run_dir: Path, cluster: ClusterSpec, config: RunConfig, platform_factory, view: View,
               sinks: dict[str, ResultLog]) -> Iterator[Ports]:
    """The ports a run's configuration composes (the platform from `platform_factory` when given), closed after:
    the platform first, so that what is in flight fails at once, then the placement and every log in `sinks`."""
    token = secrets.token_hex(16)
    if platform_factory is None:
        platform = PLATFORMS[config.platform](run_dir / "logs", token, config.site)
    else:
        platform = platform_factory(run_dir / "logs", token)
    try:
        placement = PLACEMENTS[config.placement](cluster, config.scheduler, platform, config.site)
    except BaseException:
        platform.close()
        raise
    try:
        yield Ports(placement=placement, platform=platform, store=checkpoint_store(store_url(config, run_dir)),
                    sinks=sinks, view=view)
    finally:
        platform.close()
        placement.close()
        for sink in sinks.values():
            sink.close()


def new_lifecycle(spec: JobSpec, run_id: str, cluster: ClusterSpec, config: RunConfig,
                  first_requeue_backoff_s: float = REQUEUE_BACKOFF_S) -> JobLifecycle:
    return JobLifecycle(spec, run_id, cluster, RUN_POLICIES[config.policy].calibration(spec),
                        config.placement_timeout_s, first_requeue_backoff_s)


def first_event(history: History | None, now_s: float) -> ev.Event:
    """A new job starts; one with a history (its log, its checkpoints) resumes."""
    return ev.Start(now_s) if history is None else ev.Resume(now_s, history)


def cluster_view(cluster: ClusterSpec) -> RunClusterView:
    return RunClusterView(cluster.total_slots, max(n.price_per_slot_s for n in cluster.nodes))


def summary_extra(cluster: ClusterSpec, config: RunConfig) -> dict:
    return {"cluster": cluster.name, "scheduler": config.scheduler, "policy": config.policy}


def _execute(run_id: str, run_dir: Path, started_s: float, cluster: ClusterSpec, config: RunConfig, view: str,
             jobs: Sequence[tuple[JobSpec, History | None]], outcomes: dict[str, JobOutcome],
             platform_factory, stop_event: threading.Event | None = None,
             first_requeue_backoff_s: float = REQUEUE_BACKOFF_S) -> RunReport:
    """Drive `jobs` (each new, or with the history its log has) until every one is done; keep summary.json."""
    policy = RUN_POLICIES[config.policy]
    extra = summary_extra(cluster, config)
    sinks = {spec.name: ResultLog(run_dir / f"{spec.name}.jsonl") for spec, _ in jobs}

    def write_summary() -> dict:
        summary = summary_dict(run_id, started_s, outcomes, extra)
        write_json_atomic(run_dir / "summary.json", summary)
        return summary

    def finished(lc: JobLifecycle, now_s: float) -> None:
        fill_outcome(outcomes[lc.spec.name], lc.history, now_s)
        write_summary()

    with VIEWS[view](run_id) as shown:
        stop = stop_event or threading.Event()
        # signals reach only the main thread; a run started from another thread is stopped by its caller
        in_main = threading.current_thread() is threading.main_thread()
        previous = {}
        try:
            with live_ports(run_dir, cluster, config, platform_factory, shown, sinks) as ports:
                lifecycles = [new_lifecycle(spec, run_id, cluster, config, first_requeue_backoff_s)
                              for spec, _ in jobs]
                driver = LiveDriver(lifecycles, policy, cluster_view(cluster), ports, ThreadFanOut(), finished,
                                    stop_event=stop)
                first = [(spec.name, first_event(history, time.time())) for spec, history in jobs]

                def interrupt(signum, frame):
                    stop.set()

                if in_main:
                    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
                write_summary()
                driver.run(first)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        summary = write_summary()
        shown.final()
    return RunReport(run_id, run_dir, summary, exit_code_for([o.stop_reason for o in outcomes.values()]))
