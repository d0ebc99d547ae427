"""deploy/: what `kubectl apply -k deploy/` would send to a cluster, checked without one.

kubectl's own kustomize renders the kustomizations; every object passes the Kubernetes API schemas in strict mode
(kubernetes-validate); the PodGroup CRD's schema accepts what Coach creates and rejects broken groups; each
ServiceAccount gets exactly the RBAC verbs Coach's calls need; Nuclio's platform config selects Coach's functions
and nothing else; and every name agrees with coach/domain/kube.py. Side effects: runs `kubectl kustomize`.
"""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
from pathlib import Path
from typing import Iterable, Mapping

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes.config import incluster_config, new_client_from_config

from coach.domain import kube
from coach.domain.identity import INDEX_LABEL, JOB_LABEL, QUORUM, ROLE_LABEL, FunctionId, Role
from coach.ui.cli import build_parser
from scheduler_fork import PROFILES

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NUCLIO = DEPLOY / "nuclio"
CRDS = DEPLOY / "crds"
PLATFORM_YAML = NUCLIO / "platform.yaml"
SECRET_EXAMPLE = DEPLOY / "secret-example.yaml"
PODGROUP_EXAMPLE = DEPLOY / "examples" / "podgroup.yaml"

#: The oldest Kubernetes docs/kubernetes.md promises, the one the issue names, and the newest kubernetes-validate knows.
K8S_VERSIONS = ("1.25", "1.30", kubernetes_validate.utils.major_minor(kubernetes_validate.latest_version()))

#: What kustomize v2.0.3 (kubectl 1.20, the oldest kubectl docs/kubernetes.md supports) understands of what we use.
KUSTOMIZE_V2_FIELDS = {"resources", "images", "configMapGenerator", "generatorOptions"}

FUNCTIONS_NS = "nuclio"  # where Nuclio creates Coach's functions: pods, PodGroups, the Lease, the S3 secret
COACH_NS = "coach-system"  # Coach's scheduler and its ServiceAccounts


# -- reading -------------------------------------------------------------------------------------------------------
def load_all(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kustomization(folder: Path) -> dict:
    return yaml.safe_load((folder / "kustomization.yaml").read_text())


def kustomize(kubectl: str, folder: Path) -> list[dict]:
    """`kubectl kustomize FOLDER`: what `kubectl apply -k FOLDER` would apply."""
    done = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kubectl kustomize {folder}: {done.stderr.strip()}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def key(obj: Mapping) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def one(objs: Iterable[Mapping], kind: str, name: str, namespace: str = "") -> dict:
    found = [obj for obj in objs if key(obj) == (kind, namespace, name)]
    assert len(found) == 1, f"{kind} {namespace}/{name}: {len(found)} found"
    return found[0]


@pytest.fixture(scope="module")
def rendered(kubectl_binary) -> list[dict]:
    return kustomize(kubectl_binary, DEPLOY)


@pytest.fixture(scope="module")
def rendered_nuclio(kubectl_binary) -> list[dict]:
    return kustomize(kubectl_binary, NUCLIO)


@pytest.fixture(scope="module")
def rendered_crds(kubectl_binary) -> list[dict]:
    return kustomize(kubectl_binary, CRDS)


@pytest.fixture(scope="module")
def platform() -> dict:
    return yaml.safe_load(PLATFORM_YAML.read_text())


@pytest.fixture(scope="module")
def coach_augment(platform) -> dict:
    """The augmented config that selects every Coach function (by the job label) and sets its function config."""
    entries = [entry for entry in platform["functionAugmentedConfigs"] if "functionConfig" in entry
               and any(expr.get("key") == JOB_LABEL
                       for expr in entry.get("labelSelector", {}).get("matchExpressions", ()))]
    assert len(entries) == 1
    return entries[0]


def scheduler_deployment(objs) -> dict:
    return one(objs, "Deployment", "coach-scheduler", COACH_NS)


def scheduler_container(objs) -> dict:
    containers = scheduler_deployment(objs)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def flag(command: list[str], name: str) -> str:
    """The value of `--name=value` in a container command."""
    values = [arg.split("=", 1)[1] for arg in command if arg.startswith(f"--{name}=")]
    assert len(values) == 1, f"--{name} in {command}"
    return values[0]


# -- kustomize -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("folder", [DEPLOY, NUCLIO], ids=["deploy", "deploy/nuclio"])
def test_kustomizations_use_only_what_kustomize_v2_understands(folder):
    fields = set(kustomization(folder))
    assert fields <= KUSTOMIZE_V2_FIELDS, f"{folder}: {sorted(fields - KUSTOMIZE_V2_FIELDS)}"
    for entry in kustomization(folder).get("resources", ()):
        path = folder / entry
        assert path.is_file(), f"{entry}: kustomize v2.0.3 takes files in `resources`, and this is not one"
        objs = load_all(path)
        assert objs and all({"apiVersion", "kind", "metadata"} <= set(obj) for obj in objs), entry


def test_rendering_is_the_listed_files_with_the_image_set(rendered):
    files = [obj for entry in kustomization(DEPLOY)["resources"] for obj in load_all(DEPLOY / entry)]
    assert sorted(map(key, rendered)) == sorted(map(key, files))
    (image,) = kustomization(DEPLOY)["images"]
    container = scheduler_container(rendered)
    assert container["image"] == f"{image['newName']}:{image['newTag']}"
    by_key = {key(obj): obj for obj in files}
    for obj in rendered:
        expected = copy.deepcopy(by_key[key(obj)])
        if key(obj) == key(scheduler_deployment(rendered)):
            expected["spec"]["template"]["spec"]["containers"][0]["image"] = container["image"]
        assert obj == expected, key(obj)


def test_the_secret_example_and_the_nuclio_config_are_not_applied_by_deploy(rendered):
    kinds = {obj["kind"] for obj in rendered}
    assert "Secret" not in kinds
    assert not [obj for obj in rendered if obj["metadata"]["name"] == "nuclio-platform-config"]


def test_nuclio_kustomization_renders_the_configmap_nuclio_reads(rendered_nuclio):
    (configmap,) = rendered_nuclio
    # The name Nuclio's controller looks up by default and its Helm chart renders; the key it mounts.
    assert key(configmap) == ("ConfigMap", FUNCTIONS_NS, "nuclio-platform-config")
    assert configmap["data"] == {"platform.yaml": PLATFORM_YAML.read_text()}


def test_helm_values_carry_the_same_platform_config(platform):
    values = yaml.safe_load((NUCLIO / "helm-values.yaml").read_text())
    assert values == {"platform": platform}


# -- the API schemas -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_object_passes_the_api_schema_strictly(version, rendered, rendered_nuclio, rendered_crds):
    objs = rendered + rendered_nuclio + rendered_crds + load_all(SECRET_EXAMPLE)
    assert {obj["kind"] for obj in objs} >= {"CustomResourceDefinition", "Deployment", "ClusterRole", "Role",
                                             "RoleBinding", "ClusterRoleBinding", "ServiceAccount", "Secret"}
    for obj in objs:
        assert kubernetes_validate.validate(obj, version, strict=True) == version, key(obj)


def test_strict_validation_rejects_a_misspelt_field(rendered):
    broken = copy.deepcopy(scheduler_deployment(rendered))
    broken["spec"]["template"]["spec"]["schedulername"] = kube.SCHEDULER_NAME
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.30", strict=True)


# -- the PodGroup CRD ----------------------------------------------------------------------------------------------
def crd(objs) -> dict:
    return one(objs, "CustomResourceDefinition", f"{kube.PODGROUP_PLURAL}.{kube.PODGROUP_GROUP}")


def crd_schema(objs) -> dict:
    (version,) = crd(objs)["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def test_crd_names_agree_with_coach_domain_kube(rendered_crds):
    spec = crd(rendered_crds)["spec"]
    assert spec["group"] == kube.PODGROUP_GROUP
    assert spec["names"]["plural"] == kube.PODGROUP_PLURAL
    assert spec["names"]["kind"] == kube.PODGROUP_KIND
    assert "pg" in spec["names"]["shortNames"]
    assert spec["scope"] == "Namespaced"
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (kube.PODGROUP_VERSION, True, True)
    assert version["subresources"] == {"status": {}}


def structural_problems(schema: Mapping, path: str = "") -> list[str]:
    """Where the schema breaks the apiserver's structural-schema rules: every node has a type (int-or-string
    excepted), properties and additionalProperties are not mixed, and anyOf appears only for int-or-string."""
    problems = []
    int_or_string = schema.get("x-kubernetes-int-or-string") is True
    if "type" not in schema and not int_or_string and not schema.get("x-kubernetes-preserve-unknown-fields"):
        problems.append(f"{path or '/'}: no type")
    if "anyOf" in schema and not int_or_string:
        problems.append(f"{path}: anyOf outside int-or-string")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(f"{path}: both properties and additionalProperties")
    for name, child in schema.get("properties", {}).items():
        problems += structural_problems(child, f"{path}/{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += structural_problems(schema["additionalProperties"], f"{path}/*")
    return problems


def test_crd_schema_is_structural(rendered_crds):
    assert structural_problems(crd_schema(rendered_crds)) == []


def test_printer_columns_point_at_fields_of_the_schema(rendered_crds):
    schema = crd_schema(rendered_crds)
    (version,) = crd(rendered_crds)["spec"]["versions"]
    columns = [column for column in version["additionalPrinterColumns"]
               if not column["jsonPath"].startswith(".metadata.")]  # metadata is the apiserver's, not the schema's
    assert columns
    for column in columns:
        node = schema
        for part in column["jsonPath"].lstrip(".").split("."):
            node = node["properties"][part]
        assert node["type"] == column["type"], column


def test_the_podgroup_coach_creates_validates_against_the_crd(rendered_crds):
    from coach.placement.kube import podgroup

    example = load_all(PODGROUP_EXAMPLE)[0]
    created = podgroup(example["metadata"]["name"], example["metadata"]["namespace"])
    assert created == example  # the documented example is what the controller sends
    assert example["spec"]["minMember"] == sum(QUORUM.values())
    assert example["metadata"]["labels"] == {JOB_LABEL: example["metadata"]["name"]}
    assert example["apiVersion"] == f"{kube.PODGROUP_GROUP}/{kube.PODGROUP_VERSION}"
    jsonschema.validate(example, crd_schema(rendered_crds))
    with_status = copy.deepcopy(example)
    with_status["status"] = {"phase": "Running", "running": 3, "scheduleStartTime": "2026-11-23T10:00:00Z"}
    jsonschema.validate(with_status, crd_schema(rendered_crds))


def test_deleting_deploy_leaves_the_shared_crd(rendered, rendered_crds):
    """`kubectl delete -k deploy/` deletes what deploy/ renders: the CRD (shared with scheduler-plugins) is not
    in it, and deploy/crds/ holds nothing but the CRD."""
    assert [obj["kind"] for obj in rendered if obj["kind"] == "CustomResourceDefinition"] == []
    assert [key(obj) for obj in rendered_crds] == [
        ("CustomResourceDefinition", "", f"{kube.PODGROUP_PLURAL}.{kube.PODGROUP_GROUP}")]


#: PodGroups that scheduler-plugins' CRD (manifests/coscheduling/crd.yaml: no required field, no bounds) accepts.
ACCEPTED_BY_SCHEDULER_PLUGINS = [{}, {"minMember": 0}, {"minMember": -1}, {"minMember": 3, "scheduleTimeoutSeconds": 0},
                                 {"minResources": {"cpu": "2", "memory": 1024}}]


@pytest.mark.parametrize("spec", ACCEPTED_BY_SCHEDULER_PLUGINS)
def test_the_crd_accepts_what_scheduler_plugins_accepts(rendered_crds, spec):
    group = {"apiVersion": f"{kube.PODGROUP_GROUP}/{kube.PODGROUP_VERSION}", "kind": kube.PODGROUP_KIND,
             "metadata": {"name": "lenet"}, "spec": spec}
    jsonschema.validate(group, crd_schema(rendered_crds))
    jsonschema.validate({"kind": kube.PODGROUP_KIND, "metadata": {"name": "lenet"}}, crd_schema(rendered_crds))


@pytest.mark.parametrize("spec, why", [
    ({"minMember": "3"}, "'3' is not of type 'integer'"),
    ({"minMember": 3, "scheduleTimeoutSeconds": 1.5}, "1.5 is not of type 'integer'"),
])
def test_the_crd_rejects_what_scheduler_plugins_rejects(rendered_crds, spec, why):
    group = {"apiVersion": f"{kube.PODGROUP_GROUP}/{kube.PODGROUP_VERSION}", "kind": kube.PODGROUP_KIND,
             "metadata": {"name": "lenet"}, "spec": spec}
    with pytest.raises(jsonschema.ValidationError, match=re.escape(why)):
        jsonschema.validate(group, crd_schema(rendered_crds))


# -- RBAC ----------------------------------------------------------------------------------------------------------
ANY = "*"  # a grant on every namespace (ClusterRoleBinding) or every object name (no resourceNames)


def grants(objs: list[dict]) -> dict[str, set[tuple[str, str, str, str, str]]]:
    """ServiceAccount -> {(namespace, apiGroup, resource, verb, resourceName)} from every binding."""
    roles = {key(obj): obj for obj in objs if obj["kind"] in ("Role", "ClusterRole")}
    granted: dict[str, set] = {}
    for binding in (obj for obj in objs if obj["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        namespace = binding["metadata"].get("namespace", ANY)
        ref = binding["roleRef"]
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"])]
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount", f"{key(binding)} binds a {subject['kind']}"
            account = f"{subject['namespace']}/{subject['name']}"
            for rule in role["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            for name in rule.get("resourceNames", [ANY]):
                                granted.setdefault(account, set()).add((namespace, group, resource, verb, name))
    return granted


def table(namespace: str, group: str, resource: str, verbs: str, name: str = ANY) -> set:
    return {(namespace, group, resource, verb, name) for verb in verbs.split()}


#: What each ServiceAccount may do: the calls Coach makes, nothing more, nothing less (tests/contract/
#: test_deploy_on_kubernetes.py checks it against the calls the audit log shows on a real apiserver).
EXPECTED_GRANTS = {
    f"{COACH_NS}/coach-scheduler": (
        table(ANY, "", "nodes", "list watch")
        | table(ANY, "", "pods", "list watch")  # every bound pod takes room on its node, whoever placed it
        | table(FUNCTIONS_NS, "", "pods", "get")
        | table(FUNCTIONS_NS, "", "pods/binding", "create")
        | table(FUNCTIONS_NS, "", "pods/status", "patch")
        | table(FUNCTIONS_NS, "", "events", "create")
        | table(FUNCTIONS_NS, kube.PODGROUP_GROUP, kube.PODGROUP_PLURAL, "list watch")
        | table(FUNCTIONS_NS, kube.PODGROUP_GROUP, f"{kube.PODGROUP_PLURAL}/status", "patch")
        | table(FUNCTIONS_NS, "coordination.k8s.io", "leases", "create")
        | table(FUNCTIONS_NS, "coordination.k8s.io", "leases", "get update", kube.LEASE_NAME)),
    f"{COACH_NS}/coach-controller": (
        table(FUNCTIONS_NS, kube.PODGROUP_GROUP, kube.PODGROUP_PLURAL, "create delete")
        | table(FUNCTIONS_NS, "networking.k8s.io", "networkpolicies", "create delete")
        | table(FUNCTIONS_NS, "", "pods", "list watch")),
}


@pytest.mark.parametrize("account", sorted(EXPECTED_GRANTS))
def test_each_service_account_gets_exactly_its_verbs(rendered, account):
    granted = grants(rendered).get(account, set())
    extra, missing = granted - EXPECTED_GRANTS[account], EXPECTED_GRANTS[account] - granted
    assert not extra and not missing, f"{account}: extra {sorted(extra)}; missing {sorted(missing)}"


def test_only_coachs_service_accounts_are_bound_and_they_exist(rendered):
    assert set(grants(rendered)) == set(EXPECTED_GRANTS)
    accounts = {f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
                for obj in rendered if obj["kind"] == "ServiceAccount"}
    assert accounts == set(EXPECTED_GRANTS)


def test_every_role_is_bound_and_grants_no_wildcard(rendered):
    bound = {(b["roleRef"]["kind"], b["metadata"].get("namespace", "") if b["roleRef"]["kind"] == "Role" else "",
              b["roleRef"]["name"]) for b in rendered if b["kind"] in ("RoleBinding", "ClusterRoleBinding")}
    roles = [obj for obj in rendered if obj["kind"] in ("Role", "ClusterRole")]
    assert {key(role) for role in roles} == bound
    for role in roles:
        for rule in role["rules"]:
            assert ANY not in rule["apiGroups"] + rule["resources"] + rule["verbs"], key(role)


def rule_comments(text: str) -> list[tuple[list[str], str]]:
    """(verbs, the comment lines written just above them) for every `verbs:` line of an RBAC file."""
    found, comment = [], []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped)
        elif stripped.startswith("verbs:"):
            found.append((yaml.safe_load(stripped)["verbs"], " ".join(comment)))
            comment = []
        elif stripped.startswith("- apiGroups:") or stripped == "---":
            comment = []
    return found


@pytest.mark.parametrize("name", ["rbac-scheduler.yaml", "rbac-controller.yaml"])
def test_every_verb_is_justified_in_a_comment(name):
    rules = rule_comments((DEPLOY / name).read_text())
    assert rules
    for verbs, comment in rules:
        for verb in verbs:
            assert re.search(rf"\b{verb}\b", comment), f"{name}: `{verb}` of {verbs} has no justification"


def coach_accepts(command: list[str], capsys) -> str:
    """Empty when `coach`'s own argument parser takes the command (nothing runs), else its error line."""
    try:
        build_parser().parse_args(command[1:])
    except SystemExit:
        return capsys.readouterr().err.strip() or "exit without a message"
    return ""


# -- the scheduler Deployment --------------------------------------------------------------------------------------
def test_scheduler_runs_two_replicas_as_its_service_account(rendered):
    deployment = scheduler_deployment(rendered)
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    one(rendered, "ServiceAccount", pod["serviceAccountName"], COACH_NS)
    assert "schedulerName" not in pod  # it is placed by the default scheduler: it cannot place itself


def test_scheduler_command_is_accepted_by_coach(rendered, capsys):
    command = scheduler_container(rendered)["command"]
    assert command[:2] == ["coach", "scheduler"]
    assert flag(command, "profile") in PROFILES
    assert coach_accepts(command, capsys) == ""


def test_scheduler_watches_the_functions_namespace(rendered):
    command = scheduler_container(rendered)["command"]
    assert flag(command, "namespace") == FUNCTIONS_NS


def test_scheduler_security_context(rendered):
    pod = scheduler_deployment(rendered)["spec"]["template"]["spec"]
    container = scheduler_container(rendered)
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security.get("runAsNonRoot", pod["securityContext"].get("runAsNonRoot")) is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}


def test_liveness_and_prometheus_use_the_metrics_port(rendered):
    template = scheduler_deployment(rendered)["spec"]["template"]
    container = scheduler_container(rendered)
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    probe = container["livenessProbe"]["httpGet"]
    assert probe["path"] == "/healthz"
    metrics_port = int(flag(container["command"], "metrics-port"))
    assert ports[probe["port"]] == metrics_port
    annotations = template["metadata"]["annotations"]
    assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": str(metrics_port),
                           "prometheus.io/path": "/metrics"}


def test_the_replica_identity_comes_from_the_pod_name(rendered):
    container = scheduler_container(rendered)
    assert flag(container["command"], "id") == "$(POD_NAME)"
    (env,) = [env for env in container["env"] if env["name"] == "POD_NAME"]
    assert env["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_the_in_cluster_kubeconfig_is_mounted_where_the_command_reads_it(rendered):
    pod = scheduler_deployment(rendered)["spec"]["template"]["spec"]
    container = scheduler_container(rendered)
    path = Path(flag(container["command"], "kubeconfig"))
    (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == path.parent]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    configmap = one(rendered, "ConfigMap", volume["configMap"]["name"], COACH_NS)
    assert path.name in configmap["data"]


def test_the_in_cluster_kubeconfig_loads_with_the_official_client(rendered, tmp_path):
    text = one(rendered, "ConfigMap", "coach-scheduler-kubeconfig", COACH_NS)["data"]["kubeconfig"]
    config = yaml.safe_load(text)
    (cluster,), (user,), (context,) = config["clusters"], config["users"], config["contexts"]
    # The files the kubelet mounts into every pod, as the official client's in-cluster mode names them.
    assert cluster["cluster"]["certificate-authority"] == incluster_config.SERVICE_CERT_FILENAME
    assert user["user"]["tokenFile"] == incluster_config.SERVICE_TOKEN_FILENAME
    assert context["context"]["namespace"] == FUNCTIONS_NS
    (tmp_path / "ca.crt").write_text("not parsed until a TLS handshake\n")
    (tmp_path / "token").write_text("token-of-the-pod")
    local = text.replace(incluster_config.SERVICE_CERT_FILENAME, str(tmp_path / "ca.crt"))
    local = local.replace(incluster_config.SERVICE_TOKEN_FILENAME, str(tmp_path / "token"))
    (tmp_path / "kubeconfig").write_text(local)
    api = new_client_from_config(config_file=str(tmp_path / "kubeconfig"))
    try:
        assert api.configuration.host == "https://kubernetes.default.svc"
        header = api.configuration.auth_settings()["BearerToken"]
        assert (header["key"], header["value"]) == ("authorization", "Bearer token-of-the-pod")
        assert api.configuration.ssl_ca_cert == str(tmp_path / "ca.crt")
        assert api.configuration.verify_ssl is True
    finally:
        api.close()


# -- Nuclio's platform config --------------------------------------------------------------------------------------
def selects(selector: Mapping, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector's verdict on a label set (an empty selector selects everything)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or ():
        present, value, values = expr["key"] in labels, labels.get(expr["key"]), expr.get("values") or []
        verdict = {"In": present and value in values, "NotIn": not present or value not in values,
                   "Exists": present, "DoesNotExist": not present}[expr["operator"]]
        if not verdict:
            return False
    return True


@pytest.mark.parametrize("selector, labels, verdict", [
    ({}, {}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
])
def test_the_selector_evaluator_follows_kubernetes(selector, labels, verdict):
    assert selects(selector, labels) is verdict


@pytest.mark.parametrize("labels, verdict", [
    ({JOB_LABEL: "x"}, True),
    ({JOB_LABEL: ""}, True),
    (FunctionId("lenet-mnist", Role.WORKER, 1).labels | {kube.POD_GROUP_LABEL: "lenet-mnist",
                                                          "nuclio.io/project-name": "coach"}, True),
    ({}, False),
    ({ROLE_LABEL: "worker", INDEX_LABEL: "0"}, False),
    ({"nuclio.io/class": "function", "nuclio.io/function-name": "hello"}, False),
])
def test_the_augmented_config_selects_coach_functions_only(coach_augment, labels, verdict):
    assert selects(coach_augment["labelSelector"], labels) is verdict


@pytest.fixture(scope="module")
def scheduler_augment(platform) -> dict:
    """The augmented config that gives Coach's schedulerName to the functions labelled for Coach's scheduler."""
    entries = [entry for entry in platform["functionAugmentedConfigs"] if "kubernetes" in entry]
    assert len(entries) == 1
    return entries[0]


@pytest.mark.parametrize("scheduler, verdict", [(kube.SCHEDULER_NAME, True), (kube.DEFAULT_SCHEDULER_NAME, False),
                                                (None, False)])
def test_only_functions_for_coachs_scheduler_get_its_scheduler_name(scheduler_augment, scheduler, verdict):
    labels = FunctionId("lenet-mnist", Role.WORKER, 1).labels | {kube.POD_GROUP_LABEL: "lenet-mnist"}
    if scheduler is not None:
        labels[kube.SCHEDULER_LABEL] = scheduler
    assert selects(scheduler_augment["labelSelector"], labels) is verdict
    assert selects(scheduler_augment["labelSelector"], {kube.SCHEDULER_LABEL: kube.SCHEDULER_NAME}) is False


def test_the_augmented_config_has_nuclios_shape(platform, coach_augment, scheduler_augment):
    # Field names of Nuclio's pkg/platformconfig (Config, LabelSelectorAndConfig, Kubernetes): Nuclio drops
    # unknown keys without a word, so a misspelling here would silently do nothing.
    assert set(platform) == {"functionAugmentedConfigs"}
    assert set(coach_augment) == {"labelSelector", "functionConfig"}
    assert set(coach_augment["functionConfig"]) == {"spec"}
    assert set(scheduler_augment) == {"labelSelector", "kubernetes"}
    assert set(scheduler_augment["kubernetes"]) == {"deployment"}


def test_the_generated_deployment_gets_coachs_scheduler(scheduler_augment, rendered):
    # Nuclio merges `kubernetes.deployment` into the Deployment it generates (empty fields only); merged into a
    # minimal valid Deployment it must still be one, with Coach's schedulerName.
    labels = {"nuclio.io/function-name": "coach-lenet-worker-0"}
    generated = {"apiVersion": "apps/v1", "kind": "Deployment",
                 "metadata": {"name": "nuclio-coach-lenet-worker-0", "namespace": FUNCTIONS_NS},
                 "spec": {"selector": {"matchLabels": labels},
                          "template": {"metadata": {"labels": labels},
                                       "spec": {"containers": [{"name": "nuclio", "image": "coach-functions"}]}}}}
    merged = fill_empty(generated, scheduler_augment["kubernetes"]["deployment"])
    assert merged["spec"]["template"]["spec"]["schedulerName"] == kube.SCHEDULER_NAME
    assert kubernetes_validate.validate(merged, "1.30", strict=True) == "1.30"


def fill_empty(target: dict, extra: Mapping) -> dict:
    """mergo.Merge as Nuclio calls it: fields of `extra` go where `target` has nothing."""
    merged = copy.deepcopy(target)
    for name, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(name), Mapping):
            merged[name] = fill_empty(merged[name], value)
        elif merged.get(name) in (None, "", [], {}):
            merged[name] = copy.deepcopy(value)
    return merged


#: The JSON names of Nuclio's function spec (pkg/functionconfig/types.go, type Spec, Nuclio 1.14).
NUCLIO_FUNCTION_SPEC_KEYS = set("""
    description disable publish handler runtime env envFrom resources image imageHash replicas minReplicas
    maxReplicas targetCPU dataBindings triggers volumes version alias build runRegistry imagePullSecrets
    runtimeAttributes loggerSinks dealerURI platform readinessTimeoutSeconds serviceType imagePullPolicy
    securityContext serviceAccount scaleToZero disableDefaultHTTPTrigger disableSensitiveFieldsMasking devices
    affinity nodeSelector nodeName tolerations priorityClassName preemptionPolicy deploymentStrategy hostIPC
    customScalingMetricSpecs autoScaleMetrics waitReadinessTimeoutBeforeFailure eventTimeout preemptionMode
    sidecars initContainers""".split())


def test_the_augmented_function_config_replaces_nothing_coach_sets(coach_augment):
    spec = coach_augment["functionConfig"]["spec"]
    assert set(spec) <= NUCLIO_FUNCTION_SPEC_KEYS
    assert spec["waitReadinessTimeoutBeforeFailure"] is True  # a pod waiting for its gang is not a failure
    # Nuclio decodes the augmented config over the function's own: a list there replaces the function's list.
    lists = {name for name, value in spec.items() if isinstance(value, list)}
    assert "env" not in lists
    for path in sorted((ROOT / "coach_functions").glob("*/function.yaml")):
        own = yaml.safe_load(path.read_text())["spec"]
        assert not lists & set(own), f"{path.relative_to(ROOT)} sets {sorted(lists & set(own))}: it would be lost"


def test_the_functions_get_the_store_from_the_secret(coach_augment):
    (source,) = coach_augment["functionConfig"]["spec"]["envFrom"]
    secret = load_all(SECRET_EXAMPLE)[0]
    assert source == {"secretRef": {"name": secret["metadata"]["name"]}}
    assert secret["metadata"]["namespace"] == FUNCTIONS_NS
    assert set(secret["stringData"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
                                         "AWS_ENDPOINT_URL"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "f"},
           "spec": {"containers": [{"name": "nuclio", "image": "coach-functions", "envFrom": [source]}]}}
    assert kubernetes_validate.validate(pod, "1.30", strict=True) == "1.30"


# -- names shared with the code ------------------------------------------------------------------------------------
def test_names_agree_with_coach_domain_kube(rendered, scheduler_augment):
    schedulers = scheduler_augment["kubernetes"]["deployment"]["spec"]["template"]["spec"]["schedulerName"]
    assert schedulers == kube.SCHEDULER_NAME
    assert scheduler_augment["labelSelector"]["matchLabels"] == {kube.SCHEDULER_LABEL: kube.SCHEDULER_NAME}
    lease_rules = [rule for obj in rendered if obj["kind"] == "Role" for rule in obj["rules"]
                   if "leases" in rule["resources"] and "resourceNames" in rule]
    assert [rule["resourceNames"] for rule in lease_rules] == [[kube.LEASE_NAME]]
    assert (load_all(PODGROUP_EXAMPLE)[0]["metadata"]["namespace"] == load_all(SECRET_EXAMPLE)[0]["metadata"]
            ["namespace"] == FUNCTIONS_NS)


def readme_section() -> str:
    """The Kubernetes guide (docs/kubernetes.md, linked from the README), from its title on."""
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    return text[text.index("# Running on Kubernetes\n"):]


def test_the_readme_names_the_labels_coach_uses():
    section = readme_section()
    for name in (kube.SCHEDULER_NAME, kube.SLOTS_LABEL, kube.POD_GROUP_LABEL, JOB_LABEL, ROLE_LABEL, INDEX_LABEL,
                 kube.FAILED_SCHEDULING, f"{kube.PODGROUP_PLURAL}.{kube.PODGROUP_GROUP}", kube.SCHEDULER_LABEL,
                 kube.DEFAULT_SCHEDULER_NAME):
        assert f"`{name}" in section, name


def readme_commands(program: str) -> list[list[str]]:
    """The `program ...` lines of the Kubernetes guide's sh blocks, continuation lines joined."""
    blocks = re.findall(r"```sh\n(.*?)```", readme_section(), flags=re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [shlex.split(line, comments=True) for line in lines if line.startswith(program + " ")]


def test_the_readme_coach_commands_are_accepted_by_coach(capsys):
    commands = readme_commands("coach")
    assert {command[1] for command in commands} == {"run", "scheduler"}
    for command in commands:
        assert coach_accepts(command, capsys) == "", shlex.join(command)


def test_the_readme_applies_what_deploy_holds():
    commands = [" ".join(command) for command in readme_commands("kubectl")]
    assert "kubectl apply -k deploy/" in commands
    assert "kubectl apply -k deploy/nuclio/" not in commands  # only mentioned, for an existing Nuclio
    helm = [" ".join(command) for command in readme_commands("helm")]
    assert any("--values deploy/nuclio/helm-values.yaml" in command for command in helm)
