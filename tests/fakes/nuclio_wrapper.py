"""One worker process of a fake Nuclio function: what Nuclio's Python wrapper does for one worker of a trigger.

The pod's processor (tests/fakes/nuclio_processor.py) forks one per worker. Each imports the handler and calls its
`init_context` with a Context of its own (its worker id), tells the processor it is ready, then handles one event at
a time from its socket: a frame (8-byte length, then JSON) per event and per response. It checks nothing (no token:
that is the handler's business, as on Nuclio) and answers a handler's exception with 500. On SIGTERM it leaves at
once when idle and after its current event otherwise, as Nuclio's wrapper drains on its termination signal. It dies
with the processor (PR_SET_PDEATHSIG), as the container's processes do.

Side effects: runs the handler; writes to its stderr (the pod's log).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import socket
import sys
import traceback

import nuclio_sdk
from nuclio_sdk.logger import HumanReadableFormatter

from coach.platforms.host import die_with_parent, load_handler, nuclio_event
from coach.platforms.template import flush_and_exit

FRAME_HEADER = 8  # bytes: the length of the JSON text that follows, big-endian


def send_frame(sock: socket.socket, message: dict) -> None:
    data = json.dumps(message).encode()
    sock.sendall(len(data).to_bytes(FRAME_HEADER, "big") + data)


def recv_frame(sock: socket.socket) -> dict | None:
    """The next frame, or None at the end of the stream (the other side is gone)."""
    header = _recv_exactly(sock, FRAME_HEADER)
    if header is None:
        return None
    body = _recv_exactly(sock, int.from_bytes(header, "big"))
    return None if body is None else json.loads(body)


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def event_of(frame: dict) -> nuclio_sdk.Event:
    """The Nuclio event of a request frame, made as Coach's own host makes one."""
    return nuclio_event(base64.b64decode(frame["body"]), frame.get("content_type") or "application/octet-stream",
                        dict(frame.get("headers") or {}), frame["method"], frame["path"])


def respond(handler, context, frame: dict) -> dict:
    """The response frame for one request frame."""
    try:
        output = handler(context, event_of(frame))
        response = nuclio_sdk.Response.from_entrypoint_output(json.dumps, output)
    except Exception as error:  # noqa: BLE001 - a handler's bug is a 500 for the caller, not a dead worker
        traceback.print_exc()
        return {"status": 500, "content_type": "application/json", "headers": {},
                "body": base64.b64encode(json.dumps({"error": f"{type(error).__name__}: {error}"}).encode()).decode()}
    body = response["body"]
    if response.get("body_encoding") != "base64":
        body = base64.b64encode(body.encode() if isinstance(body, str) else bytes(body)).decode()
    return {"status": response["status_code"], "content_type": response["content_type"],
            "headers": {key: str(value) for key, value in (response["headers"] or {}).items()}, "body": body}


def run(sock: socket.socket, handler_spec: str, name: str, worker_id: int, parent_pid: int) -> None:
    """The wrapper's whole life, in the forked child; never returns."""
    code = 1
    busy = [False]
    draining = [False]

    def on_term(*_):
        draining[0] = True
        if not busy[0]:
            os._exit(0)

    try:
        os.dup2(2, 1)  # the processor's stdout is its READY pipe; a wrapper prints into the pod's log
        die_with_parent(parent_pid)
        signal.signal(signal.SIGTERM, on_term)
        logger = nuclio_sdk.Logger(logging.INFO, f"{name}-{worker_id}")
        logger.set_handler("default", sys.stderr, HumanReadableFormatter())
        context = nuclio_sdk.Context(logger, None, worker_id, nuclio_sdk.TriggerInfo("http", "http"))
        handler, module = load_handler(handler_spec)
        if callable(getattr(module, "init_context", None)):
            module.init_context(context)
        send_frame(sock, {"ready": True, "pid": os.getpid()})
        while not draining[0]:
            frame = recv_frame(sock)
            if frame is None:  # the processor is gone
                break
            busy[0] = True
            send_frame(sock, respond(handler, context, frame))
            busy[0] = False
        code = 0
    except BaseException:  # noqa: BLE001 - init_context failed, or the processor went away: the log says which
        traceback.print_exc()
    finally:
        flush_and_exit(code)
