"""`coach serve`'s page in Debian's Chromium through Playwright, against an in-process server whose simulated
epochs take milliseconds: every view (jobs, a job's page, the API docs), light and dark, desktop and phone, checked
with axe-core (zero serious or critical violations) and kept as screenshots in test-artifacts/; keyboard focus
that updates never move; stop that asks first; every validation problem beside its line; offline and back
without a reload, and a restarted server on a fresh results folder never showing the old run's curve."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from coach.app.run import RunConfig
from coach.domain.cluster import DEFAULT_CLUSTER
from coach.service.server import Listen, bind, http_server
from coach.service.session import ServedRun
from tests.service.conftest import MODELS, Paced, job_text
from tests.support import factory, wait_for

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("COACH_TEST_ARTIFACTS", REPO / "test-artifacts"))
AXE = REPO / "web" / "node_modules" / "axe-core" / "axe.min.js"  # `make web` installs it (web/package.json)
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1366, "height": 900}


class Http:
    """A served run behind uvicorn on `port` (0: any); stopping the HTTP side leaves the run going."""

    def __init__(self, served: ServedRun, port: int = 0, token: str | None = None):
        listen = Listen("127.0.0.1", port, token, 64 * 1024)
        sock = bind(listen)
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = http_server(served, [MODELS], listen)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, 10.0, "the server to listen")

    def stop(self) -> None:
        self.server.should_exit = True
        self.server.force_exit = True
        self.thread.join(15)


def served_run(results: Path, epoch_s: float) -> ServedRun:
    served = ServedRun(results, DEFAULT_CLUSTER, RunConfig(policy="static"), platform_factory=factory(Paced(epoch_s)))
    served.start()
    return served


def axe_problems(page) -> list[str]:
    """axe-core's serious and critical violations on the page as it is, one line each."""
    page.add_script_tag(path=str(AXE))
    found = page.evaluate("""async () => (await axe.run(document, {resultTypes: ["violations"]})).violations
        .filter((v) => v.impact === "serious" || v.impact === "critical")
        .map((v) => `${v.id}: ${v.nodes.length} nodes: ${v.nodes[0].target} ${v.nodes[0].failureSummary}`)""")
    return found


def fits(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_every_view_is_accessible_keyed_by_run_and_survives_the_server_going_away(tmp_path, chromium):
    from playwright.sync_api import expect, sync_playwright

    assert AXE.exists(), "make web installs axe-core (web/package.json)"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    served = served_run(tmp_path / "results", 0.05)
    http = Http(served)
    import requests

    def submit(url: str, text: str) -> None:
        answer = requests.post(f"{url}/api/jobs", data=text, headers={"Content-Type": "application/yaml"}, timeout=30)
        assert answer.status_code == 201, answer.text

    submit(http.url, job_text("a", max_epochs=3, workers=2))
    submit(http.url, job_text("long", max_epochs=100000, workers=1))
    wait_for(lambda: served.board.job("a")["phase"] == "done", 30, "job a to finish")
    problems: dict[str, list[str]] = {}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            outside: list[str] = []
            for scheme in ("light", "dark"):
                for name, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
                    page = browser.new_page(viewport=viewport, color_scheme=scheme)
                    page.on("request", lambda r: None if r.url.startswith(http.url) or r.url.startswith(("blob:", "data:"))
                            else outside.append(r.url))
                    page.goto(http.url + "/")
                    expect(page.locator("#live")).to_have_text("live", timeout=20_000)
                    expect(page.locator('tr[data-job="a"] td.phase')).to_have_text("done · max epochs")
                    expect(page.locator("#compare-chart canvas").first).to_be_visible()
                    assert fits(page), f"the jobs view is wider than {viewport['width']} px"
                    problems[f"jobs {scheme} {name}"] = axe_problems(page)
                    page.screenshot(path=str(ARTIFACTS / f"serve-jobs-{scheme}-{name}.png"), full_page=True)
                    page.locator('tr[data-job="a"] td.name a').click()
                    expect(page).to_have_url(http.url + "/jobs/a")
                    expect(page.locator("#job-ending")).to_contain_text("stopped at max_epochs (3 of 3)")
                    assert "tone-good" not in page.locator("#job-ending").get_attribute("class")
                    expect(page.locator("#epochs tbody tr")).to_have_count(3)
                    expect(page.locator("#loss-chart")).to_have_attribute("data-epochs", "3")
                    expect(page.locator("#job-times")).to_contain_text("job completion time")
                    expect(page.locator("#job-money")).to_contain_text("per epoch")
                    assert fits(page), f"the job view is wider than {viewport['width']} px"
                    problems[f"job {scheme} {name}"] = axe_problems(page)
                    page.screenshot(path=str(ARTIFACTS / f"serve-job-{scheme}-{name}.png"), full_page=True)
                    page.goto(http.url + "/docs")
                    expect(page.locator(".swagger-ui .info")).to_be_visible(timeout=20_000)
                    if name == "desktop" and scheme == "light":
                        page.screenshot(path=str(ARTIFACTS / "serve-docs.png"))
                    page.close()
            assert outside == [], "the page loaded something from elsewhere"

            page = browser.new_page(viewport=DESKTOP)
            page.goto(http.url + "/")
            expect(page.locator("#live")).to_have_text("live", timeout=20_000)
            # keyboard: the stop button keeps its focus through live updates; stop asks first and says it is final
            stop = page.get_by_role("button", name="Stop long")
            stop.focus()
            epoch = served.board.job("long")["epoch"]
            wait_for(lambda: served.board.job("long")["epoch"] >= epoch + 3, 30, "three more epochs of long")
            page.wait_for_timeout(600)  # let the page take the updates in (each arrives within 0.25 s)
            assert page.evaluate("document.activeElement.getAttribute('aria-label')") == "Stop long"
            page.keyboard.press("Enter")
            expect(page.locator("#stop-dialog")).to_be_visible()
            expect(page.locator("#stop-dialog")).to_contain_text("This is final")
            page.keyboard.press("Escape")
            expect(page.locator("#stop-dialog")).to_be_hidden()
            assert served.board.job("long")["phase"] not in ("stopped_by_user",)
            # every validation problem at once, each with its line
            page.fill("#job-text", "name: bad name!\nmodel: /etc/passwd\nbatch_size: -1\noptimizer: sgdd\n"
                                   "learning_rate: 0.1\ntarget_loss: 0.1\nmax_epochs: 0\nbudget: -1\n")
            page.click("#submit")
            expect(page.locator("#problems li")).to_have_count(6)
            expect(page.locator('#problems li[data-field="model"]')).to_contain_text("line 2")
            expect(page.locator('#problems li[data-field="budget"]')).to_contain_text("line 8")
            # clone into the form
            page.get_by_role("button", name="Clone a into the submit form").click()
            expect(page.locator("#job-text")).to_have_value(re.compile(r"^name: a-2$", re.MULTILINE), timeout=10_000)
            # offline: a banner with the last update's time, rows greyed, actions disabled; then back, no reload
            http.stop()
            expect(page.locator("#offline")).to_be_visible(timeout=20_000)
            expect(page.locator("#offline")).to_contain_text("as of")
            assert page.get_by_role("button", name="Stop long").get_attribute("aria-disabled") == "true"
            page.screenshot(path=str(ARTIFACTS / "serve-offline.png"), full_page=True)
            # the server comes back on a fresh results folder (a new run) with a job named as the old one
            served.close()
            fresh = served_run(tmp_path / "fresh", 0.05)
            try:
                http = Http(fresh, port=http.port)
                submit(http.url, job_text("a", max_epochs=1, workers=1))
                expect(page.locator("#live")).to_have_text("live", timeout=20_000)
                expect(page.locator("#offline")).to_be_hidden()
                expect(page.locator('tr[data-job="long"]')).to_have_count(0)
                expect(page.locator('tr[data-job="a"] td.phase')).to_have_text("done · max epochs", timeout=30_000)
                page.locator('tr[data-job="a"] td.name a').click()
                expect(page.locator("#epochs tbody tr")).to_have_count(1)
                expect(page.locator("#loss-chart")).to_have_attribute("data-epochs", "1")
            finally:
                http.stop()
                fresh.close()
            browser.close()
    finally:
        http.stop()
        served.close()
    assert {view: found for view, found in problems.items() if found} == {}
