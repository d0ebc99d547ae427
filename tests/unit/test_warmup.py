"""coach_functions/warmup.py: which batch shapes a job's epochs run and in what order they are warmed, what a host has
warmed, the time limit, and that a warm-up leaves nothing an epoch reads (parameter names, the numbers it computes)."""

from __future__ import annotations

import textwrap
from types import SimpleNamespace

import numpy as np
import pytest

from coach_functions.warmup import MAX_SHAPES, TRAINING, VALIDATION, Warmth, batch_rows, job_shapes, warm_up


def test_a_pass_sees_a_full_batch_and_a_shorter_last_one():
    assert batch_rows(2000, 64) == {64, 16}
    assert batch_rows(128, 64) == {64}
    assert batch_rows(64, 64) == {64}
    assert batch_rows(10, 64) == {10}
    assert batch_rows(0, 64) == set()


def test_a_jobs_warm_request_warms_every_batch_its_epochs_run_at_one_to_four_workers_most_used_first():
    # LeNet's job: 4,000 training samples (shards of 4,000 | 2,000 | 1,333 | 1,000 at 1-4 workers, batch 64) and
    # 1,000 validation samples (slices of 1,000 | 500 | 333, 333, 334 | 250, in batches of 256)
    assert job_shapes(64, 4000, 1000) == [
        (TRAINING, 64), (TRAINING, 63), (TRAINING, 32), (TRAINING, 16), (TRAINING, 53), (TRAINING, 40),
        (VALIDATION, 256), (VALIDATION, 232), (VALIDATION, 244), (VALIDATION, 77), (VALIDATION, 78),
        (VALIDATION, 250)]
    assert job_shapes(1, 0, 0) == [(TRAINING, 1)]  # no batch of 0 rows, no data to shard, no validation set
    assert job_shapes(32, 2, 0) == [(TRAINING, 32), (TRAINING, 31), (TRAINING, 2), (TRAINING, 1)]  # < 4 samples


def test_a_host_warms_each_shape_once_per_loaded_module_in_the_order_asked(tmp_path):
    path, module = str(tmp_path / "m.py"), object()
    warmth = Warmth()
    first = warmth.unwarmed(path, module, [(VALIDATION, 256), (TRAINING, 64)])
    assert first == [(VALIDATION, 256), (TRAINING, 64)]
    warmth.done(path, module, first)
    assert warmth.unwarmed(path, module, [(TRAINING, 64), (TRAINING, 16)]) == [(TRAINING, 16)]
    assert warmth.unwarmed(path, object(), [(TRAINING, 64)]) == [(TRAINING, 64)]  # a reloaded module: again
    assert warmth.unwarmed(str(tmp_path / "other.py"), module, [(TRAINING, 64)]) == [(TRAINING, 64)]


def test_a_host_warms_at_most_max_shapes_per_module(tmp_path):
    path, module = str(tmp_path / "m.py"), object()
    warmth = Warmth()
    warmed = set()
    for batch in range(1, 200):
        shapes = warmth.unwarmed(path, module, job_shapes(batch, 10_000, 0))
        warmed |= set(shapes)
        warmth.done(path, module, shapes)
    assert len(warmed) == MAX_SHAPES
    assert warmth.unwarmed(path, module, [(TRAINING, 999)]) == []


MODEL = """
    from mxnet import gluon

    def build_model():
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(10))
        net.hybridize()
        return net
"""


@pytest.fixture()
def model_module(tmp_path):
    import importlib.util

    path = tmp_path / "warm_model.py"
    path.write_text(textwrap.dedent(MODEL))
    spec = importlib.util.spec_from_file_location("warm_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train_once(module):
    """What an epoch computes: seeded model, one SGD step on fixed data; (parameter names, loss, parameters)."""
    import mxnet as mx
    from mxnet import autograd, gluon

    mx.random.seed(3)
    net = module.build_model()
    net.initialize(mx.init.Xavier())
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    x = mx.nd.array(np.random.RandomState(0).rand(32, 8).astype("float32"))
    y = mx.nd.array(np.arange(32) % 10)
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    loss.backward()
    trainer.step(32)
    params = net.collect_params()
    return list(params.keys()), float(loss.sum().asscalar()), [p.data().asnumpy() for p in params.values()]


def test_a_warm_up_changes_no_name_and_no_number_of_the_epoch_after_it(model_module):
    import mxnet as mx

    with mx.name.NameManager():  # both sides start from the same name counter
        names, loss, params = train_once(model_module)
    with mx.name.NameManager():
        ran = warm_up(model_module, np.zeros(8, "float32"), [(TRAINING, 32), (TRAINING, 7), (VALIDATION, 256)])
        warm_names, warm_loss, warm_params = train_once(model_module)

    assert ran == [(TRAINING, 32), (TRAINING, 7), (VALIDATION, 256)]
    assert warm_names == names  # the throw-away model took no name from the epoch's
    assert warm_loss == loss
    assert all(np.array_equal(a, b) for a, b in zip(warm_params, params))


def test_a_model_file_that_raises_in_its_warm_up_raises_to_the_caller(tmp_path):
    broken = SimpleNamespace(build_model=lambda: (_ for _ in ()).throw(ValueError("no model today")))
    with pytest.raises(ValueError, match="no model today"):
        warm_up(broken, np.zeros(8, "float32"), [(TRAINING, 4)])


def test_a_warm_up_stops_after_the_shape_that_reaches_its_time_limit(model_module):
    """The job waits for the warm-up: a host spends at most about WARM_UP_LIMIT_S on it, the most used shapes
    first, and always runs the first."""
    shapes = [(TRAINING, 32), (TRAINING, 31), (VALIDATION, 256)]
    assert warm_up(model_module, np.zeros(8, "float32"), shapes, limit_s=0.0) == [(TRAINING, 32)]
    assert warm_up(model_module, np.zeros(8, "float32"), shapes, limit_s=60.0) == shapes
