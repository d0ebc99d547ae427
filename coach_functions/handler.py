"""What the three Nuclio functions share: the warm host's start (`init_host`) and every invocation
(`handle_event`), which runs one epoch of one parameter-server role in a forked child (coach_functions/children.py),
most often the host's spare (coach_functions/spares.py).

The event body is the typed contract of coach/domain/contracts.py: an `EpochRequest`, a `WarmRequest`, an
`AheadRequest` or `{"action": "cancel"}`. A body that does not match it is answered 400 with one line naming the field, before
anything is forked or loaded. A broken model file (it does not import, `build_model()`, `load_data()` or `loss()`
raises, or its data are not what the contract says) is answered 422, `model file PATH: ...`: it would fail the
same way on any instance, so the controller does not retry it. The traceback of anything the model file raised
goes to stderr, which is the function's log.

Replies are standard JSON (never NaN or Infinity); a worker's epoch that diverged or stopped early is still a reply
(coach_functions/training.py).

Side effects: imports MXNet, forks processes, reads the model file, reads and writes checkpoint files named in the
event.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

from coach.domain.contracts import AheadRequest, ContractError, EpochRequest, WarmReply, WarmRequest
from coach_functions import auth
from coach_functions.children import cancel_children
from coach_functions.failures import EpochError
from coach_functions.host_state import HostState
from coach_functions.models import learn_classes, load_model, warm_host
from coach_functions.spares import announce, run_epoch, want_spare


def init_host(context) -> None:
    """Import MXNet once in the warm host so that every forked epoch child starts without that cost."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import mxnet  # noqa: F401  (the point is to have it imported before fork)

    context.user_data.host = HostState()
    want_spare(context.user_data.host)


def handle_event(context, event, role: str) -> Any:
    """The body of every role's Nuclio handler: an epoch, a warm-up, a cancel, or a bad request, answered as JSON."""
    host: HostState = context.user_data.host
    body = event.body
    if isinstance(body, (bytes, str)):
        try:
            body = json.loads(body or "{}")
        except ValueError:  # JSONDecodeError, or bytes that are not UTF-8
            return _respond(context, 400, {"error": "body: not valid JSON", "field": "body", "role": role})
    action = body.get("action") if isinstance(body, dict) else None
    if action == "cancel":
        return _respond(context, 200, {"cancelled": cancel_children(host)})
    try:
        request = _parse(body, action, role)
    except ContractError as error:  # before any fork: the controller sent something this side cannot run
        return _respond(context, 400, {"error": str(error), "field": error.field, "role": role})
    if isinstance(request, AheadRequest):
        announce(host, request.role, request.next)
        return _respond(context, 200, {"ahead": True, "role": role})
    if isinstance(request, WarmRequest):  # load the model file and its data before the first timed epoch
        warmed = WarmReply()
        if role == "worker":
            try:
                module, data = load_model(host, request.model_path)
            except EpochError as error:  # the model file, its load_data() or its data: logged, rejected
                return _respond(context, 422, {"error": str(error), "role": role})
            if request.batch_size is not None:  # before any epoch: calibration then measures warm children too
                warm_host(host, request.model_path, module, data, request.batch_size)
            want_spare(host)  # one that holds the model now
            warmed = WarmReply(train_samples=len(data["X_train"]))
        return _respond(context, 200, {**warmed.to_dict(), "role": role})
    if role == "worker":
        try:
            module, _ = load_model(host, request.model_path)  # rejected here, before any fork; cached for the child
        except EpochError as error:
            return _respond(context, 422, {"error": str(error), "role": role})
    status, reply = run_epoch(host, request)
    if role == "worker":
        learn_classes(host, request.model_path, module, reply)
    reply["role"] = role
    return _respond(context, status, reply)


def _parse(body: Any, action: Any, role: str) -> EpochRequest | WarmRequest | AheadRequest:
    """The typed request in `body`, or ContractError; an epoch or ahead request must be for this function's own
    role."""
    if action == "warm":
        return WarmRequest.from_dict(body)
    if action == "ahead":
        request = AheadRequest.from_dict(body)
    elif action is not None:
        raise ContractError("action", f"unknown action {str(action)[:40]!r}, expected 'warm', 'ahead' or 'cancel'")
    else:
        request = EpochRequest.from_dict(body)
    if request.role != role:
        raise ContractError("role", f"this is the {role} function, got a request for the {request.role} role")
    return request


def _respond(context, status: int, reply: dict):
    """The reply as standard JSON; one with NaN or Infinity in it is a bug here, answered 500 saying so."""
    try:
        body = json.dumps(reply, allow_nan=False)
    except (TypeError, ValueError) as error:
        status, body = 500, json.dumps({"error": f"reply is not standard JSON: {error}", "role": reply.get("role")})
    return context.Response(body=body, content_type="application/json", status_code=status)


def entry_points(role: str) -> tuple[Callable[[Any], None], Callable[[Any, Any], Any]]:
    """(init_context, handler) of one role's Nuclio function: the token is checked before anything else, so that
    only the run's controller may invoke it; the three roles differ only by `role`."""
    def init_context(context) -> None:
        auth.init_context(context)
        init_host(context)

    def handler(context, event) -> Any:
        refused = auth.refusal(context, event)
        if refused is not None:
            return refused
        return handle_event(context, event, role)

    return init_context, handler
