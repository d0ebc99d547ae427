"""Who may talk to `coach serve`, and how much they may send: a pure ASGI middleware in front of the app.

On a loopback address no token is needed; elsewhere the server refuses to start without one, and every request
but the page's shell (`/`, `/static/...`: no data) must carry `Authorization: Bearer TOKEN`, compared in constant
time. Request bodies are read here, at most `max_body_bytes` of them: a larger one is answered 413 before the
app sees it, so no handler holds more than that.
"""

from __future__ import annotations

import hmac
import ipaddress
import json

PUBLIC_PATHS = ("/", "/favicon.ico")
PUBLIC_PREFIXES = ("/static/",)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`; a name is not resolved (anything else needs a token)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def _answer(send, status: int, detail: str, headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


class Guard:
    def __init__(self, app, token: str | None, max_body_bytes: int):
        self.app, self.max_body_bytes = app, max_body_bytes
        self._expected = f"Bearer {token}".encode() if token else None

    def _allowed(self, scope) -> bool:
        if self._expected is None:
            return True
        path = scope.get("path", "")
        if path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES):
            return True
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        return hmac.compare_digest(given, self._expected)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if not self._allowed(scope):
            return await _answer(send, 401, f"{scope.get('path')}: a bearer token is required "
                                            "(Authorization: Bearer TOKEN)", [(b"www-authenticate", b"Bearer")])
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            return await _answer(send, 413, f"{scope.get('path')}: request body larger than "
                                            f"{self.max_body_bytes} bytes")
        chunks, size = [], 0
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body_bytes:
                    return await _answer(send, 413, f"{scope.get('path')}: request body larger than "
                                                    f"{self.max_body_bytes} bytes")
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            body, replayed = b"".join(chunks), False

            async def replay():
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            return await self.app(scope, replay, send)
        return await self.app(scope, receive, send)
