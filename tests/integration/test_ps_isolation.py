"""A job's ps-lite traffic accepts only its own job (issue 37): a local process that sends bytes to a running LeNet
job's ps-lite ports neither reaches them (each job's nodes meet in a network namespace of the job's own) nor, where
it does reach them (no namespace), fails the job: such an attempt is retried without counting against it.

The probe: every TCP port a process of the job listens on, in any of its threads' network namespaces, gets a
client's HTTP request, pipelined. A bare `GET / HTTP/1.1\\r\\n\\r\\n` is not enough to break ps-lite: ZeroMQ reads a
peer whose greeting is not ZMTP 3's as ZMTP 1.0 frames, whose first byte is their length ('G' = 71), so 18 bytes
wait for more. A longer request completes frames, which ps-lite then fails to parse and aborts its process with
`Check failed: pb.ParseFromArray(meta_buf, buf_size): failed to parse string into protobuf`.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

from coach.domain.cluster import DEFAULT_CLUSTER
from coach.platforms import netns
from coach.storage.results import read_log
from coach.app.run import run_jobs

from tests.support import stderr_of

from .conftest import LENET, host_processes

PROBE = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: probe\r\n\r\n" * 40
LISTEN = "0A"  # /proc/net/tcp's state of a listening socket


def job_listeners(marker: str) -> set[tuple[str, int, bool]]:
    """(network namespace, port, whether it is ps-lite's) for every listening TCP socket of the job's hosts and epoch
    children, in whichever namespace each of their threads is. A host's own socket (its HTTP trigger, which its
    children inherit) is not ps-lite's."""
    found, of_hosts = set(), set()
    for process in Path("/proc").glob("[0-9]*"):
        log = stderr_of(process.name)
        if marker not in Path(log).name:
            continue
        try:
            parent = next(line.split()[1] for line in (process / "status").read_text().splitlines()
                          if line.startswith("PPid:"))
            sockets = {os.readlink(fd) for fd in (process / "fd").iterdir()}
            if stderr_of(parent) != log:  # a host: its parent is the template, whose stderr is not the log
                of_hosts |= sockets
            for task in (process / "task").iterdir():
                namespace = os.readlink(task / "ns" / "net")
                for line in (task / "net" / "tcp").read_text().splitlines()[1:]:
                    fields = line.split()
                    if fields[3] == LISTEN and f"socket:[{fields[9]}]" in sockets:
                        found.add((namespace, int(fields[1].split(":")[1], 16), f"socket:[{fields[9]}]"))
        except (OSError, StopIteration):  # the process or thread ended while we looked
            continue
    return {(namespace, port, inode not in of_hosts) for namespace, port, inode in found}


class Probe:
    """A local process's bytes at every port of the job it finds, once a first epoch is logged; records what it
    reached."""

    def __init__(self, marker: str, results: Path, rounds: int | None = None):
        self.marker, self.results, self.rounds = marker, results, rounds
        self.seen: set[tuple[str, int, bool]] = set()  # every listener found
        self.reached: list[tuple[str, int, bool]] = []  # those a connection from here reached
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set() and not any(p.read_text() for p in self.results.glob(f"*/{self.marker}*.jsonl")):
            time.sleep(0.05)
        while not self._stop.is_set() and self.rounds != 0:
            new = job_listeners(self.marker) - self.seen
            self.seen |= new
            for listener in new:
                try:
                    with socket.create_connection(("127.0.0.1", listener[1]), timeout=1.0) as sock:
                        sock.sendall(PROBE)
                        time.sleep(0.05)
                    self.reached.append(listener)
                except OSError:  # refused: nothing listens there in this process's namespace
                    pass
            if self.rounds is not None and any(child for _, _, child in new):  # a round that found ps-lite ports
                self.rounds -= 1
            time.sleep(0.02)


def test_a_local_process_cannot_reach_a_jobs_ps_lite_ports(tmp_path, make_job, marker):
    job = make_job(f"{marker}-lenet", model=LENET, max_epochs=3, max_retries=0)
    results = tmp_path / "results"
    with Probe(marker, results) as probe:
        report = run_jobs([job], DEFAULT_CLUSTER, results, view="quiet")

    records = read_log(report.run_dir / f"{job.name}.jsonl")
    assert [(r["phase"], r["epoch"]) for r in records] == [("training", 1), ("training", 2), ("training", 3)]
    assert records[-1]["stop_reason"] == "max_epochs" and report.exit_code == 0
    ours = os.readlink("/proc/self/ns/net")
    ps_lite = {(ns, port) for ns, port, child in probe.seen if child}
    assert ps_lite, "the probe found no ps-lite port of the job"
    # the job's ps-lite nodes listened in one namespace of the job's own, which no connection from here enters (a
    # host's inherited HTTP socket, seen while its host is being stopped, may look like a child's here: ours)
    assert len({ns for ns, _ in ps_lite} - {ours}) == 1
    assert not [listener for listener in probe.reached if listener[0] != ours]
    assert host_processes(marker) == []


def test_an_epoch_broken_from_outside_is_retried_without_counting_against_the_job(tmp_path, make_job, marker,
                                                                                   monkeypatch):
    def no_namespace() -> int:
        raise netns.NamespaceError("unshare(CLONE_NEWNET): Operation not permitted (this test)")

    monkeypatch.setattr(netns, "create", no_namespace)  # as without the privilege: ps-lite on the shared loopback
    job = make_job(f"{marker}-lenet", model=LENET, max_epochs=3, max_retries=0)  # an own failure would end it
    results = tmp_path / "results"
    with Probe(marker, results, rounds=1) as probe:
        report = run_jobs([job], DEFAULT_CLUSTER, results, view="quiet")

    assert [listener for listener in probe.reached if listener[2]], "the probe reached no ps-lite port"
    records = read_log(report.run_dir / f"{job.name}.jsonl")
    retries = [r for r in records if r["phase"] == "retry"]
    assert retries and all(r["foreign"] is True and r["will_retry"] is True for r in retries), retries
    assert all("failed to parse string into protobuf" in r["error"] for r in retries)
    assert all(r["cost"] > 0 for r in retries)  # what the attempt held is still paid, within the budget
    epochs = [r for r in records if r["phase"] == "training"]
    assert [r["epoch"] for r in epochs] == [1, 2, 3] and epochs[-1]["stop_reason"] == "max_epochs"
    assert records[-1]["cumulative_cost"] <= job.budget
    logs = "".join(path.read_text() for path in (report.run_dir / "logs").glob("*.log"))
    assert "failed to parse string into protobuf" in logs  # what ps-lite said when the probe's bytes reached it
    assert report.exit_code == 0
    assert host_processes(marker) == []
