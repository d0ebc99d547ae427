"""Fixtures for the Nuclio platform and fake-dashboard tests (test_nuclio_platform.py,
test_fake_nuclio_dashboard.py): the suite's real kube-apiserver (its `default` namespace, emptied before and after
each test) and the dashboard's test double on loopback, a copy of functions/ whose
function.yaml files name the tiny handler of tests/contract/nuclio_handler.py, and the tests' stand-in for Coach's
scheduler (a binding POST).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from kubernetes import client, config

from coach.domain.identity import ROLES
from coach.domain.kube import NUCLIO_FUNCTION_LABEL
from tests.fakes.nuclio_dashboard import FakeDashboard
from tests.support import wait_for  # noqa: F401 - the nuclio tests import it from here

REPO = Path(__file__).resolve().parents[2]
HANDLER = "tests.contract.nuclio_handler:handler"
PLATFORM_CONFIG = REPO / "deploy" / "nuclio" / "platform.yaml"


# --------------------------------------------------------------------------- helpers


def pods_of(core: client.CoreV1Api, function: str, namespace: str = "default") -> list:
    return core.list_namespaced_pod(namespace, label_selector=f"{NUCLIO_FUNCTION_LABEL}={function}").items


def the_pod(core: client.CoreV1Api, function: str, namespace: str = "default"):
    """The function's one pod, once the dashboard has made it."""
    return wait_for(lambda: (pods_of(core, function, namespace) or [None])[0], what=f"pod of {function}")


def bind(core: client.CoreV1Api, pod_name: str, node: str, namespace: str = "default") -> int:
    """Bind as Coach's scheduler does (the apiserver answers with a Status, so the raw response is read)."""
    body = client.V1Binding(metadata=client.V1ObjectMeta(name=pod_name),
                            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node))
    response = core.create_namespaced_pod_binding(pod_name, namespace, body, _preload_content=False)
    response.data  # noqa: B018 - read to its end: a connection given back unread breaks the next request on it
    response.release_conn()
    return response.status


def functions_copy(folder: Path, handler_for: Callable[[str], str] = lambda role: HANDLER,
                   edit: Callable[[str], str] = lambda text: text) -> Path:
    """coach_functions/<role>/function.yaml copied under `folder`, naming `handler_for(role)` as the handler."""
    for role in ROLES:
        text = (REPO / "coach_functions" / role.value / "function.yaml").read_text()
        text = text.replace(f"coach_functions.{role.value}.main:handler", handler_for(role.value))
        (folder / role.value).mkdir(parents=True, exist_ok=True)
        (folder / role.value / "function.yaml").write_text(edit(text))
    return folder


# --------------------------------------------------------------------------- fixtures


def empty_default_namespace(plane) -> None:
    """No pod or Deployment of an earlier test left in `default` (no kubelet or controller here removes them)."""
    with plane.client() as api:
        client.AppsV1Api(api).delete_collection_namespaced_deployment("default")
    plane.force_delete_pods("default")


@pytest.fixture
def kubeconfig(control_plane, tmp_path):
    empty_default_namespace(control_plane)
    yield control_plane.write_kubeconfig(tmp_path / "kubeconfig")
    empty_default_namespace(control_plane)


@pytest.fixture
def core(kubeconfig):
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    with client.ApiClient(configuration) as api_client:
        yield client.CoreV1Api(api_client)


@pytest.fixture
def dashboard(kubeconfig, tmp_path):
    with FakeDashboard(kubeconfig, log_dir=tmp_path / "logs", platform_config=PLATFORM_CONFIG) as dash:
        yield dash


@pytest.fixture
def functions_dir(tmp_path):
    return functions_copy(tmp_path / "functions")
