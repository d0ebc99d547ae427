"""What every driver does: deliver events to lifecycles and carry their commands out against the ports.

A driver owns the run's lifecycles, asks the run's policy for counts with every job in view, polls the placement
for the jobs that wait for their quorum, and turns deploys and epochs into events. How time passes and how
blocking work completes is the subclass's: the live driver uses the wall clock and threads, the virtual-time
driver a virtual clock and a heap of future events. Side effects: only through the ports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from coach.domain.contracts import AheadRequest, ContractError, PsAddress, WarmReply, WarmRequest, WorkerReply
from coach.domain.identity import FunctionId, Role, has_quorum
from coach.domain.invocation import ERROR, UNREACHABLE, Failure, FunctionRef
from coach.drivers.fanout import ThreadFanOut, SequentialFanOut, Together
from coach.drivers.rendezvous import Rendezvous
from coach.lifecycle import commands as cmd
from coach.lifecycle import events as ev
from coach.lifecycle.job import Awaiting, JobLifecycle
from coach.policy.run_policy import RunClusterView, RunJobView, RunPolicy
from coach.ports import CheckpointStore, Clock, Placement, Platform, RecordSink, View

FanOut = ThreadFanOut | SequentialFanOut
#: An AheadRequest only has a host tell its idle spare to join (or fork one that does): answered in milliseconds, or
#: the function is not there.
AHEAD_TIMEOUT_S = 5.0


@dataclass
class Ports:
    """The implementations one run composed from its configuration."""

    placement: Placement
    platform: Platform
    store: CheckpointStore
    sinks: Mapping[str, RecordSink]  # job -> its log
    view: View


@dataclass(frozen=True)
class Work:
    """Blocking work a command started; `run()` does it, `to_event(result, now_s)` reports it."""

    job: str
    run: Callable[[], object]
    to_event: Callable[[object, float], ev.Event | None]  # None: nothing to report
    duration_s: Callable[[object], float]  # how long it took (the virtual driver's clock advances by it)
    cut: Callable[[object, float], object] | None = None  # its result had a stop closed the platform after s


class Driver:
    """The shared part of the live and virtual-time drivers."""

    def __init__(self, lifecycles: Sequence[JobLifecycle], policy: RunPolicy, cluster: RunClusterView, ports: Ports,
                 fan_out: FanOut, on_finish: Callable[[JobLifecycle, float], None] = lambda lc, now_s: None):
        self.jobs = {lc.spec.name: lc for lc in lifecycles}
        self.order = [lc.spec.name for lc in lifecycles]  # submission order
        self.policy = policy
        self.cluster = cluster
        self.ports = ports
        self.fan_out = fan_out
        self.on_finish = on_finish
        self.refs: dict[FunctionId, FunctionRef] = {}  # deployed functions of every job
        self.rendezvous = Rendezvous()
        self._asking: set[str] = set()
        self._placement_changed = False
        self._index = {name: i for i, name in enumerate(self.order)}
        self._waiting: set[str] = set()  # jobs whose lifecycle waits for Bindings
        self._fresh: set[str] = set()  # waiting jobs not polled since their watch began
        self._told: dict[str, tuple] = {}  # job -> (bound, why, placement version) of its last poll in this watch
        self._quiet: tuple[object, float] | None = None  # (placement version, earliest deadline): every waiting
        # job has been polled at this version, so until it changes or the deadline comes, only fresh ones need a poll
        # what the policy sees of every unfinished job, in submission order; rebuilt only for jobs that changed
        self._views = {lc.spec.name: RunJobView(lc.spec, lc.history, lc.held_slots, False) for lc in lifecycles}
        self._changed: set[str] = set()  # jobs that handled an event since the last policy round
        self._asked: set[str] = set()  # jobs whose views said `asking` in the last round
        ports.placement.register(self.order)

    # -- to be provided by a subclass -------------------------------------------------------------------------
    clock: Clock  # the subclass's: wall or virtual

    def now_s(self) -> float:
        return self.clock.now_s()

    def start_work(self, work: Work) -> None:
        """Run blocking work; its event reaches `deliver` when it is done."""
        raise NotImplementedError

    def set_timer(self, job: str, at_s: float) -> None:
        """Deliver the job's timer (TimerFired, or a placement poll while it waits for its quorum) at `at_s`."""
        raise NotImplementedError

    # -- delivering ---------------------------------------------------------------------------------------------
    def deliver(self, job: str, event: ev.Event) -> None:
        """One event to one job, its commands carried out, then whatever rounds they call for."""
        self._dispatch(job, event)
        self.settle()

    def timer(self, job: str) -> None:
        """A job's timer came: a placement poll while it waits for its quorum, else TimerFired."""
        lc = self.jobs[job]
        if lc.awaiting == Awaiting.BINDINGS:
            self._poll(job)
        else:
            self._dispatch(job, ev.TimerFired(self.now_s()))
        self.settle()

    def _dispatch(self, job: str, event: ev.Event) -> None:
        lc = self.jobs[job]
        try:
            commands = lc.handle(event)
            for command in commands:
                self._execute(job, command)
        except Exception as error:  # a bug in one job, or a port failing it, must not take the others down
            self.fail(job, error)
            return
        self._noted(job)

    def fail(self, job: str, error: BaseException) -> None:
        """Stop the job as an internal error (its lifecycle writes why), the run goes on."""
        for command in self.jobs[job].crash(self.now_s(), error):
            self._execute(job, command)
        self._noted(job)

    def _noted(self, job: str) -> None:
        """What the driver keeps of a job after it handled something: the policy's view, waiting, the view."""
        lc = self.jobs[job]
        self._changed.add(job)
        if lc.awaiting == Awaiting.BINDINGS:
            self._waiting.add(job)
        else:
            self._waiting.discard(job)
        self.ports.view.update(lc.status())

    def settle(self) -> None:
        """Answer what the last events asked for: policy decisions and placement polls, until nothing changes."""
        while True:
            if self._asking:
                self._policy_round()
            elif self._placement_changed:
                self._placement_changed = False
                self._poll_waiting_jobs()
            else:
                return

    def poll_waiting(self) -> None:
        """Let the scheduler retry pending pods (its backoffs are timed) for every job that waits."""
        self._placement_changed = True
        self.settle()

    def add(self, lc: JobLifecycle, first: ev.Event) -> None:
        """A job that arrives while the others run (a server's submission): last in submission order."""
        name = lc.spec.name
        if name in self.jobs:
            raise ValueError(f"job {name!r} is in this run already")
        self.jobs[name] = lc
        self._index[name] = len(self.order)
        self.order.append(name)
        self._views[name] = RunJobView(lc.spec, lc.history, lc.held_slots, False)
        self.ports.placement.register([name])
        self.deliver(name, first)

    def stop(self, job: str, reason: str) -> None:
        """Stop one job with `reason`; an epoch or deploy in flight ends first, so its line is kept."""
        if not self.jobs[job].done:
            self.deliver(job, ev.StopRequested(self.now_s(), reason))

    def stop_all(self) -> None:
        for job in self.order:
            if not self.jobs[job].done:
                self._dispatch(job, ev.StopRequested(self.now_s()))
        self.settle()

    @property
    def finished(self) -> bool:
        return all(lc.done for lc in self.jobs.values())

    @property
    def placement_waited_for(self) -> bool:
        """True while some job waits for its quorum."""
        return bool(self._waiting)

    def _poll_waiting_jobs(self) -> None:
        """Bindings for every job that waits for its quorum, in submission order.

        The first poll runs the scheduler now. The placement's `version` (it changes whenever a poll or explain
        may answer differently) lets the others be skipped when they would be no news: a job that heard the
        current version's answer in this watch, before its deadline, would hear it again and do nothing.
        """
        jobs, index, waiting = self.jobs, self._index.__getitem__, self._waiting
        if not waiting:
            return
        placement = self.ports.placement
        first = min(waiting, key=index)
        self._poll(first)
        version, now_s = placement.version, self.now_s()
        quiet = self._quiet is not None and self._quiet[0] == version and now_s < self._quiet[1]
        if quiet:  # every waiting job but the fresh ones heard this version's answer already
            others, deadline_s = sorted(self._fresh & waiting, key=index), self._quiet[1]
        else:
            others, deadline_s = sorted(waiting - {first}, key=index), math.inf
        if first in waiting:
            deadline_s = min(deadline_s, jobs[first].watch_deadline_s)
        for job in others:
            lc = jobs[job]
            if lc.awaiting != Awaiting.BINDINGS:
                continue
            told = self._told.get(job)
            if (job in self._fresh or told is None or told[2] != placement.version
                    or now_s >= lc.watch_deadline_s):
                self._poll(job)
            if lc.awaiting == Awaiting.BINDINGS:
                deadline_s = min(deadline_s, lc.watch_deadline_s)
        if placement.version != version or self._fresh & waiting:
            self._quiet = None  # a poll changed the placement: the next pass looks at every job again
        else:
            self._quiet = (version, deadline_s)

    def _poll(self, job: str) -> None:
        now_s = self.now_s()
        placement = self.ports.placement
        bound = placement.poll(job, now_s)
        why = "" if bound and has_quorum(bound) else placement.explain(job, now_s)
        self._fresh.discard(job)
        before, self._told[job] = self._told.get(job), (bound, why, placement.version)
        if before is not None and before[:2] == (bound, why) and now_s < self.jobs[job].watch_deadline_s:
            return  # the job heard exactly this in this watch: hearing it again would change nothing
        self._dispatch(job, ev.Bindings(now_s, bound, why))

    def _policy_round(self) -> None:
        """The run's policy decides for every unfinished job at once; the asking ones get their answer."""
        asking, self._asking = self._asking, set()
        for name in self._changed | asking | self._asked:  # the views of the others are as they were
            lc = self.jobs[name]
            if lc.done:
                self._views.pop(name, None)
            elif name in self._views:
                self._views[name] = RunJobView(lc.spec, lc.history, lc.held_slots, name in asking)
        self._changed, self._asked = set(), asking
        views = list(self._views.values())
        now_s = self.now_s()
        decisions = self.policy.decide(self.cluster, views, now_s)
        for job in self.order:
            if job in asking:
                self._dispatch(job, ev.Decided(now_s, decisions[job]))

    # -- commands -------------------------------------------------------------------------------------------
    def _execute(self, job: str, command: cmd.Command) -> None:
        ports = self.ports
        if isinstance(command, cmd.AskPolicy):
            self._asking.add(job)
        elif isinstance(command, cmd.Submit):
            ports.placement.submit(job, command.ids)
            self._placement_changed = True
        elif isinstance(command, cmd.Release):
            ports.placement.release(command.ids)
            self._placement_changed = True
        elif isinstance(command, cmd.WatchPlacement):
            self._told.pop(job, None)
            self._fresh.add(job)  # a new watch: its first Bindings is news, whatever it says
            self._placement_changed = True
            self.set_timer(job, command.deadline_s)
        elif isinstance(command, cmd.WaitUntil):
            self.set_timer(job, command.at_s)
        elif isinstance(command, cmd.Deploy):
            self.start_work(self._deploy_work(job, command))
        elif isinstance(command, cmd.Remove):
            refs = [self.refs.pop(fid) for fid in command.ids if fid in self.refs]
            if refs:
                self.start_work(Work(job, lambda: [ports.platform.remove(r) for r in refs], lambda r, t: None,
                                     lambda r: 0.0))
        elif isinstance(command, cmd.InvokeEpoch):
            self.start_work(self._epoch_work(job, command))
        elif isinstance(command, cmd.WriteRecord):
            ports.sinks[job].append(command.record)
        elif isinstance(command, cmd.PruneCheckpoints):
            ports.store.prune(job, command.keep)
        elif isinstance(command, cmd.Finish):
            self._views.pop(job, None)  # policies see unfinished jobs only
            self.rendezvous.forget(job)
            ports.sinks[job].close()
            self.on_finish(self.jobs[job], self.now_s())
        else:
            raise TypeError(f"unknown command {command!r}")

    def _deploy_work(self, job: str, command: cmd.Deploy) -> Work:
        platform, fan_out = self.ports.platform, self.fan_out

        def run() -> tuple[list[FunctionRef], Failure | None, float, int | None]:
            results = fan_out.map(lambda pair: platform.deploy(*pair), command.placements)
            refs = [r for r in results if isinstance(r, FunctionRef)]
            failures = [r for r in results if isinstance(r, Failure)]
            took_s = max((getattr(r, "duration_s", 0.0) for r in failures), default=0.0)
            workers = [r for r in refs if r.fid.role == Role.WORKER]
            train_samples = None
            if not failures and workers:  # load the model and its data now, not inside the first timed epoch
                warm = WarmRequest(command.model_path, command.batch_size)
                warmed = fan_out.together(platform, workers, lambda ref: warm, 600.0)
                took_s = max(took_s, warmed.wall_s)
                if warmed.failure:
                    failures.append(warmed.failure)
                train_samples = _told_train_samples(warmed.replies.values())
            return refs, (failures[0] if failures else None), took_s, train_samples

        def to_event(result, now_s: float) -> ev.Event:
            refs, failure, _, train_samples = result
            self.refs.update({ref.fid: ref for ref in refs})
            return ev.Deployed(now_s, tuple(ref.fid for ref in refs), failure, train_samples)

        return Work(job, run, to_event, lambda result: result[2])

    def _epoch_work(self, job: str, command: cmd.InvokeEpoch) -> Work:
        platform, store, fan_out = self.ports.platform, self.ports.store, self.fan_out
        refs = [self.refs[fid] for fid, _ in command.functions]
        following = [self.refs[fid] for fid in command.following if fid in self.refs]
        started_s = self.now_s()

        def run():
            meeting = self.rendezvous.meeting(platform, job, refs, following)
            save = store.prefix(job, command.save_tag)

            def request_for(ref: FunctionRef):
                ps = PsAddress(*meeting.address, command.servers, command.workers, ref.host)
                announced = meeting.next_of(ref)
                return command.request(ref.fid, ps, save, meeting.id, announced)

            # the next step's functions this one does not use hear where it meets from an AheadRequest instead
            idle = {ref: meeting.next_of(ref) for ref in following if ref not in refs}
            idle = {ref: ahead for ref, ahead in idle.items() if ahead is not None}
            told = fan_out.beside(platform, list(idle), lambda ref: AheadRequest(ref.fid.role.value, idle[ref]),
                                  AHEAD_TIMEOUT_S)
            together = fan_out.together(platform, refs, request_for, command.timeout_s)
            told()
            return epoch_result(together, refs, store)

        def to_event(result, now_s: float) -> ev.Event:
            failure, replies, durations, wall_s, checkpoint = result
            if failure is not None:
                return ev.EpochFailed(now_s, failure, durations)
            return ev.EpochDone(now_s, started_s, wall_s, replies, durations, checkpoint)

        def cut(result, after_s: float):
            """As when a stop closes the platform `after_s` into the epoch: every call fails as unreachable."""
            durations = {fid: min(took_s, after_s) for fid, took_s in result[2].items()}
            return Failure(job, UNREACHABLE, "platform closed", after_s), {}, durations, after_s, None

        return Work(job, run, to_event, lambda result: result[3], cut)


def _told_train_samples(replies) -> int | None:
    """The training set's size the warmed workers agree on; None when a reply does not tell it or they disagree
    (a model file whose data is not the same in every host: its epochs will say)."""
    told = set()
    for reply in replies:
        try:
            told.add(WarmReply.from_dict(reply.body).train_samples)
        except ContractError:
            return None
    return told.pop() if len(told) == 1 else None


def epoch_result(together: Together, refs: Sequence[FunctionRef], store: CheckpointStore):
    """(failure, worker replies, slot seconds per function, wall seconds, checkpoint) from an epoch's replies."""
    by_name = {ref.name: ref for ref in refs}
    durations = {by_name[name].fid: reply.duration_s for name, reply in together.replies.items()}
    if together.failure is not None:
        failed = by_name.get(together.failure.function)
        if failed is not None:
            durations[failed.fid] = together.failure.duration_s
        return together.failure, {}, durations, together.wall_s, None
    replies: dict[FunctionId, WorkerReply] = {}
    for name, reply in together.replies.items():
        if by_name[name].fid.role != Role.WORKER:
            continue
        try:
            replies[by_name[name].fid] = WorkerReply.from_dict(reply.body)
        except ContractError as error:
            return Failure(name, ERROR, f"reply: {error}", reply.duration_s), {}, durations, together.wall_s, None
    rank0 = [r for r in replies.values() if r.rank == 0]
    saved = rank0[0].checkpoint_saved if rank0 else None
    checkpoint = saved if saved and store.complete(saved) else None
    return None, replies, durations, together.wall_s, checkpoint

