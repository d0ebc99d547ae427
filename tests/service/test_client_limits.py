"""Every HTTP client of Coach has limits (issue 37, item 2): a connect and a read timeout, a total deadline and a
largest answer; a server that breaks them costs one line and exit 1, never memory or a hang.

The CLI clients run as subprocesses under RLIMIT_AS against a local server that answers without end, drips a
byte every 0.2 s, or never answers; the limits are shortened in the subprocess (the module's LIMITS) so that the
deadline is seconds, and the assertions are on what the line says (the limit it names), not on the clock.
"""

from __future__ import annotations

import ast
import os
import re
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from coach.net.http import MAX_ANSWER_BYTES, Limits, bounded_request, problem

REPO = Path(__file__).resolve().parents[2]
MEMORY_BYTES = 1 << 30
DRIP_S = 0.2  # between the bytes of a dripping answer: well within every read timeout below
SHORT = "Limits(1.0, 1.0, 1.5, 1 << 20)"  # connect, read, deadline (s); bytes: a drip byte comes 5x within a read
RUN = ("import sys; import coach.service.client as c; from coach.net.http import Limits; "
       f"c.LIMITS = {SHORT}; from coach.ui.cli import main; sys.exit(main(sys.argv[1:]))")


def _serve(kind: str) -> tuple[socket.socket, int]:
    """A server on 127.0.0.1 that answers every request `kind`ly: `endless` body, `drip` a byte every DRIP_S (after
    its headers), `drip-headers` (a byte every DRIP_S of its status line and headers), `silent` (never a byte)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def answer(conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            if kind == "endless":
                conn.sendall(head + b"\r\n{\"jobs\": [")
                while True:
                    conn.sendall(b"{}, " * 16384)
            elif kind == "drip":
                conn.sendall(head + b"\r\n")
                while True:
                    conn.sendall(b" ")
                    time.sleep(DRIP_S)
            elif kind == "drip-headers":
                for byte in head + b"X-Slow: " + b"a" * 1000:
                    conn.sendall(bytes([byte]))
                    time.sleep(DRIP_S)
            else:
                time.sleep(60)
        except OSError:
            pass
        finally:
            conn.close()

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1]


@pytest.fixture
def server(request):
    sock, port = _serve(request.param)
    yield f"http://127.0.0.1:{port}"
    sock.close()


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def client(tmp_path: Path, argv: list[str], short: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", RUN, *argv] if short else [sys.executable, "-m", "coach.ui.cli", *argv]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60, preexec_fn=_limited,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


COMMANDS = {"status": ["status"], "submit": ["submit", "job.yaml"], "stop": ["stop", "tiny"],
            "logs": ["logs", "tiny"]}
EXPECTED = {"endless": "answer larger than 1048576 bytes (the limit)",
            "drip": "no complete answer within 1.5 s (the deadline)",
            "drip-headers": "no complete answer within 1.5 s (the deadline)",
            "silent": "no answer within 1 s"}


@pytest.mark.parametrize("server", list(EXPECTED), indirect=True)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_client_command_against_a_server_that_breaks_a_limit_is_one_line_and_exit_1(tmp_path, server, command,
                                                                                      request):
    (tmp_path / "job.yaml").write_text("name: tiny\n")
    done = client(tmp_path, [*COMMANDS[command], "--server", server])
    kind = request.node.callspec.params["server"]
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert server in lines[0] and EXPECTED[kind] in lines[0], lines[0]


@pytest.mark.parametrize("server", ["endless"], indirect=True)
def test_status_with_its_default_limits_refuses_an_endless_answer_at_its_cap(tmp_path, server):
    done = client(tmp_path, ["status", "--server", server], short=False)
    assert done.returncode == 1
    assert f"answer larger than {MAX_ANSWER_BYTES} bytes (the limit)" in done.stderr.strip()


@pytest.mark.parametrize("server", ["endless", "drip", "drip-headers", "silent"], indirect=True)
def test_the_nuclio_dashboard_client_fails_as_a_value_naming_the_limit(server, request):
    from coach.platforms.nuclio import DEADLINE_READS, NuclioPlatform

    platform = NuclioPlatform(server, image="coach:test", token="t", request_timeout_s=1.0, retries=1)
    failure = platform._get("f")
    kind = request.node.callspec.params["server"]
    words = {"endless": "answer larger than", "drip": f"no complete answer within {1.0 * DEADLINE_READS:g} s",
             "drip-headers": f"no complete answer within {1.0 * DEADLINE_READS:g} s",
             "silent": "no answer within 1 s"}[kind]
    assert words in failure.message and server in failure.message, failure.message


@pytest.mark.parametrize("server", ["drip-headers"], indirect=True)
def test_the_deadline_holds_while_headers_drip(server):
    limits = Limits(1.0, 1.0, 1.5, 1 << 20)
    with pytest.raises(Exception) as raised:
        bounded_request("GET", server, limits)
    assert problem(raised.value, limits) == "no complete answer within 1.5 s (the deadline)"


def test_a_server_that_is_not_a_url_is_refused_naming_the_option(tmp_path):
    done = client(tmp_path, ["status", "--server", "not a url"], short=False)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("coach status: error: argument --server: expected http://HOST:PORT")


# --------------------------------------------------------------------------- the Kubernetes clients

KUBE_CALL = re.compile(r"^(list|create|delete|patch|replace|read)_(namespaced_|cluster_)?\w+$")
KUBE_CLIENTS = {"_core", "_custom", "_networking", "_api", "core", "custom", "leases"}


def test_every_non_watch_kubernetes_call_has_a_request_timeout():
    """A call through a kubernetes client API object passes `_request_timeout=(connect, read)` (bench.py, a
    benchmark harness, aside); the informers' lists get theirs from watch.py, their one caller."""
    missing = []
    files = [*sorted((REPO / "coach" / "placement").glob("*.py")), *sorted((REPO / "coach" / "kube_scheduler").glob("*.py")),
             REPO / "coach" / "platforms" / "nuclio.py"]
    for path in files:
        if path.name == "bench.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and KUBE_CALL.match(node.func.attr)):
                continue
            receiver = node.func.value
            name = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", None)
            if name in KUBE_CLIENTS and not any(k.arg == "_request_timeout" for k in node.keywords):
                missing.append(f"{path.relative_to(REPO)}:{node.lineno} {node.func.attr}")
    assert missing == []
