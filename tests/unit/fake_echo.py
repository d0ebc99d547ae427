"""A tiny Nuclio-style handler for the function-host tests (tests/unit/test_host.py).

`init_context` stores a greeting in `context.user_data`; `handler` dispatches on the request path:

- `/raise`   raises RuntimeError("boom")              -> the host must answer 500 with a JSON error
- `/teapot`  returns context.Response(status_code=418) -> the host must pass the status through
- `/bytes`   returns context.Response(body=bytes)      -> the host must send those bytes as they are
- `/where`   returns the host's pid, working directory and $COACH_TEST_PROBE (tests/unit/test_template.py)
- anything else echoes what the handler saw as a dict  -> the host must send it as JSON
"""

from __future__ import annotations

import json
import os

GREETING = "set by init_context"
RAW_BYTES = b"\x00\x01coach\xff"


def init_context(context) -> None:
    context.user_data.greeting = GREETING


def handler(context, event):
    if event.path == "/raise":
        raise RuntimeError("boom")
    if event.path == "/teapot":
        return context.Response(body=json.dumps({"short": "stout"}), content_type="application/json",
                                 status_code=418)
    if event.path == "/bytes":
        return context.Response(body=RAW_BYTES, content_type="application/octet-stream")
    if event.path == "/where":
        return {"pid": os.getpid(), "cwd": os.getcwd(), "probe": os.environ.get("COACH_TEST_PROBE")}
    body = event.body.decode("latin-1") if isinstance(event.body, bytes) else event.body
    return {
        "body": body,
        "method": event.method,
        "path": event.path,
        "content_type": event.content_type,
        "greeting": context.user_data.greeting,
    }
