"""The run's token, checked by every Coach function itself: a request without it is answered 401.

Why here and not only in Coach's local host: on Nuclio nothing stands between a function's Service and its handler
(Nuclio's processor and Python wrapper check nothing), so without this any pod that reaches the Service could run
epochs. The token comes in the function's environment (TOKEN_ENV, set in its spec); `init_context` takes it out of
the environment, so that the epoch children forked later, which run the model file's code, never see it. It is
compared in constant time, and never logged nor put in a reply. A function whose environment has no token refuses
every request (it says so once in its log).

Side effects: reads and removes TOKEN_ENV from this process's environment; writes one line to stderr when it is
missing.
"""

from __future__ import annotations

import hmac
import json
import os
import sys
from typing import Any, Mapping

from coach.domain.contracts import TOKEN_ENV, TOKEN_HEADER

REFUSED = {"error": "missing or wrong token"}  # the 401 reply: says nothing about the token
UNAUTHORISED = 401


def init_context(context) -> None:
    """Keep the run's token for this worker process's requests (None: every request is refused)."""
    token = os.environ.pop(TOKEN_ENV, "")
    context.user_data.token = token.encode("utf-8", "surrogateescape") if token else None
    if not token:
        sys.stderr.write(f"{TOKEN_ENV} is not set: every request is refused with {UNAUTHORISED}\n")
        sys.stderr.flush()


def header(headers: Mapping[str, Any] | None, name: str) -> str | None:
    """A header's value by case-insensitive name (Nuclio passes Go's canonical names, other hosts the sender's)."""
    wanted = name.lower()
    for key, value in (headers or {}).items():
        if str(key).lower() == wanted:
            return value if isinstance(value, str) else str(value)
    return None


def authorised(headers: Mapping[str, Any] | None, token: bytes | None) -> bool:
    """Whether the request carries the run's token (constant-time comparison; no token kept: never)."""
    given = header(headers, TOKEN_HEADER)
    if token is None or given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token)


def refusal(context, event):
    """The 401 response for a request without the run's token, or None for one that carries it."""
    if authorised(getattr(event, "headers", None), getattr(context.user_data, "token", None)):
        return None
    return context.Response(body=json.dumps(REFUSED), content_type="application/json", status_code=UNAUTHORISED)
