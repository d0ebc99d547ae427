"""Bindings sent from a child process: the same contract as `binder.Binder`, with the HTTP off the scheduler's GIL.

A binding's POST through the official client costs the sending process as much CPU as the rest of the
scheduler's work on the pod (urllib3 and http.client, as py-spy shows); in one process the
two share one core. Here the scheduler's process only hands batches of (id, namespace, name, uid, node) over a
socket pair to a child process (`python -m coach.kube_scheduler.bind_process`, a fresh interpreter: never a
fork of a process with threads, and never a re-import of the caller's main module as multiprocessing's spawn
does) whose threads POST through their own `ApiClient`, built from a pickled copy of the parent's client
configuration, and send the outcomes back in batches.

Credentials: a kubeconfig with a token gives the configuration a refresh hook (a closure, which cannot cross a
process boundary, and which renews expiring tokens from exec plugins or OIDC). The child's copy has none; the
parent asks its own configuration for the token every AUTH_REFRESH_S (which runs the hook) and sends the
child the credentials whenever they changed.

Leadership crosses the process boundary as one number, the monotonic time until which this replica leads (0: it
does not): the parent looks at it whenever its elector's answer changes (`leadership_changed`) and at least every
REFRESH_S, and sends it when it differs from what the child has; the child checks the latest right before each
POST, as `Binder` does. CLOCK_MONOTONIC is one clock for every process of the machine. The child ignores
SIGINT (the parent stops it) and ends when its socket closes. If it dies, every binding it held and every later
one is reported FAILED and `healthy()` turns false, so /healthz tells Kubernetes to restart the scheduler.
"""

from __future__ import annotations

import copy
import itertools
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Callable

from kubernetes import client

from coach.kube_scheduler.binder import FAILED, NOT_LEADER, BindOutcome, failure_detail, post_binding
from coach.kube_scheduler.objects import PodInfo
from coach.kube_scheduler.rest import JsonPoster

#: How often the parent looks at its leadership (and sends it to the child if it changed), at the least.
REFRESH_S = 0.02
#: How often the parent renews its credentials (its client's refresh hook) and passes changes on to the child.
AUTH_REFRESH_S = 1.0
#: How long the child lets outcomes gather, so that one message carries several (against sending each at once,
#: benchmarks/kube_scheduler_throughput.py shows no difference beyond the machine's noise).
ANSWER_BATCH_S = 0.005
#: How long stop() waits for the child to finish the bindings it is sending.
STOP_WAIT_S = 60.0

_STOP = "stop"  # parent -> child: report what is queued as not sent, finish, answer _DONE
_DONE = "done"  # child -> parent: the last outcomes were sent
# parent -> child, otherwise: first (configuration, threads, timeout_s), then ("leads", monotonic s),
# ("auth", api_key dict) and batches


class ProcessBinder:
    """`Binder`'s interface (start, bind, busy, stop) over a child process; see the module docstring."""

    def __init__(self, api: client.ApiClient, leads_until_s: Callable[[], float],
                 report: Callable[[BindOutcome], None], threads: int = 4, timeout_s: float = 30.0):
        self._configuration = api.configuration
        self._api_key = dict(api.configuration.api_key)  # the credentials the child has
        child_configuration = copy.copy(api.configuration)
        child_configuration.refresh_api_key_hook = None  # a closure: the parent refreshes and passes keys on
        child_configuration.api_key = dict(self._api_key)
        self._start_message = (child_configuration, threads, timeout_s)
        self._conn: Connection | None = None
        self._process: subprocess.Popen | None = None
        self._leads_until_s = leads_until_s
        self._report = report
        self._threads = threads
        self._ids = itertools.count()
        self._held: dict[int, tuple[PodInfo, str, float]] = {}  # id -> (pod, node, decided_s), until answered
        self._outbox: list[tuple] = []  # bindings not yet handed to the child
        self._cond = threading.Condition()
        self._closing = False
        self._dead = ""  # why the child is gone, once it is
        self._sender = threading.Thread(target=self._send_loop, name="coach-scheduler-bind-send", daemon=True)
        self._reader = threading.Thread(target=self._read_loop, name="coach-scheduler-bind-read", daemon=True)

    def start(self) -> ProcessBinder:
        ours, theirs = socket.socketpair()
        with ours, theirs:
            self._process = subprocess.Popen([sys.executable, "-m", __name__, str(theirs.fileno())],
                                             pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
            self._conn = Connection(os.dup(ours.fileno()))  # the child's end closes here: its exit ends ours
        self._conn.send(self._start_message)
        self._sender.start()
        self._reader.start()
        return self

    def bind(self, pod: PodInfo, node: str) -> None:
        """Queue one binding; returns at once."""
        decided_s = time.monotonic()
        with self._cond:
            if not (self._dead or self._closing):
                key = next(self._ids)
                self._held[key] = (pod, node, decided_s)
                self._outbox.append((key, pod.namespace, pod.name, pod.uid, node))
                self._cond.notify()
                return
            result, detail = (FAILED, self._dead) if self._dead else (NOT_LEADER, "")
        self._report(BindOutcome(pod, node, result, detail=detail, decided_s=decided_s))

    def busy(self) -> bool:
        """Bindings are waiting for a thread (more are queued than the child's threads can send at once)."""
        return len(self._held) > self._threads

    def leadership_changed(self) -> None:
        """Tell the child now (not at the next refresh) that the elector's answer changed."""
        with self._cond:
            self._cond.notify()

    def healthy(self) -> bool:
        return not self._dead

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def stop(self) -> None:
        """Finish the bindings being sent, report the queued ones as not sent, end the child and the threads."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            unsent, self._outbox = self._outbox, []
            self._cond.notify()
        for key, *_ in unsent:
            self._answer(key, NOT_LEADER, None, "", 0.0)
        if self._process is None:  # never started
            return
        self._sender.join()
        self._reader.join(STOP_WAIT_S)
        try:
            self._process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._conn.close()
        self._fail_held("the binding process was stopped")

    # ---- threads of the parent ---------------------------------------------------------------------------------

    def _send_loop(self) -> None:
        next_auth_s = time.monotonic() + AUTH_REFRESH_S
        sent_leads = None  # what the child last heard
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._outbox or self._closing, REFRESH_S)
                batch, self._outbox = self._outbox, []
                closing = self._closing
            try:
                if time.monotonic() >= next_auth_s:
                    next_auth_s = time.monotonic() + AUTH_REFRESH_S
                    self._pass_credentials_on()
                leads = 0.0 if closing else self._leads_until_s()
                if leads != sent_leads:
                    self._conn.send(("leads", leads))
                    sent_leads = leads
                if batch:
                    self._conn.send(batch)
                if closing:
                    self._conn.send(_STOP)
                    return
            except (OSError, ValueError):  # the child is gone: the reader reports it
                return

    def _pass_credentials_on(self) -> None:
        configuration = self._configuration
        if configuration.refresh_api_key_hook is not None:
            configuration.refresh_api_key_hook(configuration)
        keys = dict(configuration.api_key)
        if keys != self._api_key:
            self._api_key = keys
            self._conn.send(("auth", keys))

    def _read_loop(self) -> None:
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                break
            if message == _DONE:
                return
            for key, result, current, detail, answered_s in message:
                self._answer(key, result, current, detail, answered_s)
        try:
            code = self._process.wait(1.0)
        except subprocess.TimeoutExpired:
            code = None
        with self._cond:
            self._dead = f"the binding process ended (exit code {code})"
        self._fail_held(self._dead)

    def _answer(self, key: int, result: str, current: dict | None, detail: str, answered_s: float) -> None:
        with self._cond:
            held = self._held.pop(key, None)
        if held is not None:
            pod, node, decided_s = held
            self._report(BindOutcome(pod, node, result, current=current, detail=detail, decided_s=decided_s,
                                     answered_s=answered_s))

    def _fail_held(self, why: str) -> None:
        with self._cond:
            keys = list(self._held)
        for key in keys:
            self._answer(key, FAILED, None, why, time.monotonic())


def serve_bindings(conn: Connection) -> None:
    """The child: POST every binding the parent sends, from its threads; send the outcomes back."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        configuration, threads, timeout_s = conn.recv()
    except (EOFError, OSError):  # the parent is gone already
        return
    api = client.ApiClient(configuration)
    core, poster = client.CoreV1Api(api), JsonPoster(api, (5.0, timeout_s))
    work: queue.SimpleQueue = queue.SimpleQueue()
    answered: list[tuple] = []
    cond = threading.Condition()
    state = {"closing": False, "working": threads, "leads_until_s": 0.0}

    def post(key: int, namespace: str, name: str, uid: str, node: str) -> tuple:
        if state["closing"] or time.monotonic() >= state["leads_until_s"]:
            return key, NOT_LEADER, None, "", 0.0
        try:
            result, current, detail = post_binding(poster, core, namespace, name, uid, node)
        except Exception as error:  # never lose an outcome: the parent must learn that the pod is not bound
            result, current, detail = FAILED, None, failure_detail(error)
        return key, result, current, detail, time.monotonic()

    def work_loop() -> None:
        while (item := work.get()) is not None:
            outcome = post(*item)
            with cond:
                answered.append(outcome)
                cond.notify()
        with cond:
            state["working"] -= 1
            cond.notify()

    def answer_loop() -> None:
        while True:
            with cond:
                cond.wait_for(lambda: answered or not state["working"])
            time.sleep(ANSWER_BATCH_S)  # let more outcomes gather
            with cond:
                batch = answered[:]
                answered.clear()
                finished = not state["working"]
            try:
                if batch:
                    conn.send(batch)
                if finished:
                    conn.send(_DONE)
                    return
            except OSError:  # the parent is gone: nobody to tell
                return

    workers = [threading.Thread(target=work_loop, daemon=True) for _ in range(threads)]
    answers = threading.Thread(target=answer_loop, daemon=True)
    for thread in (*workers, answers):
        thread.start()
    try:
        while (message := conn.recv()) != _STOP:
            if message[0] == "leads":
                state["leads_until_s"] = message[1]
                continue
            if message[0] == "auth":
                configuration.api_key = message[1]  # read afresh by every request's auth settings
                continue
            for item in message:
                work.put(item)
    except (EOFError, OSError):  # the parent is gone
        pass
    state["closing"] = True
    for _ in workers:
        work.put(None)
    answers.join()
    api.close()


if __name__ == "__main__":
    serve_bindings(Connection(int(sys.argv[1])))
