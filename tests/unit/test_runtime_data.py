"""Broken model files and broken data are rejected, naming the model file; diverged training stops cleanly.

- `normalise_data` and `check_labels` (pure NumPy) reject what the model-file contract does not allow.
- `load_model` turns anything the model file raises into an EpochError (422, not retried) and writes its
  traceback to stderr, the function's log.
- Real epochs on real function hosts are in tests/integration/test_runtime_epochs.py.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import nuclio_sdk
import numpy as np
import pytest

from coach.domain.contracts import WarmRequest
from coach.platforms.host import make_context
from coach_functions import handler, models, training
from coach_functions.data import check_labels, normalise_data
from coach_functions.failures import EpochError
from coach_functions.host_state import HostState
from coach_functions.models import load_model

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

    assert training._classes(out, gluon.loss.SoftmaxCrossEntropyLoss()) == 7
    assert training._classes(out, gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False)) is None
    assert training._classes(out, gluon.loss.L2Loss()) is None
    assert training._classes(mx.nd.zeros((1,)), gluon.loss.SoftmaxCrossEntropyLoss()) is None


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
        load_model(HostState(), str(path))

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
        load_model(HostState(), str(path))

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
        load_model(HostState(), str(path))

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
        load_model(HostState(), str(path))

    assert str(caught.value) == f"model file {path}: load_data(): X_train holds NaN or infinity (first at sample 3: nan)"


def test_a_failed_load_is_not_cached_and_a_fixed_file_loads(tmp_path):
    host = HostState()
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
    context.user_data.host = HostState()
    event = nuclio_sdk.Event(body=WarmRequest(str(path)).to_dict(), content_type="application/json")

    response = handler.handle_event(context, event, "worker")

    assert (response.status_code, json.loads(response.body)) == (
        422, {"error": f"model file {path}: load_data() raised RuntimeError: no data", "role": "worker"})
    assert "raise RuntimeError('no data')" in capfd.readouterr().err


# --------------------------------------------------------------------------- the classes a host learns


TWO_SAMPLES = """
    def build_model():
        pass

    def load_data():
        return [[0.0], [1.0]], [0, 1]
"""


@pytest.mark.parametrize("classes", [10, None])  # None: a loss whose labels are not class indices, known too
def test_a_host_keeps_the_classes_a_worker_reply_tells_for_the_module_loaded_now_and_takes_them_out(tmp_path,
                                                                                                   classes):
    path = model_file(tmp_path, TWO_SAMPLES)
    host = HostState()
    module, _ = load_model(host, str(path))
    assert models.known_classes(host, str(path), module) is models.UNKNOWN

    reply = {"samples": 2, models.CLASSES_FIELD: classes}
    models.learn_classes(host, str(path), module, reply)

    assert reply == {"samples": 2}  # never passed on to the controller
    assert models.known_classes(host, str(path), module) == classes


def test_a_changed_model_file_forgets_its_classes_and_odd_values_are_not_kept(tmp_path):
    path = model_file(tmp_path, TWO_SAMPLES)
    host = HostState()
    old, _ = load_model(host, str(path))
    models.learn_classes(host, str(path), old, {models.CLASSES_FIELD: 2})
    stat = path.stat()
    os.utime(path, (stat.st_atime, stat.st_mtime + 5))

    module, _ = load_model(host, str(path))

    assert models.known_classes(host, str(path), module) is models.UNKNOWN
    models.learn_classes(host, str(path), old, {models.CLASSES_FIELD: 2})  # an epoch of the module replaced
    assert models.known_classes(host, str(path), module) is models.UNKNOWN
    models.learn_classes(host, str(path), module, {models.CLASSES_FIELD: "10"})  # not from a child of ours
    assert models.known_classes(host, str(path), module) is models.UNKNOWN
    models.learn_classes(host, str(tmp_path / "other.py"), module, {models.CLASSES_FIELD: 3})  # not loaded
    assert models.known_classes(host, str(tmp_path / "other.py"), module) is models.UNKNOWN
