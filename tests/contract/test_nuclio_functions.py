"""Coach's real functions (coach_functions/*/main.py, function.yaml as shipped) under the fake Nuclio dashboard, which runs
them as Nuclio does: one wrapper process per worker of the HTTP trigger (two), requests to a free one. Coach's Nuclio
platform deploys them; the tests stand in for Coach's scheduler by binding the pods.

What must hold there: a request without the run's token is refused 401 by the function itself, in every worker
process, and the token is in no log; a cancel stops the running epoch whichever worker process receives it.
"""

from __future__ import annotations

import functools
import json
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from coach.domain.contracts import TOKEN_HEADER, EpochRequest, Hyper, PsAddress
from coach.domain.identity import FunctionId, Role
from coach.domain.invocation import ERROR, Failure, FunctionRef
from coach.platforms.local import free_port
from coach.platforms.nuclio import NuclioPlatform
from coach.platforms.nuclio_spec import function_name
from tests.contract.nuclio_support import (  # noqa: F401 - fixtures
    REPO, bind, core, dashboard, kubeconfig, the_pod, wait_for,
)

pytestmark = pytest.mark.slow  # MXNet in every wrapper process: a few seconds each

TOKEN = "run-token-5e3c"
SCHEDULER = FunctionId("lenet", Role.SCHEDULER, 0)
WORKER = FunctionId("lenet", Role.WORKER, 0)
HYPER = Hyper(batch_size=64, optimizer="sgd", learning_rate=0.05, optimizer_params={}, seed=0)


@pytest.fixture
def platform(dashboard):
    made = NuclioPlatform(dashboard.url, image="coach-functions:test", token=TOKEN, functions_dir=REPO / "coach_functions",
                          ready_timeout_s=60.0, poll_s=0.05)
    yield made
    made.close()


def deployed(platform: NuclioPlatform, core, fid: FunctionId) -> FunctionRef:
    assert platform.create(fid) is None
    assert bind(core, the_pod(core, function_name(fid)).metadata.name, "node-1") == 201
    ref = platform.deploy(fid, "node-1")
    assert isinstance(ref, FunctionRef), ref
    return ref


def invoke(dashboard, fid: FunctionId, body: dict, headers: dict) -> requests.Response:
    """Through the dashboard, as Coach does, with exactly `headers` of Coach's own."""
    return requests.post(f"{dashboard.url}/api/function_invocations", data=json.dumps(body), timeout=30,
                         headers={"X-Nuclio-Function-Name": function_name(fid), "Content-Type": "application/json",
                                  **headers})


def listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def parent_of(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rfind(")") + 2:].split()[1])


def test_a_function_refuses_a_request_without_the_run_token_in_every_worker_process(platform, core, dashboard,
                                                                                    tmp_path):
    deployed(platform, core, WORKER)
    wrappers = dashboard.processes(function_name(WORKER))["wrappers"]
    assert len(wrappers) == 2  # numWorkers in coach_functions/worker/function.yaml
    refused = [invoke(dashboard, WORKER, {"action": "cancel"}, headers)
               for headers in ({}, {TOKEN_HEADER: "wrong"}, {TOKEN_HEADER: TOKEN[:-1]}, {TOKEN_HEADER: TOKEN.upper()})]
    assert [(r.status_code, r.json()) for r in refused] == [(401, {"error": "missing or wrong token"})] * 4
    for _ in wrappers:  # each worker process, in turn: past the check
        accepted = invoke(dashboard, WORKER, {"action": "cancel"}, {TOKEN_HEADER: TOKEN})
        assert (accepted.status_code, accepted.json()) == (200, {"cancelled": 0})
    for pid in wrappers:  # taken out of the environment of the processes that run the model's code
        assert f"{TOKEN_HEADER}".encode() not in Path(f"/proc/{pid}/environ").read_bytes()
        assert TOKEN.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
    logs = [path for path in (tmp_path / "logs").rglob("*") if path.is_file()]
    assert logs and not [path for path in logs if TOKEN in path.read_text(errors="replace")]


def test_a_cancel_stops_the_running_epoch_whichever_worker_process_receives_it(platform, core, dashboard):
    ref = deployed(platform, core, SCHEDULER)
    processes = dashboard.processes(function_name(SCHEDULER))
    registry = processes["tmpdir"] / "coach-epochs"  # COACH_EPOCHS_DIR of function.yaml, in the pod's temp dir
    owners: list[int] = []
    # the free worker that waited longest takes the epoch; which one that is depends on whether the cancelled
    # epoch's reply or the cancel's came back first, so run epochs until each process has held one
    for step in range(1, 6):
        if sorted(set(owners)) == sorted(processes["wrappers"]):
            break
        # a scheduler waits for its servers and workers: this epoch runs until its deadline unless cancelled
        request = EpochRequest(job="lenet", epoch=step, step=step, attempt=1, role="scheduler",
                               ps=PsAddress("127.0.0.1", free_port(), 1, 1, "127.0.0.1"), model_path="unused.py",
                               data_fraction=1.0, hyper=HYPER, checkpoint_load=None, checkpoint_save="ckpt",
                               deadline_s=60.0)
        with ThreadPoolExecutor(1) as pool:
            epoch = pool.submit(platform.invoke, ref, request, 60.0)
            wait_for(functools.partial(listens, request.ps.root_port), timeout_s=20,
                     what="the epoch's ps-lite scheduler")
            entries = os.listdir(registry) if registry.exists() else []
            owners += [parent_of(int(entry.split("-")[0])) for entry in entries]
            cancel = invoke(dashboard, SCHEDULER, {"action": "cancel"}, {TOKEN_HEADER: TOKEN})
            assert (cancel.status_code, cancel.json()) == (200, {"cancelled": 1})
            outcome = epoch.result(timeout=20)
        assert len(entries) == 1
        assert isinstance(outcome, Failure) and outcome.kind == ERROR, outcome
        assert outcome.message == "epoch child exited with code -9"
        wait_for(lambda: os.listdir(registry) == [], what="the entry removed once the child is reaped")
    # the epoch ran in one worker process, then in the other; each time the cancel came to the other one
    assert sorted(set(owners)) == sorted(processes["wrappers"])
