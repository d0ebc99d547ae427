"""The DL2 policy's pieces on hand-made states: features and masks, the network's shapes and masking, the numpy
forward pass against Gluon's, the policy's grants, the teacher's decisions, and the registry's model file."""

from __future__ import annotations

import math
from dataclasses import dataclass

import mxnet as mx
import numpy as np
import pytest

from tests.support import pollux_data, require
from coach.simulator.policies import CLUSTER_POLICIES
from coach.simulator.grants import batch_bounds, check_grants
from coach.dl2 import CLUSTER_MODEL
from coach.dl2.cluster_round import GLOBAL_FEATURES, JOB_FEATURES, Round
from coach.dl2.observation import pad, padded_action
from coach.dl2.imitation import expert_steps, next_action, targets_of
from coach.dl2 import ModelFileError
from coach.dl2.cluster_round import GPU_SHAPE
from coach.dl2.network import new_network, numpy_net
from coach.dl2.numpy_net import load_numpy_net
from coach.dl2.cluster_policy import Dl2ClusterPolicy, decide, dl2
from coach.simulator.policies.drf import drf
from coach.simulator.policies.optimus import optimus
from coach.simulator.session import Settings, cluster_from, simulate
from coach.simulator.view import ClusterSnapshot, ClusterJobView


@dataclass(frozen=True)
class FakeApp:
    name: str = "cifar10"
    init_batch: int = 32
    max_batch: int = 1024
    max_local_batch: int = 128
    scale: float = 0.9

    def throughput(self, gpus, nodes, batch):
        return gpus * 100.0 * self.scale ** (gpus - 1) if gpus > 0 else 0.0

    def efficiency(self, batch, progress):
        return 1.0

    def best_batch(self, gpus, nodes, progress):
        low, _ = batch_bounds(self, gpus)
        return low, self.throughput(gpus, nodes, low)


def job(name, *, arrival_s=0.0, app=FakeApp(), asked=1, progress=0.0, total=1e6, gpus=0, max_gpus=8):
    return ClusterJobView(name=name, arrival_s=arrival_s, app=app, requested_gpus=asked, requested_batch=64,
                          progress=progress, total_progress=total, attained_gpu_s=0.0, gpus=gpus, batch=64,
                          remaining_budget=math.inf, max_gpus=max_gpus)


def snap(*jobs, nodes=(4,), now_s=600.0):
    return ClusterSnapshot(now_s=now_s, node_gpus=nodes, price_per_gpu_s=0.001, interval_s=60.0, jobs=tuple(jobs))


THREE = snap(job("a", asked=2, max_gpus=2), job("b", arrival_s=60.0, app=FakeApp("mystery"), asked=4, gpus=1),
             job("c", arrival_s=120.0, asked=1, progress=5e5), nodes=(4, 2))


def test_observation_shapes_and_the_mask_of_a_fresh_round():
    observation = Round(THREE).observe(np.zeros(3, dtype=int))
    assert observation.jobs.shape == (3, JOB_FEATURES) and observation.jobs.dtype == np.float32
    assert observation.globals.shape == (GLOBAL_FEATURES,)
    assert observation.mask.tolist() == [1, 1, 1, 1]  # three jobs below their limits, and STOP
    assert observation.stop == 3
    assert np.isfinite(observation.jobs).all() and np.isfinite(observation.globals).all()
    assert observation.globals[0] == 1.0  # every GPU free
    # application one-hot: cifar10 for a and c, the "other" slot for b's unknown application
    assert observation.jobs[0, 1] == 1.0 and observation.jobs[1, 6] == 1.0 and observation.jobs[1, :6].sum() == 0


def test_mask_forbids_a_job_at_its_limit_and_every_job_on_a_full_cluster():
    round_ = Round(THREE)
    assert round_.mask(np.array([2, 0, 0])).tolist() == [0, 1, 1, 1]  # a holds its max_gpus (2)
    assert round_.mask(np.array([2, 3, 1])).tolist() == [0, 0, 0, 1]  # 6 of 6 GPUs given: only STOP
    assert round_.free(np.array([2, 3, 1])) == 0


def test_window_cuts_the_jobs_a_round_sees():
    many = snap(*(job(f"j{i}", arrival_s=i) for i in range(5)), nodes=(8,))
    round_ = Round(many, window=3)
    assert [j.name for j in round_.jobs] == ["j0", "j1", "j2"]
    assert round_.observe(np.zeros(3, dtype=int)).mask.shape == (4,)


def test_network_output_shapes_and_masked_actions_have_no_probability():
    net = new_network(seed=1)
    round_ = Round(THREE)
    observations = [round_.observe(np.array(g)) for g in ([0, 0, 0], [2, 0, 0], [2, 3, 1])]
    small = Round(snap(job("x")), window=1).observe(np.zeros(1, dtype=int))  # narrower: padded to 3 jobs
    jobs, globs, present, mask = pad(observations + [small])
    assert jobs.shape == (4, 3, JOB_FEATURES) and globs.shape == (4, GLOBAL_FEATURES)
    assert present.tolist()[3] == [1, 0, 0] and mask.tolist()[3] == [1, 0, 0, 1]  # STOP moved to the last column
    assert padded_action(1, small, 3) == 3 and padded_action(0, small, 3) == 0
    logits, values = net(mx.nd.array(jobs), mx.nd.array(globs), mx.nd.array(present), mx.nd.array(mask))
    assert logits.shape == (4, 4) and values.shape == (4,)
    probabilities = mx.nd.softmax(logits, axis=1).asnumpy()
    assert np.allclose(probabilities.sum(axis=1), 1.0)
    assert (probabilities[mask == 0] == 0).all()
    assert probabilities[2].tolist() == [0, 0, 0, 1]  # a full cluster: STOP for sure
    assert (probabilities[mask == 1] > 0).all()


def test_numpy_forward_is_the_gluon_forward():
    net = new_network(seed=2)
    fast = numpy_net(net)
    round_ = Round(THREE)
    for given in ([0, 0, 0], [1, 1, 0], [2, 0, 1]):
        observation = round_.observe(np.array(given))
        jobs, globs, present, mask = pad([observation])
        logits, values = net(mx.nd.array(jobs), mx.nd.array(globs), mx.nd.array(present), mx.nd.array(mask))
        mine, value = fast.forward(observation)
        legal = observation.mask == 1
        assert np.allclose(mine[legal], logits.asnumpy()[0][legal], atol=1e-4)
        assert value == pytest.approx(float(values.asnumpy()[0]), abs=1e-4)


def test_padding_does_not_change_a_job_s_scores():
    net = new_network(seed=3)
    round_ = Round(THREE)
    alone = round_.observe(np.zeros(3, dtype=int))
    wider = Round(snap(*THREE.jobs, job("d", arrival_s=500.0), nodes=(4, 2))).observe(np.zeros(4, dtype=int))
    jobs, globs, present, mask = pad([alone, wider])
    logits, _ = net(mx.nd.array(jobs), mx.nd.array(globs), mx.nd.array(present), mx.nd.array(mask))
    mine, _ = numpy_net(net).forward(alone)
    assert np.allclose(logits.asnumpy()[0][[0, 1, 2, 4]], mine, atol=1e-4)


def test_policy_grants_keep_the_contract_and_are_deterministic():
    policy = Dl2ClusterPolicy(numpy_net(new_network(seed=4)))
    for snapshot in (THREE, snap(), snap(*(job(f"j{i}", arrival_s=i, asked=3) for i in range(9)), nodes=(4, 4))):
        grants = policy.allocate(snapshot)
        check_grants(snapshot, grants)
        assert Dl2ClusterPolicy(policy.net).allocate(snapshot) == grants


def test_greedy_decisions_stop_at_a_full_cluster_or_at_stop():
    round_ = Round(THREE)
    given = decide(numpy_net(new_network(seed=5)), round_)
    assert (given <= round_.caps).all() and given.sum() <= round_.total


def test_teacher_decisions_rebuild_drf_and_optimus_allocations():
    snapshot = snap(*(job(f"j{i}", arrival_s=i, asked=a, progress=p, max_gpus=6)
                      for i, (a, p) in enumerate([(3, 0.0), (1, 9e5), (4, 5e5), (2, 1e5)])), nodes=(4, 4))
    for teacher, order in ((drf(0), "fewest"), (optimus(0), "gain")):
        round_ = Round(snapshot)
        targets = targets_of(round_, teacher.allocate(snapshot))
        given = np.zeros(4, dtype=int)
        steps = expert_steps(round_, targets, order)
        for _, action in steps:
            if action < 4:
                given[action] += 1
        assert given.tolist() == targets.tolist()
        # STOP ends the round unless the cluster filled up first (then the round ends by itself)
        assert [action for _, action in steps].count(4) == (1 if round_.free(given) > 0 else 0)
        assert steps[-1][1] == 4 or round_.free(given) == 0
    # DRF's order: the fewest held first, ties to the earlier arrival
    round_ = Round(snapshot)
    assert next_action(round_, np.array([1, 1, 0, 0]), np.array([3, 1, 4, 2]), "fewest") == 2
    assert next_action(round_, np.array([1, 1, 1, 1]), np.array([3, 1, 4, 2]), "fewest") == 0
    assert next_action(round_, np.array([2, 1, 2, 2]), np.array([2, 1, 2, 2]), "fewest") == 4  # STOP
    assert next_action(round_, np.array([3, 1, 2, 2]), np.array([3, 1, 4, 2]), "fewest") is None  # 8 of 8 given


def test_missing_or_foreign_model_file_is_one_clear_error(tmp_path):
    missing = tmp_path / "none.params"
    with pytest.raises(ModelFileError, match=r"none\.params: no DL2 model file here; train one with `coach "
                                             r"train-policy"):
        dl2(0, missing)
    garbage = tmp_path / "garbage.params"
    garbage.write_bytes(b"not parameters")
    with pytest.raises(ValueError, match="garbage.params: not an MXNet parameter file"):
        dl2(0, garbage)
    other = tmp_path / "other.params"
    mx.nd.save(str(other), {"something.weight": mx.nd.zeros((2, 2))})
    with pytest.raises(ValueError, match="other.params: not a DL2 model"):
        load_numpy_net(other, GPU_SHAPE)


def test_saved_network_loads_back_as_the_same_policy(tmp_path):
    net = new_network(seed=6)
    path = tmp_path / "m.params"
    net.save_parameters(str(path))
    assert dl2(0, path).allocate(THREE) == Dl2ClusterPolicy(numpy_net(net)).allocate(THREE)


def test_dl2_and_its_imitation_only_twin_are_registered_with_the_shipped_models():
    from coach.dl2 import CLUSTER_IMITATION_MODEL

    assert CLUSTER_MODEL.name == "dl2_model.params" and CLUSTER_MODEL.is_file()
    assert CLUSTER_IMITATION_MODEL.name == "dl2_model-imitation.params" and CLUSTER_IMITATION_MODEL.is_file()
    for name in ("dl2", "dl2-imitation"):
        grants = CLUSTER_POLICIES[name](0).allocate(THREE)
        check_grants(THREE, grants)
        assert grants  # three jobs and free GPUs: the trained network gives some of them GPUs


def test_the_shipped_model_schedules_a_whole_workload_about_as_well_as_drf_it_imitated():
    workload = require(pollux_data() / "workloads-0.5" / "workload-1.csv")
    jct_h = {}
    for policy in ("dl2", "drf"):
        outcome, count = simulate(Settings(workload, cluster_from("4x4"), policy, "gang"))
        done = [r.finished_s - r.spec.arrival_s for r in outcome.jobs if r.stop_reason == "completed"]
        # every job but the one asking for 32 GPUs of 16 (unschedulable in every policy)
        assert len(done) == count - 1
        jct_h[policy] = sum(done) / len(done) / 3600
    assert jct_h["dl2"] <= 1.1 * jct_h["drf"], jct_h  # about DRF's, with room to spare
