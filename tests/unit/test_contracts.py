"""coach.domain.contracts and the function side that checks it (coach_functions.handler.handle_event).

Every contract type survives a trip through JSON unchanged; every malformed request is refused with one line
that names the field; a function answers such a request 400 before forking anything, and keeps serving.
"""

from __future__ import annotations

import copy
import json
import math
import os
import signal
import threading
import time
from dataclasses import replace
from typing import Any

import nuclio_sdk
import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st
from test_host import AUTH, HTTP_TIMEOUT_S, running_host

from coach.domain.contracts import (
    SCHEMA,
    AheadRequest,
    ContractError,
    EpochRequest,
    Hyper,
    NextEpoch,
    PsAddress,
    PsNodeReply,
    WarmReply,
    WarmRequest,
    WorkerReply,
)
from coach.platforms.host import make_context
from coach_functions import children, handler, spares
from coach_functions.failures import EpochError
from coach_functions.host_state import HostState
from tests.support import wait_for

PS = PsAddress(root_uri="10.0.0.5", root_port=9091, num_servers=2, num_workers=3, node_host="10.0.0.7")
HYPER = Hyper(batch_size=64, optimizer="sgd", learning_rate=0.05, optimizer_params={"momentum": 0.9, "wd": 1e-4},
              seed=7)
REQUEST = EpochRequest(job="lenet-mnist", epoch=4, step=8, attempt=2, role="worker", ps=PS,
                       model_path="jobs/models/lenet.py", data_fraction=1.0, hyper=HYPER,
                       checkpoint_load="results/ckpt/lenet-mnist-7", checkpoint_save="results/ckpt/lenet-mnist-8",
                       deadline_s=600.0)


def through_json(data: dict) -> dict:
    """What the other side gets: the dict as JSON text, parsed again (NaN stays NaN, as in Python's json)."""
    return json.loads(json.dumps(data))


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("contract", [
    REQUEST,
    replace(REQUEST, epoch=0, step=1, attempt=1, role="scheduler", data_fraction=0.25, checkpoint_load=None),
    replace(REQUEST, role="server", hyper=Hyper(batch_size=1, optimizer="adam", learning_rate=1)),
    PS,
    HYPER,
    Hyper(batch_size=32, optimizer="nag", learning_rate=0.1),
    WarmRequest(model_path="jobs/models/lenet.py"),
    WarmRequest(model_path="jobs/models/lenet.py", batch_size=64),
    AheadRequest("server", NextEpoch("next-1", PS)),
    WorkerReply(rank=0, num_workers=2, loss_sum=123.5, samples=1000, correct=870, compute_s=0.57,
                checkpoint_saved="results/ckpt/j-3", val_loss=0.19, val_accuracy=0.94, val_samples=1400),
    WorkerReply(rank=1, num_workers=2, loss_sum=120.0, samples=1000, correct=880, compute_s=0.55,
                checkpoint_saved=None),
    WorkerReply(rank=0, num_workers=2, loss_sum=None, samples=320, correct=40, compute_s=0.2,
                checkpoint_saved=None, diverged=True),
    WorkerReply(rank=1, num_workers=2, loss_sum=812.5, samples=320, correct=41, compute_s=0.2,
                checkpoint_saved=None, diverged=True),
    PsNodeReply(compute_s=1.25),
], ids=["epoch", "calibration-scheduler", "server-int-rate", "ps", "hyper", "hyper-defaults", "warm",
        "warm-batch", "ahead", "worker-rank0", "worker-rank1", "worker-diverged-no-loss", "worker-diverged-with-loss", "ps-node"])
def test_to_dict_then_from_dict_gives_an_equal_object(contract):
    data = through_json(contract.to_dict())

    assert type(contract).from_dict(data) == contract


def test_an_epoch_request_is_sent_in_the_documented_shape():
    assert REQUEST.to_dict() == {
        "schema": SCHEMA, "job": "lenet-mnist", "epoch": 4, "step": 8, "attempt": 2, "role": "worker",
        "ps": {"root_uri": "10.0.0.5", "root_port": 9091, "num_servers": 2, "num_workers": 3,
               "node_host": "10.0.0.7"},
        "model": {"path": "jobs/models/lenet.py"}, "data": {"fraction": 1.0},
        "hyper": {"batch_size": 64, "optimizer": "sgd", "learning_rate": 0.05,
                  "optimizer_params": {"momentum": 0.9, "wd": 1e-4}, "seed": 7},
        "checkpoint": {"load": "results/ckpt/lenet-mnist-7", "save": "results/ckpt/lenet-mnist-8"},
        "deadline_s": 600.0,
    }


def test_a_request_carries_its_rendezvous_id_and_the_next_announcement_only_when_set_and_they_survive_json():
    announced = replace(REQUEST, rendezvous_id="a1", next=NextEpoch("b2", replace(PS, root_port=9092)))

    assert not {"rendezvous_id", "next"} & set(REQUEST.to_dict())
    body = announced.to_dict()
    assert (body["rendezvous_id"], body["next"]) == ("a1", {"id": "b2", "ps": {**body["ps"], "root_port": 9092}})
    assert EpochRequest.from_dict(through_json(body)) == announced
    assert EpochRequest.from_dict({**REQUEST.to_dict(), "rendezvous_id": None, "next": None}) == REQUEST


NEXT = {"id": "b2", "ps": {**PS.to_dict(), "root_port": 9092}}


@pytest.mark.parametrize("field, value, message", [
    ("rendezvous_id", 3, "rendezvous_id: expected a string, got int"),
    ("rendezvous_id", "", "rendezvous_id: must not be empty"),
    ("next", 3, "next: expected an object, got int"),
    ("next", {"ps": NEXT["ps"]}, "next.id: required"),
    ("next", {**NEXT, "when": 1}, "next.when: unknown field"),
    ("next", {**NEXT, "ps": {**PS.to_dict(), "root_port": 0}}, "next.ps.root_port: must be a TCP port (1..65535), got 0"),
    ("next", {**NEXT, "ps": {**PS.to_dict(), "num_workers": 0}}, "next.ps.num_workers: must be >= 1, got 0"),
    ("next", {**NEXT, "ps": PS.to_dict()},
     "next.ps.root_port: must differ from ps.root_port (9091): both schedulers listen at once"),
    ("next", {**NEXT, "ps": {**NEXT["ps"], "node_host": "10.0.0.8"}},
     "next.ps.node_host: must equal ps.node_host ('10.0.0.7'), got '10.0.0.8'"),
    ("next", {**NEXT, "id": "a1"}, "next.id: must differ from rendezvous_id ('a1')"),
], ids=["id-int", "id-empty", "not-object", "no-id", "unknown", "port-0", "no-workers", "same-address",
        "other-node", "same-id"])
def test_a_malformed_announcement_names_its_field(field, value, message):
    with pytest.raises(ContractError) as caught:
        EpochRequest.from_dict({**REQUEST.to_dict(), "rendezvous_id": "a1", field: value})

    assert (str(caught.value), caught.value.field) == (message, message.split(": ", 1)[0])


def test_a_warm_reply_tells_the_training_sets_size_and_names_a_bad_one():
    assert WarmReply.from_dict(WarmReply(1000).to_dict()) == WarmReply(1000)
    assert WarmReply.from_dict({"warm": True, "role": "worker"}) == WarmReply(None)  # a reply that does not tell it
    for bad, message in ((0, "train_samples: must be >= 1, got 0"), ("9", "train_samples: expected an integer, got str")):
        with pytest.raises(ContractError, match=f"^{message}$") as caught:
            WarmReply.from_dict({"schema": SCHEMA, "warm": True, "train_samples": bad})
        assert caught.value.field == "train_samples"


def test_a_worker_reply_carries_the_mean_loss_and_accuracy_next_to_the_sums():
    reply = WorkerReply(rank=0, num_workers=1, loss_sum=50.0, samples=200, correct=150, compute_s=1.0,
                        checkpoint_saved="c", val_loss=0.3, val_accuracy=0.9, val_samples=100)

    assert reply.to_dict() == {
        "schema": SCHEMA, "rank": 0, "num_workers": 1, "loss_sum": 50.0, "samples": 200, "correct": 150,
        "compute_s": 1.0, "checkpoint_saved": "c", "val_loss": 0.3, "val_accuracy": 0.9, "val_samples": 100,
        "diverged": False, "stopped_early": False, "shard_samples": None, "warmup_s": None, "loss": 0.25,
        "accuracy": 0.75,
    }


def test_a_diverged_worker_reply_is_standard_json_with_a_null_loss():
    reply = WorkerReply(rank=1, num_workers=2, loss_sum=None, samples=64, correct=5, compute_s=0.1,
                        checkpoint_saved=None, diverged=True)

    text = json.dumps(reply.to_dict(), allow_nan=False)

    assert json.loads(text) == {
        "schema": SCHEMA, "rank": 1, "num_workers": 2, "loss_sum": None, "samples": 64, "correct": 5,
        "compute_s": 0.1, "checkpoint_saved": None, "val_loss": None, "val_accuracy": None, "val_samples": None,
        "diverged": True, "stopped_early": False, "shard_samples": None, "warmup_s": None, "loss": None,
        "accuracy": 5 / 64,
    }


def test_a_reply_without_diverged_from_an_earlier_runtime_is_not_diverged():
    data = WorkerReply(rank=0, num_workers=1, loss_sum=1.0, samples=4, correct=2, compute_s=0.1,
                       checkpoint_saved="c").to_dict()
    del data["diverged"]

    assert WorkerReply.from_dict(data).diverged is False


def test_a_reply_keeps_its_meaning_with_the_keys_the_runtime_adds():
    data = {**WorkerReply(rank=1, num_workers=2, loss_sum=1.0, samples=4, correct=2, compute_s=0.1,
                          checkpoint_saved=None).to_dict(), "wall_s": 0.4, "role": "worker"}

    assert WorkerReply.from_dict(data).samples == 4
    assert PsNodeReply.from_dict({"compute_s": 2, "wall_s": 2.5, "role": "server"}) == PsNodeReply(2.0)


def test_a_first_version_body_without_schema_is_accepted_as_version_1():
    data = REQUEST.to_dict()
    del data["schema"]

    assert EpochRequest.from_dict(data) == REQUEST


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)
finite = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(job=names, epoch=st.integers(0, 10**6), step=st.integers(0, 10**6), attempt=st.integers(1, 50),
       role=st.sampled_from(["scheduler", "server", "worker"]), port=st.integers(1, 65535),
       servers=st.integers(1, 64), workers=st.integers(1, 64), fraction=st.floats(1e-9, 1.0),
       batch=st.integers(1, 4096), rate=finite, seed=st.integers(0, 2**32 - 1),
       params=st.dictionaries(st.sampled_from(["momentum", "wd", "beta1", "rho"]), finite, max_size=3),
       load=st.none() | names, deadline=finite)
def test_any_valid_epoch_request_survives_json(job, epoch, step, attempt, role, port, servers, workers, fraction,
                                               batch, rate, seed, params, load, deadline):
    request = EpochRequest(job=job, epoch=epoch, step=step, attempt=attempt, role=role,
                           ps=PsAddress("h", port, servers, workers, "n"), model_path="m.py",
                           data_fraction=fraction, hyper=Hyper(batch, "sgd", rate, params, seed),
                           checkpoint_load=load, checkpoint_save="s", deadline_s=deadline)

    assert EpochRequest.from_dict(through_json(request.to_dict())) == request


# --------------------------------------------------------------------------- malformed requests

DELETE = object()  # as a value in a change: remove that key


def changed(base: dict, path: str, value: Any) -> dict:
    """A deep copy of `base` with the dotted `path` set to `value` (or removed, for DELETE)."""
    out = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node[key]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return out


VALID = REQUEST.to_dict()
MALFORMED = [
    # (where, new value, the exact message; its field is everything before the first ": ")
    ("job", DELETE, "job: required"),
    ("job", None, "job: required"),
    ("ps", DELETE, "ps: required"),
    ("ps.node_host", DELETE, "ps.node_host: required"),
    ("hyper.batch_size", DELETE, "hyper.batch_size: required"),
    ("checkpoint.save", DELETE, "checkpoint.save: required"),
    ("deadline_s", DELETE, "deadline_s: required"),
    ("ps.root_port", "9091", "ps.root_port: expected an integer, got str"),
    ("epoch", 4.0, "epoch: expected an integer, got float"),
    ("ps", [], "ps: expected an object, got list"),
    ("model", "jobs/models/lenet.py", "model: expected an object, got str"),
    ("hyper.learning_rate", "0.05", "hyper.learning_rate: expected a number, got str"),
    ("hyper.optimizer_params.momentum", "0.9", "hyper.optimizer_params.momentum: expected a number, got str"),
    ("ps.root_uri", 10, "ps.root_uri: expected a string, got int"),
    ("epoch", True, "epoch: expected an integer, got bool"),
    ("ps.num_workers", True, "ps.num_workers: expected an integer, got bool"),
    ("hyper.learning_rate", False, "hyper.learning_rate: expected a number, got bool"),
    ("hyper.optimizer_params.nesterov", True, "hyper.optimizer_params.nesterov: expected a number, got bool"),
    ("deadline_s", math.nan, "deadline_s: must be finite, got nan"),
    ("hyper.learning_rate", math.inf, "hyper.learning_rate: must be finite, got inf"),
    ("data.fraction", -math.inf, "data.fraction: must be finite, got -inf"),
    ("hyper.optimizer_params.momentum", math.nan, "hyper.optimizer_params.momentum: must be finite, got nan"),
    ("ps.root_port", 0, "ps.root_port: must be a TCP port (1..65535), got 0"),
    ("ps.root_port", 65536, "ps.root_port: must be a TCP port (1..65535), got 65536"),
    ("ps.root_port", -1, "ps.root_port: must be a TCP port (1..65535), got -1"),
    ("ps.num_servers", 0, "ps.num_servers: must be >= 1, got 0"),
    ("hyper.batch_size", 0, "hyper.batch_size: must be >= 1, got 0"),
    ("hyper.seed", -1, "hyper.seed: must be >= 0, got -1"),
    ("hyper.learning_rate", 0, "hyper.learning_rate: must be > 0, got 0.0"),
    ("epoch", -1, "epoch: must be >= 0, got -1"),
    ("attempt", 0, "attempt: must be >= 1, got 0"),
    ("data.fraction", 0, "data.fraction: must be in (0, 1], got 0.0"),
    ("data.fraction", 1.5, "data.fraction: must be in (0, 1], got 1.5"),
    ("deadline_s", 0, "deadline_s: must be > 0, got 0.0"),
    ("model.path", "", "model.path: must not be empty"),
    ("ps.node_host", "", "ps.node_host: must not be empty"),
    ("checkpoint.load", "", "checkpoint.load: must not be empty"),
    ("role", "trainer", "role: unknown role 'trainer', expected one of scheduler, server, worker"),
    ("role", "Worker", "role: unknown role 'Worker', expected one of scheduler, server, worker"),
    ("role", 1, "role: expected a string, got int"),
    ("schema", 2, "schema: version 2 is not supported (this side speaks 1)"),
    ("schema", "1", "schema: version '1' is not supported (this side speaks 1)"),
    ("schema", True, "schema: version True is not supported (this side speaks 1)"),
    ("deadline", 600, "deadline: unknown field"),
    ("hyper.sede", 7, "hyper.sede: unknown field"),
    ("ps.root_host", "x", "ps.root_host: unknown field"),
    ("hyper.optimizer_params.lr", 0.1, "hyper.optimizer_params.lr: not allowed, hyper.learning_rate sets it"),
]


@pytest.mark.parametrize("path, value, message", MALFORMED,
                         ids=[f"{path}={'deleted' if v is DELETE else repr(v)}" for path, v, _ in MALFORMED])
def test_a_malformed_epoch_request_names_the_field(path, value, message):
    with pytest.raises(ContractError) as caught:
        EpochRequest.from_dict(changed(VALID, path, value))

    assert str(caught.value) == message
    assert caught.value.field == message.split(": ", 1)[0]


@pytest.mark.parametrize("body, kind", [([], "list"), ("{}", "str"), (None, "NoneType"), (3, "int")],
                         ids=["list", "string", "null", "number"])
def test_a_body_that_is_not_an_object_is_refused(body, kind):
    with pytest.raises(ContractError) as caught:
        EpochRequest.from_dict(body)

    assert (str(caught.value), caught.value.field) == (f"body: expected a JSON object, got {kind}", "body")


def test_the_first_bad_field_is_named_in_the_order_the_request_is_written():
    body = changed(changed(VALID, "ps.root_port", "x"), "deadline_s", math.nan)

    with pytest.raises(ContractError) as caught:
        EpochRequest.from_dict(body)

    assert str(caught.value) == "ps.root_port: expected an integer, got str"


@pytest.mark.parametrize("body, message", [
    ({"action": "warm"}, "model: required"),
    ({"action": "warm", "model": {}}, "model.path: required"),
    ({"action": "warm", "model": {"path": 3}}, "model.path: expected a string, got int"),
    ({"action": "warm", "model": {"path": "m.py"}, "data": {}}, "data: unknown field"),
    ({"action": "warm", "model": {"path": "m.py"}, "schema": 0},
     "schema: version 0 is not supported (this side speaks 1)"),
    ({"action": "cancel", "model": {"path": "m.py"}}, "action: expected 'warm', got 'cancel'"),
    ({"action": "warm", "model": {"path": "m.py"}, "batch_size": 0}, "batch_size: must be >= 1, got 0"),
    ({"action": "warm", "model": {"path": "m.py"}, "batch_size": "64"}, "batch_size: expected an integer, got str"),
], ids=["no-model", "no-path", "path-int", "extra", "schema", "other-action", "batch-zero", "batch-text"])
def test_a_malformed_warm_request_names_the_field(body, message):
    with pytest.raises(ContractError) as caught:
        WarmRequest.from_dict(body)

    assert str(caught.value) == message


AHEAD_VALID = {"schema": 1, "action": "ahead", "role": "worker",
               "next": {"id": "n1", "ps": {"root_uri": "127.0.0.1", "root_port": 9092, "num_servers": 1,
                                           "num_workers": 2, "node_host": "127.0.0.1"}}}


@pytest.mark.parametrize("body, message", [
    ({**AHEAD_VALID, "role": "driver"}, "role: unknown role 'driver', expected one of scheduler, server, worker"),
    ({k: v for k, v in AHEAD_VALID.items() if k != "role"}, "role: required"),
    ({k: v for k, v in AHEAD_VALID.items() if k != "next"}, "next: required"),
    ({**AHEAD_VALID, "next": {"id": "n1"}}, "next.ps: required"),
    ({**AHEAD_VALID, "next": {**AHEAD_VALID["next"], "id": ""}}, "next.id: must not be empty"),
    ({**AHEAD_VALID, "model": {"path": "m.py"}}, "model: unknown field"),
    ({**AHEAD_VALID, "action": "warm"}, "action: expected 'ahead', got 'warm'"),
], ids=["role", "no-role", "no-next", "no-ps", "empty-id", "extra", "other-action"])
def test_a_malformed_ahead_request_names_the_field(body, message):
    with pytest.raises(ContractError) as caught:
        AheadRequest.from_dict(body)

    assert str(caught.value) == message


WORKER_VALID = WorkerReply(rank=1, num_workers=2, loss_sum=3.0, samples=10, correct=7, compute_s=0.5,
                           checkpoint_saved=None).to_dict()


@pytest.mark.parametrize("path, value, message", [
    ("rank", 2, "rank: must be below num_workers (2), got 2"),
    ("rank", -1, "rank: must be >= 0, got -1"),
    ("correct", 11, "correct: must be <= samples (10), got 11"),
    ("samples", True, "samples: expected an integer, got bool"),
    ("loss_sum", math.nan, "loss_sum: must be finite, got nan"),
    ("loss_sum", None, "loss_sum: null is allowed only with diverged: true"),
    ("loss_sum", DELETE, "loss_sum: required"),
    ("diverged", "yes", "diverged: expected a boolean, got str"),
    ("diverged", 1, "diverged: expected a boolean, got int"),
    ("compute_s", -0.1, "compute_s: must be >= 0, got -0.1"),
    ("val_samples", 0, "val_samples: must be >= 1, got 0"),
    ("schema", 2, "schema: version 2 is not supported (this side speaks 1)"),
])
def test_a_malformed_worker_reply_names_the_field(path, value, message):
    with pytest.raises(ContractError) as caught:
        WorkerReply.from_dict(changed(WORKER_VALID, path, value))

    assert str(caught.value) == message


DIVERGED_VALID = {**WORKER_VALID, "diverged": True, "loss_sum": None}


@pytest.mark.parametrize("path, value, message", [
    ("checkpoint_saved", "ckpt/j-3", "checkpoint_saved: must be null with diverged: true (diverged parameters are "
                                     "never saved)"),
    ("loss_sum", math.inf, "loss_sum: must be finite, got inf"),
    ("val_loss", math.nan, "val_loss: must be finite, got nan"),
])
def test_a_diverged_reply_still_has_no_nan_and_no_checkpoint(path, value, message):
    with pytest.raises(ContractError) as caught:
        WorkerReply.from_dict(changed(DIVERGED_VALID, path, value))

    assert str(caught.value) == message


def test_a_diverged_reply_may_carry_its_loss_or_none():
    assert WorkerReply.from_dict(DIVERGED_VALID).loss_sum is None
    assert WorkerReply.from_dict({**DIVERGED_VALID, "loss_sum": 2.5}).loss_sum == 2.5


# --------------------------------------------------------------------------- handle_event, in this process


def call(role: str, body: Any) -> tuple[int, dict]:
    """One event through handler.handle_event with a fresh host; (status, JSON reply)."""
    context = make_context(f"test-{role}")
    context.user_data.host = HostState()
    response = handler.handle_event(context, nuclio_sdk.Event(body=body, content_type="application/json"), role)
    return response.status_code, json.loads(response.body)


@pytest.mark.parametrize("body, status, reply", [
    (b"{not json", 400, {"error": "body: not valid JSON", "field": "body", "role": "server"}),
    (b"\xff\xfe", 400, {"error": "body: not valid JSON", "field": "body", "role": "server"}),
    ([1, 2], 400, {"error": "body: expected a JSON object, got list", "field": "body", "role": "server"}),
    (b"", 400, {"error": "job: required", "field": "job", "role": "server"}),
    ({"action": "bogus"}, 400,
     {"error": "action: unknown action 'bogus', expected 'warm', 'ahead' or 'cancel'", "field": "action",
      "role": "server"}),
    (AHEAD_VALID, 400, {"error": "role: this is the server function, got a request for the worker role",
                        "field": "role", "role": "server"}),
    ({**AHEAD_VALID, "next": {}}, 400, {"error": "next.id: required", "field": "next.id", "role": "server"}),
    (changed(VALID, "ps.root_port", "9091"), 400,
     {"error": "ps.root_port: expected an integer, got str", "field": "ps.root_port", "role": "server"}),
    (VALID, 400, {"error": "role: this is the server function, got a request for the worker role", "field": "role",
                  "role": "server"}),
    ({"action": "warm"}, 400, {"error": "model: required", "field": "model", "role": "server"}),
    (WarmRequest("does/not/matter.py").to_dict(), 200, {"schema": SCHEMA, "warm": True, "role": "server"}),
    ({"action": "cancel"}, 200, {"cancelled": 0}),
], ids=["not-json", "not-utf8", "list", "empty", "unknown-action", "ahead-wrong-role", "ahead-no-id", "port-str",
        "wrong-role", "warm-no-model", "warm-server", "cancel"])
def test_handle_event_answers_without_forking(body, status, reply, monkeypatch):
    monkeypatch.setattr(spares, "run_in_child", lambda *args: pytest.fail("nothing may be forked"))

    assert call("server", body) == (status, reply)


def test_handle_event_gives_the_child_the_typed_request(monkeypatch):
    seen = []

    def fake_run_epoch(host, request):
        seen.append(request)
        return 200, {"compute_s": 0.0}

    monkeypatch.setattr(handler, "run_epoch", fake_run_epoch)
    scheduler_request = replace(REQUEST, role="scheduler")

    status, reply = call("scheduler", through_json(scheduler_request.to_dict()))

    assert (status, reply) == (200, {"compute_s": 0.0, "role": "scheduler"})
    assert seen == [scheduler_request]


def test_the_scheduler_and_server_children_run_the_ps_node(monkeypatch):
    monkeypatch.setattr(spares, "run_ps_node", lambda request: {"ran": request.role})

    for role in ("scheduler", "server"):
        assert spares.epoch_work(HostState(), replace(REQUEST, role=role)) == {"ran": role}


# --------------------------------------------------------------------------- the spare child


@pytest.fixture
def spared(monkeypatch):
    """A host whose epoch children say who they are; its last spare is killed afterwards."""
    monkeypatch.setattr(spares, "run_ps_node", lambda request: {"pid": os.getpid(), "job": request.job})
    host = HostState()
    yield host
    with host.keeping, host.lock:  # not while the keeper forks one more
        spare, host.spare = host.spare, None
    if spare is not None:
        os.kill(spare.pid, 9)
        os.waitpid(spare.pid, 0)


def spare_of(host: HostState, not_pid: int | None = None) -> int:
    """The pid of the host's spare once there is one (other than `not_pid`)."""
    def pid() -> int | None:
        with host.lock:
            return host.spare.pid if host.spare is not None and host.spare.pid != not_pid else None

    return wait_for(pid, what="a spare child")


def test_an_epoch_runs_in_the_spare_forked_before_it_and_a_new_spare_follows(spared):
    spares.want_spare(spared)
    first = spare_of(spared)
    started = time.monotonic()

    status, reply = spares.run_epoch(spared, replace(REQUEST, role="server"))

    took_s = time.monotonic() - started
    assert (status, reply["pid"], reply["job"]) == (200, first, "lenet-mnist")
    assert 0 <= reply["wall_s"] <= took_s  # the epoch's own time, within the call's
    second = spare_of(spared, not_pid=first)
    assert spares.run_epoch(spared, replace(REQUEST, role="server"))[1]["pid"] == second


def test_a_spare_forked_before_a_model_was_loaded_is_not_used_and_leaves(spared):
    spares.want_spare(spared)
    stale = spare_of(spared)
    with spared.lock:
        spared.generation += 1  # as load_model does when it caches a model

    status, reply = spares.run_epoch(spared, replace(REQUEST, role="server"))

    assert status == 200 and reply["pid"] != stale
    wait_for(lambda: not _exists(stale), what="the stale spare gone and reaped")


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Joined:
    """What `join_ahead` gives a spare, here without ps-lite: its reply tells where it joined."""

    def __init__(self, role: str, ps: PsAddress):
        self.role, self.ps = role, ps

    def result(self) -> dict:
        return {"pid": os.getpid(), "joined": [self.role, self.ps.root_port]}


AHEAD = NextEpoch("next-1", replace(PS, root_port=9092))


def announced(**changes) -> EpochRequest:
    """The server's request of the epoch AHEAD announced."""
    return replace(REQUEST, **{"role": "server", "ps": AHEAD.ps, "rendezvous_id": AHEAD.id, **changes})


LOST = "joined this epoch's rendezvous ahead cannot run it"  # the 500 of an epoch whose joined node is lost


def joined_spare(host: HostState, monkeypatch) -> int:
    """The pid of a spare that joined AHEAD (through Joined, without ps-lite)."""
    monkeypatch.setattr(spares, "join_ahead", Joined)
    with host.lock:
        host.ahead = ("server", AHEAD)
    spares.want_spare(host)
    return spare_of(host)


def ended(pid: int) -> None:
    """Wait until the child ended (not reaped: a zombie can show before waitpid reports it)."""
    wait_for(lambda: os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT), what="the spare's end")


def test_a_request_naming_the_next_rendezvous_has_the_next_spare_join_it_and_that_epoch_run_there(
        spared, monkeypatch):
    monkeypatch.setattr(spares, "join_ahead", Joined)
    spares.want_spare(spared)
    plain = spare_of(spared)

    status, reply = spares.run_epoch(spared, replace(REQUEST, role="server", next=AHEAD))

    assert (status, reply["pid"], "joined" in reply) == (200, plain, False)  # a spare that joined nothing serves any
    ahead = spare_of(spared, not_pid=plain)
    assert spared.spare.joined == AHEAD and spared.ahead == ("server", AHEAD)
    status, reply = spares.run_epoch(spared, announced())
    assert (status, reply["pid"], reply["joined"]) == (200, ahead, ["server", 9092])
    assert spared.ahead is None  # that request named no next rendezvous: the next spare joins nothing
    assert spare_of(spared, not_pid=ahead) and spared.spare.joined is None


def test_a_spare_that_joined_another_rendezvous_is_dropped_and_the_epoch_forks_as_usual(spared, monkeypatch):
    elsewhere = joined_spare(spared, monkeypatch)

    status, reply = spares.run_epoch(spared, replace(REQUEST, role="server"))  # at PS, not at AHEAD

    assert status == 200 and reply["pid"] != elsewhere and "joined" not in reply
    wait_for(lambda: not _exists(elsewhere), what="the spare that joined elsewhere gone and reaped")


def test_an_epoch_given_the_address_of_an_announcement_that_never_came_true_does_not_use_its_spare(
        spared, monkeypatch):
    """The address came back (a reused port, the scheduler pod's other port) for an epoch chosen now: the spare's
    peers of that announcement are gone, so running in it would hang."""
    stale = joined_spare(spared, monkeypatch)

    status, reply = spares.run_epoch(spared, announced(rendezvous_id=None))

    assert status == 200 and reply["pid"] != stale and "joined" not in reply
    wait_for(lambda: not _exists(stale), what="the spare of the old announcement gone and reaped")


def test_an_epoch_whose_spare_was_killed_forks_as_usual(spared):
    spares.want_spare(spared)
    dead = spare_of(spared)
    os.kill(dead, 9)
    ended(dead)

    status, reply = spares.run_epoch(spared, replace(REQUEST, role="server"))

    assert status == 200 and reply["pid"] != dead, reply
    wait_for(lambda: spared.children == set(), what="the child reaped")


def test_a_spare_that_joined_the_requests_rendezvous_but_is_stale_fails_the_epoch_at_once(spared, monkeypatch):
    """Its peers may have met it already and ps-lite takes no other node in its place: a fresh child would hang."""
    joined = joined_spare(spared, monkeypatch)
    with spared.lock:
        spared.generation += 1  # the model file changed since it was forked

    status, reply = spares.run_epoch(spared, announced())

    assert status == 500 and LOST in reply["error"]
    assert spared.children == set()  # nothing was forked for it
    wait_for(lambda: not _exists(joined), what="the stale spare gone and reaped")


def test_a_spare_that_joined_the_requests_rendezvous_and_died_fails_the_epoch_at_once(spared, monkeypatch):
    dead = joined_spare(spared, monkeypatch)
    os.kill(dead, 9)
    ended(dead)

    status, reply = spares.run_epoch(spared, announced())

    assert status == 500 and LOST in reply["error"]
    assert spared.children == set()


def test_a_stale_spare_that_joined_is_replaced_by_one_that_joins_nothing_and_its_epoch_fails_at_once(
        spared, monkeypatch):
    """ps-lite takes one node per function: the keeper never joins one announcement twice."""
    joined = joined_spare(spared, monkeypatch)
    with spared.lock:
        spared.generation += 1  # a warm request loaded a model: the keeper replaces its spare
    spares.want_spare(spared)
    replacement = spare_of(spared, not_pid=joined)

    assert spared.spare.joined is None and spared.joined_id == AHEAD.id
    status, reply = spares.run_epoch(spared, announced())
    assert status == 500 and LOST in reply["error"]
    wait_for(lambda: not _exists(joined) and not _exists(replacement), what="both spares gone and reaped")


def ahead_event(host: HostState, role: str, ahead: NextEpoch) -> tuple[int, dict]:
    """An AheadRequest through handler.handle_event on `host`: (status, JSON reply)."""
    context = make_context(f"test-{role}")
    context.user_data.host = host
    event = nuclio_sdk.Event(body=AheadRequest(role, ahead).to_dict(), content_type="application/json")
    response = handler.handle_event(context, event, role)
    return response.status_code, json.loads(response.body)


def test_an_ahead_request_has_an_idle_functions_spare_join_without_a_fork_and_run_that_epoch(spared, monkeypatch):
    """A calibration point that adds this function: its step's requests went to others, so it hears it here, and
    its idle spare joins (no fork or teardown beside the running epoch)."""
    monkeypatch.setattr(spares, "join_ahead", Joined)
    spares.want_spare(spared)
    idle = spare_of(spared)

    assert ahead_event(spared, "server", AHEAD) == (200, {"ahead": True, "role": "server"})

    assert (spared.spare.pid, spared.spare.joined, spared.joined_id) == (idle, AHEAD, AHEAD.id)
    status, reply = spares.run_epoch(spared, announced())
    assert (status, reply["pid"], reply["joined"]) == (200, idle, ["server", 9092])


def test_a_spare_handed_its_join_and_its_request_back_to_back_reads_both(spared, monkeypatch):
    """The frames share one pipe: reading the first must not swallow the second."""
    monkeypatch.setattr(spares, "join_ahead", Joined)
    spares.want_spare(spared)
    idle = spare_of(spared)
    os.kill(idle, signal.SIGSTOP)  # it reads nothing until both frames are in its pipe
    try:
        ahead_event(spared, "server", AHEAD)
        result = {}
        epoch = threading.Thread(target=lambda: result.update(out=spares.run_epoch(spared, announced())))
        epoch.start()
        wait_for(lambda: spared.spare is None or spared.spare.pid != idle, what="the request handed over")
    finally:
        os.kill(idle, signal.SIGCONT)
    epoch.join(30)
    status, reply = result["out"]
    assert (status, reply["pid"], reply["joined"]) == (200, idle, ["server", 9092])


def test_an_idle_spare_forked_before_the_model_now_loaded_is_replaced_by_one_that_joins(spared, monkeypatch):
    monkeypatch.setattr(spares, "join_ahead", Joined)
    spares.want_spare(spared)
    stale = spare_of(spared)
    with spared.lock:
        spared.generation += 1  # a warm request loaded a model since

    assert ahead_event(spared, "server", AHEAD)[0] == 200

    fresh = spare_of(spared, not_pid=stale)
    assert spared.spare.joined == AHEAD
    wait_for(lambda: not _exists(stale), what="the stale spare gone and reaped")
    status, reply = spares.run_epoch(spared, announced())
    assert (status, reply["pid"], reply["joined"]) == (200, fresh, ["server", 9092])


def test_the_same_announcement_told_twice_keeps_the_spare_that_joined_it(spared, monkeypatch):
    joined = joined_spare(spared, monkeypatch)

    assert ahead_event(spared, "server", AHEAD)[0] == 200

    assert spare_of(spared) == joined and _exists(joined)
    status, reply = spares.run_epoch(spared, announced())
    assert (status, reply["pid"], reply["joined"]) == (200, joined, ["server", 9092])


def test_a_new_announcement_replaces_a_spare_that_joined_an_older_one(spared, monkeypatch):
    older = joined_spare(spared, monkeypatch)
    newer = NextEpoch("next-2", replace(PS, root_port=9093))

    assert ahead_event(spared, "server", newer)[0] == 200

    replacement = spare_of(spared, not_pid=older)
    assert spared.spare.joined == newer
    wait_for(lambda: not _exists(older), what="the spare of the older announcement gone and reaped")
    status, reply = spares.run_epoch(spared, announced(ps=newer.ps, rendezvous_id=newer.id))
    assert (status, reply["pid"], reply["joined"]) == (200, replacement, ["server", 9093])


def test_an_announced_epoch_this_host_never_joined_runs_in_a_child_that_joins_it_now(spared, monkeypatch):
    """The keeper had not forked for the announcement yet: the rendezvous waits for this node, so it may join."""
    monkeypatch.setattr(spares, "join_ahead", Joined)
    spares.want_spare(spared)
    plain = spare_of(spared)

    status, reply = spares.run_epoch(spared, announced())

    assert (status, reply["pid"], "joined" in reply) == (200, plain, False)


def test_a_worker_with_a_missing_model_file_answers_422_after_the_contract_passed(tmp_path):
    request = replace(REQUEST, model_path=str(tmp_path / "missing.py"))

    assert call("worker", request.to_dict()) == (
        422, {"error": f"model file {tmp_path / 'missing.py'}: No such file or directory", "role": "worker"})


# --------------------------------------------------------------------------- run_in_child and its deadline


def test_run_in_child_returns_the_childs_reply_with_its_wall_time():
    started = time.monotonic()
    status, reply = children.run_in_child(HostState(), REQUEST, lambda r: {"job": r.job, "rank": 0})
    took_s = time.monotonic() - started

    assert status == 200
    assert (reply["job"], reply["rank"]) == ("lenet-mnist", 0)
    assert 0 <= reply["wall_s"] <= took_s  # the child's time, within the call's


def test_run_in_child_answers_once_the_reply_is_whole_and_reaps_the_child_meanwhile():
    host = HostState()

    status, reply = children.run_in_child(host, REQUEST, lambda r: {"pid": os.getpid()})

    assert status == 200
    wait_for(lambda: host.children == set(), what="the child reaped")
    with pytest.raises(ChildProcessError):
        os.waitpid(reply["pid"], os.WNOHANG)  # reaped by the host already


def test_run_in_child_gives_up_at_the_requests_deadline():
    host = HostState()

    status, reply = children.run_in_child(host, replace(REQUEST, deadline_s=0.3), lambda r: time.sleep(30) or {})

    assert (status, reply) == (504, {"error": "deadline of 0.3 s exceeded"})
    assert host.children == set()  # the sleeping child killed and reaped, not waited for


def test_run_in_child_turns_an_exception_into_a_500_with_the_error_and_logs_its_traceback(capfd):
    def work(request):
        raise RuntimeError(f"the model exploded in {request.job}")

    status, reply = children.run_in_child(HostState(), REQUEST, work)

    assert status == 500
    assert reply["error"] == "RuntimeError: the model exploded in lenet-mnist"
    err = capfd.readouterr().err  # the child's stderr is the host's: the function's log
    assert "worker of job lenet-mnist, step 8, attempt 2 failed:" in err
    assert "Traceback (most recent call last):" in err and 'raise RuntimeError(f"the model exploded in' in err


def test_run_in_child_answers_an_epoch_error_422_rejected():
    def work(request):
        raise EpochError(f"model file {request.model_path}: build_model() raised ValueError: no")

    status, reply = children.run_in_child(HostState(), REQUEST, work)

    assert status == 422
    assert reply["error"] == "model file jobs/models/lenet.py: build_model() raised ValueError: no"
    assert "rejected" not in reply and "trace" not in reply


def test_run_in_child_never_sends_nan():
    status, reply = children.run_in_child(HostState(), REQUEST, lambda r: {"loss_sum": math.nan})

    assert status == 500
    assert reply["error"] == "reply is not standard JSON: Out of range float values are not JSON compliant"


def test_a_reply_with_nan_is_answered_500_not_sent_as_nan():
    response = handler._respond(make_context("t"), 200, {"val_loss": math.inf, "role": "worker"})

    assert response.status_code == 500
    assert json.loads(response.body) == {
        "error": "reply is not standard JSON: Out of range float values are not JSON compliant", "role": "worker"}


# --------------------------------------------------------------------------- over real HTTP


@pytest.fixture(scope="module")
def worker_host(tmp_path_factory):
    """The real worker function (coach_functions.worker.main, MXNet imported) in a function host process: its URL."""
    with running_host("coach_functions.worker.main:handler", "worker-0", tmp_path_factory.mktemp("worker-host")) as url:
        yield url


def post(url: str, body: Any = None, data: bytes | None = None) -> requests.Response:
    if data is None:
        data = json.dumps(body).encode()  # NaN is written as NaN, which Python's json (the host's) reads back
    return requests.post(f"{url}/", data=data, headers={**AUTH, "Content-Type": "application/json"},
                         timeout=HTTP_TIMEOUT_S)


def test_a_malformed_epoch_request_gets_400_naming_the_field_and_the_host_keeps_serving(worker_host):
    reply = post(worker_host, changed(VALID, "ps.root_port", "9091"))

    assert reply.status_code == 400
    assert reply.headers["Content-Type"] == "application/json"
    assert reply.json() == {"error": "ps.root_port: expected an integer, got str", "field": "ps.root_port",
                            "role": "worker"}

    again = post(worker_host, changed(VALID, "deadline_s", math.nan))
    assert (again.status_code, again.json()["error"]) == (400, "deadline_s: must be finite, got nan")
    assert requests.get(f"{worker_host}/", headers=AUTH, timeout=HTTP_TIMEOUT_S).json() == {
        "name": "worker-0", "ready": True}
    cancel = post(worker_host, {"action": "cancel"})
    assert (cancel.status_code, cancel.json()) == (200, {"cancelled": 0})


@pytest.mark.parametrize("body, data, status, error", [
    (replace(REQUEST, role="server").to_dict(), None, 400,
     "role: this is the worker function, got a request for the server role"),
    (changed(VALID, "ps.node_host", DELETE), None, 400, "ps.node_host: required"),
    (changed(VALID, "schema", 2), None, 400, "schema: version 2 is not supported (this side speaks 1)"),
    (None, b"{\"job\": ", 400, "body: not valid JSON"),
    (replace(REQUEST, model_path="/nonexistent/model.py").to_dict(), None, 422,
     "model file /nonexistent/model.py: No such file or directory"),
], ids=["wrong-role", "no-node-host", "schema-2", "truncated-json", "valid-but-no-model-file"])
def test_the_worker_function_checks_every_request_over_http(worker_host, body, data, status, error):
    reply = post(worker_host, body, data)

    assert (reply.status_code, reply.json()["error"], reply.json()["role"]) == (status, error, "worker")


def test_a_worker_reply_carries_its_first_steps_time_within_its_training_loop():
    from coach.domain.contracts import ContractError, WorkerReply

    base = {"schema": 1, "rank": 0, "num_workers": 1, "loss_sum": 1.0, "samples": 10, "correct": 5,
            "compute_s": 2.0, "checkpoint_saved": "/tmp/c"}
    assert WorkerReply.from_dict({**base, "warmup_s": 0.25}).warmup_s == 0.25
    assert WorkerReply.from_dict(base).warmup_s is None  # a reply that does not tell it
    assert WorkerReply.from_dict(WorkerReply.from_dict({**base, "warmup_s": 0.25}).to_dict()).warmup_s == 0.25
    for wrong in (-0.1, 2.5):
        with pytest.raises(ContractError, match="warmup_s"):
            WorkerReply.from_dict({**base, "warmup_s": wrong})
