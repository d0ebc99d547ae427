"""A served run: one run folder that jobs join while it runs, driven by an OpenDriver on its own thread.

The results folder is the single record. `<results>/service.json` names the served run; a restarted server loads
that run (`coach.app.run.load_run`: logs, checkpoints, summary) and resumes its unfinished jobs. Every job a
client submits is added to run.json (written atomically) before it starts, so a restart knows it.
Side effects: the run folder, function hosts (through the ports), one driver thread.
"""

from __future__ import annotations

import fcntl
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from coach.app.run_policies import RUN_POLICIES
from coach.app.run import (LoadedRun, ResumeError, RunConfig, RunFolderError, check_run_folder, cluster_view,
                           first_event, live_ports, load_run, manifest_dict, new_lifecycle, summary_extra)
from coach.domain.cluster import ClusterSpec
from coach.domain.jobs import JobSpec
from coach.domain.records import JobOutcome, summary_dict
from coach.domain.status import JobStatus
from coach.drivers.fanout import ThreadFanOut
from coach.drivers.live import OpenDriver
from coach.inputs.jobs import JOB_FIELDS
from coach.inputs.limits import FileTooLarge, NotRegularFile, file_problem
from coach.inputs.runs import RunInputError, checked_line, log_lines, read_json
from coach.lifecycle.job import USER_STOP, JobLifecycle, ended_phase
from coach.policy.history import INTERRUPTED, fill_outcome
from coach.ports import Platform
from coach.service.board import Board
from coach.service.function_logs import log_files
from coach.service.notify import Notifier, ended_payload
from coach.service.metrics import ServiceMetrics
from coach.service.observed import BoardView, ObservedLog, ObservedPlacement
from coach.storage.results import ResultLog, new_run_id, write_json_atomic

POINTER = "service.json"  # in the results folder: which run the server serves
LOCK = "service.lock"  # in the results folder: held by the one server that serves it
MAX_RECORDS = 1000  # records one request may read of a job's log (memory stays bounded for any log)
CALL_TIMEOUT_S = 30.0  # how long a request waits for the driver's loop to take its job or stop
DRIVER_THREADS = 64  # deploys, epochs and removals in flight at once, over every job


class JobExists(Exception):
    """A job of this name is in the run already."""


class UnknownJob(Exception):
    """No job of this name in the run."""


class NotRunning(Exception):
    """The server is stopping (or its run could not start): it takes no more jobs."""


class Unservable(Exception):
    """The results folder cannot be served: one line per problem (`PATH: FIELD: what is wrong`)."""

    def __init__(self, lines):
        self.lines = list(lines)
        super().__init__("\n".join(self.lines))


@dataclass(frozen=True)
class StopAnswer:
    job: str
    already_done: bool  # it had finished before the request (nothing was stopped)


class ServedRun:
    def __init__(self, results_root: Path, cluster: ClusterSpec, config: RunConfig,
                 platform_factory: Callable[[Path, str], Platform] | None = None, notifier: Notifier | None = None):
        self.results_root = results_root.resolve()
        self.notifier = notifier  # told when a job ends (`--notify URL`)
        self._new_cluster, self._new_config = cluster, config
        self.platform_factory = platform_factory
        self._lock = threading.RLock()  # run.json, the outcomes and summary.json
        self._closing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stack = ExitStack()
        self.driver: OpenDriver | None = None
        self.resumed = False

    # -- starting and stopping ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Open (or create) the served run and start its driver; Unservable when it cannot go on."""
        self._lock_folder()
        try:
            loaded = self._served_run()
        except RunFolderError as error:
            self._stack.close()
            raise Unservable(error.lines) from None
        except ResumeError as error:
            self._stack.close()
            raise Unservable([str(error)]) from None
        except OSError as error:
            self._stack.close()
            raise Unservable([f"--results: {self.results_root}: {error.strerror or error}"]) from None
        self.resumed = loaded is not None
        if loaded is None:
            loaded = self._new_run()
        self.run_id, self.run_dir, self.manifest = loaded.run_id, loaded.run_dir, loaded.manifest
        self.cluster, self.config = loaded.cluster, loaded.config
        self.outcomes, self.started_s = loaded.outcomes, loaded.started_s
        self.board = Board(self.cluster, self.run_id, self.config.placement_timeout_s)
        self.metrics = ServiceMetrics(self.board)
        if self.notifier is not None:
            self.notifier.on_outcome = self.metrics.notified
        for spec in loaded.specs:
            self.board.admit(spec.name, spec.max_epochs, spec.target_loss)
            self._replay_log(spec.name)
            if all(spec.name != pending.name for pending, _ in loaded.pending):  # as their summary left them
                self.board.show(_status_of(spec, self.outcomes[spec.name]))
        self.sinks = {spec.name: self._sink(spec.name) for spec, _ in loaded.pending}
        ports = self._stack.enter_context(live_ports(self.run_dir, self.cluster, self.config, self.platform_factory,
                                                     BoardView(self.board), self.sinks))
        ports = replace(ports, placement=ObservedPlacement(ports.placement, self.board, self.metrics))
        lifecycles = [new_lifecycle(spec, self.run_id, self.cluster, self.config) for spec, _ in loaded.pending]
        self.driver = OpenDriver(lifecycles, RUN_POLICIES[self.config.policy], cluster_view(self.cluster), ports,
                                 ThreadFanOut(), self._finished, stop_event=self._stop, threads=DRIVER_THREADS)
        first = [(spec.name, first_event(history, time.time())) for spec, history in loaded.pending]
        self._write_summary()
        self._thread = threading.Thread(target=self._drive, args=(first,), name="coach-serve-driver", daemon=True)
        self._thread.start()

    def _sink(self, job: str) -> ObservedLog:
        return ObservedLog(ResultLog(self.run_dir / f"{job}.jsonl"), self.metrics, self.board)

    def _replay_log(self, job: str) -> None:
        """What a restarted server's board knows of a job's log: its lines, as if they had just been written."""
        log = self.run_dir / f"{job}.jsonl"
        start = 0
        while log.exists():
            try:
                records, total = window_of_log(log, start, MAX_RECORDS)
            except (OSError, RunInputError):
                return  # the job's page says what is wrong with its log when asked
            for record in records:
                self.board.recorded(record)
            start += len(records)
            if not records or start >= total:
                return

    def _drive(self, first) -> None:
        try:
            self.driver.run(first)
        finally:
            self._closing = True

    def begin_closing(self) -> None:
        """Take no more jobs and interrupt the unfinished ones (`interrupted`: a restart resumes them); safe from
        a signal handler."""
        self._closing = True
        self._stop.set()

    def close(self, timeout_s: float = 120.0) -> None:
        """Interrupt every unfinished job, wait for them to record their ends, close the ports."""
        with self._lock:
            self.begin_closing()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._stack.close()
        self._write_summary()
        if self.notifier is not None:
            self.notifier.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._closing

    # -- the served run's folder ------------------------------------------------------------------------------
    def _lock_folder(self) -> None:
        """One server per results folder: two would each rewrite run.json from their own memory."""
        try:
            self.results_root.mkdir(parents=True, exist_ok=True)
            created = not (self.results_root / LOCK).exists()
            handle = open(self.results_root / LOCK, "a")
        except OSError as error:
            raise Unservable([f"--results: {self.results_root}: {error.strerror or error}"]) from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise Unservable([f"--results: {self.results_root}: another `coach serve` serves this folder "
                              f"(it holds {LOCK})"]) from None
        self._stack.callback(handle.close)  # closing the file releases the lock
        if created:  # a folder refused (start() fails before it serves) is left without the file, as it was found
            self._stack.callback(lambda: self._thread is None and (self.results_root / LOCK).unlink(missing_ok=True))

    def _served_run(self) -> LoadedRun | None:
        pointer = self.results_root / POINTER
        if not pointer.exists():
            return None
        try:
            data = read_json(pointer)  # capped, regular files only
            run_id = data.get("run_id") if isinstance(data, dict) else None
            if not isinstance(run_id, str) or not run_id or "/" in run_id or run_id.startswith(".") or "\0" in run_id:
                raise ValueError(f"expected the name of a run folder, got {str(run_id)[:80]!r}")
        except (FileTooLarge, NotRegularFile) as error:
            raise ResumeError(f"{pointer}: (file): {error}") from None
        except (OSError, ValueError) as error:
            raise ResumeError(f"{pointer}: run_id: not a served run's pointer ({file_problem(error)})") from None
        check_run_folder(self.results_root / run_id)
        return load_run(self.results_root / run_id)

    def _new_run(self) -> LoadedRun:
        run_id = new_run_id()
        run_dir = self.results_root / run_id
        run_dir.mkdir(parents=True, exist_ok=False)
        config, cluster, started_s = self._new_config, self._new_cluster, time.time()
        manifest = {**manifest_dict(run_id, started_s, cluster, config, []), "served": True}
        write_json_atomic(run_dir / "run.json", manifest)
        write_json_atomic(self.results_root / POINTER, {"run_id": run_id})
        return LoadedRun(run_id, run_dir, manifest, cluster, config, [], {}, [], started_s)

    def _write_summary(self) -> dict:
        with self._lock:
            summary = self.summary()
            write_json_atomic(self.run_dir / "summary.json", summary)
            return summary

    def _finished(self, lc: JobLifecycle, now_s: float) -> None:
        with self._lock:
            outcome = self.outcomes[lc.spec.name]
            fill_outcome(outcome, lc.history, now_s)
        self._write_summary()
        if self.notifier is not None and outcome.stop_reason != INTERRUPTED:  # a restart resumes an interrupted job
            ending = self.board.ending(lc.spec.name, outcome.stop_reason or "")
            self.notifier.send(ended_payload(self.run_id, lc.spec.name, ending, outcome.to_dict()))

    # -- what clients ask for -------------------------------------------------------------------------------
    def refused(self, spec: JobSpec) -> str | None:
        """Why the run's policy cannot run this job (`FIELD: problem`), or None."""
        problem = RUN_POLICIES[self.config.policy].check(spec)
        return None if problem is None else f"{problem} (the server's policy is {self.config.policy})"

    def submit(self, spec: JobSpec) -> None:
        """Add the job to run.json, then to the running driver. JobExists, NotRunning."""
        with self._lock:
            if not self.running:
                raise NotRunning("the server is stopping; it takes no more jobs")
            if spec.name in self.outcomes:
                raise JobExists(f"job {spec.name!r} is in run {self.run_id} already; give the job another name")
            jobs = self.manifest["jobs"] + [spec.to_dict()]
            write_json_atomic(self.run_dir / "run.json", {**self.manifest, "jobs": jobs})
            self.manifest["jobs"] = jobs
            self.outcomes[spec.name] = JobOutcome(submitted_s=time.time(), budget=spec.budget)
            self.board.admit(spec.name, spec.max_epochs, spec.target_loss)
            self.sinks[spec.name] = self._sink(spec.name)
            lc = new_lifecycle(spec, self.run_id, self.cluster, self.config)
            self.board.show(lc.status())
            added = self.driver.call_soon(lambda: self._add(lc))
        self._write_summary()
        added.result(CALL_TIMEOUT_S)

    def _add(self, lc: JobLifecycle) -> None:
        """On the loop thread: a run that is stopping takes no job (run.json has it; a restart starts it)."""
        if self._stop.is_set():
            raise RuntimeError("the run has stopped")
        self.driver.add(lc, first_event(None, time.time()))

    def stop(self, name: str) -> StopAnswer:
        """Stop one job for good (`stopped_by_user`); an epoch in flight ends first. UnknownJob, NotRunning."""
        with self._lock:
            if name not in self.outcomes:
                raise UnknownJob(f"no job {name!r} in run {self.run_id}")
            if not self.running:
                raise NotRunning("the server is stopping; its jobs stop with it")
        done = self.driver.call_soon(lambda: self._stop_job(name)).result(CALL_TIMEOUT_S)
        return StopAnswer(name, done)

    def _stop_job(self, name: str) -> bool:
        lc = self.driver.jobs.get(name)
        if lc is None or lc.done:
            return True
        self.driver.stop(name, USER_STOP)
        return False

    def records(self, name: str, start: int = 0, limit: int = MAX_RECORDS) -> tuple[list[dict], int]:
        """Records start .. start + limit - 1 of the job's log as it is on disk, and how many it holds; one
        pass over the file, holding only those. UnknownJob; RunInputError when one of them is not a record."""
        with self._lock:
            if name not in self.outcomes:
                raise UnknownJob(f"no job {name!r} in run {self.run_id}")
        log = self.run_dir / f"{name}.jsonl"
        return window_of_log(log, start, min(limit, MAX_RECORDS)) if log.exists() else ([], 0)

    def overview(self, name: str) -> dict:
        """A job's page: its spec, its times (submitted, started, finished, JCT) and its row. UnknownJob."""
        with self._lock:
            if name not in self.outcomes:
                raise UnknownJob(f"no job {name!r} in run {self.run_id}")
            spec = next((job for job in self.manifest["jobs"] if job.get("name") == name), {})
            outcome = self.outcomes[name].to_dict()
        first, _ = self.records(name, 0, 1)
        times = {"submitted": outcome["submitted"], "started": first[0]["start"] if first else None,
                 "finished": outcome["finished"], "jct_s": outcome["jct_s"]}
        return {"run_id": self.run_id, "job": name, "spec": spec, "job_file": job_file_of(spec), "times": times,
                "outcome": outcome, "status": self.board.job(name)}

    def function_logs(self, name: str) -> dict[str, Path]:
        """The job's function logs (function name -> file). UnknownJob."""
        with self._lock:
            if name not in self.outcomes:
                raise UnknownJob(f"no job {name!r} in run {self.run_id}")
        return log_files(self.run_dir / "logs", name)

    def summary(self) -> dict:
        with self._lock:
            return summary_dict(self.run_id, self.started_s, self.outcomes, summary_extra(self.cluster, self.config))


def window_of_log(log: Path, start: int, limit: int) -> tuple[list[dict], int]:
    """Records start .. start + limit - 1 of a JSON-lines log (a torn last line is not one) and how many it holds."""
    records, total = [], 0
    for number, line in log_lines(log, allow_torn_tail=True):  # capped, regular files only
        if not line.strip():
            continue
        if start <= total < start + limit:
            records.append(checked_line(log, number, line))
        total += 1
    return records, total


def job_file_of(spec: dict) -> dict:
    """A job's spec as a job file would say it (what `clone` puts in the submit form): its fields, the model by path."""
    fields = {**spec, "model": spec.get("model_path", spec.get("model"))}
    return {key: fields[key] for key in JOB_FIELDS if fields.get(key) is not None}


def _status_of(spec: JobSpec, outcome: JobOutcome) -> JobStatus:
    """A finished job as its summary tells it (a restarted server has no lifecycle for it)."""
    reason = outcome.stop_reason
    return JobStatus(job=spec.name, phase=ended_phase(reason or ""), epoch=outcome.epochs, loss=outcome.final_loss,
                     val_loss=outcome.final_val_loss, workers=outcome.workers, servers=outcome.servers,
                     cost=outcome.total_cost, budget=spec.budget, message=reason or "")


__all__ = ["ServedRun", "JobExists", "UnknownJob", "NotRunning", "Unservable", "StopAnswer", "RunInputError"]
