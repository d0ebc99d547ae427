"""Who may talk to `coach serve`, and how much they may send: a pure ASGI middleware in front of the app.

On a loopback address no token is needed; elsewhere the server refuses to start without one, and every request
but the page's and the docs' shells (`/`, `/jobs/NAME`, `/static/...`, `/docs`, `/openapi.json`: no data) must
carry `Authorization: Bearer TOKEN`, compared in constant time. Without a token, a request must name a loopback
host (`Host`), so that a site whose name an attacker points at 127.0.0.1 (DNS rebinding) is refused; a request
sent by another site's page (an `Origin` that is not this server's) is always refused, so a page the user visits
cannot submit or stop jobs. Request bodies are read here, at most `max_body_bytes` of them: a larger one is
answered 413 before the app sees it, so no handler holds more than that.
"""

from __future__ import annotations

import asyncio
import hmac
import json

from coach.domain.addresses import is_loopback

BODY_TIMEOUT_S = 30.0  # a client that has not sent its whole body by then is answered 408
# the page's and the docs' shells, which hold no data (the schema only describes the API); they ask for the token
PUBLIC_PATHS = ("/", "/favicon.ico", "/docs", "/openapi.json")
PUBLIC_PREFIXES = ("/static/", "/jobs/")


def host_name(host: str) -> str:
    """The name in a Host header, without its port (`[::1]:8765` -> `::1`)."""
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


async def _answer(send, status: int, detail: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


class Guard:
    def __init__(self, app, token: str | None, max_body_bytes: int, body_timeout_s: float | None = None):
        self.app, self.max_body_bytes = app, max_body_bytes
        self.body_timeout_s = BODY_TIMEOUT_S if body_timeout_s is None else body_timeout_s
        self._token = token.encode() if token else None

    def _refusal(self, scope) -> str | None:
        """Why this request may not go on (no or a wrong token), or None."""
        if self._token is None:
            return None
        path = scope.get("path", "")
        if path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES):
            return None
        given = [value for name, value in scope.get("headers") or [] if name == b"authorization"]
        if not given:
            return f"{path}: a bearer token is required (Authorization: Bearer TOKEN)"
        scheme, _, credentials = given[0].partition(b" ")
        # the scheme is case-insensitive (RFC 7235); one Authorization header only
        if len(given) > 1 or scheme.lower() != b"bearer" or not hmac.compare_digest(credentials.strip(), self._token):
            return f"{path}: the bearer token is not this server's"
        return None

    def _foreign(self, scope) -> str | None:
        """Why this request comes from somewhere it may not (another site's page, a rebound name), or None."""
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        origin = headers.get(b"origin")
        path = scope.get("path", "")
        if origin is not None and origin.decode("latin-1") not in (f"http://{host}", f"https://{host}"):
            return f"{path}: requests from another site's page are refused (Origin {origin.decode('latin-1')[:100]})"
        if self._token is None and not is_loopback(host_name(host)):
            return f"{path}: Host {host[:100]!r} is not a loopback name (a server without a token answers only those)"
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        foreign = self._foreign(scope)
        if foreign is not None:
            return await _answer(send, 403, foreign)
        refusal = self._refusal(scope)
        if refusal is not None:
            return await _answer(send, 401, refusal, ((b"www-authenticate", b"Bearer"),))
        path = scope.get("path")
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            return await _answer(send, 413, f"{path}: request body larger than {self.max_body_bytes} bytes")
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        try:
            body = await asyncio.wait_for(self._body(receive), self.body_timeout_s)
        except TimeoutError:
            return await _answer(send, 408, f"{path}: the request body did not arrive within "
                                            f"{self.body_timeout_s:g} s")
        if body is None:  # the client went away
            return None
        if len(body) > self.max_body_bytes:
            return await _answer(send, 413, f"{path}: request body larger than {self.max_body_bytes} bytes")
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    async def _body(self, receive) -> bytes | None:
        """The whole body, or as much as shows it is too large (one byte over the limit); None on a disconnect."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            chunks.append(chunk)
            if size > self.max_body_bytes or not message.get("more_body", False):
                return b"".join(chunks)
