"""The tiny Nuclio handler the Nuclio platform and fake-dashboard tests deploy (imports nothing heavy, so a host
starts in well under a second). It echoes as tests/unit/fake_echo.py does, except for warm requests whose model
path says what to do: `sleep:S` sleeps S seconds before replying, `exit:` ends the host process at once.
"""

from __future__ import annotations

import os
import time

from tests.unit import fake_echo


def init_context(context) -> None:
    fake_echo.init_context(context)


def handler(context, event):
    body = event.body if isinstance(event.body, dict) else {}
    path = str((body.get("model") or {}).get("path") or "")
    if path.startswith("sleep:"):
        time.sleep(float(path.split(":", 1)[1]))
    elif path.startswith("exit:"):
        os._exit(3)
    return fake_echo.handler(context, event)
