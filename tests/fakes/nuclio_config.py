"""What the fake Nuclio dashboard makes of a function config: the platform config's augmentation, the Deployment
and the pod it runs, the trigger's worker count, the env its processes get. Pure functions over JSON dicts.

As Nuclio's controller does (pkg/platform/kube/functionres/lazy.go): a function becomes a Deployment named
`nuclio-<function>`, whose pods carry the function's labels, Nuclio's class labels and `nuclio.io/function-name`,
its image, env, resources, `nodeSelector`, `affinity` and `tolerations` (the function spec's), with the
`kubernetes.deployment` of every `functionAugmentedConfigs` entry whose label selector matches filled into the
template's empty fields (mergo without override). The ReplicaSet's pods are named `<replicaset>-<5 random>`, the
ReplicaSet `<deployment>-<pod-template-hash>`, so a pod's name is `nuclio-<function>-<hash>-<suffix>`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Mapping

import yaml

from coach.domain.identity import FunctionId, Role
from coach.domain.kube import NUCLIO_FUNCTION_LABEL

#: Labels Nuclio's controller adds to every function's resources (pkg/platform/kube/functionres/lazy.go).
CLASS_LABELS = {"nuclio.io/class": "function", "nuclio.io/app": "functionres", "nuclio.io/function-version": "latest"}
PROJECT_LABEL = "nuclio.io/project-name"
CONTAINER_NAME = "nuclio"  # the function container's name in Nuclio's pods
HTTP_PORT = 8080  # the container port of Nuclio's HTTP trigger
HASH_LABEL = "pod-template-hash"  # what the ReplicaSet controller adds to its pods
DEFAULT_WORKERS = 1  # the HTTP trigger's workers when the function names none
DEFAULT_AVAILABILITY_TIMEOUT_MS = 10_000  # triggercommon.DefaultWorkerAvailabilityTimeoutMilliseconds

_GO_DURATION = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_POD_PLACEMENT = ("nodeSelector", "affinity", "tolerations")  # copied from the function spec into the pod spec


def go_duration_s(text: str) -> float:
    """Seconds of a Go duration ("30s", "1m30s", "1500ms"), or ValueError, as Go's time.ParseDuration reads it."""
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-")
    if body == "0":
        return 0.0
    if not body or _GO_DURATION.sub("", body):
        raise ValueError(f"time: invalid duration {text!r}")
    return sign * sum(float(number) * _GO_UNITS_S[unit] for number, unit in _GO_DURATION.findall(body))


def selector_matches(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against labels; an empty selector matches everything (as LabelSelectorAsSelector)."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or ()
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"label selector: unknown operator {operator!r}")
    return True


def deep_merge(base: dict, overlay: Mapping) -> dict:
    """`overlay` over `base`: mappings merge key by key, anything else replaces."""
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def fill_empty(base: dict, overlay: Mapping) -> dict:
    """`overlay` into the fields of `base` that are missing or empty, as mergo.Merge without override does (how
    Nuclio merges an augmented config's `kubernetes.deployment` into the Deployment it generates)."""
    for key, value in overlay.items():
        current = base.get(key)
        if isinstance(value, Mapping) and isinstance(current, dict):
            fill_empty(current, value)
        elif current in (None, "", 0, False, [], {}):
            base[key] = copy.deepcopy(value)
    return base


def load_platform_config(path: Path) -> list[dict]:
    """The `functionAugmentedConfigs` of a Nuclio platform config: the file itself, or a ConfigMap holding it
    under `platform.yaml`. ValueError (one line naming the file) when it is neither."""
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as error:
        raise ValueError(f"{path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not YAML ({getattr(error, 'problem', error)})") from None
    if isinstance(document, Mapping) and document.get("kind") == "ConfigMap":
        text = (document.get("data") or {}).get("platform.yaml")
        if not isinstance(text, str):
            raise ValueError(f"{path}: ConfigMap without data.platform.yaml")
        document = yaml.safe_load(text)
    if not isinstance(document, Mapping):
        raise ValueError(f"{path}: expected a Nuclio platform config (a mapping)")
    augmented = document.get("functionAugmentedConfigs") or []
    if not isinstance(augmented, list) or not all(isinstance(entry, Mapping) for entry in augmented):
        raise ValueError(f"{path}: functionAugmentedConfigs: expected a list of mappings")
    return [dict(entry) for entry in augmented]


def function_id(labels: Mapping[str, str], name: str) -> FunctionId:
    """The Coach identity in the labels; a function without one is named after itself (its log file's name)."""
    try:
        return FunctionId.from_labels(labels)
    except (KeyError, ValueError):
        return FunctionId(name, Role.WORKER, 0)


def deployment_name(function: str) -> str:
    return f"nuclio-{function}"


def http_trigger(spec: Mapping) -> Mapping:
    """The function's HTTP trigger (Nuclio makes a default one of one worker when it names none)."""
    for trigger in (spec.get("triggers") or {}).values():
        if isinstance(trigger, Mapping) and trigger.get("kind") == "http":
            return trigger
    return {}


def trigger_workers(spec: Mapping) -> int:
    """How many worker processes the HTTP trigger runs: `numWorkers` (the retired `maxWorkers` still counts)."""
    trigger = http_trigger(spec)
    workers = trigger.get("numWorkers") or trigger.get("maxWorkers") or DEFAULT_WORKERS
    return max(1, int(workers))


def availability_timeout_ms(spec: Mapping) -> int:
    return int(http_trigger(spec).get("workerAvailabilityTimeoutMilliseconds") or DEFAULT_AVAILABILITY_TIMEOUT_MS)


def pod_labels(meta: Mapping) -> dict[str, str]:
    return {**meta["labels"], **CLASS_LABELS, NUCLIO_FUNCTION_LABEL: meta["name"]}


def pod_template(meta: Mapping, spec: Mapping, augmented: list[dict]) -> dict:
    """The Deployment's pod template for a function: its container, placement and the platform config's additions."""
    labels = pod_labels(meta)
    container = {"name": CONTAINER_NAME, "image": spec["image"], "env": copy.deepcopy(list(spec.get("env") or [])),
                 "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}]}
    if spec.get("resources"):
        container["resources"] = copy.deepcopy(spec["resources"])
    pod_spec: dict = {"containers": [container], "restartPolicy": "Always"}
    for key in _POD_PLACEMENT:
        if spec.get(key):
            pod_spec[key] = copy.deepcopy(spec[key])
    template = {"metadata": {"labels": labels, "annotations": {NUCLIO_FUNCTION_LABEL: meta["name"]}},
                "spec": pod_spec}
    for entry in augmented:
        if selector_matches(entry.get("labelSelector"), labels):
            deployment = (entry.get("kubernetes") or {}).get("deployment") or {}
            fill_empty(template, ((deployment.get("spec") or {}).get("template") or {}))
    return template


def template_hash(template: Mapping) -> str:
    """A short stable digest of the pod template, as the ReplicaSet controller's pod-template-hash label."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    return "".join("bcdfghjklmnpqrstvwxz2456789"[int(digest[i:i + 2], 16) % 27] for i in range(0, 20, 2))


def deployment(meta: Mapping, template: Mapping) -> dict:
    """The apps/v1 Deployment of a function: one replica of `template`."""
    name = meta["name"]
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": deployment_name(name), "namespace": meta["namespace"], "labels": pod_labels(meta)},
            "spec": {"replicas": 1, "selector": {"matchLabels": {NUCLIO_FUNCTION_LABEL: name}},
                     "template": copy.deepcopy(dict(template))}}


def pod(meta: Mapping, template: Mapping, owner: Mapping) -> dict:
    """A new pod of the function's ReplicaSet: `<deployment>-<hash>-` plus the apiserver's random suffix, owned by
    the Deployment (`owner`: its name and uid)."""
    hashed = template_hash(template)
    body = copy.deepcopy(dict(template))
    body["metadata"]["labels"][HASH_LABEL] = hashed
    body["metadata"]["generateName"] = f"{deployment_name(meta['name'])}-{hashed}-"
    body["metadata"]["namespace"] = meta["namespace"]
    body["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": owner["name"],
                                            "uid": owner["uid"], "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": "v1", "kind": "Pod", **body}


def container_env(pod_object: Mapping, pod_ip: str) -> dict[str, str]:
    """The env the kubelet gives the pod's container: plain values, and fieldRefs to the pod's own fields."""
    fields = {"status.podIP": pod_ip, "metadata.name": pod_object["metadata"]["name"],
              "metadata.namespace": pod_object["metadata"].get("namespace", ""),
              "spec.nodeName": (pod_object.get("spec") or {}).get("nodeName") or "", "status.hostIP": pod_ip}
    env: dict[str, str] = {}
    for container in (pod_object.get("spec") or {}).get("containers") or ():
        if container.get("name") != CONTAINER_NAME:
            continue
        for entry in container.get("env") or ():
            if "value" in entry:
                env[entry["name"]] = str(entry["value"])
            else:
                path = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
                if path in fields:
                    env[entry["name"]] = fields[path]
    return env


def grace_period_s(pod_object: Mapping) -> float:
    """How long the kubelet lets the pod's processes stop: the deletion's grace period, else the pod's own."""
    meta, spec = pod_object.get("metadata") or {}, pod_object.get("spec") or {}
    for value in (meta.get("deletionGracePeriodSeconds"), spec.get("terminationGracePeriodSeconds"), 30):
        if value is not None:
            return float(value)
    return 30.0


def unschedulable(pod_object: Mapping) -> bool:
    """Pending with PodScheduled=False for reason Unschedulable: what Nuclio's controller fails fast on."""
    status = pod_object.get("status") or {}
    return (status.get("phase", "Pending") == "Pending"
            and any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") ==
                    "Unschedulable" for c in status.get("conditions") or ()))
