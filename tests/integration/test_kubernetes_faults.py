"""A Nuclio dashboard that fails: `coach run --platform nuclio` retries a bounded number of times and stops the job
with a reason that names the dashboard, the endpoint and what it answered; nothing hangs.

The whole loopback stack runs (the real control plane, the dashboard's test double, moto S3, `coach scheduler` in its own
process); the dashboard's fault hooks make it answer 500 or hang. The platform is built with short timeouts so
that the bounds are seconds, as a user would set them for a flaky dashboard, and the requeue backoff starts at
REQUEUE_BACKOFF_S instead of 1 s: the bound counts tries, and waiting the production backoffs out (31 s) would
test nothing more.
"""

from __future__ import annotations


import yaml

from coach.app.compose import Site
from coach.app.run import run_jobs
from tests.fakes.stack import LoopbackStack
from coach.inputs.jobs import load_job
from coach.platforms.nuclio import NuclioPlatform

from tests.integration.conftest import MODELS

REQUEUE_BACKOFF_S = 0.05  # first requeue backoff (production: 1 s); doubles per requeue, as in production


def small_job(tmp_path):
    path = tmp_path / "flaky.yaml"
    path.write_text(yaml.safe_dump({
        "name": "flaky", "model": str(MODELS / "tiny_mlp.py"), "batch_size": 64, "optimizer": "sgd",
        "learning_rate": 0.05, "target_loss": 0.0, "max_epochs": 1, "budget": 10.0, "workers": 1, "servers": 1}))
    return load_job(path)


def run(stack: LoopbackStack, tmp_path, placement_timeout_s: float):
    site = Site(platform="nuclio", dashboard=stack.dashboard.url, kubeconfig=str(stack.kubeconfig),
                namespace=stack.namespace, image="coach-functions:test")

    def platform(logs, token):
        return NuclioPlatform(stack.dashboard.url, stack.namespace, image=site.image, token=token, request_timeout_s=1.0,
                              retries=2, ready_timeout_s=20.0)

    return run_jobs([small_job(tmp_path)], stack.cluster, tmp_path / "results", view="quiet", site=site,
                    platform_factory=platform, placement_timeout_s=placement_timeout_s,
                    checkpoints=stack.checkpoints, first_requeue_backoff_s=REQUEUE_BACKOFF_S)


def test_a_dashboard_that_answers_500_to_every_create_stops_the_job_as_unschedulable_with_its_answer(
        stack, tmp_path):
    stack.dashboard.fail_next("/api/functions", status=500, times=10**6)
    report = run(stack, tmp_path, placement_timeout_s=0.5)
    reason = report.summary["jobs"]["flaky"]["stop_reason"]
    assert reason.startswith("unschedulable: no quorum after 6 tries: pods not created: "), reason
    assert f"nuclio dashboard {stack.dashboard.url}: POST /api/functions: HTTP 500 after 2 tries" in reason, reason
    assert report.exit_code == 1
    assert stack.binding_attempts() == []  # no pod ever existed to bind


def test_a_dashboard_that_hangs_while_the_function_deploys_stops_the_job_with_a_timeout_reason(stack, tmp_path):
    stack.dashboard.hang("/api/functions/", seconds=30, times=10**6)  # every GET of a function's status hangs
    report = run(stack, tmp_path, placement_timeout_s=30.0)
    reason = report.summary["jobs"]["flaky"]["stop_reason"]
    assert reason.startswith("failed: "), reason
    assert "deploy" in reason and stack.dashboard.url in reason, reason
    assert report.exit_code == 1
