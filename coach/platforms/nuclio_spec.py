"""A Coach function as a Nuclio function config: its name, labels, spec and env. Reads function.yaml; no other I/O.

Why a module of its own: Nuclio reads a function config non-strictly, so a misspelt or retired key is dropped
without a word. Every key of `coach_functions/<role>/function.yaml` is therefore checked here against the fields of
Nuclio's own config types (`pkg/functionconfig/types.go`: `Meta`, `Spec`, `Trigger`), and a retired key
(`maxWorkers`, replaced by `numWorkers`) is refused with the replacement named.

The config sent to the dashboard is the file's spec without its `build` section (the image is built beforehand
from coach_functions/Dockerfile: nothing is built on the cluster), plus `spec.image`, the run's token and the caller's
environment. A function's identity travels as labels (coach.io/job, role, index and the PodGroup label); its
name is derived from the identity for people and logs and never parsed back.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Mapping

import yaml

from coach.domain.identity import ROLES, FunctionId, Role
from coach.domain.kube import POD_GROUP_LABEL, SCHEDULER_LABEL, SCHEDULER_NAME
from coach.platforms.host import TOKEN_ENV

#: Where the three functions' folders are: <repo>/functions/<role>/function.yaml.
FUNCTIONS_DIR = Path(__file__).resolve().parents[2] / "coach_functions"

#: Nuclio's label naming a function's project (pkg/common/consts.go); the dashboard filters by it.
PROJECT_LABEL = "nuclio.io/project-name"
#: Annotation naming the run that created a function (a digest of the run's token, never the token).
RUN_ANNOTATION = "coach.io/run"
#: Annotation naming one creation of a function: remove(ref) deletes that creation only.
INSTANCE_ANNOTATION = "coach.io/instance"

#: Longest function name: Nuclio names the function's Service `nuclio-<name>`, a DNS-1035 label of at most 63.
MAX_NAME_CHARS = 63 - len("nuclio-")

#: The JSON keys of Nuclio's function-config types (pkg/functionconfig/types.go, Nuclio 1.14).
TOP_KEYS = frozenset({"apiVersion", "kind", "metadata", "spec"})  # apiVersion/kind: as Nuclio's docs write them
META_KEYS = frozenset({"name", "namespace", "labels", "annotations", "resourceVersion"})
SPEC_KEYS = frozenset({
    "description", "disable", "publish", "handler", "runtime", "env", "envFrom", "resources", "image", "imageHash",
    "replicas", "minReplicas", "maxReplicas", "targetCPU", "dataBindings", "triggers", "volumes", "version", "alias",
    "build", "runRegistry", "imagePullSecrets", "runtimeAttributes", "loggerSinks", "dealerURI", "platform",
    "readinessTimeoutSeconds", "serviceType", "imagePullPolicy", "securityContext", "serviceAccount", "scaleToZero",
    "disableDefaultHTTPTrigger", "disableSensitiveFieldsMasking", "devices", "affinity", "nodeSelector",
    "nodeName", "tolerations", "priorityClassName", "preemptionPolicy", "deploymentStrategy", "hostIPC",
    "customScalingMetricSpecs", "autoScaleMetrics", "waitReadinessTimeoutBeforeFailure", "eventTimeout",
    "preemptionMode", "sidecars", "initContainers",
})
TRIGGER_KEYS = frozenset({
    "class", "kind", "name", "disabled", "numWorkers", "url", "paths", "username", "password", "secret",
    "partitions", "annotations", "workerTerminationTimeout", "workerAvailabilityTimeoutMilliseconds",
    "workerAllocatorName", "explicitAckMode", "waitExplicitAckDuringRebalanceTimeout", "batch", "total_tasks",
    "max_task_allocation", "attributes",
})
#: Retired keys Nuclio still reads but will drop, and what replaces them.
RETIRED_KEYS: Mapping[str, str] = {"maxWorkers": "numWorkers"}  # Trigger.MaxWorkers: removed in Nuclio 1.15
#: Sections Coach never sends: the image is prebuilt (coach_functions/Dockerfile), so nothing is built on the cluster.
NOT_SENT = ("build",)

_INVALID = re.compile(r"[^a-z0-9-]+")


class FunctionYamlError(ValueError):
    """A function.yaml Nuclio would misread; the message is one line naming the file and the key."""


def function_name(fid: FunctionId) -> str:
    """`coach-<job>-<role>-<index>`, DNS-1123 safe; a hash of the identity is appended when the name had to be
    changed (case, characters) or cut (longer than MAX_NAME_CHARS), so that two identities never share a name."""
    raw = f"coach-{fid.job}-{fid.role.value}-{fid.index}"
    clean = _INVALID.sub("-", raw.lower()).strip("-")
    clean = re.sub("-{2,}", "-", clean)
    if clean == raw and len(clean) <= MAX_NAME_CHARS:
        return clean
    digest = hashlib.sha256(f"{fid.job}\0{fid.role.value}\0{fid.index}".encode()).hexdigest()[:8]
    return f"{clean[:MAX_NAME_CHARS - len(digest) - 1].rstrip('-')}-{digest}"


def run_digest(token: str) -> str:
    """Names the run on its functions without revealing the token (which authorises invocations)."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def check_keys(config: Mapping, where: str) -> None:
    """FunctionYamlError on the first key Nuclio's function-config types do not have, or a retired one."""

    def unknown(keys, allowed, path):
        for key in keys:
            if key in RETIRED_KEYS:
                raise FunctionYamlError(f"{where}: {path}{key}: retired in Nuclio, use {RETIRED_KEYS[key]}")
            if key not in allowed:
                raise FunctionYamlError(f"{where}: {path}{key}: not a Nuclio function-config key "
                                        f"(Nuclio would drop it silently)")

    if not isinstance(config, Mapping):
        raise FunctionYamlError(f"{where}: expected a mapping, got {type(config).__name__}")
    unknown(config, TOP_KEYS, "")
    metadata, spec = config.get("metadata") or {}, config.get("spec")
    if not isinstance(metadata, Mapping):
        raise FunctionYamlError(f"{where}: metadata: expected a mapping")
    unknown(metadata, META_KEYS, "metadata.")
    if not isinstance(spec, Mapping):
        raise FunctionYamlError(f"{where}: spec: expected a mapping")
    unknown(spec, SPEC_KEYS, "spec.")
    triggers = spec.get("triggers") or {}
    if not isinstance(triggers, Mapping):
        raise FunctionYamlError(f"{where}: spec.triggers: expected a mapping of trigger name to trigger")
    for name, trigger in triggers.items():
        if not isinstance(trigger, Mapping):
            raise FunctionYamlError(f"{where}: spec.triggers.{name}: expected a mapping")
        unknown(trigger, TRIGGER_KEYS, f"spec.triggers.{name}.")
    if not isinstance(spec.get("handler"), str) or not spec["handler"]:
        raise FunctionYamlError(f"{where}: spec.handler: missing (module:function)")


def load_function_yaml(path: Path) -> dict:
    """One role's function.yaml, checked key by key; FunctionYamlError (one line) when Nuclio would misread it."""
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as error:
        raise FunctionYamlError(f"{path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise FunctionYamlError(f"{path}: {where}{getattr(error, 'problem', None) or 'not YAML'}") from None
    check_keys(config, str(path))
    return config


def load_role_configs(functions_dir: Path) -> dict[Role, dict]:
    """Every role's function.yaml under `functions_dir`."""
    return {role: load_function_yaml(functions_dir / role.value / "function.yaml") for role in ROLES}


def function_config(fid: FunctionId, base: Mapping, *, namespace: str, project: str, image: str, token: str,
                    env: Mapping[str, str], instance: str, scheduler_name: str = SCHEDULER_NAME) -> dict:
    """The body of `POST /api/functions` for `fid`: metadata and spec (status is the dashboard's); the scheduler
    that binds its pod is a label, which Nuclio's platform config turns into the pods' schedulerName."""
    base_meta, base_spec = base.get("metadata") or {}, base.get("spec") or {}
    labels = {**(base_meta.get("labels") or {}), **fid.labels, POD_GROUP_LABEL: fid.job, PROJECT_LABEL: project,
              SCHEDULER_LABEL: scheduler_name}
    annotations = {**(base_meta.get("annotations") or {}), RUN_ANNOTATION: run_digest(token),
                   INSTANCE_ANNOTATION: instance}
    added = {**env, TOKEN_ENV: token}
    kept = [entry for entry in base_spec.get("env") or [] if entry.get("name") not in added]
    spec = {key: value for key, value in base_spec.items() if key not in NOT_SENT}
    spec["image"] = image
    spec["env"] = kept + [{"name": name, "value": str(value)} for name, value in added.items()]
    return {
        "metadata": {"name": function_name(fid), "namespace": namespace, "labels": labels,
                     "annotations": annotations},
        "spec": spec,
    }


def trigger_workers(config: Mapping) -> int:
    """How many worker processes Nuclio runs for the function's HTTP trigger (`numWorkers`; one by default)."""
    for trigger in ((config.get("spec") or {}).get("triggers") or {}).values():
        if isinstance(trigger, Mapping) and trigger.get("kind") == "http":
            return max(1, int(trigger.get("numWorkers") or 1))
    return 1


def is_ours(config: Mapping, fid: FunctionId) -> bool:
    """Whether a function the dashboard holds carries `fid`'s identity labels (whichever run created it)."""
    labels = (config.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in {**fid.labels, POD_GROUP_LABEL: fid.job}.items())
