"""Broken model files and broken data are rejected, naming the model file; diverged training stops cleanly.

- `normalise_data` and `check_labels` (pure NumPy) reject what the model-file contract does not allow.
- `load_model` turns anything the model file raises into an EpochError (422, not retried) and writes its
  traceback to stderr, the function's log.
- Real epochs on real function hosts (functions.*.main on the embedded platform, real ps-lite on loopback):
  a worker whose loss stops being finite replies 200 `diverged: true` without a checkpoint, every worker stops at
  the same step and the servers finish; `build_model()` raising (its traceback goes to the worker's log) and
  labels outside the model's classes are answered 422. These take a few seconds: four hosts import MXNet.
"""

from __future__ import annotations

import json
import math
import os
import textwrap
import threading
import uuid
from pathlib import Path

import nuclio_sdk
import numpy as np
import pytest

from coach.domain.contracts import EpochRequest, Hyper, PsAddress, WarmRequest, WorkerReply
from coach.domain.identity import FunctionId, Role, functions_for
from coach.domain.invocation import REJECTED, Failure, Reply
from coach.platforms.host import make_context
from coach.platforms.local import LocalPlatform
from functions import runtime
from functions.runtime import EpochError, check_labels, load_model, normalise_data

X = np.arange(12, dtype="float32").reshape(4, 3)
Y = np.array([0, 1, 2, 1], dtype="int64")


def rejected(data) -> str:
    with pytest.raises(EpochError) as caught:
        normalise_data(data)
    return str(caught.value)


# --------------------------------------------------------------------------- normalise_data


def test_nan_in_the_training_inputs_is_rejected_naming_the_first_sample():
    x = X.copy()
    x[2, 1] = np.nan

    assert rejected((x, Y)) == "load_data(): X_train holds NaN or infinity (first at sample 2: nan)"


def test_infinity_in_the_validation_labels_is_rejected():
    assert rejected((X, Y, X[:2], [1.0, np.inf])) == "load_data(): y_val holds NaN or infinity (first at sample 1: inf)"


def test_a_value_too_large_for_float32_is_infinity_and_rejected():
    x = X.astype("float64")
    x[0, 0] = 1e39

    assert rejected((x, Y)) == "load_data(): X_train holds NaN or infinity (first at sample 0: inf)"


def test_validation_samples_of_another_shape_are_rejected():
    assert rejected((X, Y, np.zeros((2, 4)), [0, 1])) == \
        "load_data(): X_val samples have shape (4,), X_train samples (3,)"


def test_inputs_that_are_not_numbers_are_rejected():
    message = rejected(([["a", "b"], ["c", "d"]], [0, 1]))

    assert message.startswith("load_data(): X_train is not a numeric array (could not convert string to float")


def test_ragged_inputs_are_rejected():
    assert rejected(([[1.0, 2.0], [3.0]], [0, 1])).startswith("load_data(): X_train is not a numeric array (")


def test_inputs_and_labels_of_different_lengths_are_rejected():
    assert rejected((X, Y[:3])) == "load_data(): training inputs and labels must be non-empty and of equal length"
    assert rejected((X, Y, X[:2], Y[:1])) == \
        "load_data(): validation inputs and labels must both be given, of equal length"


def test_a_number_instead_of_an_array_is_rejected():
    assert rejected((5, [1])) == "load_data(): training inputs and labels must be non-empty and of equal length"


def test_labels_given_as_a_column_become_one_label_per_sample():
    out = normalise_data((X, Y.reshape(-1, 1), X[:2], Y[:2].reshape(-1, 1)))

    assert out["y_train"].shape == (4,) and out["y_val"].shape == (2,)
    np.testing.assert_array_equal(out["y_train"], [0, 1, 2, 1])


def test_good_data_pass_unchanged_as_float32():
    out = normalise_data({"X_train": X, "y_train": Y, "X_val": X[:1], "y_val": Y[:1]})

    assert sorted(out) == ["X_train", "X_val", "y_train", "y_val"]
    assert all(array.dtype == np.float32 for array in out.values())
    np.testing.assert_array_equal(out["X_train"], X)


# --------------------------------------------------------------------------- check_labels


DATA = {"X_train": X, "y_train": Y.astype("float32"), "X_val": X[:2], "y_val": np.array([0, 9], dtype="float32")}


def labels_rejected(data: dict, classes: int | None) -> str:
    with pytest.raises(EpochError) as caught:
        check_labels(data, classes, "m.py")
    return str(caught.value)


def test_labels_within_the_models_classes_pass():
    check_labels(DATA, 10, "m.py")


def test_a_label_equal_to_the_number_of_classes_is_rejected_naming_the_model_file():
    assert labels_rejected(DATA, 9) == (
        "model file m.py: y_val[1] is 9, not a class index of the model's 9 outputs (0..8); 1 such labels")


@pytest.mark.parametrize("bad, shown", [(-1.0, "-1"), (0.5, "0.5"), (3.0, "3")])
def test_negative_fractional_or_too_large_training_labels_are_rejected(bad, shown):
    data = {**DATA, "y_train": np.array([0, 1, bad, bad], dtype="float32")}

    assert labels_rejected(data, 3) == (
        f"model file m.py: y_train[2] is {shown}, not a class index of the model's 3 outputs (0..2); 2 such labels")


def test_labels_with_several_columns_cannot_be_class_indices():
    data = {**DATA, "y_train": np.zeros((4, 2), dtype="float32")}

    assert labels_rejected(data, 10) == "model file m.py: y_train must hold one class index per sample, it has shape (4, 2)"


def test_labels_are_not_checked_when_the_loss_does_not_take_class_indices():
    check_labels({**DATA, "y_train": np.array([0.5, -3, 1e6, 2], dtype="float32")}, None, "m.py")


def test_the_classes_are_the_output_size_for_the_default_loss_only():
    import mxnet as mx
    from mxnet import gluon

    out = mx.nd.zeros((1, 7))

    assert runtime._classes(out, gluon.loss.SoftmaxCrossEntropyLoss()) == 7
    assert runtime._classes(out, gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False)) is None
    assert runtime._classes(out, gluon.loss.L2Loss()) is None
    assert runtime._classes(mx.nd.zeros((1,)), gluon.loss.SoftmaxCrossEntropyLoss()) is None


# --------------------------------------------------------------------------- load_model: the model file's own errors


def model_file(folder: Path, body: str, name: str = "model.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


def test_load_data_raising_is_rejected_naming_the_file_and_its_traceback_goes_to_stderr(tmp_path, capfd):
    path = model_file(tmp_path, """
        def build_model():
            pass

        def load_data():
            return helper()

        def helper():
            raise FileNotFoundError("digits.npz is not here")
    """)

    with pytest.raises(EpochError) as caught:
        load_model(runtime.HostState(), str(path))

    assert str(caught.value) == f"model file {path}: load_data() raised FileNotFoundError: digits.npz is not here"
    err = capfd.readouterr().err
    assert f"model file {path}: load_data() raised FileNotFoundError: digits.npz is not here; its traceback:" in err
    assert "Traceback (most recent call last):" in err
    assert f'File "{path}", line 9, in helper' in err and 'raise FileNotFoundError("digits.npz is not here")' in err


def test_a_model_file_that_fails_to_import_is_rejected_with_its_traceback(tmp_path, capfd):
    path = model_file(tmp_path, """
        import numpy as np
        SCALE = 1 / 0
    """)

    with pytest.raises(EpochError) as caught:
        load_model(runtime.HostState(), str(path))

    assert str(caught.value) == f"model file {path}: importing it raised ZeroDivisionError: division by zero"
    assert "SCALE = 1 / 0" in capfd.readouterr().err


def test_sys_exit_in_load_data_is_rejected_and_does_not_end_the_host(tmp_path):
    path = model_file(tmp_path, """
        import sys
        def build_model():
            pass
        def load_data():
            sys.exit(3)
    """)

    with pytest.raises(EpochError) as caught:
        load_model(runtime.HostState(), str(path))

    assert str(caught.value) == f"model file {path}: load_data() raised SystemExit: 3"


def test_broken_data_are_rejected_naming_the_model_file(tmp_path):
    path = model_file(tmp_path, """
        import numpy as np
        def build_model():
            pass
        def load_data():
            x = np.ones((4, 2), dtype="float32")
            x[3, 0] = np.nan
            return x, np.zeros(4)
    """)

    with pytest.raises(EpochError) as caught:
        load_model(runtime.HostState(), str(path))

    assert str(caught.value) == f"model file {path}: load_data(): X_train holds NaN or infinity (first at sample 3: nan)"


def test_a_failed_load_is_not_cached_and_a_fixed_file_loads(tmp_path):
    host = runtime.HostState()
    path = model_file(tmp_path, "def build_model(): pass\ndef load_data(): raise ValueError('not yet')\n")
    with pytest.raises(EpochError):
        load_model(host, str(path))
    path.write_text("def build_model(): pass\ndef load_data(): return [[1.0], [2.0]], [0, 1]\n")
    os.utime(path, (1, 1))  # a new mtime even within the file system's timestamp resolution

    _, data = load_model(host, str(path))

    np.testing.assert_array_equal(data["y_train"], [0, 1])


def test_a_warm_request_for_a_broken_model_file_is_answered_422(tmp_path, capfd):
    path = model_file(tmp_path, "def build_model(): pass\ndef load_data(): raise RuntimeError('no data')\n")
    context = make_context("test-worker")
    context.user_data.host = runtime.HostState()
    event = nuclio_sdk.Event(body=WarmRequest(str(path)).to_dict(), content_type="application/json")

    response = runtime.handle_event(context, event, "worker")

    assert (response.status_code, json.loads(response.body)) == (
        422, {"error": f"model file {path}: load_data() raised RuntimeError: no data", "role": "worker"})
    assert "raise RuntimeError('no data')" in capfd.readouterr().err


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
            deadline_s: float = 60.0) -> dict[str, Reply | Failure]:
        """One epoch of every function at once, as the controller invokes it; the failures cancel the rest."""
        self.step += 1
        host, port = self.platform.rendezvous_address(self.refs[0])
        results: dict[str, Reply | Failure] = {}

        def invoke(ref):
            request = EpochRequest(
                job=self.job, epoch=self.step, step=self.step, attempt=1, role=ref.role,
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

    for result in epochs.workers(results):
        assert isinstance(result, Failure) and result.kind == REJECTED, result
        assert result.message == (f"model file {path}: y_train[7] is 10, not a class index of the model's 10 "
                                  f"outputs (0..9); 1 such labels")


def test_the_hosts_still_train_after_those_failures(epochs, tmp_path):
    results = epochs.run(model_file(tmp_path, TINY))

    assert all(isinstance(r, Reply) for r in results.values()), results
