"""The embedded platform's warm function host: one process per placed function, Nuclio events over HTTP.

It does what a Nuclio processor does for a Python function, on 127.0.0.1 only: import the handler module,
call `init_context` once, then turn each HTTP request into a `nuclio_sdk.Event`, call the handler and send back
its `Response`. Requests must carry the run's token (compared in constant time); a request is checked before its
body is read. A body that is not UTF-8 (unless its Content-Type names a binary type) or whose Content-Length is
not a size gets 400, never 500.

The host leaves when its parent does, also after `kill -9`: it asks Linux to SIGKILL it when its parent dies
(PR_SET_PDEATHSIG; the parent must start hosts from a thread that lives as long as they do, because the signal
follows the thread that forked), and it watches its parent pid as a fallback. Its parent is the template process
(coach.platforms.template), which leaves with the controller the same way; its epoch children die with it the same
way (coach_functions/children.py). So no function outlives `coach run`.

Run as `COACH_FUNCTION_TOKEN=T python -m coach.platforms.host --handler coach_functions.worker.main:handler --parent-pid P`
(or forked by the template with those arguments); it prints `READY <port>` on stdout when it serves.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import datetime
import hmac
import importlib
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import nuclio_sdk
from nuclio_sdk.logger import HumanReadableFormatter

from coach.domain.contracts import TOKEN_ENV, TOKEN_HEADER  # noqa: F401 - also imported from here

PARENT_POLL_S = 0.5  # how often the host checks that its controller is alive (the fallback to PR_SET_PDEATHSIG)
PR_SET_PDEATHSIG = 1  # prctl option: the signal this process gets when the thread that forked it ends
MAX_BODY_BYTES = 64 * 1024 * 1024  # an epoch request is a few hundred bytes; anything this large is not one
BINARY_TYPES = ("application/octet-stream",)  # bodies of these types reach the handler as bytes, unchecked


class BadRequest(Exception):
    """A request the host answers 400 before the handler sees it; the message names what is wrong."""


def token_matches(given: str | None, token: str) -> bool:
    """The run's token, compared in constant time (the header is text; both sides compared as UTF-8 bytes)."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode("utf-8", "surrogateescape"))


def body_length(header: str | None) -> int:
    """Content-Length as a size (missing: 0), or BadRequest."""
    if header is None or header.strip() == "":
        return 0
    text = header.strip()
    if not text.isdigit() or not text.isascii():
        raise BadRequest(f"Content-Length: not a size: {header[:40]!r}")
    length = int(text)
    if length > MAX_BODY_BYTES:
        raise BadRequest(f"Content-Length: {length} bytes is more than the {MAX_BODY_BYTES} a request may have")
    return length


def check_text(body: bytes, content_type: str) -> None:
    """A body is UTF-8 text unless its Content-Type names a binary type: JSON has no other encoding (RFC 8259)."""
    if content_type.split(";")[0].strip().lower() in BINARY_TYPES:
        return
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadRequest(f"body: not UTF-8 (byte {error.start}: {body[error.start:error.start + 1]!r})") from None


def load_handler(spec: str):
    """`module:function` -> (handler, module), as Nuclio's `spec.handler` names it."""
    module_name, _, function_name = spec.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, function_name or "handler"), module


def make_context(name: str) -> nuclio_sdk.Context:
    logger = nuclio_sdk.Logger(logging.INFO, name)
    logger.set_handler("default", sys.stderr, HumanReadableFormatter())
    return nuclio_sdk.Context(logger, None, 0, nuclio_sdk.TriggerInfo("http", "http"))


def nuclio_event(body: bytes, content_type: str, headers: dict, method: str, path: str) -> nuclio_sdk.Event:
    """The Nuclio event of an HTTP request: a JSON body decoded, any other body as bytes (as Nuclio's HTTP
    trigger hands it to a Python handler)."""
    decoded: object = body
    if content_type.startswith("application/json"):
        try:
            decoded = json.loads(body.decode() or "null")
        except (UnicodeDecodeError, json.JSONDecodeError):
            decoded = body
    return nuclio_sdk.Event(
        body=decoded,
        content_type=content_type,
        trigger=nuclio_sdk.TriggerInfo("http", "http"),
        headers=headers,
        _id=str(uuid.uuid4()),
        method=method,
        path=path,
        size=len(body),
        timestamp=datetime.datetime.now(datetime.UTC),
        url=path,
    )


def to_event(request: BaseHTTPRequestHandler, body: bytes) -> nuclio_sdk.Event:
    return nuclio_event(body, request.headers.get("Content-Type", "application/octet-stream"),
                        dict(request.headers.items()), request.command, request.path)


def serve(handler_spec: str, token: str, name: str, port: int = 0) -> ThreadingHTTPServer:
    context = make_context(name)
    handler, module = load_handler(handler_spec)
    if callable(getattr(module, "init_context", None)):
        module.init_context(context)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: the controller logs what matters
            pass

        def _reply(self, status: int, body: str, content_type: str = "application/json", headers=None,
                   base64_body: bool = False):
            data = base64.b64decode(body) if base64_body else body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, str(value))
            self.end_headers()
            self.wfile.write(data)

        def _authorised(self) -> bool:
            if token_matches(self.headers.get(TOKEN_HEADER), token):
                return True
            self.close_connection = True  # its body, if any, is never read
            self._reply(403, json.dumps({"error": "missing or wrong token"}))
            return False

        def _bad_request(self, error: BadRequest) -> None:
            self.close_connection = True  # what is left of the body must not be read as the next request
            self._reply(400, json.dumps({"error": str(error)}))

        def do_GET(self):
            if self._authorised():
                self._reply(200, json.dumps({"name": name, "ready": True}))

        def do_POST(self):
            if not self._authorised():
                return
            try:
                body = self.rfile.read(body_length(self.headers.get("Content-Length")))
                check_text(body, self.headers.get("Content-Type") or "")
            except BadRequest as error:
                self._bad_request(error)
                return
            try:
                output = handler(context, to_event(self, body))
                response = nuclio_sdk.Response.from_entrypoint_output(json.dumps, output)
            except Exception as error:  # a handler bug is a 500 for the caller, not a dead host
                self._reply(500, json.dumps({"error": f"{type(error).__name__}: {error}"}))
                return
            self._reply(response["status_code"], response["body"], response["content_type"], response["headers"],
                        base64_body=response.get("body_encoding") == "base64")

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this host the moment the thread that started it ends (the controller died, even by
    `kill -9`), then leave if the controller is already gone (it died before the request took effect)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent watch below still applies
        pass
    if os.getppid() != parent_pid:
        os._exit(0)


def watch_parent(parent_pid: int) -> None:
    """Leave at once when the controller is gone (also after `kill -9`): the fallback to PR_SET_PDEATHSIG."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(0)
        time.sleep(PARENT_POLL_S)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--handler", required=True)
    parser.add_argument("--name", default="function")
    parser.add_argument("--parent-pid", type=int, default=os.getppid())
    args = parser.parse_args(argv)
    die_with_parent(args.parent_pid)
    threading.Thread(target=watch_parent, args=(args.parent_pid,), daemon=True).start()
    for sig in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C reaches the whole process group: leave quietly
        signal.signal(sig, lambda *_: os._exit(0))
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        parser.error(f"{TOKEN_ENV} is not set: a host never serves without the run's token")
    server = serve(args.handler, token, args.name)
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
