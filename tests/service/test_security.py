"""`coach serve`'s guard: a bearer token compared in constant time, loopback detection, the page's shell public."""

from __future__ import annotations

import pytest

from coach.domain.addresses import is_loopback
from coach.ui.cli import main
from tests.service.conftest import job_text


def test_with_a_token_every_endpoint_but_the_page_shell_needs_it(serve):
    server = serve(token="s3cret")
    anonymous = {}

    for path in ("/api/jobs", "/api/summary", "/api/cluster", "/metrics", "/api/events", "/api/jobs/t/logs",
                 "/api/jobs/t/overview", "/api/jobs/t/records.csv"):
        answer = server.get(path, headers=anonymous)
        assert answer.status_code == 401, path
        assert answer.headers["www-authenticate"] == "Bearer"
    assert server.post("/api/jobs", job_text("t"), headers=anonymous).status_code == 401
    assert server.post("/api/jobs", job_text("t"), headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert server.post("/api/jobs", job_text("t"), headers={"Authorization": "s3cret"}).status_code == 401
    assert server.get("/", headers=anonymous).status_code == 200  # the shell: no data, it asks for the token
    assert server.get("/static/page.js", headers=anonymous).status_code == 200
    assert server.get("/jobs/t", headers=anonymous).status_code == 200  # a job's page: the same shell
    # the docs' shell and the schema describe the API and hold no data: the docs' Authorize button sends the token
    assert server.get("/docs", headers=anonymous).status_code == 200
    schema = server.get("/openapi.json", headers=anonymous).json()
    assert schema["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer",
                                                                 "description": "the server's --token"}
    assert server.get("/api/jobs").status_code == 200
    assert server.post("/api/jobs", job_text("t", max_epochs=1)).status_code == 201
    assert server.served.board.job("t") is not None


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.3.2.1", True), ("::1", True),
                                            ("[::1]", True), ("localhost", True), ("0.0.0.0", False),
                                            ("::", False), ("10.0.0.5", False), ("example.org", False)])
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback


def test_serving_beyond_loopback_without_a_token_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("COACH_TOKEN", raising=False)

    code = main(["serve", "--host", "0.0.0.0", "--port", "0", "--results", str(tmp_path / "r")])

    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--host: 0.0.0.0 is not a loopback address" in err
    assert not (tmp_path / "r").exists()


def test_bad_serve_options_are_one_line_and_exit_2(tmp_path, capsys):
    assert main(["serve", "--port", "0", "--models", str(tmp_path / "none"), "--results", str(tmp_path)]) == 2
    assert "--models:" in capsys.readouterr().err
    assert main(["serve", "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["serve", "--port", "0", "--results", str(tmp_path / "file")]) == 2
    assert "--results" in capsys.readouterr().err


def test_the_scheme_is_case_insensitive_and_a_wrong_token_is_told_apart(serve):
    server = serve(token="s3cret")

    for scheme in ("bearer", "BEARER", "Bearer"):
        assert server.get("/api/jobs", headers={"Authorization": f"{scheme} s3cret"}).status_code == 200
    wrong = server.get("/api/jobs", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "not this server's" in wrong.json()["detail"]


def test_two_authorization_headers_are_refused(serve):
    import http.client

    server = serve(token="s3cret")
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.putrequest("GET", "/api/jobs")
    connection.putheader("Authorization", "Bearer nope")
    connection.putheader("Authorization", "Bearer s3cret")
    connection.endheaders()

    assert connection.getresponse().status == 401
    connection.close()


def test_a_body_that_never_arrives_is_a_408(serve, monkeypatch):
    import socket

    monkeypatch.setattr("coach.service.security.BODY_TIMEOUT_S", 0.5)
    server = serve()
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nname: a")
        answer = b""
        while b"did not arrive" not in answer:  # the head and the body may come in separate packets
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
        answer = answer.decode()

    assert answer.startswith("HTTP/1.1 408") and "did not arrive within 0.5 s" in answer


def test_a_second_server_on_the_same_results_is_refused(serve, tmp_path, capsys):
    serve(results=tmp_path / "results")

    assert main(["serve", "--port", "0", "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another `coach serve` serves this folder" in err


def test_another_sites_page_and_a_rebound_name_are_refused(serve):
    server = serve()
    job = job_text("csrf", max_epochs=1)

    foreign = server.post("/api/jobs", job, headers={"Origin": "http://evil.example",
                                                     "Content-Type": "application/yaml"})
    plain = server.post("/api/jobs", job, headers={"Content-Type": "text/plain"})
    rebound = server.get("/api/jobs", headers={"Host": "evil.example:8765"})
    same = server.post("/api/jobs", job, headers={"Origin": server.url, "Content-Type": "application/yaml"})

    assert foreign.status_code == 403 and "another site's page" in foreign.json()["detail"]
    assert plain.status_code == 415 and "application/yaml" in plain.json()["detail"]
    assert rebound.status_code == 403 and "not a loopback name" in rebound.json()["detail"]
    assert same.status_code == 201


def test_a_token_server_answers_any_host_name(serve):
    server = serve(token="s3cret")

    answer = server.get("/api/jobs", headers={**server.headers, "Host": "coach.example:8765"})

    assert answer.status_code == 200
