"""The whole Kubernetes + Nuclio stack on one machine, over loopback: what `make demo-k8s` and the end-to-end
tests run `coach run --platform nuclio` against.

Parts: the real control plane (tests/controlplane: etcd, kube-apiserver, kube-scheduler) with one Ready node per
node of the cluster file (its slots as the `coach.io/slots` cap, 4 CPUs and 8 GiB allocatable), moto's S3 server
with a bucket for checkpoints, the test double of Nuclio's dashboard (it creates each function's pod in the
apiserver, waits for a scheduler to bind it, then starts the function's real warm host), and `coach scheduler` in
its own process. The controller, `coach run`, is another process, as on a real cluster. Tests pass the session's
control plane and get a namespace of their own; `make demo-k8s` starts one for itself.

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

from coach.domain.cluster import ClusterSpec
from coach.domain.kube import SLOTS_LABEL
from tests.controlplane.cluster import ControlPlane
from tests.fakes.nuclio_dashboard import FakeDashboard
from tests.fakes.s3 import LoopbackS3

BUCKET = "coach-checkpoints"
STOP_GRACE_S = 10.0
RUN_STOP_GRACE_S = 30.0  # an interrupted `coach run` has this long to record it and release its functions
LEASE_DURATION_S = 5  # a killed scheduler's successor waits at most this long for its Lease to expire


def coach_command() -> list[str]:
    """How to start the `coach` command of this interpreter (the venv's console script when there is one)."""
    script = Path(sys.executable).with_name("coach")
    return [str(script)] if script.exists() else [sys.executable, "-m", "coach.ui.cli"]


@dataclass
class LoopbackStack:
    """The stack's parts; `start()` brings them up in dependency order, `stop()` takes them down in reverse."""

    workdir: Path  # kubeconfig, logs of the dashboard's hosts and of the scheduler
    cluster: ClusterSpec  # one node per node, with its slots
    namespace: str = "default"
    profile: str = "gang"  # the scheduler's profile
    plane: ControlPlane | None = None  # the control plane to use (None: start one, and stop it at the end)
    s3: LoopbackS3 | None = None
    dashboard: FakeDashboard | None = None
    scheduler: subprocess.Popen | None = None
    kubeconfig: Path | None = None
    schedulers_started: int = 0
    env: dict[str, str] = field(default_factory=dict)  # what the controller and the functions read (S3 address)
    setenv: Callable[[str, str], None] = os.environ.__setitem__  # tests pass monkeypatch.setenv

    own_plane: bool = False  # this stack started the control plane
    audit_from: int = 0  # the audit log's length when the stack started

    def start(self, with_scheduler: bool = True) -> LoopbackStack:
        """Bring the parts up; if one fails, what is up already is stopped before the error propagates."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start(with_scheduler)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, with_scheduler: bool) -> None:
        if self.plane is None:
            self.plane = ControlPlane(self.workdir / "controlplane").start()
            self.own_plane = True
        self.audit_from = self.plane.audit_lines()
        self.plane.ensure_namespace(self.namespace)
        self.plane.apply_crd(Path(__file__).resolve().parents[2] / "deploy" / "crds" / "podgroup-crd.yaml")
        self.plane.start_kube_scheduler()  # the cluster's default scheduler, for runs with --scheduler default
        self.kubeconfig = self.plane.write_kubeconfig(self.workdir / "kubeconfig", namespace=self.namespace)
        self._add_nodes()
        self.s3 = LoopbackS3().start()
        self.s3.make_bucket(BUCKET)
        self.env = self.s3.environment()
        for key, value in self.env.items():  # the dashboard's warm hosts inherit this process's environment, as
            self.setenv(key, value)  # pods on a cluster get the Secret's (deploy/nuclio/platform.yaml)
        self.dashboard = FakeDashboard(self.kubeconfig, self.namespace, log_dir=self.workdir / "functions").start()
        if with_scheduler:
            self.start_scheduler()

    def _add_nodes(self) -> None:
        for node in self.cluster.nodes:
            self.plane.add_node(node.name, labels={SLOTS_LABEL: str(node.slots)})

    def binding_attempts(self) -> list[tuple[str, int]]:
        """(pod, HTTP status) of every binding in the stack's namespace since it started, from the audit log."""
        return [(event["objectRef"]["name"], event["responseStatus"]["code"])
                for event in self.plane.audit(self.audit_from)
                if event.get("objectRef", {}).get("subresource") == "binding"
                and event["objectRef"].get("namespace") == self.namespace]

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
        """End the scheduler process (SIGKILL by default: no chance to tidy up, as a crashed pod); one that does
        not end within STOP_GRACE_S of a gentler signal is killed."""
        if self.scheduler is not None and self.scheduler.poll() is None:
            self.scheduler.send_signal(sig)
            try:
                self.scheduler.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.scheduler.kill()
                self.scheduler.wait()
        self.scheduler = None

    def run_arguments(self) -> list[str]:
        """The `coach run` options that point it at this stack."""
        return ["--platform", "nuclio", "--dashboard", self.dashboard.url, "--kubeconfig", str(self.kubeconfig),
                "--namespace", self.namespace, "--checkpoints", self.checkpoints]

    def stop(self) -> None:
        """Stop every part that runs, whatever fails on the way (each step is tried; nothing raises)."""
        steps = [lambda: self.kill_scheduler(signal.SIGTERM)]
        steps += [part.stop for part in (self.dashboard, self.s3) if part is not None]
        if self.plane is not None:
            plane = self.plane
            steps += [lambda: plane.force_delete_pods(self.namespace),
                      lambda: plane.delete_nodes(node.name for node in self.cluster.nodes)]
            if self.own_plane:
                steps.append(plane.stop)
        for step in steps:
            try:
                step()
            except Exception as error:  # noqa: BLE001 - tidy up the rest, say what could not be
                print(f"stack: stopping: {type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}",
                      file=sys.stderr, flush=True)
        self.dashboard = self.s3 = None

    def __enter__(self) -> LoopbackStack:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _run_to_the_end(command: list[str], env: dict[str, str]) -> int:
    """`coach run` to its end; on Ctrl-C or SIGTERM it is interrupted too (SIGINT, so that it records the
    interruption and releases its functions) and waited for. A run that ended interrupted (130) has said so in its
    one line, `coach: interrupted`, and that is the stack's exit code; otherwise the interruption goes on."""
    run = subprocess.Popen(command, env=env)
    try:
        return run.wait()
    except KeyboardInterrupt:
        if run.poll() is None:
            run.send_signal(signal.SIGINT)
            try:
                run.wait(RUN_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait()
        if run.returncode == 130:
            return 130
        raise


def main(argv=None) -> int:
    from coach.inputs.cluster import load_cluster

    parser = argparse.ArgumentParser(prog="python -m tests.fakes.stack", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", metavar="JOB", help="job files (YAML)")
    parser.add_argument("--cluster", metavar="FILE", help="cluster file (default: the thesis cluster)")
    parser.add_argument("--results", default="results", metavar="DIR")
    parser.add_argument("--profile", default="gang", choices=("gang", "gang-strict", "default"),
                        help="coach scheduler's profile (default: %(default)s)")
    parser.add_argument("--scheduler", default=None,
                        help="coach run's --scheduler (default: the profile; 'default' means kube-scheduler)")
    args = parser.parse_args(argv)
    cluster = load_cluster(args.cluster)
    workdir = Path(tempfile.mkdtemp(prefix="coach-k8s-"))
    started = time.monotonic()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the stack as Ctrl-C does
    code = 130
    try:
        with LoopbackStack(workdir, cluster, profile=args.profile) as stack:
            print(f"kube-apiserver {stack.plane.url}  nuclio dashboard {stack.dashboard.url}  "
                  f"S3 {stack.s3.endpoint_url}  kubeconfig {stack.kubeconfig}", flush=True)
            command = [*coach_command(), "run", *args.files, "--results", args.results, "--plain",
                       "--scheduler", args.scheduler or args.profile, *stack.run_arguments()]
            if args.cluster:
                command += ["--cluster", args.cluster]
            code = _run_to_the_end(command, {**os.environ, **stack.env})
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
    except Exception as error:  # a part that did not come up: one line; what was up is stopped already
        print(f"stack: {type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}",
              file=sys.stderr, flush=True)
        code = 1
    print(f"stack stopped after {time.monotonic() - started:.0f} s; its logs: {workdir}", flush=True)
    return code

if __name__ == "__main__":
    sys.exit(main())
