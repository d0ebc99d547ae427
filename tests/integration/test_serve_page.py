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
from coach.domain.cluster import DEFAULT_CLUSTER, ClusterSpec, NodeSpec
from coach.service.server import Listen, bind, http_server
from coach.service.session import ServedRun
from tests.service.conftest import MODELS, Paced, job_text
from tests.support import factory, wait_for

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("COACH_TEST_ARTIFACTS", REPO / "test-artifacts"))
AXE = REPO / "web" / "node_modules" / "axe-core" / "axe.min.js"  # `make web` installs it (web/package.json)
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1366, "height": 900}
# five slots: a (2 workers, 4 slots) runs first; then long (3 slots) runs and `wait` (3 slots) waits for slots for good
FIVE_SLOTS = ClusterSpec("five-slots", (NodeSpec("node-1", 3, 0.0001), NodeSpec("node-2", 2, 0.0001)))
SCHEDULER_CODES = ("NodeSlotsFit", "HeadOfLine", "Coscheduling", "PodGroupRoles", "QuorumFirst", "Insufficient", "pods")


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


def served_run(results: Path, epoch_s: float, cluster: ClusterSpec = DEFAULT_CLUSTER) -> ServedRun:
    """A run whose jobs wait for their quorum for 10 minutes: a waiting job stays as it is while the test looks."""
    served = ServedRun(results, cluster, RunConfig(policy="static", placement_timeout_s=600.0),
                       platform_factory=factory(Paced(epoch_s)))
    served.start()
    return served


# Swagger UI's own markup, which the docs page cannot change without patching the library: each operation's
# summary is a button that holds the operation's copy-link and lock buttons (axe's nested-interactive)
SWAGGERS_OWN = (("nested-interactive", ".opblock-summary-control"),)


def axe_problems(page, known: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """axe-core's serious and critical violations on the page as it is, one line each; a (rule, selector) in
    `known` leaves out that rule's nodes whose selector ends so."""
    page.add_script_tag(path=str(AXE))
    found = page.evaluate("""async (known) => (await axe.run(document, {resultTypes: ["violations"]})).violations
        .filter((v) => v.impact === "serious" || v.impact === "critical")
        .map((v) => ({ ...v, nodes: v.nodes.filter((n) => !known.some(([rule, end]) => rule === v.id
          && String(n.target[n.target.length - 1]).endsWith(end))) }))
        .filter((v) => v.nodes.length)
        .map((v) => `${v.id}: ${v.nodes.length} nodes: ${v.nodes[0].target} ${v.nodes[0].failureSummary}`)""",
                          [list(pair) for pair in known])
    return found


def fits(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def check_charts(page, url: str) -> None:
    """A job's loss chart: its target line, the log scale, the time axis and the tooltip under the cursor, read
    from the uPlot instances the page draws (`charts`, element id -> uPlot)."""
    from playwright.sync_api import expect

    page.goto(url + "/jobs/a")
    expect(page.locator("#loss-chart")).to_have_attribute("data-epochs", "3", timeout=20_000)
    loss = "charts.get('loss-chart')"
    assert page.evaluate(f"{loss}.series.map((s) => s.label)") == ["epoch", "training loss", "validation loss",
                                                                      "target"]
    assert page.evaluate(f"{loss}.data[3]") == [0, 0, 0]  # the job's target_loss, at every epoch
    assert page.evaluate(f"[{loss}.scales.y.distr, {loss}.data[0]]") == [1, [1, 2, 3]]
    page.locator("#job-controls .log-scale").check()
    page.wait_for_function(f"{loss}.scales.y.distr === 3")  # uPlot's logarithmic scale
    page.locator("#job-controls .x-axis").select_option("time")
    page.wait_for_function(f"{loss}.series[0].label === 'time' && {loss}.data[0][0] > 1e9 && {loss}.scales.y.distr === 3")
    x, y = page.evaluate(f"""(() => {{ const u = {loss}; const r = u.over.getBoundingClientRect();
        return [r.left + u.valToPos(u.data[0][1], "x"), r.top + u.valToPos(u.data[1][1], "y")]; }})()""")
    page.mouse.move(x, y)
    tip = page.locator("#loss-chart .chart-tip")
    expect(tip).to_be_visible()
    # the second epoch's wall time and training loss (the simulated epochs have no validation loss)
    expect(tip).to_have_text(re.compile(r"^time \d{1,2}:\d\d:\d\d( [AP]M)? · training loss: [0-9.]+$"))
    shown = float(tip.inner_text().rsplit(": ", 1)[1])
    assert page.evaluate(f"{loss}.cursor.idx") == 1
    assert abs(shown - page.evaluate(f"{loss}.data[1][1]")) < 1e-3


def check_docs_token(browser, served: ServedRun) -> None:
    """The API docs on a server with a token: the page's token is filled in, so "Try it out" works at once; a
    wrong one given to Authorize is answered 401 with words that say so; the right one works again."""
    from playwright.sync_api import expect

    guarded = Http(served, token="s3cret")
    try:
        page = browser.new_page(viewport=DESKTOP)
        page.add_init_script("localStorage.setItem('coach-token', 's3cret')")  # as the page keeps it
        page.goto(guarded.url + "/docs")
        op = page.locator("#operations-default-jobs_api_jobs_get")
        op.locator(".opblock-summary-control").click(timeout=20_000)
        op.get_by_role("button", name="Try it out").click()
        answer = op.locator(".live-responses-table .response").first
        for token, code, words in ((None, "200", '"jobs"'), ("wrong", "401", "the bearer token is not this server's"),
                                   ("s3cret", "200", '"jobs"')):
            if token is not None:
                page.locator(".swagger-ui .btn.authorize").first.click()
                dialog = page.locator(".swagger-ui .dialog-ux")
                expect(dialog.locator(".btn-done")).to_be_visible()
                if dialog.locator("button", has_text="Logout").count():
                    dialog.locator("button", has_text="Logout").click()
                dialog.locator("input").fill(token)
                dialog.get_by_role("button", name="Apply credentials").click()
                dialog.locator(".btn-done").click()
                op.get_by_role("button", name="Clear").click()
            op.get_by_role("button", name="Execute").click()
            expect(answer.locator(".response-col_status")).to_contain_text(code)
            expect(answer.locator(".response-col_description pre").first).to_contain_text(words)
        page.close()
    finally:
        guarded.stop()


def test_every_view_is_accessible_keyed_by_run_and_survives_the_server_going_away(tmp_path, chromium):
    from playwright.sync_api import expect, sync_playwright

    assert AXE.exists(), "make web installs axe-core (web/package.json)"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    served = served_run(tmp_path / "results", 0.05, FIVE_SLOTS)
    http = Http(served)
    import requests

    def submit(url: str, text: str) -> None:
        answer = requests.post(f"{url}/api/jobs", data=text, headers={"Content-Type": "application/yaml"}, timeout=30)
        assert answer.status_code == 201, answer.text

    submit(http.url, job_text("a", max_epochs=3, workers=2))
    submit(http.url, job_text("long", max_epochs=100000, workers=1))
    submit(http.url, job_text("wait", max_epochs=2, workers=1))
    wait_for(lambda: served.board.job("a")["phase"] == "done", 30, "job a to finish")
    wait_for(lambda: served.board.job("wait")["message"].startswith("2/3 placed"), 30, "job wait to hold 2 of 5 slots")
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
                    # a job whose functions are not all placed says so, in plain words, not in the scheduler's
                    expect(page.locator('tr[data-job="wait"] td.phase')).to_have_text("waiting for slots")
                    expect(page.locator('tr[data-job="wait"] td.note')).to_contain_text(
                        "needs 3 slots (1 scheduler, 1 server, 1 worker); 2 placed; no node has a free slot")
                    page.get_by_label("compare wait").uncheck()  # the newest job is ticked; it has no curve yet
                    page.get_by_label("compare a").check()
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
                    if name == "desktop":
                        page.goto(http.url + "/jobs/wait")
                        expect(page.locator("#job-phase")).to_have_text("waiting for slots")
                        waiting = page.locator("#job-waiting")
                        for words in ("needs 3 slots", "why: no node has a free slot for its functions",
                                      "held by long (3)", "first in the queue", "gives its slots back"):
                            expect(waiting).to_contain_text(words)
                        assert not [code for code in SCHEDULER_CODES if code in waiting.inner_text()]
                        problems[f"waiting job {scheme}"] = axe_problems(page)
                    page.goto(http.url + "/docs")
                    expect(page.locator(".swagger-ui .info")).to_be_visible(timeout=20_000)
                    expect(page.locator(".swagger-ui .opblock").first).to_be_visible()
                    problems[f"docs {scheme} {name}"] = axe_problems(page, SWAGGERS_OWN)
                    if name == "desktop" and scheme == "light":
                        page.screenshot(path=str(ARTIFACTS / "serve-docs.png"))
                    page.close()
            assert outside == [], "the page loaded something from elsewhere"

            page = browser.new_page(viewport=DESKTOP)
            check_charts(page, http.url)
            page.goto(http.url + "/")
            expect(page.locator("#live")).to_have_text("live", timeout=20_000)
            # several jobs overlaid: the ticked ones, each its own series
            page.get_by_label("compare wait").uncheck()
            page.get_by_label("compare a").check()
            page.get_by_label("compare long").check()
            page.wait_for_function("charts.get('compare-chart').series.map((s) => s.label).join() === 'epoch,a,long'")
            # a job file loaded from disk fills the form; submitted, it waits behind `wait` for slots
            page.set_input_files("#job-file", files=[{"name": "up.yaml", "mimeType": "text/yaml",
                                                      "buffer": job_text("up", max_epochs=1, workers=1).encode()}])
            expect(page.locator("#job-text")).to_have_value(job_text("up", max_epochs=1, workers=1))
            expect(page.locator("#submit-result")).to_contain_text("loaded up.yaml")
            page.click("#submit")
            expect(page.locator('tr[data-job="up"] td.phase')).to_have_text("waiting for slots", timeout=10_000)
            assert served.board.job("up")["waiting"]["queue"] == "number 2 in the queue, after wait"
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
            check_docs_token(browser, served)
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
