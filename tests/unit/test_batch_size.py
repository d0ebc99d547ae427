"""Batch scaling: the pure chooser (coach.estimates.batch_size) and the worker's noise-scale estimator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coach.estimates.batch_size import (MAX_GLOBAL_BATCH, SCALINGS, BatchInputs, NoiseStats, StepTime, WorkerNoise,
                                    adascale_gain, batch_bounds, choose_batch, choose_global_batch, combine,
                                    efficiency, fit_step_time, goodput, smooth)
from coach_functions.noise_scale import NoiseProbe, noise_estimates

STEP = StepTime(overhead_s=0.01, per_sample_s=0.0001)


def test_goodput_peaks_where_its_derivative_says():
    # goodput(M) = M / (a + b M / W) * (B + M0) / (B + M) is largest at M* = sqrt(a B W / b)
    noise_scale, workers = 200.0, 2
    best = math.sqrt(STEP.overhead_s * noise_scale * workers / STEP.per_sample_s)
    assert best == pytest.approx(200.0)

    per_worker = choose_global_batch(noise_scale, workers, 64, STEP, (32, 512))

    assert per_worker * workers == 200
    around = [goodput(noise_scale, m * workers, workers, 64, STEP) for m in (99, 100, 101)]
    assert around[1] > around[0] and around[1] > around[2]


def test_no_noise_chooses_the_smallest_batch_and_pure_noise_the_largest():
    # B = 0: every extra sample is wasted (E = M0 / M), so the throughput gain never pays
    assert choose_global_batch(0.0, 2, 64, STEP, (32, 512)) == 32
    # B infinite: every sample counts fully, so the largest batch has the highest throughput
    assert choose_global_batch(math.inf, 2, 64, STEP, (32, 512)) == 512


def test_adaptive_grows_the_batch_when_the_measured_noise_grows():
    low = BatchInputs(64, 0.05, 2, NoiseStats(grad_var=50.0, grad_sqr=1.0), ((2, 64, 0.0228),))
    high = BatchInputs(64, 0.05, 2, NoiseStats(grad_var=5000.0, grad_sqr=1.0), ((2, 64, 0.0228),))

    small, large = choose_batch("adaptive", low), choose_batch("adaptive", high)

    assert small.batch_size < 64 < large.batch_size
    assert small.grad_noise_scale == 50.0 and large.grad_noise_scale == 5000.0
    for choice, noise in ((small, 50.0), (large, 5000.0)):
        assert choice.global_batch == 2 * choice.batch_size
        assert choice.learning_rate == pytest.approx(0.05 * adascale_gain(noise, choice.global_batch, 64))


def test_adaptive_from_one_measured_batch_splits_the_step_time_half_and_half():
    # one point (64, 0.02 s): 0.01 s overhead + 0.01 s for 64 samples, so M* = sqrt(0.01 * 400 * 2 * 64 / 0.01)
    inputs = BatchInputs(64, 0.05, 2, NoiseStats(400.0, 1.0), ((2, 64, 0.02),))

    choice = choose_batch("adaptive", inputs)

    assert choice.global_batch == 2 * round(math.sqrt(0.01 * 400 * 2 * 64 / 0.01) / 2)  # 226


def test_fixed_and_linear_keep_the_per_worker_batch_and_linear_scales_the_learning_rate():
    inputs = BatchInputs(per_worker=64, learning_rate=0.05, workers=3)

    fixed, linear = choose_batch("fixed", inputs), choose_batch("linear", inputs)

    assert fixed.record() == {"batch_size": 64, "global_batch": 192, "learning_rate": 0.05, "batch_scaling": "fixed"}
    assert linear.record() == {"batch_size": 64, "global_batch": 192, "learning_rate": pytest.approx(0.15),
                               "batch_scaling": "linear"}


def test_adaptive_before_any_measurement_is_fixed():
    choice = choose_batch("adaptive", BatchInputs(64, 0.05, 2, noise=None, step_times=((2, 64, 0.02),)))

    assert choice.record() == {"batch_size": 64, "global_batch": 128, "learning_rate": 0.05,
                               "batch_scaling": "adaptive"}


def test_bounds_are_the_reference_batch_to_eight_times_the_global_batch_capped_by_shard_and_maximum():
    assert batch_bounds(BatchInputs(64, 0.05, 2)) == (32, 512)
    assert batch_bounds(BatchInputs(64, 0.05, 2, samples=600)) == (32, 300)  # a worker's shard
    assert batch_bounds(BatchInputs(1024, 0.05, 2)) == (512, MAX_GLOBAL_BATCH // 2)
    assert batch_bounds(BatchInputs(64, 0.05, 3)) == (22, 512)


def test_efficiency_and_the_adascale_gain():
    assert efficiency(100.0, 64, 64) == 1.0
    assert efficiency(100.0, 164, 64) == pytest.approx(164 / 264)
    assert efficiency(math.inf, 512, 64) == 1.0
    assert adascale_gain(0.0, 256, 64) == pytest.approx(1.0)  # no noise: a bigger batch buys nothing
    assert adascale_gain(math.inf, 256, 64) == pytest.approx(4.0)  # all noise: the linear rule
    assert 1.0 < adascale_gain(100.0, 256, 64) < 4.0


def test_step_time_fit_recovers_a_line_and_handles_its_degenerate_cases():
    exact = [(m, 0.004 + 0.0002 * m) for m in (16, 32, 64, 128)]
    fitted = fit_step_time(exact)
    assert fitted.overhead_s == pytest.approx(0.004) and fitted.per_sample_s == pytest.approx(0.0002)
    assert fit_step_time([]) is None
    assert fit_step_time([(64, 0.02), (64, 0.04)]) == StepTime(0.015, 0.015 / 64)
    assert fit_step_time([(32, 0.05), (64, 0.04)]) == StepTime(0.045, 0.0)  # slower with fewer samples: no slope
    assert fit_step_time([(32, 0.0), (64, math.nan)]) is None


def test_noise_statistics_combine_by_steps_and_smooth_across_epochs():
    assert combine([]) is None and combine([WorkerNoise(1.0, 1.0, 0)]) is None
    both = combine([WorkerNoise(10.0, 1.0, 3), WorkerNoise(30.0, 3.0, 1)])
    assert both == NoiseStats(15.0, 1.5)
    assert smooth(None, both) == both
    assert smooth(NoiseStats(10.0, 1.0), NoiseStats(30.0, 2.0)) == NoiseStats(20.0, 1.5)
    assert NoiseStats(-5.0, 2.0).noise_scale == 0.0 and NoiseStats(5.0, -1.0).noise_scale == math.inf


def test_every_scaling_is_registered_with_whether_it_measures_noise():
    assert {name: s.measures_noise for name, s in SCALINGS.items()} == {"fixed": False, "linear": False,
                                                                         "adaptive": True}


def test_the_estimator_is_unbiased_on_synthetic_gradients_with_a_known_noise_scale():
    # per-sample gradients g ~ N(G, diag(sigma^2)): |G|^2 and tr(Sigma) are known exactly
    rng = np.random.default_rng(13)
    dims, small, workers, trials = 40, 16, 4, 4000
    true_g = rng.normal(0.0, 0.5, dims)
    sigma = rng.uniform(0.5, 2.0, dims)
    estimates = []
    for _ in range(trials):
        samples = true_g + sigma * rng.normal(size=(small * workers, dims))
        local = samples[:small].mean(axis=0)  # one worker's batch is part of the summed one, as in dist_sync
        summed = samples.mean(axis=0)
        estimates.append(noise_estimates(float(local @ local), float(summed @ summed), small, small * workers))
    var, sqr = np.mean(estimates, axis=0)

    assert var == pytest.approx(float(np.sum(sigma ** 2)), rel=0.03)
    assert sqr == pytest.approx(float(true_g @ true_g), rel=0.03)
    with pytest.raises(ValueError):
        noise_estimates(1.0, 1.0, 8, 8)


class _Param:
    """A Gluon parameter as NoiseProbe sees it: a gradient array per device."""

    def __init__(self, grad, grad_req="write"):
        self.grad, self.grad_req = grad, grad_req

    def list_grad(self):
        return [self.grad]


def test_the_probe_reads_the_local_gradient_before_the_step_and_the_summed_one_after():
    import mxnet as mx
    grad = mx.nd.array([8.0, 0.0])  # sum over a local batch of 4: mean (2, 0)
    probe = NoiseProbe([_Param(grad), _Param(mx.nd.array([1.0]), grad_req="null")], num_workers=2, batch_size=4,
                       every=2)

    for _ in range(4):
        probe.before_step(4)
        grad[:] = mx.nd.array([12.0, 4.0])  # the push-pull: the sum over 8 samples, mean (1.5, 0.5)
        probe.after_step()
        grad[:] = mx.nd.array([8.0, 0.0])
    probe.before_step(3)  # a short last batch is never sampled
    probe.after_step()

    var, sqr = noise_estimates(4.0, 2.5, 4, 8)
    assert probe.reply_fields() == {"grad_var": pytest.approx(var), "grad_sqr": pytest.approx(sqr), "noise_steps": 2}
    assert NoiseProbe([_Param(grad)], num_workers=1, batch_size=4).active is False  # one worker: nothing to compare


def test_the_noise_fields_travel_in_the_contract_only_when_measured():
    from coach.domain.contracts import ContractError, Hyper, WorkerReply

    asked = Hyper(64, "sgd", 0.05, {}, 0, measure_noise=True)
    assert asked.to_dict()["measure_noise"] is True and Hyper.from_dict(asked.to_dict()) == asked
    assert "measure_noise" not in Hyper(64, "sgd", 0.05).to_dict()  # a request without it keeps its earlier shape
    reply = WorkerReply(rank=0, num_workers=2, loss_sum=6.4, samples=64, correct=32, compute_s=1.0,
                        checkpoint_saved=None, grad_var=-3.5, grad_sqr=0.25, noise_steps=7)
    assert WorkerReply.from_dict(reply.to_dict()) == reply  # an unbiased grad_var may be negative
    plain = WorkerReply(rank=0, num_workers=2, loss_sum=6.4, samples=64, correct=32, compute_s=1.0,
                        checkpoint_saved=None)
    assert not {"grad_var", "grad_sqr", "noise_steps"} & set(plain.to_dict())
    with pytest.raises(ContractError, match="grad_sqr: expected a number, got str"):
        WorkerReply.from_dict({**reply.to_dict(), "grad_sqr": "x"})
    with pytest.raises(ContractError, match="hyper.measure_noise: expected a boolean, got int"):
        Hyper.from_dict({**asked.to_dict(), "measure_noise": 1}, where="hyper.")
