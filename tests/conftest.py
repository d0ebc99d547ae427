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


def pytest_collection_modifyitems(items):
    """Every test on the real control plane is marked `kube` (so `-m "not kube"` leaves them out)."""
    for item in items:
        if {"control_plane", "kubectl_binary"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kube)


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
