"""coach.platforms.host: the warm function host, run for real as a subprocess.

The host imports a Nuclio handler (here tests/unit/fake_echo.py), calls its `init_context` once, prints
`READY <port>`, and turns every HTTP request on 127.0.0.1 that carries the run's token (given to the host in
the COACH_FUNCTION_TOKEN environment variable) into a Nuclio event for the handler.
It leaves by itself when the process that started it dies.
"""

from __future__ import annotations

import contextlib

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from fake_echo import RAW_BYTES

from coach.platforms.host import TOKEN_ENV, TOKEN_HEADER

ROOT = Path(__file__).resolve().parents[2]  # the project: `tests.unit.fake_echo` imports from here
HANDLER = "tests.unit.fake_echo:handler"
TOKEN = "T"
AUTH = {TOKEN_HEADER: TOKEN}
HOST_ENV = {**os.environ, TOKEN_ENV: TOKEN}
START_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 10.0


def read_line(process: subprocess.Popen, timeout_s: float, stderr_path: Path | None = None) -> str:
    """The next stdout line of `process`, or a test failure (with its stderr) after `timeout_s`."""
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    line = process.stdout.readline().decode() if ready else ""
    if not line:
        detail = stderr_path.read_text() if stderr_path and stderr_path.exists() else ""
        pytest.fail(f"no line from pid {process.pid} within {timeout_s} s (exit code {process.poll()})\n{detail}")
    return line


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)
    if process.stdout:
        process.stdout.close()


def gone(pid: int) -> bool:
    """True when `pid` has exited (a zombie waiting for a non-reaping init counts as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@contextlib.contextmanager
def running_host(handler: str, name: str, folder: Path):
    """A function host process serving `handler`: its base URL while the block runs."""
    stderr_path = folder / "stderr.txt"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "coach.platforms.host", "--handler", handler, "--name", name],
            cwd=ROOT, env=HOST_ENV, stdout=subprocess.PIPE, stderr=stderr,
        )
    try:
        words = read_line(process, START_TIMEOUT_S, stderr_path).split()
        assert words[0] == "READY" and len(words) == 2, words
        yield f"http://127.0.0.1:{int(words[1])}"
    finally:
        stop(process)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """A running host for the echo handler: its base URL."""
    with running_host(HANDLER, "echo", tmp_path_factory.mktemp("host")) as url:
        yield url


# --------------------------------------------------------------------------- requests with the token


def test_a_json_post_reaches_the_handler_as_a_decoded_nuclio_event(host):
    reply = requests.post(f"{host}/invoke", json={"epoch": 3, "roles": ["worker"]}, headers=AUTH,
                          timeout=HTTP_TIMEOUT_S)

    assert reply.status_code == 200
    assert reply.headers["Content-Type"] == "application/json"
    assert reply.json() == {
        "body": {"epoch": 3, "roles": ["worker"]},
        "method": "POST",
        "path": "/invoke",
        "content_type": "application/json",
        "greeting": "set by init_context",  # init_context ran once, before the first event
    }


def test_a_non_json_body_reaches_the_handler_as_bytes(host):
    reply = requests.post(f"{host}/text", data=b"plain words", headers={**AUTH, "Content-Type": "text/plain"},
                          timeout=HTTP_TIMEOUT_S)

    assert reply.status_code == 200
    assert reply.json()["body"] == "plain words"
    assert reply.json()["content_type"] == "text/plain"


def test_get_with_the_token_says_the_function_is_ready(host):
    reply = requests.get(f"{host}/", headers=AUTH, timeout=HTTP_TIMEOUT_S)

    assert reply.status_code == 200
    assert reply.json() == {"name": "echo", "ready": True}


# --------------------------------------------------------------------------- the token


@pytest.mark.parametrize("headers", [{}, {TOKEN_HEADER: "not-the-token"}], ids=["missing", "wrong"])
def test_a_post_without_the_right_token_is_forbidden(host, headers):
    reply = requests.post(f"{host}/invoke", json={"epoch": 1}, headers=headers, timeout=HTTP_TIMEOUT_S)

    assert reply.status_code == 403
    assert reply.json() == {"error": "missing or wrong token"}


def test_a_get_without_the_token_is_forbidden(host):
    reply = requests.get(f"{host}/", timeout=HTTP_TIMEOUT_S)

    assert reply.status_code == 403
    assert reply.json() == {"error": "missing or wrong token"}


# --------------------------------------------------------------------------- what the handler returns


def test_a_handler_that_raises_gives_500_with_a_json_error_and_the_host_keeps_serving(host):
    reply = requests.post(f"{host}/raise", json={}, headers=AUTH, timeout=HTTP_TIMEOUT_S)

    assert reply.status_code == 500
    assert reply.headers["Content-Type"] == "application/json"
    assert reply.json() == {"error": "RuntimeError: boom"}
    assert requests.get(f"{host}/", headers=AUTH, timeout=HTTP_TIMEOUT_S).status_code == 200


def test_the_status_code_of_a_handler_response_is_passed_through(host):
    reply = requests.post(f"{host}/teapot", json={}, headers=AUTH, timeout=HTTP_TIMEOUT_S)

    assert reply.status_code == 418
    assert reply.headers["Content-Type"] == "application/json"
    assert json.loads(reply.content) == {"short": "stout"}


def test_a_binary_handler_response_arrives_as_the_same_bytes(host):
    # nuclio_sdk base64-encodes a bytes body and marks it body_encoding=base64; a Nuclio processor decodes
    # it again before answering, so the caller must get the original bytes, not their base64 text.
    reply = requests.post(f"{host}/bytes", json={}, headers=AUTH, timeout=HTTP_TIMEOUT_S)

    assert reply.status_code == 200
    assert reply.headers["Content-Type"] == "application/octet-stream"
    assert reply.content == RAW_BYTES


# --------------------------------------------------------------------------- starting


def test_a_host_without_the_token_in_its_environment_refuses_to_start():
    env = {key: value for key, value in os.environ.items() if key != TOKEN_ENV}

    finished = subprocess.run([sys.executable, "-m", "coach.platforms.host", "--handler", HANDLER], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=30)

    assert finished.returncode == 2
    assert finished.stdout == ""  # never READY
    assert finished.stderr.splitlines()[-1].endswith(
        f"error: {TOKEN_ENV} is not set: a host never serves without the run's token")


# --------------------------------------------------------------------------- no host outlives its controller

# A stand-in controller: starts a host that watches this very process, reports "<host pid> <port>", then waits.
CONTROLLER = f"""
import os, subprocess, sys, time
host = subprocess.Popen([sys.executable, "-m", "coach.platforms.host", "--handler", {HANDLER!r},
                         "--name", "orphan", "--parent-pid", str(os.getpid())],
                        stdout=subprocess.PIPE)  # inherits the token from this process's environment
words = host.stdout.readline().decode().split()
print(host.pid, words[1] if len(words) == 2 else "none", flush=True)
time.sleep(120)
"""


def test_the_host_exits_by_itself_when_its_parent_is_killed():
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER], cwd=ROOT, env=HOST_ENV,
                                  stdout=subprocess.PIPE)
    host_pid = None
    try:
        pid_text, port = read_line(controller, START_TIMEOUT_S).split()
        host_pid = int(pid_text)
        url = f"http://127.0.0.1:{port}/"
        assert requests.get(url, headers=AUTH, timeout=HTTP_TIMEOUT_S).json() == {"name": "orphan", "ready": True}

        controller.send_signal(signal.SIGKILL)  # like `kill -9` of `coach run`: no cleanup code runs
        controller.wait(timeout=10)

        deadline = time.monotonic() + 10.0
        while not gone(host_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone(host_pid), f"host {host_pid} still running 10 s after its parent was killed"
        with pytest.raises(requests.ConnectionError):
            requests.get(url, headers=AUTH, timeout=HTTP_TIMEOUT_S)
    finally:
        stop(controller)
        if host_pid is not None and not gone(host_pid):
            os.kill(host_pid, signal.SIGKILL)


# A stand-in controller that starts its host from a thread that then ends, and stays alive itself.
CONTROLLER_THREAD = f"""
import os, subprocess, sys, threading, time
started = {{}}
def start():
    started["host"] = subprocess.Popen([sys.executable, "-m", "coach.platforms.host", "--handler", {HANDLER!r},
                                        "--name", "orphan", "--parent-pid", str(os.getpid())], stdout=subprocess.PIPE)
    started["words"] = started["host"].stdout.readline().decode().split()
spawner = threading.Thread(target=start)
spawner.start()
spawner.join()
print(started["host"].pid, flush=True)
time.sleep(120)
"""


def test_the_kernel_kills_the_host_when_the_thread_that_started_it_ends():
    """PR_SET_PDEATHSIG is armed: the kernel kills the host without the parent watch, which has no reason to act
    here since the controller process is still alive. The signal follows the forking thread (why LocalPlatform
    starts hosts from one long-lived thread)."""
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER_THREAD], cwd=ROOT, env=HOST_ENV,
                                  stdout=subprocess.PIPE)
    host_pid = None
    try:
        host_pid = int(read_line(controller, START_TIMEOUT_S).strip())
        seen = time.monotonic()
        while not gone(host_pid) and time.monotonic() - seen < 5.0:
            time.sleep(0.01)
        assert gone(host_pid), f"host {host_pid} outlived the thread that started it"
        assert controller.poll() is None  # the parent is alive: the parent watch had no reason to act
    finally:
        stop(controller)
        if host_pid is not None and not gone(host_pid):
            os.kill(host_pid, signal.SIGKILL)


# --------------------------------------------------------------------------- bad requests are 400, not 500


@pytest.mark.parametrize("content_type", ["application/json", "text/plain; charset=utf-8", None])
def test_a_body_that_is_not_utf8_is_a_bad_request(host, content_type):
    headers = {**AUTH, **({"Content-Type": content_type} if content_type else {})}
    reply = requests.post(f"{host}/invoke", data=b'{"epoch": "\xff\xfe"}', headers=headers,
                          timeout=HTTP_TIMEOUT_S)

    assert reply.status_code == 400
    assert reply.json() == {"error": "body: not UTF-8 (byte 11: b'\\xff')"}
    assert requests.get(f"{host}/", headers=AUTH, timeout=HTTP_TIMEOUT_S).status_code == 200


def test_a_body_declared_binary_reaches_the_handler_as_its_bytes(host):
    reply = requests.post(f"{host}/echo", data=b"\xff\x00",
                          headers={**AUTH, "Content-Type": "application/octet-stream"}, timeout=HTTP_TIMEOUT_S)

    assert reply.status_code == 200
    assert reply.json()["body"] == "\xff\x00"  # fake_echo decodes bytes as latin-1


def raw_request(url: str, request: bytes) -> bytes:
    """Send `request` as it is and read the answer until the host closes the connection."""
    import socket
    from urllib.parse import urlparse

    address = urlparse(url)
    with socket.create_connection((address.hostname, address.port), timeout=HTTP_TIMEOUT_S) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("length", [b"abc", b"-5", b"1e3", b"99999999999999"])
def test_a_content_length_that_is_not_a_size_is_a_bad_request(host, length):
    answer = raw_request(host, b"POST /invoke HTTP/1.1\r\nHost: x\r\nX-Coach-Token: T\r\nContent-Length: " + length
                         + b"\r\nContent-Type: application/json\r\n\r\n{}")

    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert b'"error": "Content-Length: ' in answer


def test_a_request_without_the_token_is_refused_before_its_body_is_read(host):
    # a body announced but never sent: a host that read it first would wait for it, and raw_request's socket
    # would time out before any answer came
    answer = raw_request(host, b"POST /invoke HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")

    assert answer.startswith(b"HTTP/1.1 403 "), answer


def test_a_token_with_characters_beyond_ascii_is_forbidden_not_an_error(host):
    reply = requests.post(f"{host}/invoke", json={}, headers={TOKEN_HEADER: "T\u00e9"}, timeout=HTTP_TIMEOUT_S)

    assert reply.status_code == 403


def test_the_token_is_compared_in_constant_time():
    from coach.platforms import host as host_module

    assert host_module.token_matches("abc", "abc")
    assert not host_module.token_matches("abd", "abc")
    assert not host_module.token_matches(None, "abc")
    assert not host_module.token_matches("\udcff", "abc")  # a surrogate from a header is not an error
    assert "hmac.compare_digest" in Path(host_module.__file__).read_text()


# --------------------------------------------------------------------------- the platform starts hosts that last


def test_a_host_deployed_from_a_short_lived_thread_outlives_that_thread_and_dies_with_close(tmp_path):
    """PR_SET_PDEATHSIG follows the thread that forked: hosts are started from the platform's own thread."""
    import threading

    from coach.domain.identity import FunctionId, Role
    from coach.platforms.local import LocalPlatform

    platform = LocalPlatform(tmp_path / "logs", TOKEN, env={"PYTHONPATH": str(ROOT)},
                             handlers={Role.WORKER: HANDLER})
    try:
        result = {}
        deployer = threading.Thread(target=lambda: result.update(
            ref=platform.deploy(FunctionId("echo", Role.WORKER, 0), "node-1")))
        deployer.start()
        deployer.join(timeout=START_TIMEOUT_S + 5)
        ref = result["ref"]
        pid = int(ref.instance)
        time.sleep(0.3)  # a PR_SET_PDEATHSIG tied to the finished thread would have killed it by now

        assert not gone(pid)
        assert requests.get(ref.url, headers=AUTH, timeout=HTTP_TIMEOUT_S).json() == {"name": "echo-worker-0",
                                                                                      "ready": True}
    finally:
        platform.close()
    assert gone(pid)
    assert platform.deploy(FunctionId("echo", Role.WORKER, 1), "node-1").kind == "deploy"  # closed: refused
