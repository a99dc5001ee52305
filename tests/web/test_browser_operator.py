"""Issue #44's pages in Chromium at 1024 and 1440 px: the overview's queue table fits its card (Pause
in view), a queue page with its tabs and resume, the job page's run now with its audit, limits
editing, and the workers page. One test per page and action, each at both widths, a screenshot of
each under $PGQ_TEST_ARTIFACTS (see test_browser.py), and no console error."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from pgq import Queue
from tests.conftest import SQL

from .test_browser import (  # noqa: F401 - the fixtures, shared
    PASSWORD,
    TIMEOUT_MS,
    USER,
    artifacts,
    browser,
    expect,
    pytestmark,
    server,
    sync_api,
)

WIDTHS = [1024, 1440]


@pytest.fixture(params=WIDTHS, ids=lambda w: f"{w}px")
def page(browser: Any, server: str, request: pytest.FixtureRequest) -> Iterator[Any]:  # noqa: F811
    """A logged-in page `param` px wide; saves a screenshot named after the test and width, and fails
    the test if the page logged an error."""
    context = browser.new_context(base_url=server, http_credentials={"username": USER, "password": PASSWORD},
                                  viewport={"width": request.param, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.on("dialog", lambda dialog: dialog.accept())

    def shot(name: str) -> None:
        path = artifacts() / f"{name}-{request.param}px.png"
        tab.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")

    tab.shot = shot  # type: ignore[attr-defined]
    try:
        yield tab
    finally:
        shot(f"{request.node.originalname}-end")  # where the test stopped, passed or not
        context.close()
    assert errors == [], errors


def _fits(page: Any, selector: str) -> None:
    """The element is no wider than the card holding it: nothing clipped or scrolled sideways."""
    widths = page.eval_on_selector(selector, "e => [e.scrollWidth, e.closest('.card').clientWidth]")
    assert widths[0] <= widths[1], (selector, widths)


def _scroll_to(locator: Any) -> None:
    """Scroll `locator`'s element into view. The overview's live refresh (every 5 s) replaces the
    queue table, and an element it replaced while Playwright waited for it to be stable is detached:
    the locator then finds the new one on the next try (CI saw it once, with the suite in parallel)."""
    for attempt in range(5):
        try:
            locator.scroll_into_view_if_needed()
            return
        except sync_api.Error as exc:
            if "not attached" not in str(exc) or attempt == 4:
                raise


def _follow(page: Any, link: Any) -> None:
    """Click `link` and wait for the page it leads to. The overview's live refresh (every 5 s)
    replaces the queue table: a click that lands as the table is replaced hits the old row, which
    leads nowhere, as a reader's click would be lost; the link is then clicked again (CI saw it once,
    with the suite in parallel)."""
    href = link.get_attribute("href")
    for attempt in range(3):
        link.click()
        try:
            page.wait_for_url(f"**{href}", timeout=3000)
            return
        except sync_api.TimeoutError:
            if attempt == 2:
                raise


def _busy_database(queue: Queue, db: SQL) -> None:
    for name in ("billing", "mail", "images", "reports-with-a-long-name"):
        queue.enqueue_many([{"kind": "send_email", "queue": name}] * 3)
    for claim in queue.claim(worker="host-a:4242:worker-1", queues=["images"], limit=2):
        queue.fail(claim, "OSError: disk full", final=True)
    queue.enqueue("report", queue="billing", delay=7200)
    queue.pause("billing")
    db("SELECT pgq.worker_register('host-a:4242:worker-1', 'host-a.example.internal', 4242, "
       "ARRAY['billing', 'mail', 'images', 'reports-with-a-long-name'], ARRAY['send_email', 'report'], 8, 30, 5, "
       "'0.2.0')")


def test_overview_and_queue_page_fit_and_resume(page: Any, pgq_queue: Queue, db: SQL) -> None:
    _busy_database(pgq_queue, db)
    page.goto("/")
    expect(page.locator('tr[data-queue="mail"] td[data-col="ready"]')).to_have_text("3")
    _fits(page, "#queues")
    # The queue table may start below the fold (at 1024 px the tiles take two rows): scrolled to it,
    # the button is inside the viewport, which a table wider than its card would push it out of.
    pause = page.locator('tr[data-queue="mail"] button:has-text("Pause")')
    _scroll_to(pause)
    expect(pause).to_be_in_viewport()
    page.shot("overview")

    _follow(page, page.locator('tr[data-queue="billing"] td.name a'))
    expect(page.locator("h1")).to_contain_text("billing")
    expect(page.locator("#paused-banner")).to_contain_text("Paused")
    expect(page.locator('[data-tab="ready"] .count')).to_have_text("3")
    page.click('[data-tab="scheduled"]')
    expect(page.locator("#queue-jobs tr[data-job-id]")).to_have_count(1)
    _fits(page, "#queue-jobs .table")
    page.shot("queue")
    page.click('#queue-pause button:has-text("Resume")')
    expect(page.locator(".notice")).to_contain_text("Queue resumed")
    expect(page.locator("h1")).to_contain_text("billing")
    assert db("SELECT count(*) AS n FROM pgq.paused_queues") == [{"n": 0}]


def test_job_page_run_now_is_audited(page: Any, pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("report", queue="billing", delay=7200)
    db("UPDATE pgq.jobs SET progress = '{\"pct\": 62.5, \"step\": \"render\"}' WHERE id = %s", [job_id])
    page.goto(f"/jobs/{job_id}")
    expect(page.locator('[data-fact="run_at"]')).to_contain_text("in ")
    expect(page.locator('[data-field="progress-bar"]')).to_be_visible()
    page.click("#run-now")
    expect(page.locator(".notice")).to_contain_text("Job due now")
    expect(page.locator('[data-field="actor"]').first).to_have_text(f"dashboard:{USER}")
    page.shot("job")
    assert db("SELECT action, actor FROM pgq.job_audit") == [{"action": "run_now", "actor": f"dashboard:{USER}"}]


def test_limits_are_edited_and_workers_fit(page: Any, pgq_queue: Queue, db: SQL) -> None:
    _busy_database(pgq_queue, db)
    page.goto("/limits")
    form = page.locator("#set-concurrency")
    form.locator('input[name="kind"]').fill("send_email")
    form.locator('input[name="max_running"]').fill("4")
    form.locator("button").click()
    expect(page.locator(".notice")).to_contain_text("Limit saved")
    expect(page.locator("#concurrency-limits")).to_contain_text("send_email")
    page.shot("limits")
    assert db("SELECT kind, max_running FROM pgq.concurrency_limits") == [{"kind": "send_email", "max_running": 4}]
    page.goto("/workers")
    expect(page.locator("h1")).to_have_text("Workers")
    expect(page.locator("#workers")).to_contain_text("host-a:4242:worker-1")
    _fits(page, "#workers")
    page.shot("workers")


def test_queue_page_names_who_paused_it_and_its_unknown_kinds(page: Any, pgq_queue: Queue, db: SQL) -> None:
    """The queue page shows the pause's actor and the database role it ran as (pgq.paused_queues), and
    the queued jobs of kinds no live worker of the queue knows, per kind, as the overview does. Before,
    it named the actor only and showed no unknown kinds."""
    _busy_database(pgq_queue, db)  # billing paused by the test's role; its worker knows send_email, report
    pgq_queue.resume("billing")
    pgq_queue.pause("billing", actor="cli:ops-alice")
    pgq_queue.enqueue_many([{"kind": "legacy_export", "queue": "billing"}] * 4)
    pgq_queue.enqueue("resize_v2", queue="billing")
    role = db("SELECT paused_role FROM pgq.paused_queues WHERE queue = 'billing'")[0]["paused_role"]
    page.goto("/")
    expect(page.locator('tr[data-queue="billing"] [data-unknown-kinds]')).to_contain_text(
        "5 of unknown kinds: legacy_export, resize_v2")
    _fits(page, "#queues")  # the note wraps under the number instead of widening the table
    _follow(page, page.locator('tr[data-queue="billing"] td.name a'))
    expect(page.locator("#paused-by")).to_have_text("cli:ops-alice")
    expect(page.locator("#paused-role")).to_have_text(f"via role {role}")
    unknown = page.locator("#unknown-kinds")
    expect(unknown).to_contain_text("5 queued jobs of kinds no live worker of this queue knows")
    expect(unknown).to_contain_text("legacy_export (4)")
    expect(unknown).to_contain_text("resize_v2 (1)")
    page.shot("queue-unknown-kinds")
    unknown.locator('[data-unknown-kind="legacy_export"]').click()
    expect(page.locator("tr[data-job-id]")).to_have_count(4)
    # The API says the same.
    data = page.request.get("/api/queues/billing").json()
    assert data["paused_by"] == "cli:ops-alice" and data["paused_role"] == role
    assert data["unknown_kinds"] == {"legacy_export": 4, "resize_v2": 1} and data["unknown_kinds_capped"] == []


def test_queue_page_cancelled_tab_and_workers_count_this_queues_jobs(page: Any, pgq_queue: Queue, db: SQL) -> None:
    """Issue #44: the cancelled tab lists the queue's cancelled jobs newest first and counts them on every
    tab (jobs_cancelled_idx, revision 0031; it read the newest 100,000 finished jobs of every queue), and
    "Workers serving it" counts each worker's running jobs of this queue, not of every queue it serves."""
    _busy_database(pgq_queue, db)  # host-a:4242:worker-1 serves billing, mail, images and another queue
    cancelled = pgq_queue.enqueue_many([{"kind": "send_email", "queue": "mail"}] * 3)
    for job_id in cancelled:
        pgq_queue.cancel(job_id)
    pgq_queue.cancel(pgq_queue.enqueue("send_email", queue="billing"))  # another queue's
    pgq_queue.claim(worker="host-a:4242:worker-1", queues=["mail"], limit=1)
    pgq_queue.enqueue_many([{"kind": "send_email", "queue": "reports-with-a-long-name"}] * 2)
    pgq_queue.claim(worker="host-a:4242:worker-1", queues=["reports-with-a-long-name"], limit=5)

    page.goto("/queues/mail")
    expect(page.locator('[data-tab="cancelled"] .count')).to_have_text("3")
    row = page.locator('#queue-workers tr[data-worker="host-a:4242:worker-1"]')
    expect(row.locator('[data-col="running"]')).to_have_text("1 of 6 in all")
    _fits(page, "#queue-workers")
    page.click('[data-tab="cancelled"]')
    expect(page.locator("#queue-jobs tr[data-job-id]")).to_have_count(3)
    ids = [int(i) for i in page.locator("#queue-jobs tr[data-job-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.jobId)")]
    assert ids == cancelled[::-1]  # newest first
    _fits(page, "#queue-jobs .table")
    page.shot("queue-cancelled")


def test_overview_says_more_than_the_cap_of_handed_back_jobs(page: Any, pgq_queue: Queue, db: SQL) -> None:
    """Issue #44: the jobs an older worker handed back for their kind are counted up to
    UNKNOWN_KINDS_CAP per queue on the overview's Retrying column, as the unknown kinds are."""
    from pgq._ops import UNKNOWN_KINDS_CAP

    db("INSERT INTO pgq.jobs (queue, kind, attempts, last_error) "
       "SELECT 'orphans', 'legacy', 1, 'no worker of queue orphans knows kind legacy (worker old-1)' "
       "FROM generate_series(1, %s)", [UNKNOWN_KINDS_CAP + 5])
    page.goto("/")
    cell = page.locator('tr[data-queue="orphans"] td[data-col="retrying"]')
    expect(cell).to_contain_text(f"{UNKNOWN_KINDS_CAP + 5:,}")  # the retrying count itself is exact
    expect(cell).to_contain_text(f"more than {UNKNOWN_KINDS_CAP:,} unknown kind")
    _fits(page, "#queues")
    page.shot("overview-unknown-kind-capped")


def test_job_page_explains_with_readable_times_and_the_holders_state(page: Any, pgq_queue: Queue) -> None:
    """Issue #44: the explain panel shows its times readably with their relative time (it printed
    PostgreSQL's timestamp to the microsecond, and the time again after it), and the state of the job
    holding a sequence, with when it finished."""
    first = pgq_queue.enqueue("sync", queue="accounts", sequence_key="acct:42", max_attempts=1)
    second = pgq_queue.enqueue("sync", queue="accounts", sequence_key="acct:42")
    (claim,) = pgq_queue.claim(worker="host-1", queues=["accounts"])
    pgq_queue.fail(claim, "ValueError: account acct:42 is locked")
    later = pgq_queue.enqueue("report", queue="accounts", delay=7200)

    page.goto(f"/jobs/{first}")
    finished = page.locator('#explain [data-reason="finished"]')
    expect(finished).to_contain_text("failed at ")
    expect(finished.locator('[data-fact="finished_at"]')).to_contain_text(" UTC (")
    expect(finished.locator('[data-fact="finished_at"]')).to_contain_text("ago)")
    assert not re.search(r"\d\d:\d\d:\d\d\.\d", finished.inner_text())  # no microseconds
    assert finished.inner_text().count(" UTC") == 1  # the time once
    page.shot("explain-finished")
    page.goto(f"/jobs/{second}")
    held = page.locator('#explain [data-reason="sequence_held"]')
    expect(held.locator(f'[data-blocker="{first}"]')).to_contain_text("failed")
    expect(held.locator(f'[data-blocker="{first}"]')).to_contain_text("ago")
    page.shot("explain-sequence-held")
    page.goto(f"/jobs/{later}")
    expect(page.locator('#explain [data-reason="scheduled"] [data-fact="run_at"]')).to_contain_text("(in ")
    row = page.locator('#explain [data-reason="scheduled"]')
    box = row.bounding_box()
    assert box is not None and box["height"] < 40, box  # one line, not wrapped
