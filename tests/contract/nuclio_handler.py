"""The tiny Nuclio handler the Nuclio platform and fake-dashboard tests deploy (imports nothing heavy, so a pod
starts in well under a second). Like Coach's functions it refuses a request without the run's token with 401
(coach_functions/auth.py); past that it echoes as tests/unit/fake_echo.py does, except for requests whose model path says
what to do: `sleep:S` sleeps S seconds before replying, `exit:` ends the worker process at once, `foreign:` answers as a
host whose epoch child ps-lite aborted on bytes from outside the job (coach_functions/children.py). The path `/init`
answers which process this is and which ran its `init_context`.
"""

from __future__ import annotations

import json
import os
import time

from coach_functions import auth
from tests.unit import fake_echo


def init_context(context) -> None:
    auth.init_context(context)
    fake_echo.init_context(context)
    context.user_data.init_pid = os.getpid()


def handler(context, event):
    refused = auth.refusal(context, event)
    if refused is not None:
        return refused
    if event.path == "/init":
        return {"pid": os.getpid(), "init_pid": context.user_data.init_pid, "worker_id": context.worker_id}
    body = event.body if isinstance(event.body, dict) else {}
    path = str((body.get("model") or {}).get("path") or "")
    if path.startswith("sleep:"):
        time.sleep(float(path.split(":", 1)[1]))
    elif path.startswith("exit:"):
        os._exit(3)
    elif path.startswith("foreign:"):
        body = {"error": "ps-lite aborted on a message from outside the job (failed to parse string into protobuf); "
                         "epoch child exited with code -6", "foreign": True}
        return context.Response(body=json.dumps(body), content_type="application/json", status_code=500)
    return fake_echo.handler(context, event)
