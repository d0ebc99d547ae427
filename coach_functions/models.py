"""A host's model files: each imported and its data loaded once per host, the classes an epoch's shape pass found
for it, and the warm-up of MXNet for its batch shapes.

A host keeps only what the model file gives: its module, its data, and the classes the first worker epoch's shape
pass found for it (a field of the child's reply that the host takes out); an epoch from a checkpoint, whose file
gives every shape, then runs no shape pass. At the job's warm request, before any epoch, a worker host also warms
MXNet up for every batch shape the job's epochs use at 1-4 workers, on a throw-away model (coach_functions/warmup.py):
every child forked after it starts warm, and no number an epoch computes changes. Nothing is warmed while an epoch
runs: on two shared CPUs that would slow the epoch (and a calibration mini-epoch, which is a measurement).

Side effects: imports the model file and calls its load_data(); the warm-up runs MXNet in the host.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from coach_functions.data import normalise_data
from coach_functions.failures import EpochError, log_failure, user_code
from coach_functions.host_state import HostState
from coach_functions.warmup import job_shapes, warm_up


def _model_key(model_path: str) -> str:
    """The key of a model file in a host's caches (`models`, `classes`): its resolved path."""
    return str(Path(model_path).resolve())


def load_model(host: HostState, model_path: str):
    """Import a model file and call its `load_data()` once per host (cached until the file changes).

    Every problem is an EpochError naming the model file; what the model file itself raised is logged with its
    traceback."""
    path = _model_key(model_path)
    try:
        mtime = os.stat(path).st_mtime
    except OSError as error:
        raise EpochError(f"model file {model_path}: {error.strerror}") from None
    with host.lock:
        cached = host.models.get(path)
        if cached and cached[0] == mtime:
            return cached[1], cached[2]
        spec = importlib.util.spec_from_file_location(f"coach_model_{abs(hash(path))}", path)
        module = importlib.util.module_from_spec(spec)
        user_code(model_path, "importing it", lambda: spec.loader.exec_module(module))
        for name in ("build_model", "load_data"):
            if not callable(getattr(module, name, None)):
                raise EpochError(f"model file {model_path}: no function {name}()")
        raw = user_code(model_path, "load_data()", module.load_data)
        try:
            data = normalise_data(raw)
        except EpochError as error:
            raise EpochError(f"model file {model_path}: {error}") from None
        host.models[path] = (mtime, module, data)
        host.classes.pop(path, None)  # learnt for the module replaced now
        host.generation += 1
        return module, data


#: The field of a worker child's reply that tells its host the model's classes; the host takes it out
#: (`learn_classes`) before answering, so it never reaches the controller.
CLASSES_FIELD = "host_classes"


UNKNOWN = object()  # no epoch of the loaded module has told its classes yet


def known_classes(host: HostState, model_path: str, module) -> Any:
    """The classes a shape pass found for `module` (int or None), or UNKNOWN."""
    found = host.classes.get(_model_key(model_path))
    return found[1] if found is not None and found[0] is module else UNKNOWN


def learn_classes(host: HostState, model_path: str, module, reply: dict) -> None:
    """Take the classes out of a worker child's reply and keep them for `module`, the one its epoch ran (host side),
    while it is still the one loaded: a model file loaded again meanwhile has not told its classes yet."""
    if CLASSES_FIELD not in reply:
        return
    classes = reply.pop(CLASSES_FIELD)
    path = _model_key(model_path)
    with host.lock:
        loaded = host.models.get(path)
        if loaded is not None and loaded[1] is module and (classes is None or isinstance(classes, int)):
            host.classes[path] = (module, classes)


def warm_host(host: HostState, model_path: str, module, data: dict, batch_size: int) -> None:
    """Warm MXNet in this worker host for the batch shapes of a job's epochs at 1-4 workers (coach_functions/warmup.py),
    those not tried yet for `module`, the most used first, within WARM_UP_LIMIT_S: every child forked after it starts
    warm. Holds the fork lock meanwhile, so that no child is forked while the host's MXNet engine runs; a warm-up
    that fails is logged and not tried again (the epochs start cold, and show the model file's own faults)."""
    path = _model_key(model_path)
    shapes = host.warmth.unwarmed(path, module, job_shapes(batch_size, len(data["X_train"]),
                                                           len(data.get("X_val", ()))))
    if not shapes:
        return
    try:
        with host.fork_lock:
            warm_up(module, data["X_train"][0], shapes)
    except Exception as error:  # noqa: BLE001 - the model file's code: anything it raises
        log_failure(f"warming up for model file {model_path} failed; its epochs start cold:", error)
    finally:
        host.warmth.done(path, module, shapes)  # also those the time limit left out: a host warms a job once
