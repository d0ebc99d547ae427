"""`coach serve`'s HTTP API over real HTTP: submit, list, follow, stop, summary, validation, events, metrics."""

from __future__ import annotations

import json

import requests

from coach.storage.results import read_log
from tests.service.conftest import job_text
from tests.support import wait_for


def test_a_submitted_job_runs_to_its_end_and_its_log_is_the_record(serve):
    server = serve()

    answer = server.post("/api/jobs", job_text("a", max_epochs=3), headers={"Content-Type": "application/yaml"})

    assert answer.status_code == 201, answer.text
    assert answer.json() == {"job": "a", "run_id": server.served.run_id}
    wait_for(lambda: server.phase("a") == "done", 30, "job a to finish")
    one = server.get("/api/jobs/a").json()
    assert one["status"]["epoch"] == 3 and one["status"]["message"] == "max_epochs"
    assert [r["epoch"] for r in one["records"] if r["phase"] == "training"] == [1, 2, 3]
    assert one["records"] == read_log(server.served.run_dir / "a.jsonl")
    listed = server.get("/api/jobs").json()
    assert listed["run_id"] == server.served.run_id and [j["job"] for j in listed["jobs"]] == ["a"]
    summary = server.get("/api/summary").json()
    assert summary["jobs"]["a"]["stop_reason"] == "max_epochs" and summary["jobs"]["a"]["epochs"] == 3
    manifest = json.loads((server.served.run_dir / "run.json").read_text())
    assert [job["name"] for job in manifest["jobs"]] == ["a"]


def test_json_bodies_are_accepted_as_well_as_yaml(serve):
    server = serve()
    body = {"name": "j", "model": "lenet.py", "batch_size": 64, "optimizer": "sgd", "learning_rate": 0.05,
            "target_loss": 0.0, "max_epochs": 1, "budget": 10.0, "workers": 1, "servers": 1}

    answer = server.post("/api/jobs", json.dumps(body), headers={"Content-Type": "application/json"})

    assert answer.status_code == 201, answer.text
    wait_for(lambda: server.phase("j") == "done", 30, "job j to finish")


def test_an_invalid_job_is_a_422_naming_each_field_and_nothing_is_added(serve):
    server = serve()

    answer = server.post("/api/jobs", job_text("bad", budget=-1, optimizer="sgdd"))

    assert answer.status_code == 422
    detail = answer.json()["detail"]
    assert {d["loc"][1] for d in detail} == {"budget", "optimizer"}
    assert all(d["msg"].startswith(f"request: {d['loc'][1]}: ") and "\n" not in d["msg"] for d in detail)
    assert server.get("/api/jobs").json()["jobs"] == []
    assert json.loads((server.served.run_dir / "run.json").read_text())["jobs"] == []


def test_not_yaml_and_not_utf8_are_422_too(serve):
    server = serve()

    broken = server.post("/api/jobs", "name: [unclosed")
    binary = server.post("/api/jobs", b"\xff\xfe\x00name")

    assert broken.status_code == 422 and "invalid YAML" in broken.json()["detail"][0]["msg"]
    assert binary.status_code == 422 and "not UTF-8" in binary.json()["detail"][0]["msg"]


def test_a_job_may_name_only_model_files_under_the_model_folders(serve, tmp_path):
    server = serve()
    secret = tmp_path / "secret.py"
    secret.write_text("def get_model(): pass\ndef get_data(): pass\n")
    outside = server.post("/api/jobs", job_text("x", model=str(secret)))
    climbing = server.post("/api/jobs", job_text("y", model="../../tests/integration/models/tiny_mlp.py"))
    passwd = server.post("/api/jobs", job_text("z", model="/etc/passwd"))

    for answer in (outside, climbing, passwd):
        assert answer.status_code == 422
        assert answer.json()["detail"][0]["loc"] == ["body", "model"]
    assert "outside the server's model folders" in outside.json()["detail"][0]["msg"]
    assert "root:" not in passwd.text


def test_a_name_in_the_run_already_is_a_409(serve):
    server = serve()
    assert server.post("/api/jobs", job_text("twice", max_epochs=1)).status_code == 201

    again = server.post("/api/jobs", job_text("twice", max_epochs=1))

    assert again.status_code == 409 and "twice" in again.json()["detail"]


def test_a_body_over_the_limit_is_a_413_before_it_is_read_whole(serve):
    server = serve(max_body_bytes=2048)

    large = server.post("/api/jobs", job_text("big") + "#" * 4096 + "\n")
    chunked = requests.post(server.url + "/api/jobs", data=(b"#" * 1024 for _ in range(8)), timeout=10)

    assert large.status_code == 413 and "2048" in large.json()["detail"]
    assert chunked.status_code == 413
    assert server.get("/api/jobs").json()["jobs"] == []


def test_stopping_a_job_ends_it_for_good_and_keeps_its_log(serve):
    server = serve(epoch_s=0.3)
    assert server.post("/api/jobs", job_text("long", max_epochs=200)).status_code == 201
    wait_for(lambda: server.get("/api/jobs/long").json()["status"]["epoch"] >= 2, 30, "two epochs")

    answer = server.post("/api/jobs/long/stop")

    assert answer.status_code == 202 and answer.json() == {"job": "long", "stopping": True}
    wait_for(lambda: server.phase("long") == "stopped_by_user", 30, "the job to stop")
    records = read_log(server.served.run_dir / "long.jsonl")
    trained = [r["epoch"] for r in records if r["phase"] == "training"]
    assert trained == list(range(1, len(trained) + 1)) and 2 <= len(trained) < 200
    assert records[-1]["phase"] == "stopped" and records[-1]["stop_reason"] == "stopped_by_user"
    assert server.post("/api/jobs/long/stop").status_code == 409  # finished already
    assert server.get("/api/summary").json()["jobs"]["long"]["stop_reason"] == "stopped_by_user"


def test_unknown_jobs_are_404(serve):
    server = serve()

    assert server.get("/api/jobs/nobody").status_code == 404
    assert server.post("/api/jobs/nobody/stop").status_code == 404


def test_the_event_stream_sends_the_board_when_it_changes(serve):
    import time

    server = serve(epoch_s=0.6)  # an epoch lasts longer than the stream's poll: each one is seen on its own
    seen, board, deadline = [], None, time.monotonic() + 60
    with requests.get(server.url + "/api/events", stream=True, timeout=30) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert server.post("/api/jobs", job_text("live", max_epochs=3)).status_code == 201
        event = None
        for line in stream.iter_lines(decode_unicode=True):
            assert time.monotonic() < deadline, f"no end within 60 s; seen {seen}"
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line.startswith("data: ") and event == "board":
                board = json.loads(line[len("data: "):])
                seen.append({job["job"]: (job["phase"], job["epoch"]) for job in board["jobs"]})
                if seen[-1].get("live", ("", 0))[0] in ("done", "failed"):
                    break
    live = [s["live"] for s in seen if "live" in s]
    assert seen[0] == {} and live[-1] == ("done", 3)
    assert [epoch for _, epoch in live] == sorted(epoch for _, epoch in live)
    running = {epoch for phase, epoch in live if phase != "done"}
    assert {1, 2} <= running  # epochs 1 and 2 were sent while the job still ran, not only at its end
    assert {"node-1", "node-2", "node-3"} == {n["name"] for n in board["nodes"] if n["name"]}


def test_the_cluster_shows_where_a_running_jobs_functions_are(serve):
    server = serve(epoch_s=0.3)
    server.post("/api/jobs", job_text("placed", max_epochs=100, workers=2, servers=1))
    wait_for(lambda: server.phase("placed") == "training", 30, "training")

    nodes = server.get("/api/cluster").json()["nodes"]

    placed = [f for n in nodes if n["name"] for f in n["functions"]]
    assert sorted(f["role"] for f in placed) == ["scheduler", "server", "worker", "worker"]
    assert all(f["job"] == "placed" for f in placed)
    assert sum(len(n["functions"]) for n in nodes if n["name"]) <= sum(n["slots"] for n in nodes)
    server.post("/api/jobs/placed/stop")


def test_metrics_count_epochs_jobs_by_phase_cost_and_placement(serve):
    server = serve()
    server.post("/api/jobs", job_text("m", max_epochs=3))
    wait_for(lambda: server.phase("m") == "done", 30, "job m to finish")

    text = server.get("/metrics").text

    assert 'coach_epochs_total{job="m"} 3.0' in text
    assert "coach_epoch_seconds_count 3.0" in text
    assert 'coach_jobs{phase="done"} 1.0' in text
    assert 'coach_cost_spent{job="m"}' in text and "coach_pods_pending 0.0" in text
    assert "coach_placement_latency_seconds_count" in text
    cost = float(next(line.split()[-1] for line in text.splitlines() if line.startswith('coach_cost_spent{job="m"}')))
    assert cost == server.get("/api/summary").json()["jobs"]["m"]["total_cost"] > 0


def test_the_openapi_page_documents_every_endpoint(serve):
    server = serve()

    paths = server.get("/openapi.json").json()["paths"]

    assert {"/api/jobs", "/api/jobs/{name}", "/api/jobs/{name}/stop", "/api/summary", "/api/cluster",
            "/api/events", "/metrics"} <= set(paths)
    assert server.get("/docs").status_code == 200


def test_the_page_is_served_with_its_script(serve):
    server = serve()

    page = server.get("/")
    script = server.get("/static/page.js")

    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert 'src="/static/page.js"' in page.text and "/api/events" in script.text


def test_a_job_the_servers_policy_cannot_run_is_a_422(serve):
    server = serve()  # the static policy: every job must fix its counts

    answer = server.post("/api/jobs", job_text("dynamic", workers=None, servers=None).replace("workers: None\n", "")
                         .replace("servers: None\n", ""))

    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "workers"]
    assert "static policy" in answer.json()["detail"][0]["msg"]


def test_a_jobs_records_come_in_windows_so_a_long_log_never_comes_whole(serve):
    server = serve(epoch_s=0.0)
    server.post("/api/jobs", job_text("pages", max_epochs=30))
    wait_for(lambda: server.phase("pages") == "done", 30, "job pages to finish")
    whole = read_log(server.served.run_dir / "pages.jsonl")

    first = server.get("/api/jobs/pages", params={"limit": 10}).json()
    rest = server.get("/api/jobs/pages", params={"start": 10}).json()
    beyond = server.get("/api/jobs/pages", params={"start": 10_000}).json()

    assert first["total"] == rest["total"] == len(whole) == 30
    assert first["records"] + rest["records"] == whole
    assert beyond["records"] == [] and beyond["total"] == len(whole)
    too_many = server.get("/api/jobs/pages", params={"limit": 10**6})
    assert too_many.status_code == 422


def test_model_paths_the_file_system_refuses_are_422_not_500(serve):
    server = serve()
    body = {"name": "n", "batch_size": 64, "optimizer": "sgd", "learning_rate": 0.05, "target_loss": 0.0,
            "max_epochs": 1, "budget": 10.0, "workers": 1, "servers": 1}

    too_long = server.post("/api/jobs", json.dumps({**body, "model": "x" * 5000 + ".py"}))
    nul = server.post("/api/jobs", json.dumps({**body, "model": "lenet.py\u0000x"}))

    for answer in (too_long, nul):
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"][0]["loc"] == ["body", "model"]


def test_a_422_lists_at_most_fifty_problems(serve):
    server = serve()

    answer = server.post("/api/jobs", job_text("many") + "".join(f"unknown_{i}: 1\n" for i in range(300)))

    detail = answer.json()["detail"]
    assert answer.status_code == 422 and len(detail) == 51
    assert "250 more problems not listed" in detail[-1]["msg"]


def test_errors_of_unknown_paths_and_methods_name_the_endpoint(serve):
    server = serve()

    for answer, status in ((server.get("/api/nothing"), 404), (server.get("/api/jobs/x/stop"), 405),
                           (server.post("/api/jobs/"), 404), (server.post("/api/jobs/a%2Fb/stop"), 404)):
        assert answer.status_code == status
        assert answer.json()["detail"].startswith(("GET /api/", "POST /api/", "/api/"))


def test_only_usable_model_files_are_offered(serve, tmp_path):
    server = serve()

    models = server.get("/api/models").json()

    assert "lenet.py" in models["models"] and "resnet18.py" in models["models"]
    assert models["example"]["model"] in models["models"]
