"""`coach status`, `coach submit` and `coach stop` against a server: the same table, one-line errors, exit codes."""

from __future__ import annotations

from coach.ui.cli import main
from tests.service.conftest import MODELS, job_text
from tests.support import wait_for


def test_submit_status_and_stop(serve, tmp_path, capsys):
    server = serve(epoch_s=0.3)
    job = tmp_path / "job.yaml"
    job.write_text(job_text("cli", max_epochs=100))

    assert main(["submit", str(job), "--server", server.url]) == 0
    assert "submitted cli" in capsys.readouterr().out
    wait_for(lambda: server.get("/api/jobs/cli").json()["status"]["epoch"] >= 1, 30, "an epoch")
    assert main(["status", "--server", server.url]) == 0
    table = capsys.readouterr().out
    assert "cli" in table and "cost / budget" in table and server.served.run_id in table
    assert main(["stop", "cli", "--server", server.url]) == 0
    wait_for(lambda: server.phase("cli") == "stopped_by_user", 30, "the stop")


def test_status_says_a_job_waits_for_slots_in_plain_words(serve, capsys):
    server = serve(epoch_s=0.3)
    assert server.post("/api/jobs", job_text("big", max_epochs=100, workers=9)).status_code == 201  # 11 of 12
    wait_for(lambda: server.phase("big") == "training", 30, "big to train")
    assert server.post("/api/jobs", job_text("small", max_epochs=1, workers=1)).status_code == 201  # needs 3
    wait_for(lambda: (server.get("/api/jobs/small").json()["status"].get("waiting") or {}).get("why"), 30,
             "small to wait for slots")
    assert main(["status", "--server", server.url]) == 0
    table = capsys.readouterr().out
    assert "waiting for slots: needs 3 slots" in table and "no node has a free slot" in table
    assert "Insufficient" not in table
    assert main(["stop", "big", "--server", server.url]) == 0


def test_a_relative_model_is_the_job_files_and_must_be_in_the_model_folders(serve, tmp_path, capsys):
    models, elsewhere = tmp_path / "jobs" / "models", tmp_path / "elsewhere"
    for folder in (models, elsewhere):
        folder.mkdir(parents=True)
        (folder / "own.py").write_text((MODELS / "lenet.py").read_text())
    server = serve(models=[models])
    inside, outside = tmp_path / "jobs" / "inside.yaml", tmp_path / "outside.yaml"
    inside.write_text(job_text("i", model="models/own.py", max_epochs=1))  # as jobs/*.yaml name jobs/models/
    outside.write_text(job_text("o", model="elsewhere/own.py"))

    assert main(["submit", str(outside), "--server", server.url]) == 2
    err = capsys.readouterr().err
    assert f"{outside}: model: " in err and "outside the server's model folders" in err
    assert main(["submit", str(inside), "--server", server.url]) == 0
    assert server.served.board.job("i") is not None


def test_client_errors_are_one_line(serve, tmp_path, capsys):
    server = serve()
    bad = tmp_path / "bad.yaml"
    bad.write_text(job_text("b", budget="lots"))

    assert main(["submit", str(bad), "--server", server.url]) == 2
    assert capsys.readouterr().err.strip() == f"{bad}: budget: expected a number, got str 'lots'"
    assert main(["submit", str(tmp_path / "missing.yaml"), "--server", server.url]) == 2
    assert "missing.yaml: (file)" in capsys.readouterr().err
    assert main(["stop", "nobody", "--server", server.url]) == 2
    assert "nobody" in capsys.readouterr().err
    assert main(["status", "--server", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach the server" in err


def test_clients_facing_something_that_is_not_coach_say_so_in_one_line(tmp_path, capsys):
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # its lines would mix with the client's stderr
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{other.server_address[1]}"
    job = tmp_path / "job.yaml"
    job.write_text(job_text("x"))
    try:
        for argv in (["status"], ["submit", str(job)], ["stop", "x"]):
            assert main([*argv, "--server", url]) == 1
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "not a Coach server's answer" in err
    finally:
        other.shutdown()
        other.server_close()


def test_status_watch_prints_each_refresh_until_ctrl_c_which_exits_130(serve, tmp_path):
    """`coach status --watch S --json`, a real process: one JSON line per refresh, and Ctrl-C (SIGINT) ends it with
    the one line every command ends with and exit code 130."""
    import json
    import signal
    import subprocess
    import sys

    server = serve()
    assert server.post("/api/jobs", job_text("watched", max_epochs=2, workers=1)).status_code == 201
    out = tmp_path / "watch.out"
    with open(out, "w") as sink:
        process = subprocess.Popen([sys.executable, "-m", "coach.ui.cli", "status", "--server", server.url,
                                    "--watch", "0.2", "--json"], stdout=sink, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(out.read_text().splitlines()) >= 2, 30, "two refreshes")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert process.returncode == 130, err
    assert err.strip() == "coach: interrupted"
    assert len(lines) >= 2 and all(line["error"] is None for line in lines)
    assert all([job["job"] for job in line["jobs"]] == ["watched"] for line in lines)
    assert lines[0]["at"] <= lines[-1]["at"] and lines[0]["run_id"] == lines[-1]["run_id"]
