"""The budget is a hard cap: 50 seeded random jobs, budgets and prices, run in virtual time through the same
lifecycle, policy and placement as `coach run`, and no line of any log has cumulative_cost above its budget.
Steps that their deadline cuts are partial steps with a checkpoint, as the runtime replies them."""

from __future__ import annotations

import random
from pathlib import Path

from coach.app.virtual_run import run_virtual
from coach.domain.cluster import ClusterSpec, NodeSpec
from coach.domain.jobs import JobSpec
from coach.platforms.virtual import VirtualJobModel

MODEL = Path(__file__).resolve().parents[2] / "jobs" / "models" / "lenet.py"  # never loaded: epochs are computed


def random_case(seed: int) -> tuple[JobSpec, ClusterSpec, VirtualJobModel, str]:
    rng = random.Random(seed)
    price = rng.choice([1e-4, 1e-3, 1e-2])
    cluster = ClusterSpec("c", tuple(NodeSpec(f"n{i}", 4, price * rng.uniform(0.5, 2.0)) for i in range(3)))
    dynamic = rng.random() < 0.5
    spec = JobSpec(name="j", source=MODEL, model_path=MODEL, batch_size=64, optimizer="sgd", optimizer_params={},
                   learning_rate=0.05, target_loss=0.0, consecutive=3, max_epochs=20,
                   budget=rng.uniform(1e-4, 20.0) * price, workers=None if dynamic else rng.randint(1, 3),
                   servers=None if dynamic else rng.randint(1, 2), max_workers=3 if dynamic else None,
                   max_servers=2 if dynamic else None, seed=seed, epoch_timeout_s=600.0)
    # epochs whose time the last one does not predict: fixed parts, speeds and scaling all drawn at random
    model = VirtualJobModel(fixed_s=rng.uniform(0.3, 2.0), compute_s_one_worker=rng.uniform(0.5, 20.0),
                            worker_efficiency=rng.uniform(0.2, 1.0), server_overhead_s=rng.uniform(0.0, 0.5))
    return spec, cluster, model, "coach" if dynamic else "static"


def test_no_line_of_any_log_spends_more_than_its_budget_over_50_random_jobs():
    stopped_by_budget = partial = 0
    for seed in range(50):
        spec, cluster, model, policy = random_case(seed)
        sim = run_virtual([spec], cluster, policy=policy, models={"j": model}, placement_timeout_s=1e9)
        records = sim.records["j"]
        assert records, seed
        for record in records:
            assert record["cumulative_cost"] <= spec.budget, (seed, record)
            if record.get("stopped_early"):
                partial += 1
                assert record["checkpoint"] and 0 < record["epoch_fraction"] < 1, (seed, record)
        stopped_by_budget += records[-1]["stop_reason"] == "budget"
    assert stopped_by_budget >= 25  # the budgets are small on purpose: most jobs run out of money
    assert partial >= 10  # and many of them spend the last of it on a partial step
