"""functions/warmup.py: which batch shapes a worker epoch runs, what a host has warmed, and that a warm-up leaves
nothing an epoch reads (parameter names, the numbers it computes)."""

from __future__ import annotations

import textwrap
from types import SimpleNamespace

import numpy as np
import pytest

from functions.warmup import (MAX_SHAPES, TRAINING, VALIDATION, Warmth, batch_rows, epoch_shapes, job_shapes,
                             warm_up)


def test_a_pass_sees_a_full_batch_and_a_shorter_last_one():
    assert batch_rows(2000, 64) == {64, 16}
    assert batch_rows(128, 64) == {64}
    assert batch_rows(64, 64) == {64}
    assert batch_rows(10, 64) == {10}
    assert batch_rows(0, 64) == set()


def test_an_epoch_runs_its_shards_batches_and_every_ranks_validation_slice():
    # LeNet's job: 4,000 training samples, 1,000 validation samples, 2 workers, batch 64 (validation batch 256)
    assert epoch_shapes(2000, 1000, 2, 64) == {(TRAINING, 64), (TRAINING, 16), (VALIDATION, 256), (VALIDATION, 244)}
    # slices of 500 and 501: each rank's last validation batch
    assert epoch_shapes(2000, 1001, 2, 64) == {(TRAINING, 64), (TRAINING, 16), (VALIDATION, 256),
                                               (VALIDATION, 244), (VALIDATION, 245)}
    assert epoch_shapes(96, 0, 2, 32) == {(TRAINING, 32)}  # no validation set


def test_a_jobs_warm_request_warms_its_batch_a_calibration_batch_and_validation_at_one_to_four_workers():
    # validation slices of 1,000 samples in batches of 256: 1,000 | 500 | 333, 333, 334 | 250 at 1-4 workers
    assert job_shapes(64, 1000) == {(TRAINING, 64), (TRAINING, 63), (VALIDATION, 256), (VALIDATION, 232),
                                    (VALIDATION, 244), (VALIDATION, 77), (VALIDATION, 78), (VALIDATION, 250)}
    assert job_shapes(1, 0) == {(TRAINING, 1)}  # no batch of 0 rows, no validation set


def request(path, batch_size=32, workers=2, data_fraction=1.0):
    return SimpleNamespace(model_path=str(path), hyper=SimpleNamespace(batch_size=batch_size),
                           ps=SimpleNamespace(num_workers=workers), data_fraction=data_fraction)


def shard_size(samples, req):
    return int(samples * req.data_fraction) // req.ps.num_workers


def models(path, module, train=192, val=64):
    data = {"X_train": np.zeros((train, 8), "float32"), "X_val": np.zeros((val, 8), "float32")}
    return {str(path.resolve()): (0.0, module, data)}


def test_a_host_warms_each_shape_of_a_loaded_module_once(tmp_path):
    path, module = tmp_path / "m.py", object()
    warmth = Warmth()

    assert warmth.take(models(path, module), shard_size) is None  # nothing wanted
    warmth.want(request(path))
    assert warmth.take({}, shard_size) is None  # its model is not loaded: nothing to warm

    warmth.want(request(path))
    taken_module, sample, shapes, taken_path = warmth.take(models(path, module), shard_size)
    assert taken_module is module and sample.shape == (8,) and taken_path == str(path.resolve())
    assert shapes == {(TRAINING, 32), (VALIDATION, 32)}
    warmth.done(taken_path, module, shapes)

    warmth.want(request(path))
    assert warmth.take(models(path, module), shard_size) is None  # warmed already
    warmth.want(request(path, workers=4))  # other counts: shorter shards and validation slices
    assert warmth.take(models(path, module), shard_size)[2] == {(TRAINING, 16), (VALIDATION, 16)}

    reloaded = object()  # the model file changed: its module is warmed again
    warmth.want(request(path))
    assert warmth.take(models(path, reloaded), shard_size)[2] == {(TRAINING, 32), (VALIDATION, 32)}


def test_shapes_a_warm_request_warmed_are_not_warmed_again(tmp_path):
    path, module = str(tmp_path / "m.py"), object()
    warmth = Warmth()
    first = warmth.unwarmed(path, module, {(TRAINING, 64), (VALIDATION, 256)})
    warmth.done(path, module, first)
    assert warmth.unwarmed(path, module, {(TRAINING, 64), (TRAINING, 16)}) == {(TRAINING, 16)}
    assert warmth.unwarmed(path, object(), {(TRAINING, 64)}) == {(TRAINING, 64)}  # another module


def test_a_calibration_mini_epoch_is_not_warmed_for(tmp_path):
    """A warm-up beside a mini-epoch would slow the measurement it is; full epochs at those counts warm up."""
    path, module = tmp_path / "m.py", object()
    warmth = Warmth()
    warmth.want(request(path, data_fraction=0.25))
    assert warmth.take(models(path, module), shard_size) is None
    warmth.want(request(path))
    assert warmth.take(models(path, module), shard_size) is not None


def test_a_host_warms_at_most_max_shapes_per_module(tmp_path):
    path, module = tmp_path / "m.py", object()
    warmth = Warmth()
    warmed = set()
    for batch in range(1, 200):
        warmth.want(request(path, batch_size=batch))
        taken = warmth.take(models(path, module, train=10_000, val=0), shard_size)
        if taken is None:
            continue
        warmed |= taken[2]
        warmth.done(taken[3], module, taken[2])
    assert len(warmed) == MAX_SHAPES


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
        warm_up(model_module, np.zeros(8, "float32"), {(TRAINING, 32), (TRAINING, 7), (VALIDATION, 256)})
        warm_names, warm_loss, warm_params = train_once(model_module)

    assert warm_names == names  # the throw-away model took no name from the epoch's
    assert warm_loss == loss
    assert all(np.array_equal(a, b) for a, b in zip(warm_params, params))


def test_a_model_file_that_raises_in_its_warm_up_raises_to_the_caller(tmp_path):
    broken = SimpleNamespace(build_model=lambda: (_ for _ in ()).throw(ValueError("no model today")))
    with pytest.raises(ValueError, match="no model today"):
        warm_up(broken, np.zeros(8, "float32"), {(TRAINING, 4)})
