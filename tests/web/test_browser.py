"""The dashboard in a real browser: Debian's Chromium driven by Playwright (never `playwright install`:
it runs /usr/bin/chromium), against the dashboard served by uvicorn on a free port over the test's
database. Opens the overview and watches it update live, filters jobs and opens one, cancels and
retries a job, pauses and resumes a queue, and checks the database each time. Every test saves a
screenshot under $PGQ_TEST_ARTIFACTS (default: <tmp>/pgq-browser-artifacts); no page may log an error
(a Content-Security-Policy violation would).

Skipped, saying why, when Chromium or the playwright package is missing."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pgq import JobSpec, Queue
from tests.conftest import SQL, enqueue_after

CHROMIUM = os.environ.get("PGQ_CHROMIUM", "/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    # One Chromium at a time, on one process of a parallel run (test_browser_operator.py shares this).
    pytest.mark.xdist_group("browser"),
    pytest.mark.skipif(not Path(CHROMIUM).exists() and shutil.which(CHROMIUM) is None,
                       reason=f"no Chromium at {CHROMIUM} (apt-get install chromium; or set PGQ_CHROMIUM)"),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
uvicorn = pytest.importorskip("uvicorn")

from pgq.web import create_app  # noqa: E402

USER, PASSWORD = "ops", "browser-test"
TIMEOUT_MS = 10_000


def artifacts() -> Path:
    """Where the screenshots go."""
    path = Path(os.environ.get("PGQ_TEST_ARTIFACTS") or Path(tempfile.gettempdir()) / "pgq-browser-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(pgq_dsn: str) -> Iterator[str]:
    """The dashboard on 127.0.0.1:<free port> (uvicorn in a thread, Basic auth, refreshing every
    second); yields its base URL."""
    port = free_port()
    app = create_app(pgq_dsn, auth=(USER, PASSWORD), refresh_s=1.0)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, name="dashboard", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not served.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the dashboard did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        served.should_exit = True
        thread.join(timeout=20)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the module's tests."""
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=shutil.which(CHROMIUM) or CHROMIUM)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any, server: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A page logged in to the dashboard; saves a screenshot when the test ends and fails the test if
    the page logged an error."""
    context = browser.new_context(base_url=server, http_credentials={"username": USER, "password": PASSWORD},
                                  viewport={"width": 1360, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.on("dialog", lambda dialog: dialog.accept())  # the confirm() of cancel and pause
    try:
        yield tab
    finally:
        shot = artifacts() / f"{request.node.name}.png"
        tab.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        context.close()
    assert errors == [], errors


def expect(locator: Any) -> Any:
    return sync_api.expect(locator)


def test_overview_shows_the_queues_and_updates_live(page: Any, pgq_queue: Queue, db: SQL) -> None:
    pgq_queue.enqueue_many([{"kind": "send_email", "queue": "mail"} for _ in range(3)])
    pgq_queue.enqueue("resize", queue="images")
    (claim,) = pgq_queue.claim(worker="host-a", queues=["images"])
    pgq_queue.fail(claim, "OSError: disk full", final=True)

    page.goto("/")
    expect(page.locator("h1")).to_have_text("Overview")
    ready = page.locator('tr[data-queue="mail"] td[data-col="ready"]')
    expect(ready).to_have_text("3")
    expect(page.locator('tr[data-queue="images"]')).to_contain_text("1")  # failed in the last hour
    page.evaluate("window.__not_reloaded = true")

    pgq_queue.enqueue_many([{"kind": "send_email", "queue": "mail"} for _ in range(2)])
    pgq_queue.enqueue("report", queue="reports")

    expect(ready).to_have_text("5")  # refreshed in place, no reload
    expect(page.locator('tr[data-queue="reports"]')).to_be_visible()
    expect(page.locator('[data-testid="total-ready"]')).to_have_text("6")
    assert page.evaluate("window.__not_reloaded") is True
    expect(page.locator("#live-status")).to_have_text("Live")


def test_the_overview_charts_a_day_and_a_week_from_the_kept_counts(page: Any, pgq_queue: Queue, db: SQL) -> None:
    db("INSERT INTO pgq.jobs (queue, kind, status, attempts, finished_at) "
       "SELECT 'mail', 'send_email', CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'succeeded' END::pgq.job_status, 1, "
       "now() - g * interval '97 seconds' FROM generate_series(1, 6000) g")  # the last week, and older
    db("SELECT pgq.count_finished('2 minutes', '400 days')")

    page.goto("/")
    expect(page.locator("#counts-fresh")).to_contain_text("Exact counts")
    expect(page.locator('[data-range="1h"]')).to_have_text("1h")
    page.locator('a[data-range="24h"]').click()
    expect(page.locator("h2").first).to_contain_text("Jobs finished per quarter hour")
    expect(page.locator("svg.chart g.minute")).to_have_count(96)
    page.locator('a[data-range="7d"]').click()
    expect(page.locator("h2").first).to_contain_text("Jobs finished per hour")
    expect(page.locator("svg.chart g.minute")).to_have_count(168)
    expect(page.locator('tr[data-queue="mail"]')).to_be_visible()


def test_filter_jobs_and_open_one(page: Any, pgq_queue: Queue) -> None:
    pgq_queue.enqueue_many([{"kind": "send_email", "queue": "mail", "payload": {"n": i}} for i in range(4)])
    failing = pgq_queue.enqueue("charge_card", {"order": 42}, queue="billing", dedupe_key="order-42",
                                group_key="acct:42")
    pgq_queue.enqueue("charge_card", {"order": 43}, queue="billing")
    (claim,) = pgq_queue.claim(worker="host-b", queues=["billing"])
    assert claim.id == failing
    pgq_queue.fail(claim, "PaymentDeclined: card expired\nTraceback (most recent call last): ...", final=True)

    page.goto("/jobs")
    expect(page.locator("#jobs tbody tr")).to_have_count(6)
    page.fill('input[name="queue"]', "billing")
    page.select_option('select[name="status"]', "failed")
    page.click('button[type="submit"]:has-text("Filter")')
    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("PaymentDeclined: card expired")
    assert "queue=billing" in page.url and "status=failed" in page.url

    page.fill('input[name="q"]', "ORDER-42")
    page.click('button[type="submit"]:has-text("Filter")')
    expect(rows).to_have_count(1)
    rows.first.locator("a").first.click()

    expect(page.locator("h1")).to_contain_text(f"Job {failing}")
    expect(page.locator('[data-field="last-error"]')).to_contain_text("PaymentDeclined: card expired")
    expect(page.locator('[data-field="payload"]')).to_contain_text('"order": 42')
    expect(page.locator('[data-field="group-key"]')).to_have_text("acct:42")
    expect(page.locator(".job-state")).to_contain_text("1 of 25 attempts used")
    expect(page.locator("#retry-job")).to_be_visible()


def test_cancel_a_job_and_retry_it(page: Any, pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("send_email", {"to": "a@example.com"}, queue="mail")

    page.goto(f"/jobs/{job_id}")
    expect(page.locator('[data-field="status"]')).to_have_text("queued")
    page.click("#cancel-job")

    expect(page.locator(".notice")).to_contain_text("Job cancelled")
    expect(page.locator('[data-field="status"]')).to_have_text("cancelled")
    assert db("SELECT status::text FROM pgq.jobs WHERE id = %s", [job_id]) == [{"status": "cancelled"}]
    expect(page.locator("#cancel-job")).to_have_count(0)

    page.click("#retry-job")
    expect(page.locator('[data-field="status"]')).to_have_text("queued")
    assert db("SELECT status::text, attempts FROM pgq.jobs WHERE id = %s", [job_id]) == [
        {"status": "queued", "attempts": 0}]


def test_a_job_page_follows_the_job_live(page: Any, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("build_report", {"month": "2026-11"}, queue="reports")
    page.goto(f"/jobs/{job_id}")
    status = page.locator('[data-field="status"]')
    expect(status).to_have_text("queued")

    (claim,) = pgq_queue.claim(worker="host-c", queues=["reports"])
    expect(status).to_have_text("running")
    expect(page.locator("dd.mono").filter(has_text="host-c")).to_be_visible()

    pgq_queue.complete(claim, {"rows": 1234})
    expect(status).to_have_text("succeeded")
    expect(page.locator('[data-field="result"]')).to_contain_text('"rows": 1234')


def test_a_job_page_with_parents_and_children(page: Any, pgq_queue: Queue, db: SQL) -> None:
    """A fan-in: two fetches, a merge that needs both, a report that needs the merge, and a cleanup
    that runs whatever the merge's outcome. Follows the links from the merge to a parent and back,
    cancels the waiting merge, and watches its page follow its last parent's finish."""
    fetch_eu = pgq_queue.enqueue("fetch_rates", {"region": "eu"}, queue="etl")
    fetch_us = pgq_queue.enqueue("fetch_rates", {"region": "us"}, queue="etl")
    merge = enqueue_after(db, "merge_rates", [fetch_eu, fetch_us], queue="etl")
    report = enqueue_after(db, "build_report", [merge], queue="reports")
    cleanup = enqueue_after(db, "cleanup", [merge], queue="etl", run=True)
    (claim,) = pgq_queue.claim(worker="etl-1", queues=["etl"])
    pgq_queue.complete(claim, {"rates": 31})  # fetch_eu

    page.goto(f"/jobs/{merge}")
    expect(page.locator('[data-field="status"]')).to_have_text("waiting")
    waits = page.locator('[data-field="waits-for"]')
    expect(waits).to_have_text(f"waiting for 1 of 2 parent jobs: job {fetch_us}")
    parents = page.locator("#parents tbody tr")
    expect(parents).to_have_count(2)
    expect(parents.nth(0).locator(".badge")).to_have_text("succeeded")
    expect(parents.nth(1).locator(".badge")).to_have_text("queued")
    children = page.locator("#children tbody tr")
    expect(children).to_have_count(2)
    expect(children.nth(0)).to_contain_text("build_report")
    expect(children.nth(1)).to_contain_text("to finish")
    page.screenshot(path=str(artifacts() / "job-with-dependencies.png"), full_page=True)

    parents.nth(1).locator("a").click()
    expect(page.locator("h1")).to_contain_text(f"Job {fetch_us}")
    expect(page.locator("#children tbody tr")).to_have_count(1)
    page.locator("#children a").click()
    expect(page.locator("h1")).to_contain_text(f"Job {merge}")

    page.click("#cancel-job")  # the merge, waiting: the report needs it and goes too, the cleanup runs
    expect(page.locator(".notice")).to_contain_text("Job cancelled")
    expect(page.locator('[data-field="status"]')).to_have_text("cancelled")
    expect(waits).to_have_count(0)
    expect(children.nth(0).locator(".badge")).to_have_text("cancelled")
    expect(children.nth(1).locator(".badge")).to_have_text("queued")
    assert db("SELECT id, status::text, last_error FROM pgq.jobs WHERE id IN (%s, %s) ORDER BY id", [report, cleanup]
              ) == [{"id": report, "status": "cancelled", "last_error": f"parent job {merge} cancelled"},
                    {"id": cleanup, "status": "queued", "last_error": None}]

    (claim,) = pgq_queue.claim(worker="etl-1", queues=["etl"])
    assert claim.id == fetch_us
    pgq_queue.complete(claim)
    expect(parents.nth(1).locator(".badge")).to_have_text("succeeded")  # followed live
    expect(parents.nth(1)).to_contain_text("succeeded succeeded")


def test_pause_and_resume_a_queue(page: Any, pgq_queue: Queue, db: SQL) -> None:
    pgq_queue.enqueue("send_email", queue="mail")
    pgq_queue.enqueue("resize", queue="images")

    page.goto("/")
    row = page.locator('tr[data-queue="mail"]')
    row.locator('button:has-text("Pause")').click()

    expect(page.locator(".notice")).to_contain_text("Queue paused")
    expect(row.locator(".badge-paused")).to_be_visible()
    assert db("SELECT queue FROM pgq.paused_queues") == [{"queue": "mail"}]
    expect(page.locator('tr[data-queue="images"] .badge-paused')).to_have_count(0)

    row.locator('button:has-text("Resume")').click()
    expect(page.locator(".notice")).to_contain_text("Queue resumed")
    expect(row.locator(".badge-paused")).to_have_count(0)
    assert db("SELECT queue FROM pgq.paused_queues") == []


def test_workers_schedules_and_limits_pages(page: Any, pgq_queue: Queue) -> None:
    pgq_queue.enqueue_many([{"kind": "charge_card", "queue": "billing"} for _ in range(3)])
    pgq_queue.claim(worker="host-d-123", limit=2)
    pgq_queue.set_concurrency_limit("charge_card", 4)
    pgq_queue.set_rate_limit("charge_card", "100/min")
    pgq_queue.set_group_limits("sync_account", concurrency=2, rate="5/s")
    pgq_queue.enqueue_many([JobSpec("sync_account", group_key=f"acct:{n}", queue="billing") for n in (1, 1, 2)])
    pgq_queue.claim(worker="host-d-123", kinds=["sync_account"], limit=5)

    page.goto("/workers")
    expect(page.locator("#workers tbody tr")).to_have_count(1)
    expect(page.locator("#workers")).to_contain_text("host-d-123")
    expect(page.locator("#running tbody tr")).to_have_count(5)  # 2 charge_card, 3 sync_account
    page.click("nav >> text=Limits")
    expect(page.locator("#concurrency-limits")).to_contain_text("charge_card")
    expect(page.locator("#rate-limits")).to_contain_text("100 per minute")
    expect(page.locator("#group-limits tbody tr")).to_have_count(1)
    expect(page.locator("#group-limits")).to_contain_text("5 per second")
    expect(page.locator("#group-limits")).to_contain_text("acct:")
    page.screenshot(path=str(artifacts() / "limits-groups.png"), full_page=True)
    page.click("nav >> text=Schedules")
    expect(page.locator(".empty-state")).to_contain_text("--app")


def test_workers_page_shows_idle_workers_and_the_job_page_explains(page: Any, pgq_queue: Queue, db: SQL) -> None:
    db("SELECT * FROM pgq.worker_register('idle-host-7', 'box-a', 4101, '{billing}', '{charge_card}', 8, 30, 15, "
       "'0.2.0')")
    db("SELECT * FROM pgq.worker_register('busy-host-9', 'box-b', 4102, NULL, '{charge_card,refund}', 4, 30, 15, "
       "'0.2.0')")
    held = pgq_queue.enqueue_many([{"kind": "charge_card", "queue": "billing"} for _ in range(2)])
    pgq_queue.claim(worker="busy-host-9", limit=2)
    pgq_queue.set_concurrency_limit("charge_card", 2)
    blocked = pgq_queue.enqueue("charge_card", queue="billing")

    page.goto("/workers")
    rows = page.locator("#workers tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("busy-host-9")
    expect(rows.nth(0).locator(".badge")).to_have_text("busy")
    expect(rows.nth(1)).to_contain_text("idle-host-7")
    expect(rows.nth(1).locator(".badge")).to_have_text("idle")
    for job_id in held:
        expect(rows.nth(0).locator(f'a[href$="/jobs/{job_id}"]')).to_have_count(1)
    page.screenshot(path=str(artifacts() / "workers-registry.png"), full_page=True)

    page.goto(f"/jobs/{blocked}")
    panel = page.locator("#explain")
    expect(panel).to_contain_text("Why is it not running?")
    expect(panel.locator("[data-reason]")).to_have_count(1)
    expect(panel.locator('[data-reason="concurrency_limit_full"]')).to_contain_text("2 of 2 running")
    page.screenshot(path=str(artifacts() / "job-explain.png"), full_page=True)
    panel.locator(f'a[href$="/jobs/{held[0]}"]').click()  # a holder of the limit
    expect(page.locator('#explain [data-reason="running"]')).to_contain_text("running on busy-host-9")


def test_bulk_selection_and_apply_to_all_matching(page: Any, pgq_queue: Queue, db: SQL) -> None:
    ids = [pgq_queue.enqueue("send_mail", {"tenant": 7 if i < 4 else 8}, queue="mail", max_attempts=1)
           for i in range(6)]
    for claim in pgq_queue.claim(worker="w", queues=["mail"], limit=6):
        pgq_queue.fail(claim, "SMTPServerDisconnected: Connection unexpectedly closed")

    page.goto("/jobs?status=failed")
    page.check(f'input[name="id"][value="{ids[5]}"]')
    page.check(f'input[name="id"][value="{ids[4]}"]')
    expect(page.locator("#selected-count")).to_have_text("2")
    page.screenshot(path=str(artifacts() / "jobs-selection.png"), full_page=True)
    page.click('#bulk-selected button[value="retry"]')  # the confirm() is accepted
    expect(page.locator(".bulk-result")).to_contain_text("2 jobs retried")
    assert {r["id"] for r in db("SELECT id FROM pgq.jobs WHERE status = 'queued'")} == {ids[4], ids[5]}

    page.goto('/jobs?status=failed&payload={"tenant":7}')
    expect(page.locator("#jobs tbody tr")).to_have_count(4)
    page.click("#retry-all")
    expect(page.locator("#bulk-count")).to_have_text("4")
    expect(page.locator("#bulk-apply button")).to_have_text("Retry all 4 jobs")
    page.screenshot(path=str(artifacts() / "bulk-confirm.png"), full_page=True)
    page.click("#bulk-apply button")
    expect(page.locator(".bulk-result")).to_contain_text("4 jobs retried")
    assert db("SELECT count(*) AS n FROM pgq.jobs WHERE status = 'queued'") == [{"n": 6}]
    assert [r["actor"] for r in db("SELECT actor FROM pgq.job_audit ORDER BY id")] == [f"dashboard:{USER}"] * 2


def test_dead_letter_group_retry_takes_that_group_only(page: Any, pgq_queue: Queue, db: SQL) -> None:
    def fail(n: int, error: str) -> list[int]:
        ids = [pgq_queue.enqueue("send_mail", queue="mail", max_attempts=1) for _ in range(n)]
        for claim in pgq_queue.claim(worker="w", queues=["mail"], limit=n):
            pgq_queue.fail(claim, error)
        return ids

    short = fail(3, "TimeoutError: smtp\nTraceback (most recent call last): ...")
    longer = fail(2, "TimeoutError: smtp relay down")
    page.goto("/jobs?status=failed")
    groups = page.locator("#dead-letters tbody tr")
    expect(groups).to_have_count(2)
    expect(groups.nth(0)).to_contain_text("TimeoutError: smtp")
    groups.nth(0).locator("text=Retry all in this group").click()
    expect(page.locator("#bulk-count")).to_have_text("3")  # not the 5 errors containing its text
    expect(page.locator("#bulk")).to_contain_text("Error's first line")
    page.screenshot(path=str(artifacts() / "dead-letter-group-confirm.png"), full_page=True)
    page.click("#bulk a.btn-quiet")  # Back: the list of that group
    expect(page.locator("#error-line-filter")).to_contain_text("TimeoutError: smtp")
    expect(page.locator("#jobs tbody tr")).to_have_count(3)
    page.screenshot(path=str(artifacts() / "dead-letter-group-list.png"), full_page=True)
    page.click("#retry-all")
    page.click("#bulk-apply button")
    expect(page.locator(".bulk-result")).to_contain_text("3 jobs retried")
    queued = {r["id"] for r in db("SELECT id FROM pgq.jobs WHERE status = 'queued'")}
    assert queued == set(short) and not queued & set(longer)


def test_explain_panel_names_a_full_group_limit_and_the_sequence_holder(page: Any, pgq_queue: Queue,
                                                                         db: SQL) -> None:
    db("SELECT * FROM pgq.worker_register('host-1', 'box', 1, NULL, '{export,sync}', 4, 30, 15, '0.2.0')")
    pgq_queue.set_group_limits("export", concurrency=1)
    holder = pgq_queue.enqueue("export", queue="reports", group_key="acct:42")
    held = pgq_queue.enqueue("export", queue="reports", group_key="acct:42")
    first = pgq_queue.enqueue("sync", queue="reports", sequence_key="acct:42", max_attempts=1)
    second = pgq_queue.enqueue("sync", queue="reports", sequence_key="acct:42")
    claims = {c.id: c for c in pgq_queue.claim(worker="host-1", queues=["reports"], limit=10)}
    assert set(claims) == {holder, first}
    pgq_queue.fail(claims[first], "ValueError: bad account")

    page.goto("/jobs?queue=reports")
    expect(page.locator(f'tr[data-job-id="{held}"]')).to_contain_text("acct:42")  # its group, under the kind
    page.screenshot(path=str(artifacts() / "jobs-groups.png"), full_page=True)
    page.goto(f"/jobs/{held}")
    reason = page.locator('#explain [data-reason="group_concurrency_limit_full"]')
    expect(reason).to_contain_text("full for group acct:42: 1 of 1 running")
    page.screenshot(path=str(artifacts() / "explain-group-limit.png"), full_page=True)
    page.goto(f"/jobs/{second}")
    reason = page.locator('#explain [data-reason="sequence_held"]')
    expect(reason).to_contain_text(f"held by job {first}")
    page.screenshot(path=str(artifacts() / "explain-sequence-held.png"), full_page=True)
    reason.locator(f'a[href$="/jobs/{first}"]').click()
    expect(page.locator('#explain [data-reason="finished"]')).to_contain_text("ValueError: bad account")
