"""The whole Kubernetes + Nuclio stack on one machine, over loopback: what `make demo-k8s` and the end-to-end
tests run `coach run --platform nuclio` against.

Parts: the fake kube-apiserver with one node per node of the cluster file (capacity in the `coach.io/slots`
label), moto's S3 server with a bucket for checkpoints, the fake Nuclio dashboard (it creates each function's pod
in the apiserver, waits for Coach's scheduler to bind it, then starts the function's real warm host), and `coach
scheduler` in its own process. The controller, `coach run`, is another process, as on a real cluster.

`python -m tests.fakes.stack [--cluster FILE] [--results DIR] [--profile gang] JOB.yaml...` starts the stack,
runs the jobs, prints where everything was, and stops it all. Side effects: servers on 127.0.0.1, processes
(the scheduler, `coach run`, function hosts), files under the work folder.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kubernetes import client

from coach.domain.cluster import ClusterSpec
from coach.domain.kube import SLOTS_LABEL
from tests.fakes.kube_apiserver import FakeApiServer
from tests.fakes.nuclio_dashboard import FakeDashboard
from tests.fakes.s3 import LoopbackS3
from coach.placement.kube_connect import connect

BUCKET = "coach-checkpoints"
STOP_GRACE_S = 10.0
LEASE_DURATION_S = 5  # a killed scheduler's successor waits at most this long for its Lease to expire


def coach_command() -> list[str]:
    """How to start the `coach` command of this interpreter (the venv's console script when there is one)."""
    script = Path(sys.executable).with_name("coach")
    return [str(script)] if script.exists() else [sys.executable, "-m", "coach.ui.cli"]


@dataclass
class LoopbackStack:
    """The stack's parts; `start()` brings them up in dependency order, `stop()` takes them down in reverse."""

    workdir: Path  # kubeconfig, logs of the dashboard's hosts and of the scheduler
    cluster: ClusterSpec  # one fake node per node, with its slots
    namespace: str = "default"
    profile: str = "gang"  # the scheduler's profile
    api: FakeApiServer | None = None
    s3: LoopbackS3 | None = None
    dashboard: FakeDashboard | None = None
    scheduler: subprocess.Popen | None = None
    kubeconfig: Path | None = None
    schedulers_started: int = 0
    env: dict[str, str] = field(default_factory=dict)  # what the controller and the functions read (S3 address)
    setenv: Callable[[str, str], None] = os.environ.__setitem__  # tests pass monkeypatch.setenv

    def start(self, with_scheduler: bool = True) -> "LoopbackStack":
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.api = FakeApiServer().start()
        self.kubeconfig = self.api.write_kubeconfig(self.workdir / "kubeconfig", namespace=self.namespace)
        self._add_nodes()
        self.s3 = LoopbackS3().start()
        self.s3.make_bucket(BUCKET)
        self.env = self.s3.environment()
        for key, value in self.env.items():  # the dashboard's warm hosts inherit this process's environment, as
            self.setenv(key, value)  # pods on a cluster get the Secret's (deploy/nuclio/platform.yaml)
        self.dashboard = FakeDashboard(self.kubeconfig, self.namespace, log_dir=self.workdir / "functions").start()
        if with_scheduler:
            self.start_scheduler()
        return self

    def _add_nodes(self) -> None:
        api, problem = connect(str(self.kubeconfig))
        assert api is not None, problem  # the kubeconfig the fake apiserver just wrote
        with api:
            core = client.CoreV1Api(api)
            for node in self.cluster.nodes:
                core.create_node(client.V1Node(
                    metadata=client.V1ObjectMeta(name=node.name, labels={SLOTS_LABEL: str(node.slots)}),
                    status=client.V1NodeStatus(allocatable={"pods": str(node.slots)})))

    @property
    def checkpoints(self) -> str:
        return f"s3://{BUCKET}/runs"

    def start_scheduler(self) -> subprocess.Popen:
        """`coach scheduler` in its own process (its log: scheduler-N.log in the work folder)."""
        self.schedulers_started += 1
        log = open(self.workdir / f"scheduler-{self.schedulers_started}.log", "ab")
        with log:
            self.scheduler = subprocess.Popen(
                [*coach_command(), "scheduler", "--kubeconfig", str(self.kubeconfig), "--profile", self.profile,
                 "--namespace", self.namespace, "--metrics-port", "0", "--metrics-address", "127.0.0.1",
                 "--lease-duration", str(LEASE_DURATION_S),
                 "--id", f"scheduler-{self.schedulers_started}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self.scheduler

    def kill_scheduler(self, sig: int = signal.SIGKILL) -> None:
        """End the scheduler process (SIGKILL by default: no chance to tidy up, as a crashed pod)."""
        if self.scheduler is not None and self.scheduler.poll() is None:
            self.scheduler.send_signal(sig)
            self.scheduler.wait(timeout=STOP_GRACE_S)
        self.scheduler = None

    def run_arguments(self) -> list[str]:
        """The `coach run` options that point it at this stack."""
        return ["--platform", "nuclio", "--dashboard", self.dashboard.url, "--kubeconfig", str(self.kubeconfig),
                "--namespace", self.namespace, "--checkpoints", self.checkpoints]

    def stop(self) -> None:
        if self.scheduler is not None:
            self.kill_scheduler(signal.SIGTERM)
        for part in (self.dashboard, self.s3, self.api):
            if part is not None:
                part.stop()

    def __enter__(self) -> "LoopbackStack":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv=None) -> int:
    from coach.files.cluster import load_cluster

    parser = argparse.ArgumentParser(prog="python -m tests.fakes.stack", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", metavar="JOB", help="job files (YAML)")
    parser.add_argument("--cluster", metavar="FILE", help="cluster file (default: the thesis cluster)")
    parser.add_argument("--results", default="results", metavar="DIR")
    parser.add_argument("--profile", default="gang", choices=("gang", "gang-strict", "default"))
    args = parser.parse_args(argv)
    cluster = load_cluster(args.cluster)
    workdir = Path(tempfile.mkdtemp(prefix="coach-k8s-"))
    started = time.monotonic()
    with LoopbackStack(workdir, cluster, profile=args.profile) as stack:
        print(f"kube-apiserver {stack.api.url}  nuclio dashboard {stack.dashboard.url}  "
              f"S3 {stack.s3.endpoint_url}  kubeconfig {stack.kubeconfig}", flush=True)
        command = [*coach_command(), "run", *args.files, "--results", args.results, "--plain",
                   *stack.run_arguments()]
        if args.cluster:
            command += ["--cluster", args.cluster]
        code = subprocess.call(command, env={**os.environ, **stack.env})
    print(f"stack stopped after {time.monotonic() - started:.0f} s; its logs: {workdir}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
