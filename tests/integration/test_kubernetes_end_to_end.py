"""Coach on Kubernetes + Nuclio, end to end, on loopback: the suite's real control plane, the test double of Nuclio's
dashboard (real warm hosts, real MXNet), moto's S3 server for checkpoints, and `coach scheduler` in its own process.

The run is the real `coach run` code (its Python API, in a thread of the test): jobs/lenet-mnist.yaml trains to
its target while a second, small job waits for the node's slots; the scheduler is killed mid-run and started
again. What must hold: every function was bound by Coach's scheduler, nothing was bound twice (the restarted
scheduler adopts what is bound: no binding POST meets a 409), the node never held more pods than its slots, the
waiting pod told `kubectl describe pod` why it was pending, and the checkpoints are complete in S3.
"""

from __future__ import annotations

import collections
import json
import subprocess
import threading
import time
import uuid
from pathlib import Path

import boto3
import pytest
import yaml
from kubernetes import client

from coach.app.compose import Site
from coach.app.run import run_jobs
from coach.domain.cluster import ClusterSpec, NodeSpec
from coach.domain.identity import JOB_LABEL
from tests.fakes.stack import BUCKET, LoopbackStack
from coach.inputs.jobs import load_job

from tests.integration.conftest import MODELS, wait_until
from tests.support import kube_client

REPO = Path(__file__).resolve().parents[2]
SLOTS = 4  # one node: lenet-mnist (2 workers, 1 server, 1 PS scheduler) fills it; the small job must wait


@pytest.fixture
def stack(tmp_path, monkeypatch, control_plane):
    cluster = ClusterSpec(name="one-node", nodes=(NodeSpec("node-1", slots=SLOTS, price_per_slot_s=0.0001),))
    running = LoopbackStack(tmp_path / "stack", cluster, namespace=f"e-{uuid.uuid4().hex[:10]}", plane=control_plane,
                            setenv=monkeypatch.setenv).start()
    try:
        yield running
    finally:
        running.stop()


def core_api(stack: LoopbackStack) -> tuple[client.ApiClient, client.CoreV1Api]:
    api = kube_client(stack.kubeconfig)
    return api, client.CoreV1Api(api)


class NodeLoad(threading.Thread):
    """Samples how many Coach pods are bound to each node, to show the node never held more than its slots."""

    def __init__(self, core: client.CoreV1Api, namespace: str):
        super().__init__(daemon=True)
        self.core, self.ns, self.most, self.stopping = core, namespace, collections.Counter(), threading.Event()

    def run(self):
        while not self.stopping.wait(0.1):
            try:
                pods = self.core.list_namespaced_pod(self.ns, label_selector=JOB_LABEL).items
            except Exception:  # noqa: BLE001 - the apiserver is stopping
                continue
            now = collections.Counter(pod.spec.node_name for pod in pods if pod.spec.node_name)
            for node, count in now.items():
                self.most[node] = max(self.most[node], count)


def records(run_dir: Path, job: str) -> list[dict]:
    """The job's log lines so far; only whole lines (the controller may be writing the last one right now)."""
    path = run_dir / f"{job}.jsonl"
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def test_lenet_trains_to_its_target_on_kubernetes_and_a_scheduler_restart_loses_and_repeats_no_binding(
        stack, tmp_path, kubectl_binary):
    lenet = load_job(REPO / "jobs" / "lenet-mnist.yaml")
    small_file = tmp_path / "small.yaml"
    small_file.write_text(yaml.safe_dump({
        "name": "small", "model": str(MODELS / "tiny_mlp.py"), "batch_size": 64, "optimizer": "sgd",
        "learning_rate": 0.05, "target_loss": 0.0, "max_epochs": 2, "budget": 10.0, "workers": 1, "servers": 1}))
    small = load_job(small_file)
    site = Site(platform="nuclio", dashboard=stack.dashboard.url, namespace=stack.namespace,
                kubeconfig=str(stack.kubeconfig), image="coach-functions:test")
    api, core = core_api(stack)
    load = NodeLoad(core, stack.namespace)
    load.start()
    reports = []
    run = threading.Thread(target=lambda: reports.append(run_jobs(
        [lenet, small], stack.cluster, tmp_path / "results", view="quiet", run_id="k8s", site=site,
        checkpoints=stack.checkpoints, placement_timeout_s=120.0)))
    run.start()
    run_dir = tmp_path / "results" / "k8s"
    try:
        # mid-run: lenet has trained an epoch, small waits for the node; the scheduler dies without a word
        assert wait_until(lambda: any(r.get("phase") == "training" for r in records(run_dir, "lenet-mnist")), 240)
        stack.kill_scheduler()
        time.sleep(2.0)
        stack.start_scheduler()

        # while it waits, the small job's pod says why, to kubectl as to anyone
        def pending_small_pod():
            pods = core.list_namespaced_pod(stack.namespace, label_selector=f"{JOB_LABEL}=small").items
            return next((pod.metadata.name for pod in pods if not pod.spec.node_name), None)

        assert wait_until(pending_small_pod, 60)  # lenet holds the node for several more epochs
        pod = pending_small_pod()
        kubectl = kubectl_binary

        def described():
            return subprocess.run([kubectl, "--kubeconfig", str(stack.kubeconfig), "describe", "pod", pod],
                                  capture_output=True, text=True, timeout=30).stdout

        assert wait_until(lambda: "FailedScheduling" in described() and "coach-scheduler" in described(), 30), \
            described()
        why = described()  # the plugins' reason: no free slot on the node, or the gang's
        assert any(reason in why for reason in ("nodes are available", "gang", "deadlock")), why
        run.join(timeout=600)
        assert not run.is_alive(), "the run did not finish in 10 minutes"
    finally:
        load.stopping.set()
        load.join()
        api.close()
    summary = reports[0].summary["jobs"]
    assert summary["lenet-mnist"]["stop_reason"] == "target_loss"
    assert summary["small"]["stop_reason"] == "max_epochs"
    assert reports[0].exit_code == 0

    attempts = stack.binding_attempts()
    bound = [pod for pod, status in attempts if status == 201]
    assert attempts and all(status == 201 for _, status in attempts), attempts  # adopted, never retried
    assert len(bound) == len(set(bound))  # no pod bound twice
    functions = {name for name in bound}
    assert sum(1 for name in functions if "lenet-mnist" in name) >= 4  # scheduler, server, 2 workers
    assert sum(1 for name in functions if "small" in name) == 3  # bound by the restarted scheduler
    assert load.most["node-1"] <= SLOTS, load.most

    s3 = boto3.client("s3", endpoint_url=stack.s3.endpoint_url)
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET, Prefix="runs/lenet-mnist/")["Contents"]]
    markers = [key for key in keys if key.endswith(".complete")]
    assert markers, keys
    last = records(run_dir, "lenet-mnist")[-1]
    assert last["checkpoint"].startswith(f"s3://{BUCKET}/runs/lenet-mnist/")
