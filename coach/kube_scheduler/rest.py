"""Raw responses of the official client (`_preload_content=False`): read them whole, then give the connection back.

A response handed back to the pool unread leaves its body on the connection, and the next request sent over
that connection reads it as its own answer (http.client's ResponseNotReady). Every raw response goes through
one of these two functions.
"""

from __future__ import annotations

import json
from typing import Any


def read_json(response) -> Any:
    """The body as JSON; the connection goes back to the pool."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def finish(response) -> None:
    """Read and drop the body (a Status we do not need); the connection goes back to the pool."""
    try:
        response.data
    finally:
        response.release_conn()
