"""Acting with a DL2 network without MXNet: the model file read into numpy as MXNet reads it, every malformed file
one ModelFileError naming it, and the cluster policy's one-row-at-a-time greedy taking the actions the plain
observe-then-forward loop takes."""

from __future__ import annotations

import math
import os
import re
import struct

import mxnet as mx
import numpy as np
import pytest

from coach.dl2 import CLUSTER_IMITATION_MODEL, CLUSTER_MODEL, RUN_IMITATION_MODEL, RUN_MODEL, ModelFileError
from coach.dl2.cluster_policy import decide
from coach.dl2.cluster_round import GPU_SHAPE, Round
from coach.dl2.network import new_network, numpy_net
from coach.dl2.numpy_net import NumpyNet, load_numpy_net
from coach.dl2.params_file import read_params
from coach.dl2.run_round import COUNTS_SHAPE
from coach.simulator.view import ClusterJobView, ClusterSnapshot
from tests.unit.test_dl2_network import FakeApp


@pytest.mark.parametrize("path", [CLUSTER_MODEL, CLUSTER_IMITATION_MODEL, RUN_MODEL, RUN_IMITATION_MODEL])
def test_the_shipped_model_files_read_as_mxnet_reads_them(path):
    mine, theirs = read_params(path), mx.nd.load(str(path))
    assert sorted(mine) == sorted(theirs)
    for name, array in theirs.items():
        assert mine[name].dtype == np.float32 and np.array_equal(mine[name], array.asnumpy()), name


def test_arrays_of_every_float_type_read_as_saved(tmp_path):
    path = tmp_path / "types.params"
    arrays = {"double": np.arange(6.0).reshape(2, 3) / 7, "half": np.array([1.5, -2.25]), "single": np.ones((1, 4))}
    types = {"double": "float64", "half": "float16", "single": "float32"}
    mx.nd.save(str(path), {name: mx.nd.array(a, dtype=types[name]) for name, a in arrays.items()})
    mine = read_params(path)
    for name, array in mx.nd.load(str(path)).items():
        assert mine[name].dtype == np.dtype(types[name]) and np.array_equal(mine[name], array.asnumpy())


def test_a_saved_network_acts_as_the_network_in_training(tmp_path):
    for shape in (GPU_SHAPE, COUNTS_SHAPE):
        net = new_network(seed=11, shape=shape)
        path = tmp_path / f"{shape.kinds}.params"
        net.save_parameters(str(path))
        assert _same(load_numpy_net(path, shape), numpy_net(net))


def _same(a: NumpyNet, b: NumpyNet) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in NumpyNet.__dataclass_fields__)


def _valid_bytes() -> bytes:
    return CLUSTER_MODEL.read_bytes()


def _bad(data: bytes) -> dict[str, bytes]:
    """Ways a model file can be wrong, each built from a valid file's bytes."""
    header = 16 + 8  # list magic, reserved, array count
    return {
        "empty": b"",
        "text": b"not parameters at all",
        "list magic": struct.pack("<Q", 0x113) + data[8:],
        "array magic": data[:header] + struct.pack("<I", 0xDEADBEEF) + data[header + 4:],
        "sparse": data[:header + 4] + struct.pack("<i", 1) + data[header + 8:],
        "dimensions": data[:header + 8] + struct.pack("<i", 99) + data[header + 12:],
        "huge dimension": data[:header + 12] + struct.pack("<q", 1 << 40) + data[header + 20:],
        "negative dimension": data[:header + 12] + struct.pack("<q", -3) + data[header + 20:],
        "integer elements": _retype(data, header, 4),
        "array count": data[:16] + struct.pack("<Q", 1 << 60) + data[24:],
        "truncated": data[:len(data) // 2],
        "trailing bytes": data + b"\0",
        "name count": data[:-_names_size(data)] + struct.pack("<Q", 3),
    }


def _retype(data: bytes, at: int, flag: int) -> bytes:
    ndim = struct.unpack_from("<i", data, at + 8)[0]
    where = at + 12 + 8 * ndim + 8
    return data[:where] + struct.pack("<i", flag) + data[where + 4:]


def _names_size(data: bytes) -> int:
    """Bytes the names take at the end of the shipped file: their count, then each name's length and bytes."""
    assert data == _valid_bytes()
    return 8 + sum(8 + len(name.encode()) for name in mx.nd.load(str(CLUSTER_MODEL)))


BAD = ("empty", "text", "list magic", "array magic", "sparse", "dimensions", "huge dimension", "negative dimension",
       "integer elements", "array count", "truncated", "trailing bytes", "name count")


def test_every_malformed_case_is_built():
    assert sorted(_bad(_valid_bytes())) == sorted(BAD)


@pytest.mark.parametrize("case", BAD)
def test_a_malformed_model_file_is_one_error_naming_it(tmp_path, case):
    path = tmp_path / f"{case.replace(' ', '-')}.params"
    path.write_bytes(_bad(_valid_bytes())[case])
    with pytest.raises(ModelFileError) as caught:
        load_numpy_net(path, GPU_SHAPE)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message and len(message) < 300, message


def test_special_missing_and_oversized_files_are_refused_before_reading(tmp_path, monkeypatch):
    os.mkfifo(tmp_path / "fifo.params")
    (tmp_path / "folder.params").mkdir()
    cases = {"fifo.params": "not a regular file (a FIFO)", "folder.params": "Is a directory",
             "none.params": "no DL2 model file here"}
    for name, why in cases.items():
        with pytest.raises(ModelFileError, match=re.escape(f"{name}: ") + ".*" + re.escape(why)):
            read_params(tmp_path / name)
    with pytest.raises(ModelFileError, match="dev/zero: not a regular file"):
        read_params("/dev/zero")
    path = tmp_path / "big.params"
    path.write_bytes(_valid_bytes())
    monkeypatch.setattr("coach.dl2.params_file.MAX_MODEL_BYTES", 100)
    with pytest.raises(ModelFileError, match=r"big.params: file is larger than 100 bytes \(the limit\)"):
        read_params(path)


def test_parameters_that_do_not_make_the_network_are_named(tmp_path):
    good = {name: array.asnumpy() for name, array in mx.nd.load(str(CLUSTER_MODEL)).items()}
    cases = {
        "extra": ({**good, "spare.weight": np.zeros(2, np.float32)}, "spare.weight: not a parameter"),
        "missing": ({k: v for k, v in good.items() if k != "head.bias"}, "head.bias: missing"),
        "shape": ({**good, "head.bias": np.zeros(5, np.float32)}, r"head.bias has shape \(5,\)"),
        "nan": ({**good, "stop.weight": np.full((1, 32), np.nan, np.float32)}, "stop.weight holds numbers that are "
                                                                               "not finite"),
        "features": ({**good, "job_dense.weight": np.zeros((32, 7), np.float32)}, "reads 7 job features"),
    }
    for case, (arrays, why) in cases.items():
        path = tmp_path / f"{case}.params"
        mx.nd.save(str(path), {name: mx.nd.array(a, dtype=a.dtype) for name, a in arrays.items()})
        with pytest.raises(ModelFileError, match=f"{case}.params: .*{why}"):
            load_numpy_net(path, GPU_SHAPE)


# --------------------------------------------------------------------------- the greedy, one row at a time


def _plain_decide(net: NumpyNet, round_: Round) -> np.ndarray:
    """What `decide` must equal: observe the whole state, take the most likely action, again until STOP or full."""
    given = np.zeros(len(round_.jobs), dtype=np.int64)
    while round_.free(given) > 0:
        observation = round_.observe(given)
        action = net.greedy(observation)
        if action == observation.stop:
            break
        given[action] += 1
    return given


def _random_snapshot(rng: np.random.Generator) -> ClusterSnapshot:
    apps = [FakeApp(name, scale=s) for name, s in (("cifar10", 0.9), ("bert", 0.97), ("mystery", 0.7))]
    jobs = []
    for i in range(int(rng.integers(0, 14))):
        total = float(rng.uniform(1e4, 1e7))
        jobs.append(ClusterJobView(
            name=f"j{i}", arrival_s=float(i * rng.uniform(0, 300)), app=apps[int(rng.integers(0, 3))],
            requested_gpus=int(rng.integers(1, 9)), requested_batch=int(rng.choice([32, 64, 256])),
            progress=float(rng.uniform(0, total)), total_progress=total,
            attained_gpu_s=float(rng.uniform(0, 1e5)), gpus=int(rng.integers(0, 5)), batch=64,
            remaining_budget=math.inf, max_gpus=int(rng.integers(1, 17))))
    nodes = tuple(int(g) for g in rng.integers(1, 9, size=int(rng.integers(1, 6))))
    return ClusterSnapshot(now_s=3600.0 * 5, node_gpus=nodes, price_per_gpu_s=0.001, interval_s=60.0,
                           jobs=tuple(jobs))


def test_decide_takes_the_actions_of_the_plain_greedy_loop():
    rng = np.random.default_rng(7)
    nets = [numpy_net(new_network(seed=s)) for s in range(4)] + [load_numpy_net(CLUSTER_MODEL, GPU_SHAPE)]
    handed_out = 0
    for trial in range(300):
        snapshot, net = _random_snapshot(rng), nets[trial % len(nets)]
        given = decide(net, Round(snapshot))
        assert given.tolist() == _plain_decide(net, Round(snapshot)).tolist(), trial
        handed_out += int(given.sum())
    assert handed_out > 300  # the nets did hand GPUs out: the comparison is not between empty answers


def test_a_job_s_row_is_its_row_of_the_whole_observation():
    rng = np.random.default_rng(3)
    for _ in range(50):
        round_ = Round(_random_snapshot(rng))
        if not round_.jobs:
            continue
        given = rng.integers(0, 6, size=len(round_.jobs))
        whole = round_.observe(given).jobs
        for i in range(len(round_.jobs)):
            assert np.array_equal(round_.job_row(i, int(given[i])), whole[i]), i
