"""The Nuclio platform (coach.platforms.nuclio) against the fake dashboard and the fake kube-apiserver, over real
loopback HTTP: create, deploy once bound, invoke through the dashboard, delete; every dashboard outcome as a value.
Also the function image's Dockerfile and the function.yaml files, checked against pyproject.toml and Nuclio's keys.

Tests here stand in for Coach's scheduler by binding pods themselves. Function hosts run the tiny handler of
tests/contract/nuclio_support.py (no MXNet), so each test takes about a second.
"""

from __future__ import annotations

import re
import shlex
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
import yaml
from packaging.requirements import Requirement

from coach.domain.contracts import WarmRequest
from coach.domain.identity import FunctionId, Role
from coach.domain.invocation import DEPLOY, FOREIGN, REJECTED, TIMEOUT, UNREACHABLE, Failure, FunctionRef, Reply
from coach.domain.kube import POD_GROUP_LABEL, SCHEDULER_NAME
from coach.platforms.local import free_port
from coach.platforms.nuclio import PS_PORT, NuclioPlatform, go_duration, kube_pod_address
from coach.platforms.nuclio_spec import (
    MAX_NAME_CHARS, PROJECT_LABEL, FunctionYamlError, check_keys, function_config, function_name,
    load_function_yaml,
)
from tests.contract.nuclio_support import (  # noqa: F401 - fixtures
    REPO, bind, core, dashboard, functions_copy, functions_dir, kubeconfig, pods_of, the_pod, wait_for,
)

TOKEN = "run-token-1"
IMAGE = "registry.example/coach-functions:0.1.0"
WORKER = FunctionId("lenet", Role.WORKER, 0)
SCHEDULER = FunctionId("lenet", Role.SCHEDULER, 0)


@pytest.fixture
def make_platform(dashboard, functions_dir):
    made: list[NuclioPlatform] = []

    def make(**overrides) -> NuclioPlatform:
        options = dict(image=IMAGE, token=TOKEN, functions_dir=functions_dir, ready_timeout_s=20.0,
                       env={"COACH_CHECKPOINTS": "s3://bucket/coach"}, poll_s=0.05)
        options.update(overrides)
        platform = NuclioPlatform(options.pop("dashboard_url", dashboard.url), **options)
        made.append(platform)
        return platform

    yield make
    for platform in made:
        platform.close()


@pytest.fixture
def platform(make_platform):
    return make_platform()


def deployed(platform, core, fid: FunctionId, node: str = "node-a") -> FunctionRef:
    """Create, bind (as Coach's scheduler would) and deploy: a ready function's ref."""
    assert platform.create(fid) is None
    assert bind(core, the_pod(core, function_name(fid)).metadata.name, node) == 201
    ref = platform.deploy(fid, node)
    assert isinstance(ref, FunctionRef), ref
    return ref


# --------------------------------------------------------------------------- names and configs (no HTTP)


def test_function_names_are_dns_labels_that_keep_identities_apart():
    assert function_name(WORKER) == "coach-lenet-worker-0"
    odd = [FunctionId("LeNet_v2.final", Role.SERVER, 3), FunctionId("lenet-v2-final", Role.SERVER, 3),
           FunctionId("j" * 64, Role.WORKER, 12), FunctionId("j" * 63, Role.WORKER, 12)]
    names = [function_name(fid) for fid in odd]
    assert len(set(names)) == len(names)
    for name in names:
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= MAX_NAME_CHARS == 56, name
    assert names[1] == "coach-lenet-v2-final-server-3"  # already valid: no hash
    assert re.fullmatch(r"coach-lenet-v2-final-server-3-[0-9a-f]{8}", names[0])


def test_function_config_carries_identity_image_token_and_env():
    base = load_function_yaml(REPO / "coach_functions" / "worker" / "function.yaml")
    body = function_config(WORKER, base, namespace="coach", project="coach", image=IMAGE, token=TOKEN,
                           env={"COACH_CHECKPOINTS": "s3://b/p", "OMP_NUM_THREADS": "2"}, instance="i1")
    meta, spec = body["metadata"], body["spec"]
    assert meta["name"] == "coach-lenet-worker-0" and meta["namespace"] == "coach"
    assert {**WORKER.labels, POD_GROUP_LABEL: "lenet", PROJECT_LABEL: "coach"}.items() <= meta["labels"].items()
    assert meta["annotations"]["coach.io/instance"] == "i1" and TOKEN not in str(meta)
    assert spec["image"] == IMAGE and "build" not in spec
    assert spec["handler"] == "coach_functions.worker.main:handler" and spec["runtime"] == "python:3.11"
    env = {entry["name"]: entry["value"] for entry in spec["env"]}
    assert env == {"OMP_NUM_THREADS": "2", "DMLC_INTERFACE": "eth0", "COACH_EPOCHS_DIR": "coach-epochs",
                   "COACH_CHECKPOINTS": "s3://b/p", "COACH_FUNCTION_TOKEN": TOKEN}


@pytest.mark.parametrize("role", [role.value for role in Role])
def test_function_yaml_uses_only_nuclio_keys_and_one_replica(role):
    config = load_function_yaml(REPO / "coach_functions" / role / "function.yaml")
    spec = config["spec"]
    assert spec["minReplicas"] == spec["maxReplicas"] == 1
    assert spec["waitReadinessTimeoutBeforeFailure"] is True and spec["readinessTimeoutSeconds"] >= 600
    assert spec["triggers"]["http"]["numWorkers"] == 2 and "maxWorkers" not in spec["triggers"]["http"]
    assert "build" not in spec and "platform" not in spec  # prebuilt image; restartPolicy is Docker-only
    assert spec["handler"] == f"coach_functions.{role}.main:handler"


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["spec"]["triggers"]["http"].update(maxWorkers=2),
     "spec.triggers.http.maxWorkers: retired in Nuclio, use numWorkers"),
    (lambda c: c["spec"].update(minReplica=1), "spec.minReplica: not a Nuclio function-config key"),
    (lambda c: c["metadata"].update(label={}), "metadata.label: not a Nuclio function-config key"),
    (lambda c: c["spec"].pop("handler"), "spec.handler: missing"),
])
def test_a_key_nuclio_would_drop_is_refused_in_one_line(tmp_path, edit, message):
    config = yaml.safe_load((REPO / "coach_functions" / "worker" / "function.yaml").read_text())
    edit(config)
    path = tmp_path / "function.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(FunctionYamlError) as caught:
        load_function_yaml(path)
    assert str(caught.value).startswith(f"{path}: {message}") and "\n" not in str(caught.value)


def test_platform_refuses_a_bad_function_yaml_naming_file_and_key(tmp_path):
    folder = functions_copy(tmp_path / "f", edit=lambda text: text.replace("numWorkers", "maxWorkers"))
    with pytest.raises(ValueError, match=r"scheduler/function.yaml: spec.triggers.http.maxWorkers: retired"):
        NuclioPlatform("http://127.0.0.1:1", image=IMAGE, token=TOKEN, functions_dir=folder)
    with pytest.raises(ValueError, match=r"function.yaml: No such file"):
        NuclioPlatform("http://127.0.0.1:1", image=IMAGE, token=TOKEN, functions_dir=tmp_path / "none")
    check_keys({"apiVersion": "nuclio.io/v1", "kind": "NuclioFunction", "spec": {"handler": "m:h"}}, "x")


def test_invoke_timeout_is_a_go_duration():
    assert go_duration(30) == "30000ms" and go_duration(0.25) == "250ms" and go_duration(0) == "1ms"


# --------------------------------------------------------------------------- the whole path


def test_create_deploy_invoke_delete(platform, core, dashboard):
    assert platform.create(WORKER) is None
    pod = the_pod(core, "coach-lenet-worker-0")
    assert pod.spec.scheduler_name == SCHEDULER_NAME  # from deploy/nuclio/platform.yaml
    assert {**WORKER.labels, POD_GROUP_LABEL: "lenet"}.items() <= pod.metadata.labels.items()
    assert pod.spec.node_name is None

    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(platform.deploy, WORKER, "node-b")
        wait_for(lambda: dashboard.state("coach-lenet-worker-0") == "configuringResources")
        assert not waiting.done()  # pending pod: not ready, deploy keeps waiting
        assert bind(core, pod.metadata.name, "node-b") == 201
        ref = waiting.result(timeout=20)
    assert isinstance(ref, FunctionRef)
    assert (ref.fid, ref.node, ref.host) == (WORKER, "node-b", "127.0.0.1") and ref.url.startswith("http://127.0.0.1:")
    assert core.read_namespaced_pod(pod.metadata.name, "default").status.phase == "Running"

    reply = platform.invoke(ref, WarmRequest("jobs/models/lenet.py"), timeout_s=10)
    assert isinstance(reply, Reply) and reply.function == "lenet-worker-0"
    assert reply.body["body"] == WarmRequest("jobs/models/lenet.py").to_dict()
    assert reply.body["greeting"] == "set by init_context"  # the real host ran init_context
    # through the function's Service, from the dashboard's pod: what the job's NetworkPolicy admits
    assert dashboard.invoked_via == {"domain-name": 1}

    assert platform.delete(WORKER) is None
    wait_for(lambda: not pods_of(core, "coach-lenet-worker-0"), what="pod deleted")
    assert platform.delete(WORKER) is None  # gone already: no failure
    assert platform.invoke(ref, WarmRequest("m"), 5).kind == UNREACHABLE  # 404 from the dashboard


def test_duplicate_create_is_fine_when_the_function_is_ours(platform, core):
    assert platform.create(WORKER) is None
    assert platform.create(WORKER) is None  # 409, and the function carries our labels and run
    assert len(pods_of(core, "coach-lenet-worker-0")) == 1


def test_duplicate_create_of_someone_elses_function_is_a_failure(platform, dashboard):
    foreign = {"metadata": {"name": "coach-lenet-worker-0", "labels": {"team": "other"}},
               "spec": {"image": "other:1", "handler": "main:handler"}}
    assert requests.post(f"{dashboard.url}/api/functions", json=foreign, timeout=5).status_code == 202
    failure = platform.create(WORKER)
    assert isinstance(failure, Failure) and failure.kind == DEPLOY
    assert failure.message.startswith("nuclio function coach-lenet-worker-0 exists and is not lenet-worker-0's")


def test_a_left_over_of_an_earlier_run_is_replaced(make_platform, dashboard, core):
    earlier = make_platform(token="earlier-run")
    assert earlier.create(WORKER) is None
    first_pod = the_pod(core, "coach-lenet-worker-0").metadata.name
    now = make_platform()
    assert now.create(WORKER) is None
    held = requests.get(f"{dashboard.url}/api/functions/coach-lenet-worker-0", timeout=5).json()
    env = {e["name"]: e["value"] for e in held["spec"]["env"]}
    assert env["COACH_FUNCTION_TOKEN"] == TOKEN  # this run's function, not the earlier one
    wait_for(lambda: [p.metadata.name for p in pods_of(core, "coach-lenet-worker-0")] not in ([], [first_pod]))


def test_deploy_of_a_function_never_created_is_a_deploy_failure(platform):
    failure = platform.deploy(SCHEDULER, "node-a")
    assert isinstance(failure, Failure) and failure.kind == DEPLOY
    assert failure.message == "nuclio function coach-lenet-scheduler-0 does not exist"


def test_a_refused_body_is_a_failure_with_the_dashboards_message(make_platform, dashboard):
    failure = make_platform(project="Not_A_DNS_Label").create(WORKER)  # Nuclio checks project names
    assert failure == Failure("lenet-worker-0", DEPLOY, f"nuclio dashboard {dashboard.url}: POST /api/projects: "
                                                        f"HTTP 400: Project name doesn't conform to k8s naming "
                                                        f"convention")
    response = requests.post(f"{dashboard.url}/api/functions", json={"metadata": {"name": "x"}, "spec": {}},
                             timeout=5)
    assert response.status_code == 400  # no spec.image: Coach never sends that (see the next test)


@pytest.mark.parametrize("url, image, message", [
    ("localhost:8070", IMAGE, "nuclio dashboard URL 'localhost:8070': expected http://HOST:PORT"),
    ("http://127.0.0.1:8070", "", "nuclio function image: empty"),
])
def test_bad_settings_are_refused_in_one_line(functions_dir, url, image, message):
    with pytest.raises(ValueError) as caught:
        NuclioPlatform(url, image=image, token=TOKEN, functions_dir=functions_dir)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_dashboard_500_is_retried_a_bounded_number_of_times(platform, dashboard):
    dashboard.fail_next("/api/functions", status=500, times=2)
    assert platform.create(WORKER) is None  # third try succeeds
    dashboard.fail_next("/api/functions", status=500, times=3)
    failure = platform.create(SCHEDULER)
    assert failure == Failure("lenet-scheduler-0", DEPLOY, f"nuclio dashboard {dashboard.url}: POST /api/functions: "
                                                           f"HTTP 500 after 3 tries: injected failure")
    assert dashboard.state("coach-lenet-scheduler-0") is None  # never created


def test_a_hanging_dashboard_fails_within_a_bounded_time(make_platform, dashboard):
    platform = make_platform(request_timeout_s=0.3, retries=3)
    dashboard.hang("/api/functions", seconds=30, times=3)
    started = time.monotonic()
    failure = platform.create(WORKER)
    took_s = time.monotonic() - started
    assert isinstance(failure, Failure) and failure.kind == DEPLOY
    assert failure.message == (f"nuclio dashboard {dashboard.url}: POST /api/functions: no answer within 0.3 s "
                               f"after 3 tries")
    assert took_s >= 0.9  # it waited: three timeouts and two backoffs (0.2 s, 0.4 s)


def test_connection_refused_is_unreachable(make_platform):
    platform = make_platform(dashboard_url=f"http://127.0.0.1:{free_port()}", retries=2)
    failure = platform.create(WORKER)
    assert isinstance(failure, Failure) and failure.kind == UNREACHABLE and "connection refused after 2 tries" in \
        failure.message
    ref = FunctionRef(WORKER, "node-a", "http://127.0.0.1:1", "127.0.0.1", "x")
    failure = platform.invoke(ref, WarmRequest("m"), 5)
    assert isinstance(failure, Failure) and failure.kind == UNREACHABLE
    assert failure.message.endswith("connection refused")


def test_deploy_deadline_while_the_pod_stays_pending(make_platform, core):
    platform = make_platform(ready_timeout_s=0.5)
    assert platform.create(WORKER) is None
    started = time.monotonic()
    failure = platform.deploy(WORKER, "node-a")
    assert isinstance(failure, Failure) and failure.kind == DEPLOY
    assert failure.message == "nuclio function coach-lenet-worker-0 not ready within 0.5 s (state configuringResources)"
    assert time.monotonic() - started >= 0.5  # it waited for the pod that long


def test_error_state_is_a_deploy_failure_with_the_dashboards_message(make_platform, core, tmp_path):
    folder = functions_copy(tmp_path / "broken", handler_for=lambda role: "no_such_module:handler")
    platform = make_platform(functions_dir=folder)
    assert platform.create(WORKER) is None
    assert bind(core, the_pod(core, "coach-lenet-worker-0").metadata.name, "node-a") == 201
    failure = platform.deploy(WORKER, "node-a")
    assert isinstance(failure, Failure) and failure.kind == DEPLOY
    assert failure.message.startswith("nuclio function coach-lenet-worker-0: error: Failed to start the function: "
                                      "processor did not become ready")


def test_invocation_outcomes_pass_through_as_values(make_platform, platform, core, dashboard):
    ref = deployed(platform, core, WORKER)
    failure = platform.invoke(ref, WarmRequest("sleep:3"), timeout_s=0.5)
    assert isinstance(failure, Failure) and failure.kind == TIMEOUT  # the dashboard's Client.Timeout, as a 500
    assert "Client.Timeout exceeded" in failure.message

    stranger = make_platform(token="another-run")
    failure = stranger.invoke(ref, WarmRequest("m"), timeout_s=5)
    assert isinstance(failure, Failure) and failure.kind == REJECTED  # the function's 401, passed back
    assert failure.message == "missing or wrong token" and not failure.retryable

    failure = platform.invoke(ref, WarmRequest("foreign:"), timeout_s=5)  # ps-lite broken from outside the job
    assert isinstance(failure, Failure) and failure.kind == FOREIGN and failure.retryable
    assert failure.message.startswith("ps-lite aborted on a message from outside the job")

    failure = platform.invoke(ref, WarmRequest("exit:"), timeout_s=5)  # the host dies mid-request
    assert isinstance(failure, Failure) and failure.kind == UNREACHABLE and failure.message.endswith(": EOF")
    wait_for(lambda: dashboard.state("coach-lenet-worker-0") == "unhealthy", what="unhealthy")
    failure = platform.invoke(ref, WarmRequest("m"), timeout_s=5)
    assert isinstance(failure, Failure) and failure.kind == UNREACHABLE and "connection refused" in failure.message
    failure = platform.deploy(WORKER, "node-a")
    assert failure == Failure("lenet-worker-0", DEPLOY, "nuclio function coach-lenet-worker-0: unhealthy: "
                                                        "Function is not healthy", failure.duration_s)


def test_remove_deletes_only_the_instance_it_names(platform, core, dashboard):
    ref = deployed(platform, core, WORKER)
    stale = FunctionRef(WORKER, ref.node, ref.url, ref.host, instance="an-earlier-creation")
    platform.remove(stale)
    assert dashboard.state("coach-lenet-worker-0") == "ready"
    platform.remove(ref)
    assert dashboard.state("coach-lenet-worker-0") is None
    wait_for(lambda: not pods_of(core, "coach-lenet-worker-0"), what="pod deleted")


def test_rendezvous_uses_a_free_port_on_loopback_and_the_fixed_port_on_a_cluster(platform, make_platform, tmp_path):
    loopback = FunctionRef(SCHEDULER, "n", "http://127.0.0.1:1", "127.0.0.1", "i")
    host, port = platform.rendezvous_address(loopback)
    assert host == "127.0.0.1" and port != PS_PORT and 0 < port < 65536
    assert platform.rendezvous_address(FunctionRef(SCHEDULER, "n", "u", "10.244.1.7", "i")) == ("10.244.1.7", PS_PORT)
    # the next epoch's scheduler starts while this one's listens, and one announced in vain listens until its
    # host's next request: other ports
    assert platform.rendezvous_address(loopback, avoid_ports=frozenset({port}))[1] != port
    pod = FunctionRef(SCHEDULER, "n", "u", "10.244.1.7", "i")
    # a function runs a wrapper process per trigger worker (two): no node may join ahead, on a cluster or the fakes
    assert (platform.joins_ahead(loopback), platform.joins_ahead(pod)) == (False, False)
    single = make_platform(functions_dir=functions_copy(tmp_path / "single",
                                                        edit=lambda text: text.replace("numWorkers: 2", "numWorkers: 1")))
    assert (single.joins_ahead(loopback), single.joins_ahead(pod)) == (True, True)
    assert platform.rendezvous_address(pod, avoid_ports=frozenset({PS_PORT})) == ("10.244.1.7", PS_PORT + 1)
    assert platform.rendezvous_address(pod, avoid_ports=frozenset({PS_PORT, PS_PORT + 1})) == \
        ("10.244.1.7", PS_PORT + 2)
    assert platform.rendezvous_address(pod, avoid_ports=frozenset({PS_PORT + 2, PS_PORT + 1})) == \
        ("10.244.1.7", PS_PORT)


def test_pod_address_comes_from_the_pod(make_platform, core, kubeconfig):
    from kubernetes import client, config
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    with client.ApiClient(configuration) as api_client:
        lookup = kube_pod_address(api_client, "default")
        assert lookup(SCHEDULER) is None  # no pod yet
        platform = make_platform(pod_address=lookup)
        ref = deployed(platform, core, SCHEDULER)
        assert lookup(SCHEDULER) == "127.0.0.1" == ref.host  # the pod's status.podIP


def test_close_deletes_every_function_it_created(make_platform, core, dashboard):
    platform = make_platform()
    for fid in (SCHEDULER, WORKER):
        assert platform.create(fid) is None
    assert bind(core, the_pod(core, "coach-lenet-worker-0").metadata.name, "node-a") == 201
    wait_for(lambda: dashboard.state("coach-lenet-worker-0") == "ready", what="ready")
    platform.close()
    assert dashboard.state("coach-lenet-worker-0") is None and dashboard.state("coach-lenet-scheduler-0") is None
    wait_for(lambda: not core.list_namespaced_pod("default").items, what="pods deleted")
    assert platform.create(WORKER).message == "platform is shutting down"


@pytest.mark.slow  # four hosts at once: several seconds on two cores
def test_concurrent_deploys_of_a_job(platform, core):
    ids = [SCHEDULER, FunctionId("lenet", Role.SERVER, 0), WORKER, FunctionId("lenet", Role.WORKER, 1)]
    for fid in ids:
        assert platform.create(fid) is None
    with ThreadPoolExecutor(len(ids)) as pool:
        futures = [pool.submit(platform.deploy, fid, f"node-{fid.index}") for fid in ids]
        for fid in ids:  # the gang is bound only once every pod exists
            assert bind(core, the_pod(core, function_name(fid)).metadata.name, f"node-{fid.index}") == 201
        refs = [future.result(timeout=30) for future in futures]
    assert [(ref.fid, ref.node) for ref in refs] == [(fid, f"node-{fid.index}") for fid in ids]
    assert len({ref.url for ref in refs}) == len(ids)
    replies = [platform.invoke(ref, WarmRequest(f"m{i}"), 10) for i, ref in enumerate(refs)]
    assert [r.body["body"]["model"]["path"] for r in replies] == ["m0", "m1", "m2", "m3"]


# --------------------------------------------------------------------------- the function image


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(instruction, arguments) of coach_functions/Dockerfile, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in (REPO / "coach_functions" / "Dockerfile").read_text().splitlines():
        if raw.strip().startswith("#") or not raw.strip():
            continue
        current += raw.rstrip("\\").strip() + " "
        if not raw.rstrip().endswith("\\"):
            lines.append(current.strip())
            current = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_dockerfile_pins_agree_with_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    pinned = {Requirement(text).name.lower(): Requirement(text).specifier for text in
              project["project"]["dependencies"] + project["project"]["optional-dependencies"]["run"]}
    installed = {}
    for instruction, arguments in dockerfile_instructions():
        if instruction == "RUN" and "pip install" in arguments:
            words = shlex.split(arguments.split("pip install", 1)[1])
            for word in words:
                if not word.startswith("-"):
                    requirement = Requirement(word)
                    installed[requirement.name.lower()] = requirement.specifier
    for name in ("mxnet", "numpy", "scipy", "nuclio-sdk", "boto3", "pyyaml", "mlxtend"):
        assert name in installed, f"coach_functions/Dockerfile does not install {name}"
        assert installed[name] == pinned[name], f"{name}: Dockerfile {installed[name]} != pyproject {pinned[name]}"
    froms = [arguments for instruction, arguments in dockerfile_instructions() if instruction == "FROM"]
    assert froms[-1] == "python:3.11-slim"


def test_dockerfile_copies_only_paths_that_exist():
    copies = [arguments.split() for instruction, arguments in dockerfile_instructions() if instruction == "COPY"]
    local = [args for args in copies if not args[0].startswith("--from=")]
    assert local, "the Dockerfile copies nothing from the repository"
    for args in local:
        for source in args[:-1]:
            assert (REPO / source).exists(), f"coach_functions/Dockerfile: COPY {source}: no such path"
    copied = {args[0] for args in local}
    assert {"coach_functions", "coach/domain", "jobs/models"} <= copied
    handlers = {load_function_yaml(REPO / "coach_functions" / r.value / "function.yaml")["spec"]["handler"] for r in Role}
    for handler in handlers:  # every handler module is in what the image copies
        module = handler.split(":")[0].replace(".", "/") + ".py"
        assert (REPO / module).is_file() and module.startswith("coach_functions/")


def test_the_platform_is_thread_safe_under_concurrent_creates(platform, dashboard):
    ids = [FunctionId("big", Role.WORKER, i) for i in range(8)]
    barrier = threading.Barrier(len(ids))

    def create(fid):
        barrier.wait()
        return platform.create(fid)

    with ThreadPoolExecutor(len(ids)) as pool:
        assert list(pool.map(create, ids)) == [None] * len(ids)
    assert all(dashboard.state(function_name(fid)) is not None for fid in ids)
