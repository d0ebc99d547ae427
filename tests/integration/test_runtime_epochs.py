"""Real epochs on real function hosts (functions.*.main on the embedded platform, real ps-lite on loopback).

A worker whose loss stops being finite replies 200 `diverged: true` without a checkpoint, every worker stops at
the same step and the servers finish; `build_model()` raising (its traceback goes to the worker's log) and labels
outside the model's classes are answered 422. These take a few seconds: four hosts import MXNet.
"""

from __future__ import annotations

import json
import math
import os
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from coach.domain.contracts import EpochRequest, Hyper, PsAddress, WarmReply, WarmRequest, WorkerReply
from coach.domain.identity import FunctionId, Role, functions_for
from coach.domain.invocation import REJECTED, Failure, Reply
from coach.platforms.local import LocalPlatform


def model_file(folder: Path, body: str, name: str = "model.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


# --------------------------------------------------------------------------- real epochs on real function hosts


TINY = """
    import numpy as np
    from mxnet import gluon

    def build_model():
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(10))
        return net

    def load_data():
        rng = np.random.RandomState(0)
        x = rng.rand(256, 8).astype("float32")
        y = (x.sum(axis=1) * 10 / 8).astype("int64") % 10
        return x[:192], y[:192], x[192:], y[192:]
"""


class Epochs:
    """One job's four function hosts (scheduler, server, 2 workers) on the embedded platform; runs epochs."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.job = f"rt{uuid.uuid4().hex[:6]}"
        self.platform = LocalPlatform(folder / "logs", token=uuid.uuid4().hex)
        self.refs = []
        for fid in functions_for(self.job, workers=2, servers=1):
            ref = self.platform.deploy(fid, "node-1")
            assert not isinstance(ref, Failure), ref
            self.refs.append(ref)
        self.step = 0

    def log(self, role: Role, index: int = 0) -> str:
        return (self.folder / "logs" / f"{FunctionId(self.job, role, index).name}.log").read_text(errors="replace")

    def run(self, model: Path, learning_rate: float = 0.1, checkpoint_load: str | None = None,
            deadline_s: float = 60.0, step: int | None = None) -> dict[str, Reply | Failure]:
        """One epoch of every function at once, as the controller invokes it; the failures cancel the rest.
        `step`: the request's step (it seeds the shuffle), by default a new one."""
        self.step += 1
        host, port = self.platform.rendezvous_address(self.refs[0])
        results: dict[str, Reply | Failure] = {}

        def invoke(ref):
            request = EpochRequest(
                job=self.job, epoch=self.step, step=step or self.step, attempt=1, role=ref.role,
                ps=PsAddress(host, port, num_servers=1, num_workers=2, node_host=ref.host), model_path=str(model),
                data_fraction=1.0, hyper=Hyper(batch_size=32, optimizer="sgd", learning_rate=learning_rate,
                                               optimizer_params={"momentum": 0.9}),
                checkpoint_load=checkpoint_load, checkpoint_save=str(self.folder / "ckpt" / f"{self.step}"),
                deadline_s=deadline_s)
            results[ref.name] = result = self.platform.invoke(ref, request, deadline_s + 10)
            if isinstance(result, Failure):
                for other in self.refs:
                    self.platform.cancel(other)

        threads = [threading.Thread(target=invoke, args=(ref,)) for ref in self.refs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results

    def workers(self, results) -> list:
        return [results[ref.name] for ref in self.refs if ref.role == "worker"]

    def close(self):
        self.platform.close()


@pytest.fixture(scope="module")
def epochs(tmp_path_factory):
    runner = Epochs(tmp_path_factory.mktemp("epochs"))
    yield runner
    runner.close()


def test_a_normal_epoch_trains_and_saves(epochs, tmp_path):
    results = epochs.run(model_file(tmp_path, TINY))

    assert all(isinstance(r, Reply) for r in results.values()), results
    replies = [WorkerReply.from_dict(r.body) for r in epochs.workers(results)]
    assert [r.diverged for r in replies] == [False, False]
    assert all(math.isfinite(r.loss_sum) and r.samples == 96 for r in replies)
    saved = [r.checkpoint_saved for r in replies if r.rank == 0]
    assert saved and Path(saved[0] + ".params").exists()


def test_a_loss_that_stops_being_finite_stops_every_worker_which_replies_diverged_without_a_checkpoint(epochs,
                                                                                                       tmp_path):
    results = epochs.run(model_file(tmp_path, TINY), learning_rate=1e30)

    # every function answered 200: the workers left their training loop together and released the kvstore
    assert all(isinstance(r, Reply) for r in results.values()), results
    for reply in epochs.workers(results):
        body = reply.body
        assert body["diverged"] is True and body["checkpoint_saved"] is None
        assert "val_loss" not in body or body["val_loss"] is None
        assert body["samples"] < 96  # stopped early
        json.dumps(body, allow_nan=False)  # standard JSON: no NaN on the wire
        assert WorkerReply.from_dict(body).diverged
    assert not (tmp_path / "ckpt").exists() and not list((epochs.folder / "ckpt").glob(f"{epochs.step}.*"))


FLAGGED_LOSS = """

    class Flagged(gluon.loss.Loss):
        \"\"\"Softmax cross-entropy; a label of 10 + c means class c with a loss of infinity (its gradient is finite).\"\"\"

        def __init__(self):
            super().__init__(weight=None, batch_axis=0)
            self.ce = gluon.loss.SoftmaxCrossEntropyLoss()

        def hybrid_forward(self, F, pred, label):
            flag = label >= 10
            return self.ce(pred, label - flag * 10) - F.log(1 - flag)

    def loss():
        return Flagged()
"""


def test_one_workers_infinite_loss_stops_both_workers_at_the_same_step(epochs, tmp_path):
    """Only the worker whose shard holds the flagged sample sees a loss that is not finite, and its gradients
    stay finite: the other worker learns of it through the gradient it poisons, and both stop together."""
    path = model_file(tmp_path, TINY.replace("return x[:192]", "y[5] += 10\n        return x[:192]") + FLAGGED_LOSS)

    results = epochs.run(path, learning_rate=0.01)

    assert all(isinstance(r, Reply) for r in results.values()), results  # nobody waited for the other's push
    bodies = sorted((r.body for r in epochs.workers(results)), key=lambda b: b["rank"])
    assert [b["diverged"] for b in bodies] == [True, True]
    assert bodies[0]["samples"] == bodies[1]["samples"] < 96  # the same step, before the end of the shard
    assert sorted(b["loss_sum"] is None for b in bodies) == [False, True]  # the flagged worker's sum is -inf
    assert [b["checkpoint_saved"] for b in bodies] == [None, None]


def test_build_model_raising_is_rejected_with_its_traceback_in_the_workers_log(epochs, tmp_path):
    path = model_file(tmp_path, TINY.replace("net = gluon.nn.HybridSequential()",
                                             "raise ValueError('no such layer: Dense3D')"))

    results = epochs.run(path)

    for result in epochs.workers(results):
        assert isinstance(result, Failure) and result.kind == REJECTED, result
        assert result.message == f"model file {path}: build_model() raised ValueError: no such layer: Dense3D"
    log = epochs.log(Role.WORKER, 0)
    assert "build_model() raised ValueError: no such layer: Dense3D" in log
    assert "Traceback (most recent call last):" in log and "raise ValueError('no such layer: Dense3D')" in log


def test_a_label_outside_the_models_classes_is_rejected_naming_the_model_file(epochs, tmp_path):
    path = model_file(tmp_path, TINY.replace("return x[:192]", "y[7] = 10\n        return x[:192]"))

    results = epochs.run(path)

    # every worker checks the labels after its shape pass; the first to reject has the harness cancel the rest, as the
    # controller does, so a slower peer may be killed before its own check: then it is that cancel's, nothing else
    workers = epochs.workers(results)
    rejected = [r for r in workers if isinstance(r, Failure) and r.kind == REJECTED]
    assert rejected, workers
    for result in rejected:
        assert result.message == (f"model file {path}: y_train[7] is 10, not a class index of the model's 10 "
                                  f"outputs (0..9); 1 such labels")
    cancelled = [r for r in workers if r not in rejected]
    assert all(isinstance(r, Failure) and r.message == "epoch child exited with code -9" for r in cancelled), workers


def test_the_hosts_still_train_after_those_failures(epochs, tmp_path):
    results = epochs.run(model_file(tmp_path, TINY))

    assert all(isinstance(r, Reply) for r in results.values()), results


# last in the module: an epoch more before the others would move their flagged sample within the shuffled order
def test_the_workers_validate_slices_that_add_up_to_the_whole_sets_figures(epochs, tmp_path):
    """Each worker validates its own slice (coach_functions/validation.py) with rank 0's parameters and running
    statistics; rank 0 replies the whole set's loss and accuracy, the ones this process computes alone from the
    checkpoint rank 0 saved after validating."""
    import importlib.util

    import mxnet as mx
    from mxnet import gluon

    from coach_functions.checkpoints import load_parameters

    # 65 samples: slices of 32 and 33; a BatchNorm layer: running statistics differ between the workers, and the
    # figures must be those of rank 0's, which it saves
    body = TINY.replace("x[192:], y[192:]", "x[191:], y[191:]").replace(
        'net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(10))',
        'net.add(gluon.nn.Dense(16), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"), gluon.nn.Dense(10))')
    assert "BatchNorm" in body
    path = model_file(tmp_path, body)
    results = epochs.run(path)

    assert all(isinstance(r, Reply) for r in results.values()), results
    rank0, rank1 = sorted((WorkerReply.from_dict(r.body) for r in epochs.workers(results)), key=lambda r: r.rank)
    assert (rank0.val_samples, rank1.val_loss, rank1.val_samples) == (65, None, None)
    spec = importlib.util.spec_from_file_location("validated_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    net = module.build_model()
    load_parameters(net, rank0.checkpoint_saved)
    _, _, x_val, y_val = module.load_data()
    out = net(mx.nd.array(x_val))
    loss = float(gluon.loss.SoftmaxCrossEntropyLoss()(out, mx.nd.array(y_val)).mean().asscalar())
    correct = int((out.argmax(axis=1) == mx.nd.array(y_val)).sum().asscalar())
    assert rank0.val_loss == pytest.approx(loss, rel=1e-5)
    assert rank0.val_accuracy == correct / 65


def marked(condition: str, mark: str) -> str:
    """A model file whose forward pass appends `mark` (an f-string expression) to the file MARKS when `condition`
    holds (both Python expressions of `x`, the input)."""
    return textwrap.dedent("""
        import numpy as np
        from mxnet import autograd, gluon

        class Net(gluon.nn.Block):
            def __init__(self):
                super().__init__()
                self.body = gluon.nn.Sequential()
                self.body.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(10))

            def forward(self, x):
                if <CONDITION>:
                    with open(MARKS, "a") as marks:
                        marks.write(<MARK> + "\\n")
                return self.body(x)

        def build_model():
            return Net()

        def load_data():
            rng = np.random.RandomState(0)
            x = rng.rand(256, 8).astype("float32") + 0.01  # never all zero
            y = (x.sum(axis=1) * 10 / 8).astype("int64") % 10
            return x[:192], y[:192], x[192:], y[192:]
    """).replace("<CONDITION>", condition).replace("<MARK>", mark)


MARKED = marked('x.shape[0] == 1 and not autograd.is_training()', '"shape pass"')  # the worker's shape pass


def test_an_epoch_from_a_checkpoint_skips_the_shape_pass_once_its_host_knows_the_classes_and_trains_the_same(
        epochs, tmp_path):
    """The first epoch's shape pass tells each worker host the model's classes; a later epoch from a checkpoint,
    in a child forked after that, needs no shape pass, and trains exactly as an epoch with one (after the model
    file changes, the host forgets the classes)."""
    marks = tmp_path / "marks.txt"
    path = model_file(tmp_path, f"MARKS = {str(marks)!r}\n" + MARKED)

    def shape_passes() -> int:
        return len(marks.read_text().splitlines()) if marks.exists() else 0

    def rank0(results) -> WorkerReply:
        assert all(isinstance(r, Reply) for r in results.values()), results
        assert all(not any(k.startswith("host_") for k in r.body) for r in epochs.workers(results))
        return next(r for r in (WorkerReply.from_dict(r.body) for r in epochs.workers(results)) if r.rank == 0)

    first = rank0(epochs.run(path))
    assert shape_passes() == 2  # no checkpoint: both workers
    second = rank0(epochs.run(path, checkpoint_load=first.checkpoint_saved))  # its children may predate that
    before = shape_passes()
    step = epochs.step + 1
    skipped = rank0(epochs.run(path, checkpoint_load=second.checkpoint_saved, step=step))
    assert shape_passes() == before  # neither worker ran one

    stat = path.stat()
    os.utime(path, (stat.st_atime, stat.st_mtime + 5))  # the model file changed: reloaded, its classes unknown
    again = rank0(epochs.run(path, checkpoint_load=second.checkpoint_saved, step=step))
    assert shape_passes() == before + 2
    assert (again.loss_sum, again.correct, again.val_loss) == (skipped.loss_sum, skipped.correct, skipped.val_loss)


def test_in_a_long_shard_one_workers_infinite_loss_still_stops_both_workers_at_the_same_step(epochs, tmp_path):
    """The probe is read after the first two steps and every PROBE_EVERY_STEPS-th, at the same steps on every
    worker: in a 25-step shard a flagged sample stops both together, at most that many steps after it."""
    from coach_functions.training import PROBE_EVERY_STEPS

    body = TINY.replace("rng.rand(256, 8)", "rng.rand(1856, 8)").replace(
        "return x[:192], y[:192], x[192:], y[192:]",
        "y[5] += 10\n        return x[:1600], y[:1600], x[1600:], y[1600:]")
    path = model_file(tmp_path, body + FLAGGED_LOSS)

    results = epochs.run(path, learning_rate=0.01)

    assert all(isinstance(r, Reply) for r in results.values()), results
    bodies = sorted((r.body for r in epochs.workers(results)), key=lambda b: b["rank"])
    assert [b["diverged"] for b in bodies] == [True, True]
    assert bodies[0]["samples"] == bodies[1]["samples"] < 800  # the same step, before the end of the shard
    steps = bodies[0]["samples"] // 32
    assert steps <= 2 or steps % PROBE_EVERY_STEPS == 0  # it stopped right after a read
    assert [b["checkpoint_saved"] for b in bodies] == [None, None]


# zeros: the host's warm-up (the data are never all zero)
WARM_MARKED = marked("float(x.abs().sum().asscalar()) == 0",
                     "f\"{'training' if autograd.is_training() else 'validation'} {x.shape[0]}\"")


def test_a_warm_request_with_the_jobs_batch_warms_each_worker_host_once_per_shape_and_changes_no_number(epochs,
                                                                                                       tmp_path):
    """The job's warm request carries its per-worker batch: before it answers, each worker host runs every batch
    shape the job's epochs use at 1-4 workers once on a throw-away model (coach_functions/warmup.py). Epochs warm nothing
    (a warm-up beside one would slow it), and its children compute exactly what the children of hosts that never
    warmed up compute."""
    marks = tmp_path / "marks.txt"
    path = model_file(tmp_path, f"MARKS = {str(marks)!r}\n" + WARM_MARKED)

    def warm_ups() -> list[str]:
        return sorted(marks.read_text().splitlines()) if marks.exists() else []

    def warm() -> None:
        for ref in epochs.refs:
            if ref.role == "worker":
                reply = epochs.platform.invoke(ref, WarmRequest(str(path), batch_size=32), 60)
                assert isinstance(reply, Reply) and WarmReply.from_dict(reply.body).train_samples == 192, reply

    def rank0(runs, results) -> WorkerReply:
        assert all(isinstance(r, Reply) for r in results.values()), results
        return next(r for r in (WorkerReply.from_dict(r.body) for r in runs.workers(results)) if r.rank == 0)

    warm()
    # 192 training samples in shards of 192 | 96 | 64 | 48 (batch 32), 64 validation samples in slices of
    # 64 | 32 | 21, 21, 22 | 16 at 1-4 workers; 31: a calibration mini-epoch's last batch
    per_host = ["training 16", "training 31", "training 32", "validation 16", "validation 21", "validation 22",
                "validation 32", "validation 64"]
    assert warm_ups() == sorted(per_host * 2)
    warm()  # another job's warm request for the same model: nothing new
    assert warm_ups() == sorted(per_host * 2)

    step = epochs.step + 1  # the step seeds the shuffle: both sides run the same ones
    first = rank0(epochs, epochs.run(path, step=step))
    second = rank0(epochs, epochs.run(path, checkpoint_load=first.checkpoint_saved, step=step + 1))
    assert warm_ups() == sorted(per_host * 2)  # the epochs warmed nothing

    cold_hosts = Epochs(tmp_path / "cold")  # hosts that never warmed up: their children start cold
    try:
        cold_first = rank0(cold_hosts, cold_hosts.run(path, step=step))
        cold_second = rank0(cold_hosts, cold_hosts.run(path, checkpoint_load=first.checkpoint_saved, step=step + 1))
    finally:
        cold_hosts.close()
    for warm_reply, cold_reply in ((first, cold_first), (second, cold_second)):
        assert (warm_reply.loss_sum, warm_reply.correct, warm_reply.val_loss) == \
            (cold_reply.loss_sum, cold_reply.correct, cold_reply.val_loss)
