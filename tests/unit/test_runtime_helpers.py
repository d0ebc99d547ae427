"""coach_functions helpers that need no MXNet: data sharding, load_data() normalising, the DMLC environment."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from coach.domain.contracts import ContractError, EpochRequest, Hyper, PsAddress
from coach_functions.data import normalise_data
from coach_functions.failures import EpochError
from coach_functions.ps import ps_environment
from coach_functions.shards import shard, shard_size
from coach_functions.training import _warmup_s

FUNCTIONS = Path(__file__).resolve().parents[2] / "coach_functions"


def epoch_request(role: str = "worker", num_workers: int = 1, fraction: float = 1.0, seed: int = 0,
                  ps: PsAddress | None = None) -> EpochRequest:
    """A valid request; the helpers under test read only its ps, data_fraction, hyper.seed and role."""
    return EpochRequest(
        job="j", epoch=1, step=1, attempt=1, role=role,
        ps=ps or PsAddress(root_uri="10.0.0.5", root_port=9091, num_servers=1, num_workers=num_workers,
                           node_host="10.0.0.7"),
        model_path="m.py", data_fraction=fraction,
        hyper=Hyper(batch_size=8, optimizer="sgd", learning_rate=0.1, seed=seed),
        checkpoint_load=None, checkpoint_save="ckpt/j-1", deadline_s=60.0)


def indexed_data(n: int) -> dict:
    """X holds each sample's own index, so a shard tells which samples it got; y is X + 1000."""
    x = np.arange(n, dtype="float32").reshape(n, 1)
    return {"X_train": x, "y_train": x[:, 0] + 1000}


def shards(data: dict, num_workers: int, fraction: float = 1.0, seed: int = 0) -> list[list[int]]:
    out = []
    request = epoch_request(num_workers=num_workers, fraction=fraction, seed=seed)
    for rank in range(num_workers):
        x, y = shard(data, request, rank)
        assert list(y) == list(x[:, 0] + 1000)  # inputs and labels stay paired
        out.append([int(v) for v in x[:, 0]])
    return out


# --------------------------------------------------------------------------- shard


@pytest.mark.parametrize("n, workers", [(10, 3), (12, 4), (7, 7), (100, 6)])
def test_shards_are_equal_disjoint_and_cover_floor_n_over_w_times_w_samples(n, workers):
    parts = shards(indexed_data(n), workers, seed=3)

    per_worker = n // workers
    assert [len(part) for part in parts] == [per_worker] * workers
    everything = [i for part in parts for i in part]
    assert len(set(everything)) == per_worker * workers  # no sample twice
    assert set(everything) <= set(range(n))


def test_shards_are_the_same_for_the_same_seed():
    data = indexed_data(50)

    assert shards(data, 2, seed=7) == shards(data, 2, seed=7)


def test_shards_differ_for_another_seed():
    data = indexed_data(50)

    assert shards(data, 2, seed=7) != shards(data, 2, seed=8)


def test_shards_are_a_shuffle_not_consecutive_blocks():
    (part,) = shards(indexed_data(50), 1, seed=7)

    assert sorted(part) == list(range(50))
    assert part != list(range(50))


def test_fraction_keeps_the_rounded_up_share_of_the_samples():
    parts = shards(indexed_data(100), 2, fraction=0.25, seed=1)  # ceil(25) = 25 samples, 12 per worker

    assert [len(part) for part in parts] == [12, 12]


def test_fraction_keeps_a_subset_of_the_full_shuffle():
    full = [i for part in shards(indexed_data(100), 1, seed=1) for i in part]

    (quarter,) = shards(indexed_data(100), 1, fraction=0.25, seed=1)

    assert quarter == full[:25]


def test_a_tiny_fraction_still_gives_every_worker_one_sample():
    parts = shards(indexed_data(100), 4, fraction=0.001, seed=1)

    assert [len(part) for part in parts] == [1, 1, 1, 1]


def test_fewer_samples_than_workers_gives_empty_shards():
    parts = shards(indexed_data(3), 4)

    assert parts == [[], [], [], []]


@pytest.mark.parametrize("n, workers, fraction", [(10, 3, 1.0), (100, 2, 0.25), (100, 4, 0.001), (3, 4, 1.0)])
def test_the_shard_size_a_worker_checks_before_joining_is_the_size_of_every_shard(n, workers, fraction):
    request = epoch_request(num_workers=workers, fraction=fraction)

    assert [len(part) for part in shards(indexed_data(n), workers, fraction)] == [shard_size(n, request)] * workers


# --------------------------------------------------------------------------- normalise_data


def check_training_part(out: dict) -> None:
    assert out["X_train"].dtype == np.float32
    assert out["y_train"].dtype == np.float32
    np.testing.assert_array_equal(out["X_train"], np.array([[1, 2], [3, 4], [5, 6]], dtype="float32"))
    np.testing.assert_array_equal(out["y_train"], np.array([0, 1, 0], dtype="float32"))


X = [[1, 2], [3, 4], [5, 6]]
Y = [0, 1, 0]
XV = np.array([[7.5, 8.5]], dtype="float64")
YV = np.array([1], dtype="int64")


def test_normalise_accepts_a_pair():
    out = normalise_data((X, Y))

    check_training_part(out)
    assert sorted(out) == ["X_train", "y_train"]


def test_normalise_accepts_four_arrays_with_validation_data():
    out = normalise_data([X, Y, XV, YV])

    check_training_part(out)
    assert sorted(out) == ["X_train", "X_val", "y_train", "y_val"]
    assert (out["X_val"].dtype, out["y_val"].dtype) == (np.float32, np.float32)
    np.testing.assert_array_equal(out["X_val"], np.array([[7.5, 8.5]], dtype="float32"))
    np.testing.assert_array_equal(out["y_val"], np.array([1.0], dtype="float32"))


def test_normalise_accepts_a_dict():
    out = normalise_data({"X_train": np.array(X, dtype="int64"), "y_train": np.array(Y), "X_val": XV, "y_val": YV})

    check_training_part(out)
    assert sorted(out) == ["X_train", "X_val", "y_train", "y_val"]


def test_normalise_drops_empty_validation_data():
    out = normalise_data({"X_train": X, "y_train": Y, "X_val": [], "y_val": []})

    assert sorted(out) == ["X_train", "y_train"]


TRAINING_RULE = "load_data(): training inputs and labels must be non-empty and of equal length"
SHAPE_RULE = "load_data() must return (X, y), (X, y, X_val, y_val) or a dict of them"


@pytest.mark.parametrize("data", [
    (X, Y[:2]),                                  # one label short
    ([], []),                                    # empty
    {"X_train": X},                              # no labels
    {"X_train": None, "y_train": Y},             # no inputs
], ids=["mismatched", "empty", "no-labels", "no-inputs"])
def test_normalise_rejects_bad_training_data(data):
    with pytest.raises(EpochError) as caught:
        normalise_data(data)

    assert str(caught.value) == TRAINING_RULE


@pytest.mark.parametrize("data", [(X,), (X, Y, XV), X[0][0], None], ids=["one", "three", "number", "none"])
def test_normalise_rejects_other_shapes(data):
    with pytest.raises(EpochError) as caught:
        normalise_data(data)

    assert str(caught.value) == SHAPE_RULE


# --------------------------------------------------------------------------- ps_environment


def test_ps_environment_is_the_dmlc_variables_of_one_role_as_strings():
    ps = PsAddress(root_uri="10.0.0.5", root_port=9091, num_servers=1, num_workers=2, node_host="10.0.0.7")

    assert ps_environment("server", ps) == {
        "DMLC_ROLE": "server",
        "DMLC_PS_ROOT_URI": "10.0.0.5",
        "DMLC_PS_ROOT_PORT": "9091",
        "DMLC_NUM_SERVER": "1",
        "DMLC_NUM_WORKER": "2",
        "DMLC_NODE_HOST": "10.0.0.7",
        "PS_VERBOSE": "0",
    }


def test_ps_environment_takes_role_counts_and_node_host_from_the_request():
    ps = PsAddress(root_uri="127.0.0.1", root_port=9000, num_servers=2, num_workers=4, node_host="10.1.2.3")

    env = ps_environment("worker", ps)

    assert (env["DMLC_ROLE"], env["DMLC_NODE_HOST"]) == ("worker", "10.1.2.3")
    assert (env["DMLC_NUM_SERVER"], env["DMLC_NUM_WORKER"]) == ("2", "4")
    assert ps_environment("scheduler", ps)["DMLC_ROLE"] == "scheduler"


def test_a_request_without_node_host_is_refused_not_defaulted_to_loopback():
    body = epoch_request().to_dict()
    del body["ps"]["node_host"]

    with pytest.raises(ContractError) as caught:
        EpochRequest.from_dict(body)

    assert (str(caught.value), caught.value.field) == ("ps.node_host: required", "ps.node_host")


def test_no_function_source_hides_a_loopback_default():
    sources = sorted(FUNCTIONS.rglob("*.py"))

    assert len(sources) >= 4  # the runtime's modules and the three roles' main.py
    assert [str(p) for p in sources if "127.0.0.1" in p.read_text()] == []


def test_warmup_is_the_loops_time_beyond_its_steps_at_the_rate_between_the_first_and_the_last():
    # 10 steps in a 5 s loop: the first done at 100.9, the last at 104.5 (0.4 s each between): 1 s is not the rate's,
    # 0.5 s of the first step's excess and 0.5 s of wind-down after the last step
    assert _warmup_s({1: 100.9, 10: 104.5}, 5.0, 10) == pytest.approx(1.0)
    # the wind-down alone: a steady loop whose last step ended 0.3 s before the loop did
    assert _warmup_s({1: 100.2, 5: 101.0}, 1.3, 5) == pytest.approx(0.3)
    assert _warmup_s({1: 100.1, 10: 101.9}, 1.9, 10) == 0.0  # a faster start: nothing beyond the rate, never negative
    assert _warmup_s({}, 1.0, 10) is None and _warmup_s({1: 100.5}, 0.5, 1) is None  # fewer than two steps
    assert _warmup_s({1: 100.5}, 0.5, 10) is None  # no last mark: no rate
    assert _warmup_s({1: 100.1, 10: 90.0}, 5.0, 10) <= 5.0  # a clock that went back: within compute_s


def test_warmup_takes_the_rate_from_the_second_steps_end_so_the_second_steps_excess_is_not_scaled():
    # 5 steps in a 1.3 s loop: the first done at 100.2, the second 0.4 s later (0.2 s of start-up beyond the
    # steady 0.2 s), then 0.2 s each to 101.2, and 0.1 s of wind-down: 1.3 - 5 * 0.2 = 0.3 s beyond the rate
    marks = {1: 100.2, 2: 100.6, 5: 101.2}
    assert _warmup_s(marks, 1.3, 5) == pytest.approx(0.3)
    # the rate from the first step's end would have put the second step's excess into every step: 0.25 s a step
    assert _warmup_s({1: 100.2, 5: 101.2}, 1.3, 5) == pytest.approx(0.05)
    # two steps: no rate after the second, so it is the first's to the last's
    assert _warmup_s({1: 100.2, 2: 100.4}, 0.5, 2) == pytest.approx(0.1)
