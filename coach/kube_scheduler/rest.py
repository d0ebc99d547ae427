"""Raw responses of the official client (`_preload_content=False`): read them whole, then give the connection back.

A response handed back to the pool unread leaves its body on the connection, and the next request sent over
that connection reads it as its own answer (http.client's ResponseNotReady). Every raw response goes through
one of these two functions; `JsonPoster`'s answers are read whole by urllib3 itself (preload_content).
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any
from urllib.parse import quote, urlsplit

import urllib3


def read_json(response) -> Any:
    """The body as JSON; the connection goes back to the pool."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def finish(response) -> None:
    """Read and drop the body (a Status we do not need); the connection goes back to the pool."""
    try:
        response.read()
    finally:
        response.release_conn()


class JsonPoster:
    """POSTs of JSON bodies through the official client's own connection pool, for the calls made once per pod
    (bindings, Scheduled Events): the client's headers, auth and TLS settings, without its generated layer and
    urllib3's URL parsing on every call, which took a large share of the client's CPU per binding.

    `post(path, body)` returns (HTTP status, reason, body bytes); network failures raise urllib3's exceptions.
    """

    def __init__(self, api, timeout_s: tuple[float, float] = (5.0, 30.0)):
        self._api = api
        self.timeout_s = timeout_s  # (connect, read)
        host = api.configuration.host.rstrip("/")
        manager = api.rest_client.pool_manager
        self._timeout = urllib3.Timeout(connect=timeout_s[0], read=timeout_s[1])
        if api.configuration.proxy:  # a proxy wants the whole URL: the manager routes it
            self._open = partial(manager.urlopen, "POST")
            self._prefix = host
        else:
            self._open = partial(manager.connection_from_url(host).urlopen, "POST")
            self._prefix = urlsplit(host).path

    def post(self, path: str, body: Any) -> tuple[int, str, bytes]:
        api = self._api
        headers = {**api.default_headers, "Accept": "application/json", "Content-Type": "application/json"}
        if api.cookie:
            headers["Cookie"] = api.cookie
        api.update_params_for_auth(headers, [], ["BearerToken"])
        answer = self._open(self._prefix + path, body=json.dumps(body).encode(), headers=headers,
                            timeout=self._timeout, preload_content=True)
        return answer.status, answer.reason or "", answer.data


def path_segment(text: str) -> str:
    """One URL path segment, every reserved character escaped (as the client escapes path parameters)."""
    return quote(text, safe="")
