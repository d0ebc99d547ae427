"""A `coach serve` app in this process, over real HTTP on loopback, with a simulated platform (epochs in ms)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import requests

from coach.app.run import RunConfig
from coach.domain.cluster import DEFAULT_CLUSTER
from coach.service.server import Listen, bind, http_server
from coach.service.session import ServedRun
from tests.support import Scripted, factory, wait_for

MODELS = Path(__file__).resolve().parents[2] / "jobs" / "models"


class Paced(Scripted):
    """Simulated epochs that take `epoch_s` of wall time, so that a test can watch and stop a running job."""

    def __init__(self, epoch_s: float = 0.05):
        super().__init__()
        self.epoch_s = epoch_s

    def invoke(self, ref, request, timeout_s):
        if getattr(request, "step", None) is not None:
            time.sleep(self.epoch_s)
        return super().invoke(ref, request, timeout_s)


def job_text(name: str = "sim", **fields) -> str:
    values = {"name": name, "model": "lenet.py", "batch_size": 64, "optimizer": "sgd", "learning_rate": 0.05,
              "target_loss": 0.0, "max_epochs": 4, "budget": 10.0, "workers": 2, "servers": 1, **fields}
    return "".join(f"{key}: {value}\n" for key, value in values.items())


class Server:
    def __init__(self, results: Path, token: str | None, max_body_bytes: int, epoch_s: float,
                 models: list[Path] | None = None):
        self.served = ServedRun(results, DEFAULT_CLUSTER, RunConfig(policy="static"),
                                platform_factory=factory(Paced(epoch_s)))
        self.served.start()
        listen = Listen("127.0.0.1", 0, token, max_body_bytes)
        sock = bind(listen)
        self.url = "http://127.0.0.1:%d" % sock.getsockname()[1]
        self.http = http_server(self.served, models or [MODELS], listen)
        self.thread = threading.Thread(target=self.http.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        wait_for(lambda: self.http.started, 10.0, "the server to listen")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def get(self, path: str, **kwargs) -> requests.Response:
        return requests.get(self.url + path, headers=kwargs.pop("headers", self.headers), timeout=10, **kwargs)

    def post(self, path: str, body: str | bytes = b"", **kwargs) -> requests.Response:
        """A POST with the token (unless `headers` replaces them), declared YAML unless it says otherwise."""
        headers = dict(kwargs.pop("headers", self.headers))
        if not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = "application/yaml"
        return requests.post(self.url + path, data=body, headers=headers, timeout=30, **kwargs)

    def phase(self, job: str) -> str | None:
        answer = self.get(f"/api/jobs/{job}")
        return answer.json()["status"]["phase"] if answer.status_code == 200 else None

    def close(self) -> None:
        self.http.should_exit = True
        self.thread.join(10)
        self.served.close()


@pytest.fixture
def serve(tmp_path):
    servers = []

    def start(token: str | None = None, max_body_bytes: int = 64 * 1024, epoch_s: float = 0.05,
              results: Path | None = None, models: list[Path] | None = None) -> Server:
        server = Server(results or tmp_path / "results", token, max_body_bytes, epoch_s, models)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()
