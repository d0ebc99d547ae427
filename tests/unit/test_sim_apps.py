"""Application models: throughput from measured step times, Pollux's statistical efficiency, the best batch.

Hand-made traces pin the formulas to exact numbers; the published traces check the constants Pollux used and the
shape of the curves (more GPUs, more samples/s; larger batches, less efficiency)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tests.support import pollux_data, require
from coach.simulator.apps import (
    APP_NAMES,
    AppTraceError,
    PerfParams,
    fit_perf_params,
    job_total_progress,
    load_app,
    load_apps,
    step_time_s,
    total_progress,
)
from coach.simulator.engine import _seconds_to_finish as engine_seconds_to_finish
from coach.simulator.grants import fit_batch
from coach.simulator.view import packed_nodes
from coach.simulator.workloads import APP_BATCH_RANGES, SimJob, load_workload

DATA = pollux_data()
TRACES = DATA / "traces"


@pytest.fixture(scope="module")
def apps():
    return load_apps(require(TRACES))


# -- hand-made traces ------------------------------------------------------------------------------------------

TRUE = PerfParams(alpha_c=0.1, beta_c=0.01, alpha_n=0.2, beta_n=0.02, alpha_r=0.05, beta_r=0.01, gamma=2.0)


def make_traces(root: Path) -> Path:
    """An app `toy` whose step times follow TRUE exactly (sync = step - compute), M0 = 10, batches 10 and 40."""
    folder = root / "toy"
    folder.mkdir(parents=True)
    placements = ["placement,local_bsz,step_time,sync_time"]
    for placement in ("1", "2", "11", "22"):
        nodes, replicas = len(placement), sum(map(int, placement))
        for local in (5, 10, 20):
            step = float(step_time_s(TRUE, nodes, replicas, local))
            placements.append(f"{placement},{local},{step!r},{step - (0.1 + 0.01 * local)!r}")
    (folder / "placements.csv").write_text("\n".join(placements) + "\n")
    scalability = ["num_nodes,num_replicas,local_bsz,step_time,sync_time"]
    for local in (5, 10, 20):
        step = float(step_time_s(TRUE, 4, 8, local))
        scalability.append(f"4,8,{local},{step!r},{step - (0.1 + 0.01 * local)!r}")
    (folder / "scalability.csv").write_text("\n".join(scalability) + "\n")
    # Two epochs of progress (M0-steps): epoch 0 ends at 100, epoch 1 at 200 (the 40 trace lags: min is taken).
    (folder / "validation-10.csv").write_text("progress,iteration,metric,grad_sqr,grad_var\n"
                                              "100,100,0.5,1.0,3.0\n200,200,0.6,1.0,9.0\n")
    (folder / "validation-40.csv").write_text("progress,iteration,metric,grad_sqr,grad_var\n"
                                              "101,40,0.5,2.0,2.0\n205,80,0.6,1.0,1.0\n")
    return root


def test_hand_made_app_constants(tmp_path: Path) -> None:
    app = load_app(make_traces(tmp_path), "toy")
    assert (app.name, app.init_batch, app.max_batch) == ("toy", 10, 40)
    assert (app.min_local_batch, app.max_local_batch, app.max_gpus) == (5, 20, 8)
    assert app.max_progress == 200 * 10  # M0-steps at the end of the last epoch, in M0-samples
    assert total_progress(app, 40) == app.total_progress(10) == 2000


def test_throughput_is_the_measured_step_time_where_measured(tmp_path: Path) -> None:
    app = load_app(make_traces(tmp_path), "toy")
    for gpus, nodes, local in ((1, 1, 10), (2, 1, 5), (2, 2, 20), (4, 2, 10), (8, 4, 20)):
        step = float(step_time_s(TRUE, nodes, gpus, local))
        assert app.throughput(gpus, nodes, gpus * local) == pytest.approx(gpus * local / step, rel=1e-9)
    assert app.throughput(0, 0, 0) == 0.0
    # Between measured per-GPU batches: linear in step time.
    step = (float(step_time_s(TRUE, 1, 2, 10)) + float(step_time_s(TRUE, 1, 2, 20))) / 2
    assert app.throughput(2, 1, 30) == pytest.approx(30 / step, rel=1e-9)


def test_accumulation_past_the_largest_local_batch(tmp_path: Path) -> None:
    app = load_app(make_traces(tmp_path), "toy")
    # 2 GPUs x 40 per GPU > 20: two micro-batches of 20; one extra forward/backward pass of 0.1 + 0.01 * 20.
    step = float(step_time_s(TRUE, 1, 2, 20)) + 0.3
    assert app.throughput(2, 1, 80) == pytest.approx(80 / step, rel=1e-9)
    # One GPU above M0 always accumulates at least once (AdaptDL): batch 20 = 2 x 10.
    assert app.throughput(1, 1, 20) == pytest.approx(20 / (2 * float(step_time_s(TRUE, 1, 1, 10))), rel=1e-9)


def test_throughput_beyond_the_measurements_uses_the_fitted_model(tmp_path: Path) -> None:
    app = load_app(make_traces(tmp_path), "toy")
    assert app.steps.fit_error < 0.01  # the data follow the model exactly
    # Per-GPU batch 2 is below every measurement.
    assert app.throughput(1, 1, 2) == pytest.approx(2 / float(step_time_s(TRUE, 1, 1, 2)), rel=0.03)


def test_the_model_is_fitted_only_when_an_allocation_leaves_the_measurements(tmp_path: Path, monkeypatch) -> None:
    """Reading fits nothing (a short run may never leave the measured shapes); a fit that fails when it is needed
    is one line naming the file."""
    import coach.simulator.apps as apps_module

    def failing_fit(*_args):
        raise ValueError("Residuals are not finite in the initial point.")

    monkeypatch.setattr(apps_module, "fit_perf_params", failing_fit)
    root = make_traces(tmp_path)
    app = load_app(root, "toy")
    assert app.throughput(1, 1, 10) > 0  # measured: no fit asked for
    with pytest.raises(AppTraceError) as caught:
        app.throughput(1, 1, 2)  # a per-GPU batch below every measurement
    assert str(caught.value) == (f"{(root / 'toy' / 'placements.csv').resolve()}:0:0: cannot fit the step-time "
                                 f"model (Residuals are not finite in the initial point.)")


def test_the_error_figures_describe_the_measurements_whatever_was_asked_before(tmp_path: Path) -> None:
    """The figures are worked out when first read, after allocations may have added lines for shapes nobody
    measured (or found none outside the hull): those must not enter, nor break, them."""
    asked = load_app(make_traces(tmp_path / "asked"), "toy")
    assert asked.throughput(3, 2, 30) > 0  # 2 nodes, 3 replicas: not measured, inside the hull
    assert asked.throughput(64, 1, 640) > 0  # 64 replicas on one node: outside the hull, the fitted model
    assert (2, 3) in asked.steps.sampled and asked.steps.lines[1, 64] is None
    fresh = load_app(make_traces(tmp_path / "fresh"), "toy")
    assert asked.steps.interpolation_error == fresh.steps.interpolation_error
    assert asked.steps.fit_error == fresh.steps.fit_error


def test_efficiency_is_pollux_formula_on_interpolated_gradient_statistics(tmp_path: Path) -> None:
    app = load_app(make_traces(tmp_path), "toy")
    # Epoch 0 (progress < 100 M0-steps = 1000 M0-samples): batch 40 has sqr 2, var 2; E = (2+2) / (2 + 2*4).
    assert app.efficiency(40, 0.0) == pytest.approx(4 / 10)
    assert app.efficiency(10, 0.0) == 1.0
    assert app.efficiency(5, 0.0) == 1.0  # below M0: not above 1
    # Batch 20 interpolates a third of the way from 10 to 40: sqr 4/3, var 8/3; scale 2.
    assert app.efficiency(20, 999.0) == pytest.approx((8 / 3 + 4 / 3) / (8 / 3 + 2 * 4 / 3))
    # Epoch 1 starts at 1000 M0-samples: batch 40 has sqr 1, var 1.
    assert app.efficiency(40, 1000.0) == pytest.approx(2 / 5)
    assert app.efficiency(40, 1e9) == pytest.approx(2 / 5)  # past the end: the last epoch
    assert app.goodput(2, 1, 40, 0.0) == pytest.approx(app.throughput(2, 1, 40) * 0.4)


def test_best_batch_beats_every_other_feasible_batch(tmp_path: Path) -> None:
    app = load_app(make_traces(tmp_path), "toy")
    for gpus, nodes, progress in ((1, 1, 0.0), (2, 1, 0.0), (4, 2, 1500.0), (8, 4, 1500.0)):
        batch, goodput = app.best_batch(gpus, nodes, progress)
        assert batch % gpus == 0 and max(app.init_batch, gpus * app.min_local_batch) <= batch <= app.max_batch
        assert goodput == pytest.approx(app.goodput(gpus, nodes, batch, progress))
        for other in range(max(10, 5 * gpus), 41, gpus):
            assert app.goodput(gpus, nodes, other, progress) <= goodput * (1 + 1e-9)
    assert app.best_batch(0, 0, 0.0) == (0, 0.0)


def test_best_batch_past_max_gpus_spreads_the_max_batch(tmp_path: Path) -> None:
    app = load_app(make_traces(tmp_path), "toy")
    batch, goodput = app.best_batch(16, 4, 0.0)  # 16 x 5 > 40
    assert batch == 32 and goodput > 0  # 2 per GPU


def test_bad_allocations_are_refused(tmp_path: Path) -> None:
    app = load_app(make_traces(tmp_path), "toy")
    for gpus, nodes, batch in ((2, 3, 8), (2, 0, 8), (-1, 1, 8), (4, 1, 2)):
        with pytest.raises(ValueError):
            app.throughput(gpus, nodes, batch)
    with pytest.raises(ValueError):
        app.efficiency(0, 0.0)


def test_fit_recovers_known_parameters_from_noisy_measurements() -> None:
    rng = np.random.default_rng(7)
    nodes, replicas, local = [], [], []
    for n, r in ((1, 1), (1, 2), (1, 4), (2, 2), (2, 8), (4, 16), (8, 32)):
        for b in (4, 8, 16, 32, 64):
            nodes.append(n), replicas.append(r), local.append(b)
    nodes, replicas, local = np.array(nodes), np.array(replicas), np.array(local)
    compute = (TRUE.alpha_c + TRUE.beta_c * local) * np.exp(rng.normal(0, 0.01, len(local)))
    step = step_time_s(TRUE, nodes, replicas, local) * np.exp(rng.normal(0, 0.01, len(local)))
    fitted = fit_perf_params(nodes, replicas, local, compute, step)
    predicted = step_time_s(fitted, nodes, replicas, local)
    assert np.median(np.abs(predicted / step - 1)) < 0.02
    assert fitted.alpha_c == pytest.approx(TRUE.alpha_c, rel=0.1)
    assert fitted.beta_c == pytest.approx(TRUE.beta_c, rel=0.1)


def test_fit_with_one_replica_only_has_no_network_time() -> None:
    local = np.array([4.0, 8.0, 16.0])
    compute = 0.1 + 0.01 * local
    fitted = fit_perf_params(np.ones(3), np.ones(3), local, compute, compute)
    assert (fitted.alpha_n, fitted.alpha_r, fitted.beta_n, fitted.beta_r) == (0.0, 0.0, 0.0, 0.0)
    assert float(step_time_s(fitted, 1, 1, 8.0)) == pytest.approx(0.18, rel=1e-3)


@pytest.mark.parametrize(("file", "content", "message"), [
    ("placements.csv", "placement,local_bsz\n1,8\n", "placements.csv:1:1: expected header "
                                                    "placement,local_bsz,step_time,sync_time"),
    ("placements.csv", "placement,local_bsz,step_time,sync_time\n1,8,x,0.1\n",
     "placements.csv:2:3: step_time is not a number: 'x'"),
    ("placements.csv", "placement,local_bsz,step_time,sync_time\n1a,8,0.2,0.1\n",
     "placements.csv:2:1: placement must be digits 1-9 (replicas per node): '1a'"),
    ("validation-40.csv", "progress,iteration,metric,grad_sqr,grad_var\n100,1,0.5,nan,1\n",
     "validation-40.csv:2:4: grad_sqr must be finite and >= 0: 'nan'"),
])
def test_bad_trace_files_are_one_line(tmp_path: Path, file: str, content: str, message: str) -> None:
    root = make_traces(tmp_path)
    (root / "toy" / file).write_text(content)
    with pytest.raises(AppTraceError) as caught:
        load_app(root, "toy")
    assert str(caught.value) == f"{root.resolve() / 'toy' / file}:{message.split(':', 1)[1]}"


def test_trace_files_saved_with_a_byte_order_mark_read_as_without(tmp_path: Path) -> None:
    plain = load_app(make_traces(tmp_path / "plain"), "toy")
    marked = make_traces(tmp_path / "marked")
    for path in (marked / "toy").glob("*.csv"):
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    app = load_app(marked, "toy")
    assert (app.init_batch, app.max_batch, app.throughput(2, 1, 20)) == (plain.init_batch, plain.max_batch,
                                                                        plain.throughput(2, 1, 20))


def test_missing_application(tmp_path: Path) -> None:
    with pytest.raises(AppTraceError, match="no such application folder"):
        load_app(make_traces(tmp_path), "gpt")


# -- the published traces --------------------------------------------------------------------------------------

# name: init batch, max batch, min and max local batch, max GPUs, M0-steps to finish (Pollux artifact's constants).
POLLUX = {
    "bert": (12, 384, 4, 12, 96, 14774.0),
    "cifar10": (128, 4096, 32, 1024, 128, 39062.9),
    "deepspeech2": (20, 640, 10, 80, 64, 28536.0),
    "imagenet": (200, 12800, 20, 200, 640, 576525.6),
    "ncf": (256, 32768, 32, 32768, 1, 194174.0),
    "yolov3": (8, 512, 4, 8, 128, 103444.0),
}


def test_published_apps_have_pollux_constants(apps) -> None:
    assert tuple(apps) == APP_NAMES
    for name, (init, most, low, high, max_gpus, end_steps) in POLLUX.items():
        app = apps[name]
        assert (app.init_batch, app.max_batch, app.min_local_batch, app.max_local_batch, app.max_gpus) == \
            (init, most, low, high, max_gpus), name
        assert app.max_progress / app.init_batch == pytest.approx(end_steps, abs=0.1), name
        assert APP_BATCH_RANGES[name] == (init, most)  # the workload loader's copy agrees


def test_fit_and_table_errors_against_the_measurements(apps) -> None:
    for app in apps.values():
        assert app.steps.interpolation_error < 0.03, app.name  # placements of one shape differ by ~1-2%
        assert app.steps.fit_error < 0.08, app.name


def test_cifar10_throughput_grows_with_gpus_at_fixed_local_batch(apps) -> None:
    cifar = apps["cifar10"]
    one_node = [cifar.throughput(g, 1, 128 * g) for g in (1, 2, 4)]
    packed = [cifar.throughput(g, g // 4, 128 * g) for g in (8, 16, 32, 64)]  # 4 GPUs a node
    assert one_node == sorted(one_node) and packed == sorted(packed)
    assert packed[-1] > 4 * one_node[-1] > 8 * one_node[0]
    # Going from one node to two costs more than it brings (the measurements say so: 4 at 129 per GPU takes
    # 0.111 s a step, 44 takes 0.231 s).
    assert packed[0] < one_node[-1]
    # Where measured (one placement per shape on one node), exactly the measurement.
    rows = [line.split(",") for line in (TRACES / "cifar10" / "placements.csv").read_text().split()[1:]]
    step = np.mean([float(r[2]) for r in rows if r[0] == "4" and r[1] == "64"])
    assert cifar.throughput(4, 1, 256) == pytest.approx(256 / step)


def test_efficiency_is_one_at_init_batch_and_falls_with_batch(apps) -> None:
    for app in apps.values():
        for progress in (0.0, app.max_progress / 2, app.max_progress):
            batches = [app.init_batch * 2**k for k in range(8) if app.init_batch * 2**k <= app.max_batch]
            values = [app.efficiency(b, progress) for b in batches]
            assert values[0] == 1.0
            assert all(0 < v <= 1 for v in values)
            assert values[-1] < 1.0, app.name
    cifar = apps["cifar10"]
    values = [cifar.efficiency(128 * 2**k, 0.0) for k in range(6)]
    assert values == sorted(values, reverse=True) and values[-1] < 0.5


def test_efficiency_follows_the_measured_runs_even_where_they_disagree(apps) -> None:
    """Every validated batch size is its own training run, so gradient statistics interpolated between runs need not
    give an efficiency that falls with the batch everywhere (as in Pollux's simulator): ncf at 1024 vs 2048."""
    ncf = apps["ncf"]
    assert ncf.efficiency(1024, 0.0) < ncf.efficiency(2048, 0.0) < 1.0


def test_large_batches_become_efficient_later_in_training(apps) -> None:
    cifar = apps["cifar10"]
    assert cifar.efficiency(4096, cifar.max_progress * 0.9) > 2 * cifar.efficiency(4096, 0.0)


def test_best_batch_grows_with_gpus(apps) -> None:
    for name in ("cifar10", "imagenet", "deepspeech2", "yolov3"):
        app = apps[name]
        one, one_goodput = app.best_batch(1, 1, app.max_progress / 2)
        many, many_goodput = app.best_batch(16, 4, app.max_progress / 2)
        assert app.init_batch <= one < many <= app.max_batch, name
        assert many_goodput > one_goodput, name


def test_job_total_progress(apps) -> None:
    cifar = apps["cifar10"]
    assert job_total_progress(SimJob("a", 0.0, "cifar10", 6, 2048), cifar) == cifar.max_progress
    trace_job = SimJob("b", 0.0, "cifar10", 8, 1024, duration_s=3600.0)
    # the work of 3600 s of training at 8 GPUs, batch 1024: more than at the first epoch's goodput throughout
    assert job_total_progress(trace_job, cifar) > 3600.0 * cifar.goodput(8, 2, 1024, 0.0)
    assert engine_seconds_to_finish(cifar, cifar.throughput(8, 2, 1024), 1024, 0.0,
                                    job_total_progress(trace_job, cifar)) == pytest.approx(3600.0, rel=0.02)
    # ncf runs on one GPU only: a trace job asking for 4 is counted at 1.
    ncf = apps["ncf"]
    assert job_total_progress(SimJob("c", 0.0, "ncf", 4, 1024, 60.0), ncf) == \
        job_total_progress(SimJob("c", 0.0, "ncf", 1, 1024, 60.0), ncf)


def test_philly_jobs_alone_at_their_request_last_their_trace_duration(apps) -> None:
    """Issue 35: a trace job's work is what it does over its whole training, not at its first epoch's goodput
    (ImageNet-mapped jobs, whose efficiency grows as they train, had finished in a median 0.56x their duration)."""
    require(DATA / "traces" / "philly.csv")
    jobs = [job for job in load_workload(DATA / "traces" / "philly.csv") if job.duration_s]
    ratios: dict[str, list[float]] = {}
    for job in jobs[::20]:  # 4,100 jobs, every application
        app = apps[job.app]
        gpus = max(1, min(job.gpus, app.max_gpus))
        batch = fit_batch(app, gpus, job.batch)
        alone = engine_seconds_to_finish(app, app.throughput(gpus, packed_nodes(gpus, 4), batch), batch, 0.0,
                                         job_total_progress(job, app, 4))
        ratios.setdefault(job.app, []).append(alone / job.duration_s)
    assert set(ratios) == {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
    for name, values in ratios.items():
        assert abs(float(np.median(values)) - 1) <= 0.05, (name, float(np.median(values)))


def test_rounds_of_best_batches_search_each_allocation_once_per_epoch(apps, monkeypatch) -> None:
    """What keeps a round fast (benchmarks/results.md says how fast): best_batch is cached per (gpus, nodes, epoch)."""
    jobs = load_workload(DATA / "workloads" / "workload-1.csv")
    searched = []
    for name, app in apps.items():
        monkeypatch.setattr(app, "_best", {})  # as loaded: nothing searched yet

        def counted(*key, name=name, search=app._search_best):
            searched.append((name, *key))
            return search(*key)

        monkeypatch.setattr(app, "_search_best", counted)
    progresses = (0.0, 1e5, 1e6)
    first = [apps[job.app].best_batch(job.gpus, math.ceil(job.gpus / 4), p) for p in progresses for job in jobs]
    again = [apps[job.app].best_batch(job.gpus, math.ceil(job.gpus / 4), p) for p in progresses for job in jobs]

    assert again == first
    assert sorted(searched) == sorted({(job.app, job.gpus, math.ceil(job.gpus / 4), apps[job.app].epoch(p))
                                       for p in progresses for job in jobs})


def alone_jct_s(app, gpus: int, batch: int) -> float:
    """Seconds to finish alone on `gpus` GPUs packed 4 a node at a fixed batch: epoch by epoch of progress."""
    nodes = math.ceil(gpus / 4)
    ends = [*app.grads.epoch_starts[1:], app.max_progress]
    rate = app.throughput(gpus, nodes, batch)
    return sum((end - start) / (rate * app.efficiency(batch, start))
               for start, end in zip(app.grads.epoch_starts, ends))


def test_pollux_tuned_configurations_keep_their_scaling_efficiency(apps) -> None:
    """Pollux drew every (replicas, batch) of its load-1.0 workloads among those that finish alone within 12 h at
    50-80% of the best one-GPU run's speed per GPU (artifact applications.py get_configurations): our models agree."""
    configs = {(j.app, j.gpus, j.batch) for path in sorted((DATA / "workloads").glob("workload-*.csv"))
               for j in load_workload(path)}
    assert len(configs) == 16
    for name, gpus, batch in configs:
        app = apps[name]
        one_gpu_s = min(alone_jct_s(app, 1, int(b)) for b in app.grads.batch_sizes)
        jct_s = alone_jct_s(app, gpus, batch)
        assert jct_s < 12 * 3600, (name, gpus, batch)
        if gpus > 1:
            assert 0.5 <= one_gpu_s / jct_s / gpus <= 0.8, (name, gpus, batch)


def test_measurements_on_one_node_only_still_load(tmp_path: Path) -> None:
    """No volume for the scattered interpolation: the measured lines and the fitted model carry it."""
    root = make_traces(tmp_path)
    folder = root / "toy"
    lines = (folder / "placements.csv").read_text().splitlines()
    (folder / "placements.csv").write_text("\n".join(line for line in lines if line.split(",")[0] in
                                                     ("placement", "1", "2")) + "\n")
    (folder / "scalability.csv").write_text("num_nodes,num_replicas,local_bsz,step_time,sync_time\n"
                                            "1,4,5,0.2,0.05\n")
    app = load_app(root, "toy")
    assert app.steps.scattered is None
    assert app.throughput(2, 1, 20) == pytest.approx(20 / float(step_time_s(TRUE, 1, 2, 10)), rel=1e-9)
    assert app.throughput(8, 2, 80) > 0
