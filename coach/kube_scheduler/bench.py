"""`coach bench kube-scheduler`: pods bound per second by `coach scheduler` and by kube-scheduler, side by side.

Both run against the same kube-apiserver (the one a kubeconfig names), the same nodes and the same pods, one
after the other, measured the same way:
1. create `nodes` Ready nodes (status written as a kubelet would, the admission's not-ready taint taken off,
   `pods` allocatable = `slots_per_node`, the label coach.io/bench) and one PodGroup per job (a PS scheduler,
   a server and two workers);
2. for Coach: start `coach scheduler` as its own process (as kube-scheduler is one) and wait until it holds its
   Lease; for the default scheduler: kube-scheduler must already run on the cluster;
3. a load process creates the pods over keep-alive TLS connections (schedulerName coach-scheduler or
   default-scheduler), while a watch here notes when each pod is first seen bound;
4. the figure is pods / (last pod seen bound - first pod's POST); then every pod is deleted before the next run.
Nothing client-side throttles: the official Python client has no rate limit, and kube-scheduler's own QPS and
burst are whatever its configuration says (the suite's control plane raises them as scheduler_perf does).
Run it against a cluster of your own: the nodes are fake (no kubelet), and a node lifecycle controller marks them
unreachable after its grace period. Side effects: objects in the cluster (removed at the end), child processes.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Callable

from kubernetes import client

from coach.domain.identity import FunctionId, Role
from coach.domain.kube import (LEASE_NAME, PODGROUP_GROUP, PODGROUP_KIND, PODGROUP_PLURAL, PODGROUP_VERSION,
                               POD_GROUP_LABEL, SCHEDULER_NAME)
from coach.kube_scheduler.rest import finish
from coach.kube_scheduler.watch import Change, Informer, Replace

#: One benchmark job: a PS scheduler, a server and two workers (as scheduler_fork's bench).
JOB_SHAPE = ((Role.SCHEDULER, 0), (Role.SERVER, 0), (Role.WORKER, 0), (Role.WORKER, 1))
DEFAULT_SCHEDULER = "default-scheduler"
BENCH_LABEL = "coach.io/bench"
#: A run ends when nothing more was bound for this long.
STALL_S = 30.0
#: Objects created (or deleted) at once while setting up.
SETUP_THREADS = 16


@dataclass(frozen=True)
class SchedulerRun:
    """One scheduler's run over the benchmark's pods."""

    scheduler: str  # "coach" or "default"
    pods_bound: int  # pods seen bound in the watch
    seconds: float  # from the first pod's POST to the last pod seen bound
    pods_per_s: float  # pods_bound / seconds
    create_seconds: float  # from the first pod's POST to the last pod's 201 (the load's pace)
    conflicts: int | None  # Coach's bindings answered 409 (from its /metrics; None for kube-scheduler)
    cpu_s: float | None  # CPU seconds of `coach scheduler` and its binding process (None for kube-scheduler)


@dataclass(frozen=True)
class BenchResult:
    nodes: int
    pods: int
    slots_per_node: int
    profile: str  # Coach's scheduler_fork profile
    binder: str  # where Coach's bindings are sent from
    runs: tuple[SchedulerRun, ...]  # in the order run

    @property
    def ratio(self) -> float | None:
        """Coach's pods per second over kube-scheduler's (None unless both ran)."""
        by = {run.scheduler: run.pods_per_s for run in self.runs}
        return by["coach"] / by["default"] if by.get("coach") and by.get("default") else None

    @property
    def complete(self) -> bool:
        return all(run.pods_bound == self.pods for run in self.runs)

    def as_json(self) -> dict:
        out = asdict(self)
        out["runs"] = [{key: (round(value, 4) if isinstance(value, float) and math.isfinite(value) else value)
                        for key, value in asdict(run).items()} for run in self.runs]
        out["ratio"] = None if self.ratio is None else round(self.ratio, 3)
        return out


def bench_pods(pods: int) -> list[tuple[str, list[FunctionId]]]:
    """Jobs `job-00000`... of JOB_SHAPE until `pods` pods (the last job may be cut short)."""
    jobs = []
    made = 0
    index = 0
    while made < pods:
        job = f"job-{index:05d}"
        ids = [FunctionId(job, role, i) for role, i in JOB_SHAPE[:pods - made]]
        jobs.append((job, ids))
        made += len(ids)
        index += 1
    return jobs


def pod_body(fid: FunctionId, scheduler_name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": fid.name, "labels": {**fid.labels, POD_GROUP_LABEL: fid.job}},
            "spec": {"schedulerName": scheduler_name, "automountServiceAccountToken": False,
                     "containers": [{"name": "function", "image": "coach:bench"}]}}


def group_body(job: str) -> dict:
    return {"apiVersion": f"{PODGROUP_GROUP}/{PODGROUP_VERSION}", "kind": PODGROUP_KIND,
            "metadata": {"name": job}, "spec": {"minMember": 3}}


def node_bodies(name: str, slots: int, run: str) -> tuple[dict, dict]:
    """A bench node as a kubelet registers it: the object, then its status (Ready, with allocatable)."""
    resources = {"cpu": "64", "memory": "256Gi", "pods": str(slots)}
    node = {"metadata": {"name": name, "labels": {BENCH_LABEL: run, "kubernetes.io/hostname": name}}}
    status = {"status": {"capacity": resources, "allocatable": resources,
                         "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
    return node, status


#: The load generator: `python -c _LOAD` with a JSON job on stdin's first line ({"url", "namespace", "headers",
#: "tls", "bodies", "connections"}); waits for a second line, creates the pods over that many keep-alive
#: connections, prints {"first_s", "last_s", "failed", "cpu_s"} (monotonic clock, system-wide); SIGINT and
#: SIGTERM end it at once without a word. A pod creator's
#: own HTTP stack is not what is measured, so it is plain http.client over one TLS context.
_LOAD = """
import http.client, json, os, signal, ssl, sys, threading, time
for signum in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C reaches the bench's group: leave quietly, it cleans up
    signal.signal(signum, lambda *_: os._exit(130))
job = json.loads(sys.stdin.readline())
host, port = job["url"].split("//")[1].rsplit(":", 1)
tls = job["tls"]
context = None
if job["url"].startswith("https"):
    context = ssl.create_default_context(cafile=tls["ca"]) if tls["verify"] else ssl._create_unverified_context()
    if tls["cert"]:
        context.load_cert_chain(tls["cert"], tls["key"])
path = "/api/v1/namespaces/%s/pods" % job["namespace"]
headers = {"Content-Type": "application/json", **job["headers"]}
bodies = [json.dumps(body).encode() for body in job["bodies"]]
connections = job["connections"]
failed = []
def post(k):
    try:
        if context is None:
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
        else:
            conn = http.client.HTTPSConnection(host, int(port), context=context, timeout=60)
        for i in range(k, len(bodies), connections):
            conn.request("POST", path, bodies[i], headers)
            answer = conn.getresponse()
            answer.read()
            if answer.status != 201:
                failed.append(answer.status)
        conn.close()
    except Exception as error:
        failed.append(repr(error))
threads = [threading.Thread(target=post, args=(k,)) for k in range(connections)]
sys.stdin.readline()
cpu_s = time.process_time()
first_s = time.monotonic()
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"first_s": first_s, "last_s": time.monotonic(), "failed": len(failed),
                  "first_failure": str(failed[0]) if failed else None, "cpu_s": time.process_time() - cpu_s}),
      flush=True)
"""


def process_cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) process `pid` and its reaped children have used so far; 0 without one."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(fields[i]) for i in (11, 12, 13, 14)) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


class _BoundWatch:
    """Notes, for every pod of the namespace, when the watch first shows it bound (monotonic clock)."""

    def __init__(self, core: client.CoreV1Api, namespace: str):
        self.bound_at_s: dict[str, float] = {}
        self._lock = threading.Lock()
        self._informer = Informer("pods", partial(core.list_namespaced_pod, namespace), self._sink)

    def _sink(self, item) -> None:
        now_s = time.monotonic()
        objects = item.items if isinstance(item, Replace) else [item.obj] if isinstance(item, Change) else []
        with self._lock:
            for obj in objects:
                name = obj["metadata"]["name"]
                if obj.get("spec", {}).get("nodeName") and name not in self.bound_at_s:
                    self.bound_at_s[name] = now_s

    def start(self) -> _BoundWatch:
        self._informer.start()
        if not self._informer.synced.wait(60):
            raise RuntimeError("the pods watch did not list within 60 s")
        return self

    def count(self) -> int:
        with self._lock:
            return len(self.bound_at_s)

    def last_s(self) -> float:
        with self._lock:
            return max(self.bound_at_s.values(), default=0.0)

    def stop(self) -> None:
        self._informer.stop()


def _coach_command() -> list[str]:
    script = Path(sys.executable).with_name("coach")
    return [str(script)] if script.exists() else [sys.executable, "-m", "coach.ui.cli"]


class Bench:
    """One benchmark against one apiserver; `run()` returns the result and always cleans up."""

    def __init__(self, api: client.ApiClient, kubeconfig: str, nodes: int, pods: int, profile: str,
                 slots_per_node: int, binder: str, schedulers: tuple[str, ...], say: Callable[[str], None],
                 connections: int = 16):
        if pods > nodes * slots_per_node:
            raise ValueError(f"--pods: {pods} pods do not fit {nodes} nodes x {slots_per_node} slots")
        self.api, self.kubeconfig = api, kubeconfig
        self.nodes, self.pods, self.profile, self.slots = nodes, pods, profile, slots_per_node
        self.binder, self.schedulers, self.say, self.connections = binder, schedulers, say, connections
        self.run_id = uuid.uuid4().hex[:8]
        self.namespace = f"coach-bench-{self.run_id}"
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.node_names = [f"bench-{self.run_id}-{i:05d}" for i in range(nodes)]

    # ---- set-up and clean-up -------------------------------------------------------------------------------

    def _each(self, call, items) -> None:
        with ThreadPoolExecutor(max_workers=SETUP_THREADS) as pool:
            for future in [pool.submit(call, item) for item in items]:
                future.result()

    def _make_node(self, name: str) -> None:
        node, status = node_bodies(name, self.slots, self.run_id)
        finish(self.core.create_node(node, _preload_content=False))
        finish(self.core.patch_node_status(name, status, _preload_content=False))
        finish(self.core.patch_node(name, {"spec": {"taints": None}}, _preload_content=False))

    def set_up(self) -> None:
        if "coach" in self.schedulers:
            try:
                client.ApiextensionsV1Api(self.api).read_custom_resource_definition(
                    f"{PODGROUP_PLURAL}.{PODGROUP_GROUP}")
            except client.ApiException as error:
                if error.status == 404:
                    raise RuntimeError("the PodGroup CRD is not installed: kubectl apply -k deploy/crds/") from None
                raise
        self.say(f"creating namespace {self.namespace}, {self.nodes} nodes and the PodGroups")
        finish(self.core.create_namespace({"metadata": {"name": self.namespace, "labels": {BENCH_LABEL: self.run_id}}},
                                          _preload_content=False))
        try:  # the ServiceAccount admission plugin needs it; kube-controller-manager may have made it already
            finish(self.core.create_namespaced_service_account(self.namespace, {"metadata": {"name": "default"}},
                                                               _preload_content=False))
        except client.ApiException as error:
            if error.status != 409:
                raise
        self._each(self._make_node, self.node_names)
        if "coach" in self.schedulers:
            self._each(lambda job: finish(self.custom.create_namespaced_custom_object(
                PODGROUP_GROUP, PODGROUP_VERSION, self.namespace, PODGROUP_PLURAL, group_body(job),
                _preload_content=False)), [job for job, _ in bench_pods(self.pods)])

    def _delete_pods(self) -> None:
        finish(self.core.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=0,
                                                          _preload_content=False))
        deadline = time.monotonic() + 120
        while self.core.list_namespaced_pod(self.namespace, limit=1).items and time.monotonic() < deadline:
            time.sleep(0.5)

    def clean_up(self) -> None:
        """Remove the pods, the nodes and the namespace; a second Ctrl-C or SIGTERM meanwhile is not let through
        (it would leave them behind)."""
        if threading.current_thread() is not threading.main_thread():  # only the main thread sets handlers
            self._clean_up()
            return
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._clean_up()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _clean_up(self) -> None:
        for step in (self._delete_pods,
                     lambda: self._each(lambda name: _ignore_404(lambda: self.core.delete_node(name)), self.node_names),
                     lambda: finish(self.core.delete_namespace(self.namespace, _preload_content=False))):
            try:
                step()
            except Exception as error:  # clean up as much as can be; say what could not be
                self.say(f"clean-up: {str(error).splitlines()[0][:200]}")

    # ---- one scheduler ---------------------------------------------------------------------------------------

    def _load_job(self, scheduler_name: str) -> dict:
        configuration = self.api.configuration
        token = configuration.get_api_key_with_prefix("authorization") or configuration.get_api_key_with_prefix(
            "BearerToken")
        tls = {"verify": bool(configuration.verify_ssl), "ca": configuration.ssl_ca_cert,
               "cert": configuration.cert_file, "key": configuration.key_file}
        bodies = [pod_body(fid, scheduler_name) for _, ids in bench_pods(self.pods) for fid in ids]
        return {"url": configuration.host, "namespace": self.namespace, "tls": tls, "bodies": bodies,
                "headers": {"Authorization": token} if token else {}, "connections": self.connections}

    def _start_coach(self, log) -> subprocess.Popen:
        process = subprocess.Popen(
            [*_coach_command(), "scheduler", "--kubeconfig", self.kubeconfig, "--namespace", self.namespace,
             "--profile", self.profile, "--binder", self.binder, "--metrics-port", "0",
             "--metrics-address", "127.0.0.1", "--id", f"bench-{self.run_id}"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        leases = client.CoordinationV1Api(self.api)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if leases.read_namespaced_lease(LEASE_NAME, self.namespace).spec.holder_identity:
                    time.sleep(1.0)  # its informers list before it leads; give its first pass a moment
                    return process
            except client.ApiException as error:
                if error.status != 404:
                    raise
            time.sleep(0.2)
        _stop(process)
        raise RuntimeError("coach scheduler did not take its Lease within 60 s")

    def run_one(self, scheduler: str, log) -> SchedulerRun:
        name = SCHEDULER_NAME if scheduler == "coach" else DEFAULT_SCHEDULER
        self.say(f"{scheduler}: {self.pods} pods with schedulerName {name}")
        coach = self._start_coach(log) if scheduler == "coach" else None
        watch = _BoundWatch(self.core, self.namespace).start()
        load = subprocess.Popen([sys.executable, "-c", _LOAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        try:
            load.stdin.write(json.dumps(self._load_job(name)) + "\n")
            load.stdin.flush()
            cpu_before = self._coach_cpu_s(coach)
            load.stdin.write("go\n")
            load.stdin.flush()
            created = json.loads(load.stdout.readline() or "{}")
            load.wait(60)
            if created.get("failed", 1):
                raise RuntimeError(f"the load could not create every pod: {created.get('failed')} failed, "
                                   f"the first: {created.get('first_failure')}")
            seen, progress_s = 0, time.monotonic()
            while watch.count() < self.pods and time.monotonic() - progress_s < STALL_S:
                if watch.count() != seen:
                    seen, progress_s = watch.count(), time.monotonic()
                time.sleep(0.05)
            cpu_s = self._coach_cpu_s(coach) - cpu_before if coach is not None else None
            conflicts = _conflicts(log.name) if coach is not None else None
        finally:
            watch.stop()
            if load.poll() is None:
                load.kill()
                load.wait()
            load.stdin.close()
            load.stdout.close()
            if coach is not None:
                _stop(coach)
        bound = watch.count()
        seconds = max(1e-9, watch.last_s() - created["first_s"])
        self.say(f"{scheduler}: {bound} of {self.pods} pods bound in {seconds:.1f} s")
        self._delete_pods()
        return SchedulerRun(scheduler=scheduler, pods_bound=bound, seconds=seconds,
                            pods_per_s=bound / seconds if bound else 0.0,
                            create_seconds=created["last_s"] - created["first_s"], conflicts=conflicts, cpu_s=cpu_s)

    @staticmethod
    def _coach_cpu_s(process: subprocess.Popen | None) -> float:
        if process is None:
            return 0.0
        return process_cpu_s(process.pid) + sum(process_cpu_s(child) for child in _children(process.pid))

    def run(self, log_path: Path) -> BenchResult:
        runs = []
        try:
            self.set_up()
            with open(log_path, "ab") as log:
                for scheduler in self.schedulers:
                    runs.append(self.run_one(scheduler, log))
        finally:
            self.clean_up()
        return BenchResult(nodes=self.nodes, pods=self.pods, slots_per_node=self.slots, profile=self.profile,
                           binder=self.binder, runs=tuple(runs))


def _conflicts(log_path: str) -> int | None:
    """Bindings answered 409, from the /metrics of the `coach scheduler` whose output is at `log_path`."""
    import re

    import requests

    try:
        ports = re.findall(r"serving /metrics and /healthz on port (\d+)", Path(log_path).read_text(errors="replace"))
        text = requests.get(f"http://127.0.0.1:{ports[-1]}/metrics", timeout=5).text
    except (OSError, IndexError, requests.RequestException):
        return None
    found = re.search(r"^coach_scheduler_binding_conflicts_total ([0-9.e+]+)$", text, re.MULTILINE)
    return None if found is None else int(float(found.group(1)))


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _ignore_404(call) -> None:
    try:
        call()
    except client.ApiException as error:
        if error.status != 404:
            raise
