"""What a job's page and the integrations read: the job's overview (times, end reason in words, money), its log as
CSV and JSON lines, its function logs (tail and follow, `coach logs`), `coach status --json`, every phase in
/metrics, the webhook with its retries and bounded queue, and every validation problem at once."""

from __future__ import annotations

import csv
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from coach.service.ending import EndFigures, ending_view
from coach.service.money import money_view
from coach.service.notify import Notifier
from coach.service.waiting import plain_reasons, waiting_view
from coach.ui.cli import main
from tests.service.conftest import job_text
from tests.support import wait_for


def test_a_jobs_overview_says_why_it_ended_with_its_figures_and_its_log_downloads(serve):
    server = serve()
    assert server.post("/api/jobs", job_text("a", max_epochs=3)).status_code == 201
    wait_for(lambda: server.phase("a") == "done", 30, "job a to finish")

    overview = server.get("/api/jobs/a/overview").json()
    status = overview["status"]
    assert overview["run_id"] == server.served.run_id and status["run_id"] == server.served.run_id
    assert status["ending"]["kind"] == "max_epochs" and status["ending"]["tone"] == "limit"  # not the target's green
    assert status["ending"]["words"].startswith("stopped at max_epochs (3 of 3); best loss ")
    assert (status["step_workers"], status["step_servers"]) == (2, 1)
    assert status["money"]["per_epoch"] > 0 and status["money"]["projected_at_max"] == status["cost"]
    assert overview["times"]["started"] and overview["times"]["jct_s"] is not None
    assert overview["job_file"]["model"].endswith("lenet.py") and "model_path" not in overview["job_file"]
    rows = list(csv.DictReader(io.StringIO(server.get("/api/jobs/a/records.csv").text)))
    assert [row["epoch"] for row in rows if row["phase"] == "training"] == ["1", "2", "3"]
    jsonl = server.get("/api/jobs/a/records.jsonl")
    assert jsonl.headers["content-disposition"] == 'attachment; filename="a.jsonl"'
    assert [json.loads(line) for line in jsonl.text.splitlines()] == server.get("/api/jobs/a").json()["records"]
    assert server.get("/api/jobs/nope/records.csv").status_code == 404


def test_budget_and_waiting_read_in_plain_words():
    figures = EndFigures(spent=0.0438, budget=0.05, next_epoch_cost=0.016, best_loss=0.101, loss_name="val loss",
                         target_loss=0.01, epochs=4, max_epochs=10)
    ending = ending_view("budget", figures)
    assert ending["tone"] == "budget"
    assert ending["words"] == ("budget spent: the next epoch would cost ≈0.016, 0.0062 left; best val loss 0.101, "
                               "target 0.01")
    assert ending_view("target_loss", figures)["tone"] == "good" and ending_view(None, figures) is None
    money = money_view(0.04, 0.05, [0.01, 0.01], [1.0, 1.0], 2, 10)
    assert money["epochs_affordable"] == 1 and money["projected_at_max"] == 0.12 and money["level"] == "warn"
    assert money["per_hour"] == 36.0 and money_view(0.045, 0.05, [0.01], [1.0], 1, 10)["level"] == "over"
    functions = [{"name": "a-worker-0", "job": "a", "role": "worker", "node": "n1"},
                 {"name": "b-scheduler-0", "job": "b", "role": "scheduler", "node": None},
                 {"name": "b-server-0", "job": "b", "role": "server", "node": None},
                 {"name": "b-worker-0", "job": "b", "role": "worker", "node": None},
                 {"name": "b-worker-1", "job": "b", "role": "worker", "node": None}]
    view = waiting_view("b", "waiting", "0/4 placed: 0/1 nodes are available: 1 Insufficient slots.", 100.0,
                        functions, 1, ["b"], 30.0)
    assert view["needs"] == "needs 4 slots (1 scheduler, 1 server, 2 workers); 0 placed"
    assert view["held_by"] == "0 of 1 slots free; held by a (1)"
    assert view["why"] == ["no node has a free slot for its functions"] and view["queue"] == "first in the queue"
    assert "fewer workers" in view["fewer"] and "30 s" in view["next_try"]
    assert plain_reasons("NodeSlotsFit: queued") == ["jobs submitted earlier are placed first (first in, first out)"]
    # a reason no entry knows loses its plugin's name and says functions, not pods; the retry is not a reason
    assert plain_reasons("HeadOfLine: behind job a, which is still placing its pods; retry in 2 s") == [
        "behind job a, which is still placing its functions"]
    assert plain_reasons("3/4 placed: x; starting with the 3 placed".split(": ", 1)[1]) == [
        "x"]


def test_every_phase_is_in_the_metrics_with_each_jobs_budget_and_loss(serve):
    server = serve()
    assert server.post("/api/jobs", job_text("m", max_epochs=2, budget=7.5)).status_code == 201
    wait_for(lambda: server.phase("m") == "done", 30, "job m to finish")
    text = server.get("/metrics").text
    for phase in ("waiting", "training", "failed", "stopped_by_user"):
        assert f'coach_jobs{{phase="{phase}"}} 0.0' in text
    assert 'coach_jobs{phase="done"} 1.0' in text and 'coach_job_budget{job="m"} 7.5' in text
    assert 'coach_job_loss{job="m"}' in text and 'coach_cost_spent{job="m"}' in text


def test_the_function_log_tail_follows_and_coach_logs_prints_it(serve, capsys):
    server = serve()
    assert server.post("/api/jobs", job_text("f", max_epochs=1)).status_code == 201
    wait_for(lambda: server.phase("f") == "done", 30, "job f to finish")
    logs = server.served.run_dir / "logs"
    logs.mkdir(exist_ok=True)
    (logs / "f-worker-0.log").write_text("one\ntwo\nthree\n")
    (logs / "f-x-worker-0.log").write_text("another job's\n")  # a job whose name starts with f's

    assert server.get("/api/jobs/f/logs?lines=2").json()["functions"] == {"f-worker-0": ["two", "three"]}
    assert main(["logs", "f", "--lines", "1", "--server", server.url]) == 0
    assert capsys.readouterr().out == "f-worker-0 | three\n"
    assert main(["status", "--json", "--server", server.url]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["run_id"] == server.served.run_id and answer["jobs"][0]["ending"]["kind"] == "max_epochs"
    assert main(["logs", "nope", "--server", server.url]) == 2


def test_every_validation_problem_is_told_at_once_even_with_a_model_outside(serve):
    server = serve()
    answer = server.post("/api/jobs", "name: bad name!\nmodel: /etc/passwd\nbatch_size: -1\noptimizer: sgdd\n"
                                      "learning_rate: -1\ntarget_loss: -2\nmax_epochs: 0\nbudget: -1\nworkers: 0\n"
                                      "servers: 0\n")
    assert answer.status_code == 422
    fields = [d["loc"][1] for d in answer.json()["detail"]]
    assert sorted(fields) == sorted(["model", "name", "batch_size", "optimizer", "learning_rate", "target_loss",
                                     "max_epochs", "budget", "workers", "servers"])


class _Receiver(BaseHTTPRequestHandler):
    answers: list[int] = []
    got: list[dict] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status = self.answers.pop(0) if self.answers else 200
        self.got.append({**body, "status": status})
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_webhook_is_called_when_a_job_ends_and_retries_a_failing_receiver(tmp_path):
    from coach.app.run import RunConfig
    from coach.domain.cluster import DEFAULT_CLUSTER
    from coach.service.session import ServedRun
    from tests.service.conftest import Paced
    from tests.support import factory

    _Receiver.answers, _Receiver.got = [500], []
    receiver = HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{receiver.server_port}/hook"
    notifier = Notifier(url, first_pause_s=0.05)
    served = ServedRun(tmp_path / "results", DEFAULT_CLUSTER, RunConfig(policy="static"),
                       platform_factory=factory(Paced(0.01)), notifier=notifier)
    served.start()
    try:
        from coach.service.submission import checked_submission
        from tests.service.conftest import MODELS

        spec, _ = checked_submission(job_text("w", max_epochs=2), [MODELS])
        served.submit(spec)
        wait_for(lambda: any(g["status"] == 200 for g in _Receiver.got), 30, "the webhook's delivery")
    finally:
        served.close()
        receiver.shutdown()
        receiver.server_close()
    assert [g["attempt"] for g in _Receiver.got] == [1, 2]  # the 500 was tried again
    delivered = _Receiver.got[-1]
    assert delivered["event"] == "job.ended" and delivered["job"] == "w" and delivered["kind"] == "max_epochs"
    assert delivered["stop_reason"] == "max_epochs" and delivered["run_id"] == served.run_id
    assert 'coach_notifications_total{outcome="delivered"} 1.0' in served.metrics.exposition().decode()


def test_a_full_queue_drops_the_oldest_delivery_and_counts_it():
    outcomes = []
    notifier = Notifier("http://127.0.0.1:9/", tries=1, max_queued=2, on_outcome=outcomes.append)
    with notifier._wake:  # the sender waits for this lock (reentrant): nothing leaves the queue meanwhile
        for number in range(3):
            notifier.send({"n": number})
        assert [payload["n"] for payload in notifier._queue] == [1, 2]
    assert notifier.dropped == 1 and outcomes[0] == "dropped"
    notifier.close(10)
