"""`coach serve --platform nuclio`: a served run on Kubernetes + Nuclio (the loopback stack of `make demo-k8s`:
the real control plane, the dashboard's test double, moto's S3, `coach scheduler` in its own process). A job submitted over HTTP is
placed by Coach's scheduler, trains through the dashboard's functions, checkpoints to S3 and finishes."""

from __future__ import annotations

import threading

import requests

from coach.app.compose import PLACEMENT_OF, Site
from coach.app.run import RunConfig
from coach.service.server import Listen, bind, http_server
from coach.service.session import ServedRun
from coach.storage.results import read_log
from tests.integration.conftest import MODELS, wait_until
from tests.support import wait_for


def test_a_job_submitted_to_a_server_on_kubernetes_trains_to_its_end(stack, tmp_path):
    site = Site(platform="nuclio", dashboard=stack.dashboard.url, namespace=stack.namespace,
                kubeconfig=str(stack.kubeconfig), image="coach-functions:test")
    config = RunConfig(policy="static", platform="nuclio", placement=PLACEMENT_OF["nuclio"], site=site,
                       checkpoints=stack.checkpoints, placement_timeout_s=120.0)
    served = ServedRun(tmp_path / "results", stack.cluster, config)
    served.start()
    listen = Listen("127.0.0.1", 0, None, 64 * 1024)
    sock = bind(listen)
    url = "http://127.0.0.1:%d" % sock.getsockname()[1]
    server = http_server(served, [MODELS], listen)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 10, "the server to listen")
        job = ("name: kube-job\nmodel: tiny_mlp.py\nbatch_size: 64\noptimizer: sgd\nlearning_rate: 0.05\n"
               "target_loss: 0.0\nmax_epochs: 2\nbudget: 10.0\nworkers: 2\nservers: 1\nepoch_timeout_s: 120\n")
        answer = requests.post(f"{url}/api/jobs", data=job, headers={"Content-Type": "application/yaml"},
                               timeout=30)
        assert answer.status_code == 201, answer.text

        def phase() -> str:
            return requests.get(f"{url}/api/jobs/kube-job", timeout=10).json()["status"]["phase"]

        assert wait_until(lambda: phase() in ("done", "failed"), 240), phase()
        assert phase() == "done"
    finally:
        server.should_exit = True
        thread.join(10)
        served.close()
    records = read_log(served.run_dir / "kube-job.jsonl")
    trained = [r for r in records if r["phase"] == "training"]
    assert [r["epoch"] for r in trained] == [1, 2] and records[-1]["stop_reason"] == "max_epochs"
    assert all(set(r["placement"].values()) == {"node-1"} for r in trained)  # bound by Coach's scheduler
    assert all(r["checkpoint"].startswith("s3://") for r in trained)
