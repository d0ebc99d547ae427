"""`coach serve` as users run it: a real server process, real function hosts and real MXNet training.

A server killed with kill -9 mid-job resumes the job when it starts again, and the job finishes with one
continuous log; the page, in Debian's Chromium driven by Playwright, submits a LeNet job, shows its epochs as
they arrive and the job finishing, and leaves a screenshot in test-artifacts/.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import requests

from coach.storage.results import read_log
from tests.integration.conftest import LENET, MODELS, host_processes, wait_until
from tests.support import stop_process, wait_for

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("COACH_TEST_ARTIFACTS", REPO / "test-artifacts"))


def start_server(results: Path, models: Path, out: Path) -> tuple[subprocess.Popen, str]:
    """`coach serve` on a free port; its URL once it listens."""
    log = open(out, "w")
    process = subprocess.Popen([sys.executable, "-m", "coach.ui.cli", "serve", "--port", "0", "--results",
                                str(results), "--models", str(models), "--policy", "static"],
                               stdout=log, stderr=subprocess.STDOUT)
    log.close()

    def url():
        found = re.search(r"coach serve: (http://127\.0\.0\.1:\d+)/", out.read_text())
        assert process.poll() is None, out.read_text()
        return found and found.group(1)

    return process, wait_for(url, 60, "the server to listen")


def job_yaml(name: str, model: str, **fields) -> str:
    values = {"name": name, "model": model, "batch_size": 64, "optimizer": "sgd", "learning_rate": 0.05,
              "target_loss": 0.0, "max_epochs": 3, "budget": 10.0, "workers": 1, "servers": 1,
              "epoch_timeout_s": 120, **fields}
    return "".join(f"{key}: {value}\n" for key, value in values.items())


def test_a_server_killed_mid_job_resumes_it_on_restart_and_it_finishes(tmp_path, marker):
    results, out = tmp_path / "results", tmp_path / "serve.out"
    job = f"{marker}-restart"
    server, url = start_server(results, MODELS, out)
    try:
        answer = requests.post(f"{url}/api/jobs", data=job_yaml(job, "tiny_mlp.py", max_epochs=6, workers=2),
                               headers={"Content-Type": "application/yaml"}, timeout=30)
        assert answer.status_code == 201, answer.text
        run_dir = results / answer.json()["run_id"]

        def trained() -> int:
            log = run_dir / f"{job}.jsonl"
            return sum(1 for r in read_log(log) if r["phase"] == "training") if log.exists() else 0

        assert wait_until(lambda: trained() >= 2, 180), out.read_text()
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        assert wait_until(lambda: host_processes(marker) == [], 15)
        before = trained()
        assert before < 6

        out = tmp_path / "serve-again.out"
        server, url = start_server(results, MODELS, out)
        assert "resuming run" in out.read_text()
        assert wait_until(lambda: requests.get(f"{url}/api/jobs/{job}", timeout=10).json()["status"]["phase"]
                          == "done", 240), out.read_text()
    finally:
        stop_process(server)
    records = read_log(run_dir / f"{job}.jsonl")
    assert [r["epoch"] for r in records if r["phase"] == "training"] == [1, 2, 3, 4, 5, 6]
    assert records[-1]["stop_reason"] == "max_epochs"
    assert json.loads((run_dir / "summary.json").read_text())["jobs"][job]["stop_reason"] == "max_epochs"
    assert json.loads((results / "service.json").read_text())["run_id"] == run_dir.name


def test_the_page_submits_a_lenet_job_and_shows_its_epochs_live(tmp_path, marker, chromium):
    from playwright.sync_api import expect, sync_playwright

    results, out = tmp_path / "results", tmp_path / "serve.out"
    job = f"{marker}-page"
    server, url = start_server(results, LENET.parent, out)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1366, "height": 900})
            page.goto(url + "/")
            expect(page.locator("#live")).to_have_text("live", timeout=20_000)
            page.fill("#job-text", job_yaml(job, "lenet.py", max_epochs=4))
            page.click("#submit")
            expect(page.locator("#submit-result")).to_contain_text(f"submitted {job}", timeout=30_000)
            row = page.locator(f'tr[data-job="{job}"]')
            expect(row.locator("td.epoch")).to_have_text("1 / 4", timeout=180_000)
            # while it trains: its three functions (scheduler, server, worker) on the cluster's nodes
            expect(page.locator(f'#nodes .node:not(.pending) .chip[title^="{job}-"]')).to_have_count(3)
            page.screenshot(path=str(ARTIFACTS / "serve-page-training.png"), full_page=True)
            for epoch in ("2", "3", "4"):  # each epoch shows up while the job runs, without a reload
                expect(row.locator("td.epoch")).to_have_text(f"{epoch} / 4", timeout=180_000)
            expect(row.locator("td.phase")).to_have_text("done · max epochs", timeout=60_000)
            row.locator("td.name a").click()  # its own page: the curves drawn by uPlot, one row per epoch
            expect(page.locator("#loss-chart")).to_have_attribute("data-epochs", "4", timeout=20_000)
            expect(page.locator("#epochs tbody tr")).to_have_count(4)
            assert page.locator("#loss-chart canvas").count() == 1
            page.go_back()
            assert page.locator("#nodes .node").count() >= 3
            page.screenshot(path=str(ARTIFACTS / "serve-page.png"), full_page=True)
            browser.close()
    finally:
        stop_process(server)
    log = next(results.glob(f"*/{job}.jsonl"))
    assert [r["epoch"] for r in read_log(log) if r["phase"] == "training"] == [1, 2, 3, 4]
    assert (ARTIFACTS / "serve-page.png").stat().st_size > 10_000
