"""Fixtures more than one test folder uses: the real Kubernetes control plane (one per session) and a namespace of
it per test, the loopback S3 server and a clean AWS environment around it."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

import pytest

from tests.controlplane.build import ensure_built
from tests.controlplane.cluster import ControlPlane
from tests.fakes.s3 import LoopbackS3

_buckets = itertools.count(1)


TESTS = Path(__file__).resolve().parent

#: The tests outside tests/integration/ that are left out of the fast loop (`-m "not slow"`): each took over about a
#: second on 2 cores (`pytest --durations=0 -m "not integration"`), mostly because it trains a network (MXNet's
#: import alone is 2 s) or runs real processes for seconds. As `path::name`, parameters left out.
SLOW = {
    "unit/test_dl2_counts.py::test_training_in_virtual_time_imitates_coach_and_is_resumable",  # trains DL2, 13 s
    "unit/test_dl2_network.py::test_the_shipped_model_schedules_a_whole_workload_about_as_well_as_drf_it_imitated",
    "unit/test_dl2_training.py::test_a_tiny_reinforcement_learning_run_improves_its_reward",  # trains DL2, 9 s
    "unit/test_dl2_training.py::test_imitation_agrees_with_the_teacher_on_held_out_rounds",
    "unit/test_dl2_training.py::test_a_stopped_run_resumes_to_the_same_model",
    "unit/test_train_policy_cli.py::test_run_level_training_writes_a_counts_model_the_run_policy_loads",
    "unit/test_template.py::test_a_template_that_does_not_answer_in_time_forks_nothing_more_and_its_hosts_keep_serving",
    "unit/test_template.py::test_the_template_and_its_hosts_die_with_a_controller_killed_by_sigkill",
    "unit/test_template.py::test_a_template_that_died_is_replaced_at_the_next_deploy",
    "unit/test_template.py::test_forked_hosts_get_their_own_environment_directory_and_pid_from_one_shared_template",
    "unit/test_host.py::test_a_host_deployed_from_a_short_lived_thread_outlives_that_thread_and_dies_with_close",
    "unit/test_contracts.py::test_a_malformed_epoch_request_gets_400_naming_the_field_and_the_host_keeps_serving",
    "unit/test_jobs.py::test_the_optimizer_parameter_table_matches_mxnet",  # imports MXNet in a new process
    "unit/test_scheduler_fork_properties.py::test_gang_never_deadlocks_and_completes_every_job",
    "unit/test_scheduler_fork_properties.py::test_gang_strict_never_deadlocks_and_completes_every_job",
    "unit/test_sim_workloads.py::test_whole_philly_trace",
    "service/test_api.py::test_the_event_stream_sends_the_board_when_it_changes",
    "service/test_api.py::test_stopping_a_job_ends_it_for_good_and_keeps_its_log",
    "service/test_restart.py::test_a_restarted_server_resumes_the_interrupted_jobs_and_keeps_the_finished_ones",
    "service/test_restart.py::test_a_job_stopped_by_its_user_is_not_resumed",
    "contract/test_kube_scheduler_binder.py::"
    "test_the_binding_process_gets_the_credentials_a_kubeconfigs_refresh_hook_renews",
    "contract/test_checkpoint_stores.py::test_a_store_nobody_answers_for_fails_as_values",
}


def pytest_collection_modifyitems(items):
    """Marks by folder and by fixture, so that a new test gets them by where it is and what it uses:
    `integration` for tests/integration/, `kube` for every test on the real control plane, `browser` for every
    test that drives Chromium (the `chromium` fixture), and `slow` for all of those and the tests in SLOW."""
    for item in items:
        path = item.path.relative_to(TESTS)
        fixtures = set(getattr(item, "fixturenames", ()))
        if path.parts[0] == "integration":
            item.add_marker(pytest.mark.integration)
        if {"control_plane", "kubectl_binary"} & fixtures:
            item.add_marker(pytest.mark.kube)
        if "chromium" in fixtures:
            item.add_marker(pytest.mark.browser)
        name = f"{path.as_posix()}::{getattr(item, 'originalname', item.name)}"
        if name in SLOW or any(item.get_closest_marker(mark) for mark in ("integration", "kube", "browser")):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def kubectl_binary() -> str:
    """kubectl of the control plane's release, built with it."""
    return str(ensure_built() / "bin" / "kubectl")


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    """etcd + kube-apiserver (TLS, tokens, RBAC, default admission), built from source once and started once."""
    with ControlPlane(tmp_path_factory.mktemp("controlplane")) as plane:
        yield plane


@pytest.fixture(scope="session")
def podgroup_crd(control_plane):
    """deploy/'s PodGroup CRD, installed once and Established."""
    control_plane.apply_crd(Path(__file__).resolve().parents[1] / "deploy" / "crds" / "podgroup-crd.yaml")


@pytest.fixture
def kube_namespace(control_plane):
    """A fresh namespace of the control plane for one test; its pods are deleted at the end (no kubelet would)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    control_plane.ensure_namespace(name)
    yield name
    control_plane.force_delete_pods(name)


@pytest.fixture
def kube_nodes(control_plane):
    """`kube_nodes(name, **fields)`: a Ready node of the control plane, deleted after the test (names are made
    unique per test and returned)."""
    prefix = uuid.uuid4().hex[:6]
    made: list[str] = []

    def add(name: str, **fields) -> str:
        full = f"{prefix}-{name}"
        control_plane.add_node(full, **fields)
        made.append(full)
        return full

    yield add
    control_plane.delete_nodes(made)


@pytest.fixture(scope="module")
def s3_server():
    with LoopbackS3() as server:
        yield server


@pytest.fixture
def s3_env(s3_server, monkeypatch, tmp_path):
    """The environment a controller and its function hosts read: this server, fake credentials, no other AWS
    setup (no profile, no config or credentials file of the machine's user)."""
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for name, value in s3_server.environment().items():
        monkeypatch.setenv(name, value)
    return s3_server


@pytest.fixture
def bucket(s3_env) -> str:
    """A fresh bucket's name (moto's state is per process: every test gets its own)."""
    return s3_env.make_bucket(f"coach-test-{next(_buckets)}")[len("s3://"):]
