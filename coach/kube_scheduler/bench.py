"""`coach bench kube-scheduler`: pods bound per second end to end, watch -> decide -> bind over HTTP.

Three processes, as on a real cluster where the apiserver, the scheduler and the clients creating pods do not
share a CPU: the fake kube-apiserver (tests.fakes.kube_apiserver) in a child process (or in this one, with
`apiserver="thread"`), Coach's KubeScheduler in this process, and the load (the pods' POSTs) from another child
process over plain keep-alive HTTP connections. The steps:
1. create `nodes` nodes of `slots_per_node` slots (the coach.io/slots label) and one PodGroup per job (jobs of
   one PS scheduler, one server and two workers, as scheduler_fork's bench);
2. start the KubeScheduler and wait until it has listed everything and holds the Lease;
3. create the pods, and time from the first pod's POST to the last binding's 201.
The result also says when the last pod was created, so a reader sees whether creation was the limit.
Side effects: child processes, HTTP on loopback, a temporary kubeconfig.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from kubernetes import client

from coach.domain.identity import FunctionId, Role
from coach.domain.kube import (PODGROUP_GROUP, PODGROUP_KIND, PODGROUP_PLURAL, PODGROUP_VERSION, POD_GROUP_LABEL,
                               SCHEDULER_NAME, SLOTS_LABEL)
from coach.placement.kube_connect import connect
from coach.kube_scheduler.loop import Config, KubeScheduler
from coach.kube_scheduler.rest import finish, read_json

#: One benchmark job: a PS scheduler, a server and two workers (as scheduler_fork.bench).
JOB_SHAPE = ((Role.SCHEDULER, 0), (Role.SERVER, 0), (Role.WORKER, 0), (Role.WORKER, 1))
NAMESPACE = "default"
#: The run ends when nothing more was bound for this long.
STALL_S = 30.0
#: The child process that serves the fake apiserver: prints its URL, serves until its stdin closes.
_SERVE = """
import sys
sys.setswitchinterval(float(sys.argv[2]))
from tests.fakes.kube_apiserver import FakeApiServer
with FakeApiServer(watch_history=int(sys.argv[1])) as api:
    print(api.url, flush=True)
    sys.stdin.read()
"""


@dataclass(frozen=True)
class BenchResult:
    nodes: int
    pods: int
    profile: str
    apiserver: str  # "process" or "thread"
    pods_bound: int  # pods this scheduler bound (each answered 201)
    pods_bound_in_apiserver: int  # pods that have a node, as the apiserver lists them afterwards
    seconds: float  # from the first pod's POST to the last binding's 201
    pods_per_s: float  # pods_bound / seconds
    create_seconds: float  # from the first pod's POST to the last pod's 201 (the load generator's pace)
    conflicts: int  # bindings answered 409 (must be 0)
    relists: int  # lists after the first (a watch that fell behind the history)
    bind_latency_p50_s: float  # decision -> 201, median of every binding's recorded latency (mostly the wait
    bind_latency_p99_s: float  # for a binder thread: a pass decides every pending pod at once); 99th percentile
    events_written: int  # Events the scheduler wrote within the window (Scheduled ones trail the bindings)
    binder: str  # where the bindings were sent from: "threads" (of the scheduler's process) or "process"
    cpu_scheduler_s: float  # CPU seconds of this process (the scheduler) from the first POST to the end
    cpu_binder_s: float | None  # CPU seconds of the scheduler's binding process, same window (None: threads)
    cpu_load_s: float  # CPU seconds of the load generator from its first POST to its last
    cpu_apiserver_s: float | None  # CPU seconds of the apiserver's process, same window (None: in this process)

    def as_json(self) -> dict:
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, float):  # standard JSON: a bound beyond the last bucket is null, never Infinity
                out[key] = round(value, 4) if math.isfinite(value) else None
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


def pod_body(fid: FunctionId) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": fid.name, "labels": {**fid.labels, POD_GROUP_LABEL: fid.job}},
            "spec": {"schedulerName": SCHEDULER_NAME, "containers": [{"name": "function", "image": "coach:bench"}]}}


def group_body(job: str) -> dict:
    return {"apiVersion": f"{PODGROUP_GROUP}/{PODGROUP_VERSION}", "kind": PODGROUP_KIND,
            "metadata": {"name": job}, "spec": {"minMember": 3}}


class _Apiserver:
    """The fake apiserver in a thread or a child process; `url`, then `stop()`."""

    def __init__(self, where: str, watch_history: int, switch_interval_s: float):
        self.where = where
        if where == "thread":
            from tests.fakes.kube_apiserver import FakeApiServer

            self._fake = FakeApiServer(watch_history=watch_history).start()
            self.url = self._fake.url
        elif where == "process":
            self._child = subprocess.Popen([sys.executable, "-c", _SERVE, str(watch_history), str(switch_interval_s)],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            self.url = self._child.stdout.readline().strip()
            if not self.url.startswith("http://"):
                self.stop()
                raise RuntimeError("the fake apiserver's process did not start")
        else:
            raise ValueError(f"apiserver must be 'thread' or 'process', not {where!r}")

    def kubeconfig(self, path: Path) -> Path:
        if self.where == "thread":
            return self._fake.write_kubeconfig(path)
        import yaml

        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "clusters": [{"name": "bench", "cluster": {"server": self.url}}],
            "users": [{"name": "bench", "user": {}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench", "namespace": NAMESPACE}}],
            "current-context": "bench"}))
        return path

    def cpu_s(self) -> float:
        """CPU seconds the apiserver's child process has used so far (0 in thread mode or off Linux)."""
        return 0.0 if self.where == "thread" else process_cpu_s(self._child.pid)

    def stop(self) -> None:
        if self.where == "thread":
            self._fake.stop()
        else:
            self._child.stdin.close()
            self._child.wait(30)
            self._child.stdout.close()


#: The load generator: `python -c _LOAD URL PODS CONNECTIONS`; waits for a line on stdin, creates the pods over
#: CONNECTIONS keep-alive connections, prints {"first_s", "last_s", "failed", "cpu_s"} (monotonic clock,
#: system-wide; cpu_s from the first POST on). It writes each request as prepared bytes and reads the answer's
#: status line, headers and body directly: a pod creator's own HTTP stack is not what is measured, and
#: http.client's cost per request was most of this process's CPU.
_LOAD = """
import json, socket, sys, threading, time
from coach.kube_scheduler.bench import bench_pods, pod_body
url, pods, connections = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
host, port = url.split("//")[1].split(":")
head = b"POST /api/v1/namespaces/default/pods HTTP/1.1\\r\\nHost: %s:%s\\r\\nContent-Type: application/json\\r\\n" % (
    host.encode(), port.encode())
requests = []
for _, ids in bench_pods(pods):
    for fid in ids:
        body = json.dumps(pod_body(fid)).encode()
        requests.append(head + b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body)
failed = []
def post(k):
    try:
        send(k)
    except Exception as error:  # a closed connection, a malformed answer: counted, never a silent thread death
        failed.append(repr(error))
def send(k):
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    answers = sock.makefile("rb")
    for i in range(k, len(requests), connections):
        sock.sendall(requests[i])
        status = int(answers.readline().split()[1])
        length = 0
        while True:
            line = answers.readline()
            if line in (b"\\r\\n", b"\\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        answers.read(length)
        if status != 201:
            failed.append(status)
    answers.close()
    sock.close()
threads = [threading.Thread(target=post, args=(k,)) for k in range(connections)]
sys.stdin.readline()
cpu_s = time.process_time()
first_s = time.monotonic()
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"first_s": first_s, "last_s": time.monotonic(), "failed": len(failed),
                  "cpu_s": time.process_time() - cpu_s}), flush=True)
"""


def process_cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) process `pid` has used so far; 0 without one, or off Linux."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _create_all(pool: ThreadPoolExecutor, create, bodies) -> None:
    for future in [pool.submit(create, body) for body in bodies]:
        future.result()


def run_bench(nodes: int, pods: int, profile: str = "gang", slots_per_node: int = 4, seed: int = 0,
              apiserver: str = "process", creators: int = 16, bind_threads: int = 16, scheduled_events: bool = True,
              binder: str = "process",
              timeout_s: float = 600.0, switch_interval_s: float = 0.005) -> BenchResult:
    """Measure; see the module docstring. ValueError when the pods do not fit the nodes' slots."""
    if pods > nodes * slots_per_node:
        raise ValueError(f"{pods} pods do not fit {nodes} nodes x {slots_per_node} slots")
    server = _Apiserver(apiserver, watch_history=max(10_000, 8 * (pods + nodes)), switch_interval_s=switch_interval_s)
    previous_interval_s = sys.getswitchinterval()
    sys.setswitchinterval(switch_interval_s)
    with tempfile.TemporaryDirectory(prefix="coach-bench-") as folder:
        api = None
        scheduler = None
        load = None
        try:
            api, problem = connect(str(server.kubeconfig(Path(folder) / "kubeconfig")))
            if api is None:
                raise RuntimeError(problem)
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            jobs = bench_pods(pods)
            with ThreadPoolExecutor(max_workers=creators) as pool:
                _create_all(pool, lambda body: finish(core.create_node(body, _preload_content=False)),
                            [{"metadata": {"name": f"node-{i:05d}", "labels": {SLOTS_LABEL: str(slots_per_node)}}}
                             for i in range(nodes)])
                _create_all(pool, lambda body: finish(custom.create_namespaced_custom_object(
                    PODGROUP_GROUP, PODGROUP_VERSION, NAMESPACE, PODGROUP_PLURAL, body, _preload_content=False)),
                    [group_body(job) for job, _ in jobs])
                last = {"bound_s": 0.0}
                latencies_s: list[float] = []
                lock = threading.Lock()

                def on_bound(outcome) -> None:
                    with lock:
                        last["bound_s"] = max(last["bound_s"], outcome.answered_s)
                        latencies_s.append(outcome.answered_s - outcome.decided_s)

                load = subprocess.Popen([sys.executable, "-c", _LOAD, server.url, str(pods), str(creators)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                scheduler = KubeScheduler(api, Config(profile=profile, namespace=NAMESPACE, lease_namespace=NAMESPACE,
                                                      metrics_host="127.0.0.1", metrics_port=0, seed=seed,
                                                      bind_threads=bind_threads, scheduled_events=scheduled_events,
                                                      binder=binder),
                                          on_bound=on_bound).start()
                deadline = time.monotonic() + 60
                while not (scheduler.wait_synced(1.0) and scheduler.is_leader()):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the scheduler did not list and lead within 60 s")
                cpu_before = (time.process_time(), server.cpu_s(), process_cpu_s(scheduler.binder_pid))
                load.stdin.write("go\n")
                load.stdin.flush()
                created = json.loads(load.stdout.readline() or "{}")
                load.wait(30)
                if created.get("failed", 1):
                    raise RuntimeError(f"the load generator could not create every pod: {created}")
                started_s, created_s = created["first_s"], created["last_s"]
            deadline = time.monotonic() + timeout_s
            seen, progress_s = 0, time.monotonic()
            while scheduler.bound_total < pods and time.monotonic() < deadline:
                if scheduler.bound_total != seen:
                    seen, progress_s = scheduler.bound_total, time.monotonic()
                elif time.monotonic() - progress_s > STALL_S:
                    break  # nothing bound for a while: report what was
                time.sleep(0.05)
            cpu_after = (time.process_time(), server.cpu_s(), process_cpu_s(scheduler.binder_pid))
            bound_total = scheduler.bound_total
            conflicts = len(scheduler.conflicts)
            relists = int(sum(sample.value for metric in scheduler.metrics.relists.collect()
                              for sample in metric.samples if sample.name.endswith("_total")))
            events_written = scheduler.events_written
            latencies = _percentiles(latencies_s, (0.5, 0.99))
            scheduler.stop()
            scheduler = None
            listed = core.list_namespaced_pod(NAMESPACE, field_selector="spec.nodeName!=", _preload_content=False)
            in_apiserver = len(read_json(listed)["items"])
            seconds = max(1e-9, last["bound_s"] - started_s)
            return BenchResult(nodes=nodes, pods=pods, profile=profile, apiserver=apiserver, pods_bound=bound_total,
                               pods_bound_in_apiserver=in_apiserver, seconds=seconds, pods_per_s=bound_total / seconds,
                               create_seconds=created_s - started_s, conflicts=conflicts, relists=relists,
                               bind_latency_p50_s=latencies[0], bind_latency_p99_s=latencies[1],
                               events_written=events_written,
                               binder=binder, cpu_scheduler_s=cpu_after[0] - cpu_before[0],
                               cpu_binder_s=(cpu_after[2] - cpu_before[2]) if binder == "process" else None,
                               cpu_load_s=created["cpu_s"],
                               cpu_apiserver_s=(cpu_after[1] - cpu_before[1]) if apiserver == "process" else None)
        finally:
            if load is not None:
                if load.poll() is None:
                    load.kill()
                    load.wait()
                load.stdin.close()
                load.stdout.close()
            if scheduler is not None:
                scheduler.stop()
            if api is not None:
                api.close()
            server.stop()
            sys.setswitchinterval(previous_interval_s)


def _percentiles(values: list[float], quantiles: tuple[float, ...]) -> tuple[float, ...]:
    """Nearest-rank percentiles of `values` (NaN, shown as null, when there are none)."""
    ordered = sorted(values)
    if not ordered:
        return tuple(float("nan") for _ in quantiles)
    return tuple(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] for q in quantiles)
