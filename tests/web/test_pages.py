"""The HTML pages on a real database (what a browser test would be slow to check one by one): what
each shows, the live fragments, paging links, and the schedules of an App."""

from __future__ import annotations

import html
import re

import psycopg
import pytest

import pgq
from pgq import Queue, _ops
from pgq.web import queries
from tests.conftest import SQL, enqueue_after

from .conftest import Client

LIVE = {"X-Pgq-Live": "1"}


def test_overview_page_and_its_live_fragment(dashboard: Client, pgq_queue: Queue) -> None:
    pgq_queue.enqueue_many([{"kind": "k", "queue": "mail"}] * 3)
    pgq_queue.pause("mail")
    client = dashboard(refresh_s=2.5)

    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<svg class="chart"' in page.text and 'data-queue="mail"' in page.text
    assert 'data-live data-interval="2.5"' in page.text and "Updates every 2.5 s" in page.text
    assert "badge-paused" in page.text and "/queues/resume" in page.text and 'value="mail"' in page.text

    fragment = client.get("/", headers=LIVE)
    assert fragment.status_code == 200 and "<html" not in fragment.text and 'data-queue="mail"' in fragment.text
    assert fragment.headers["vary"] == "X-Pgq-Live"


def test_overview_counts_jobs_handed_back_for_an_unknown_kind(dashboard: Client, pgq_queue: Queue) -> None:
    pgq_queue.enqueue_many([{"kind": "resize", "queue": "img"}] * 2 + [{"kind": "crop", "queue": "img"}])
    claims = pgq_queue.claim(worker="old", queues=["img"], limit=10)
    for claim in claims:  # what a worker whose app has no such task does (pgq/worker/runner.py)
        if claim.job.kind == "resize":
            assert pgq_queue._run(_ops.error_set(claim, "no worker of queue 'img' knows kind 'resize' (old)"))
            pgq_queue.snooze(claim, 60)
        else:
            pgq_queue.fail(claim, "ValueError: bad crop")
    row = re.search(r'<tr data-queue="img">.*?</tr>', dashboard().get("/").text, flags=re.DOTALL)
    assert row is not None
    retrying = re.search(r'data-col="retrying">(.*?)</td>', row.group(0), flags=re.DOTALL)
    assert retrying is not None and retrying.group(1).startswith("3 ") and "2 unknown kind" in retrying.group(1)


def test_overview_names_kinds_no_live_worker_knows(dashboard: Client, pgq_queue: Queue, pgq_dsn: str) -> None:
    """Issue #42: jobs of kinds no live worker of their queue knows are counted and named beside the
    queue's ready jobs (and in /api/queues); kinds a live worker knows are not."""
    pgq_queue.enqueue_many([{"kind": "resize", "queue": "img"}] * 3 + [{"kind": "crop", "queue": "img"}]
                           + [{"kind": "thumb", "queue": "img"}])
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgq.workers (claimed_by, host, pid, queues, kinds, slots, lease_s, refresh_s, "
                     "version) VALUES ('w1', 'h', 1, ARRAY['img'], ARRAY['thumb'], 1, 60, 60, 'test')")
    client = dashboard()
    row = re.search(r'<tr data-queue="img">.*?</tr>', client.get("/").text, flags=re.DOTALL)
    assert row is not None
    ready = re.search(r'data-col="ready">(.*?)</td>', row.group(0), flags=re.DOTALL)
    assert ready is not None and ready.group(1).startswith("5 ")
    assert "4 of unknown kinds: crop, resize" in ready.group(1) and "crop (1), resize (3)" in ready.group(1)
    [img] = [q for q in client.get("/api/queues").json()["queues"] if q["name"] == "img"]
    assert img["unknown_kinds"] == {"crop": 1, "resize": 3}


def test_jobs_page_keeps_its_filters_and_links_the_next_page(dashboard: Client, pgq_queue: Queue) -> None:
    ids = pgq_queue.enqueue_many([{"kind": "send", "queue": "mail"}] * 60)
    client = dashboard()

    page = client.get("/jobs?queue=mail&kind=send&status=queued").text
    assert len(re.findall(r'<tr data-job-id="', page)) == 50
    assert 'value="mail"' in page and 'value="send"' in page and '<option value="queued" selected>' in page
    older = re.search(r'href="(/jobs\?[^"]*cursor=\d+[^"]*)"', page)
    assert older, "no link to the next page"
    link = older.group(1).replace("&amp;", "&")
    assert "queue=mail" in link and "status=queued" in link
    second = client.get(link).text
    assert len(re.findall(r'<tr data-job-id="', second)) == 10
    assert f'data-job-id="{ids[0]}"' in second and "cursor=" not in second.split("« Newest")[-1]
    assert "No job matches." in client.get("/jobs?kind=other").text


def test_job_page_shows_lease_progress_watermarks_and_result(dashboard: Client, pgq_queue: Queue,
                                                             db: SQL) -> None:
    job_id = pgq_queue.enqueue("report", {"month": 11}, dedupe_key="report-11", watermark=7)
    pgq_queue.claim(worker="host-9")
    db("UPDATE pgq.jobs SET progress = '{\"done\": 3, \"of\": 10}' WHERE id = %s", [job_id])
    client = dashboard()

    page = client.get(f"/jobs/{job_id}").text
    assert "host-9" in page and "report-11" in page and "Cancel job" in page
    assert '"done": 3' in html.unescape(page)
    assert re.search(r"<dt>Input watermark</dt><dd>7</dd>", page)
    lease = re.search(r">in (\d+)s</time>", page)  # the 60 s lease, from the database clock
    assert (lease and 30 <= int(lease.group(1)) <= 60) or ">in 1m 00s</time>" in page

    fragment = client.get(f"/jobs/{job_id}", headers=LIVE).text
    assert "<html" not in fragment and "host-9" in fragment


def test_job_page_and_api_show_the_group_key(dashboard: Client, pgq_queue: Queue) -> None:
    grouped = pgq_queue.enqueue("sync", group_key="acct:<42>")
    plain = pgq_queue.enqueue("sync")
    client = dashboard()
    page = client.get(f"/jobs/{grouped}").text
    assert '<dd class="mono" data-field="group-key">acct:&lt;42&gt;</dd>' in page  # escaped
    assert '<dd class="mono" data-field="group-key">\u2013</dd>' in client.get(f"/jobs/{plain}").text
    assert client.get(f"/api/jobs/{grouped}").json()["job"]["group_key"] == "acct:<42>"


def test_job_page_shows_the_sequence_key_and_the_job_holding_it(dashboard: Client, pgq_queue: Queue) -> None:
    first = pgq_queue.enqueue("post", sequence_key="acct:<7>")
    second = pgq_queue.enqueue("post", sequence_key="acct:<7>")
    client = dashboard()
    page = client.get(f"/jobs/{second}").text
    assert ('<dd class="mono" data-field="sequence-key">acct:&lt;7&gt; <span class="subtle small" '
            f'data-field="held-by">held by job <a href="/jobs/{first}">#{first}</a></span></dd>') in page
    # The first runs now: its key, and nobody holds it.
    assert '<dd class="mono" data-field="sequence-key">acct:&lt;7&gt;</dd>' in client.get(f"/jobs/{first}").text
    assert client.get(f"/api/jobs/{second}").json()["job"]["sequence_key"] == "acct:<7>"


def test_overview_counts_waiting_jobs_per_queue_and_links_them(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    parent = pgq_queue.enqueue("fetch", queue="mail")
    enqueue_after(db, "send", [parent], queue="mail")
    enqueue_after(db, "send", [parent], queue="mail")
    enqueue_after(db, "report", [parent], queue="reports")  # a queue holding only waiting jobs
    page = dashboard().get("/").text

    def cell(queue: str, column: str) -> str:
        row = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', page, re.S)
        assert row, f"no row of queue {queue}"
        found = re.search(rf'<td class="num" data-col="{column}">(.*?)</td>', row.group(1), re.S)
        assert found, column
        return found.group(1)

    assert cell("mail", "ready") == "1" and ">2</a>" in cell("mail", "waiting")
    assert 'href="/jobs?queue=mail&amp;status=waiting"' in cell("mail", "waiting")
    assert cell("reports", "ready") == "0" and ">1</a>" in cell("reports", "waiting")


def test_jobs_page_filters_waiting_jobs(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    parent = pgq_queue.enqueue("fetch")
    child = enqueue_after(db, "merge", [parent])
    page = dashboard().get("/jobs?status=waiting").text
    assert re.findall(r'<tr data-job-id="(\d+)"', page) == [str(child)]
    assert '<option value="waiting" selected>' in page
    assert '<span class="badge badge-waiting">waiting</span>' in page and "after its parents" in page


def test_job_page_lists_parents_and_children_and_what_a_waiting_job_waits_for(
        dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    fetch_a, fetch_b = pgq_queue.enqueue("fetch"), pgq_queue.enqueue("fetch")
    merge = enqueue_after(db, "merge", [fetch_a, fetch_b])
    report = enqueue_after(db, "report", [merge], run=True)
    [claim] = pgq_queue.claim(worker="w")
    pgq_queue.complete(claim)  # fetch_a
    client = dashboard()

    page = client.get(f"/jobs/{merge}").text
    waits = re.search(r'data-field="waits-for">(.*?)</span>', page, re.S)
    assert waits and html.unescape(re.sub(r"<[^>]+>", "", waits.group(1))) == (
        f"waiting for 1 of 2 parent jobs: job {fetch_b}")
    assert f'<a href="/jobs/{fetch_b}">{fetch_b}</a>' in waits.group(1)
    parents = re.search(r'<table class="table" id="parents">(.*?)</table>', page, re.S)
    children = re.search(r'<table class="table" id="children">(.*?)</table>', page, re.S)
    assert parents and children
    rows = re.findall(r'<tr data-job-id="(\d+)">(.*?)</tr>', parents.group(1), re.S)
    assert [int(i) for i, _ in rows] == [fetch_a, fetch_b]
    assert f'<a href="/jobs/{fetch_a}">' in rows[0][1] and "badge-succeeded" in rows[0][1]
    assert "badge-queued" in rows[1][1] and "not finished" in rows[1][1] and "to succeed" in rows[1][1]
    assert f'<a href="/jobs/{report}">' in children.group(1) and "badge-waiting" in children.group(1)
    assert "to finish" in children.group(1)
    assert 'id="cancel-job"' in page and "the jobs that need it to succeed are cancelled with it" in page

    of_report = client.get(f"/jobs/{report}").text
    assert 'id="children"' not in of_report and "None: no job waits for it." in of_report
    plain = client.get(f"/jobs/{pgq_queue.enqueue('plain')}").text
    assert 'id="dependencies"' not in plain and "waits-for" not in plain
    fragment = client.get(f"/jobs/{merge}", headers=LIVE).text
    assert "<html" not in fragment and 'id="parents"' in fragment


def test_job_page_says_how_many_dependencies_it_left_out(dashboard: Client, pgq_queue: Queue, db: SQL,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queries, "DEPENDENCIES_SHOWN", 2)
    parents = pgq_queue.enqueue_many([{"kind": "part"}] * 7)
    callback = enqueue_after(db, "callback", parents, run=True)
    for claim in pgq_queue.claim(worker="w", limit=3):
        pgq_queue.complete(claim)
    parent_purged = parents[0]
    db("DELETE FROM pgq.jobs WHERE id = %s", [parent_purged])

    page = dashboard().get(f"/jobs/{callback}").text
    waits = re.search(r'data-field="waits-for">(.*?)</span>', page, re.S)
    assert waits and waits.group(1) == "waiting for 4 of 7 parent jobs"  # none of the two listed
    assert "and 5 more: <code>SELECT * FROM pgq.job_dependencies WHERE job_id = " in page
    row = re.search(rf'<tr data-job-id="{parent_purged}">(.*?)</tr>', page, re.S)
    assert row and f'href="/jobs/{parent_purged}"' not in row.group(1) and ">deleted</span>" in row.group(1)
    assert "succeeded" in row.group(1)  # its recorded outcome stays


def test_schedules_page_with_an_app(dashboard: Client, pgq_dsn: str) -> None:
    app = pgq.App(pgq_dsn)

    @app.periodic(cron="*/5 * * * *", name="cleanup")
    def cleanup() -> None:
        pass

    @app.task
    def other() -> None:
        pass

    page = dashboard(app=app).get("/schedules").text
    assert "cleanup" in page and "cron &#39;*/5 * * * *&#39;" in page
    assert "no job" in page and "tick-missing" in page  # no worker ran the ticks
    # The next tick, relative: "in 2m 05s", or "now" when the page was read in its last second.
    assert re.search(r"in \d+m \d\ds|in \d+s|>now</time>", page)
    jobs = dashboard(app=app).get("/jobs").text
    assert '<option value="other">' in jobs and '<option value="cleanup">' in jobs


def test_workers_and_limits_pages(dashboard: Client, pgq_queue: Queue) -> None:
    pgq_queue.enqueue_many([{"kind": "charge", "queue": "billing"}] * 2)
    pgq_queue.claim(worker="host-5", limit=2)
    pgq_queue.set_concurrency_limit("charge", 2)
    pgq_queue.set_rate_limit("charge", (30, 90))
    client = dashboard()

    workers = client.get("/workers").text
    # Each job twice: in flight on its worker's row, and in the running jobs.
    assert "host-5" in workers and len(re.findall(r'<a href="/jobs/\d+"', workers)) == 4
    assert "<html" not in client.get("/workers", headers=LIVE).text
    limits = client.get("/limits").text
    assert '<meter min="0" max="2" value="2"' in limits and "30 per 90 s" in limits
    assert "No per-group limit is set" in limits
    pgq_queue.set_group_limits("charge", rate=(4, 60))
    limits = client.get("/limits").text
    row = re.search(r'<table class="table" id="group-limits">.*?</table>', limits, re.S)
    assert row is not None and "charge" in row.group(0) and "4 per minute" in row.group(0) and "any" in row.group(0)


def test_workers_page_lists_idle_registered_workers_and_busy_ones(dashboard: Client, pgq_queue: Queue,
                                                                  db: SQL) -> None:
    db("SELECT * FROM pgq.worker_register('idle-1', 'box', 7, '{billing}', '{charge}', 8, 30, 15, '1.0')")
    db("SELECT * FROM pgq.worker_register('busy-1', 'box', 8, NULL, '{charge}', 2, 30, 15, '1.0')")
    ids = pgq_queue.enqueue_many([{"kind": "charge", "queue": "billing"}] * 2)
    pgq_queue.claim(worker="busy-1", limit=2)
    page = dashboard().get("/workers").text
    rows = re.findall(r"<tr[^>]*>\s*<td class=\"mono worker-cell\">([^<]+)<div.*?</td>\s*<td>(.*?)</td>", page,
                      flags=re.S)
    assert [(name, re.sub(r"<[^>]+>", "", state)) for name, state in rows] == [("busy-1", "busy"), ("idle-1", "idle")]
    assert all(f'href="/jobs/{i}"' in page for i in ids)
    assert "all queues" in page and "box:7" in page


def test_job_page_explains_why_the_job_is_not_running(dashboard: Client, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("charge", queue="billing")
    pgq_queue.pause("billing")
    page = dashboard().get(f"/jobs/{job_id}").text
    assert "Why is it not running?" in page
    assert re.findall(r'data-reason="([a-z_]+)"', page) == ["queue_paused", "no_live_worker"]


def test_pages_say_when_there_is_nothing(dashboard: Client) -> None:
    client = dashboard()
    assert "No queue holds waiting, queued or running jobs" in client.get("/").text
    assert "No worker is registered and none holds a job" in client.get("/workers").text
    assert "No concurrency limit is set" in client.get("/limits").text
    assert "No job matches." in client.get("/jobs").text


def test_job_page_shows_an_earlier_attempts_error_as_previous_once_it_runs_again_or_succeeds(
        dashboard: Client, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("charge")
    (first,) = pgq_queue.claim(worker="host-1")
    pgq_queue.fail(first, "TimeoutError: gateway slow", retry_in=0)
    client = dashboard()

    retrying = client.get(f"/jobs/{job_id}").text  # queued again: nothing of attempt 1 is current
    assert 'data-field="last-error"' not in retrying and ">Last error<" not in retrying
    assert re.search(r'data-field="previous-attempt-error">TimeoutError: gateway slow<', retrying)
    owner = re.search(r'data-field="lease-owner">(.*?)</dd>', retrying, re.S)
    assert owner and owner.group(1).startswith("\u2013") and "last attempt: host-1" in owner.group(1)
    started = re.search(r'data-field="started">(.*?)</dd>', retrying, re.S)
    assert started and "not yet" in started.group(1) and "<time" not in started.group(1)

    (second,) = pgq_queue.claim(worker="host-2")
    running = client.get(f"/jobs/{job_id}").text
    owner = re.search(r'data-field="lease-owner">(.*?)</dd>', running, re.S)
    assert owner and owner.group(1) == "host-2"
    pgq_queue.complete(second, {"ok": True})

    done = client.get(f"/jobs/{job_id}").text
    assert ">Last error<" not in done and "Previous attempt's error" in done
    assert "TimeoutError: gateway slow" in done and "the job succeeded since" in done
    listed = client.get("/jobs").text
    assert "(previous) TimeoutError: gateway slow" in listed


def test_job_page_shows_the_error_a_job_failed_with_as_its_last_error(dashboard: Client, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("charge", max_attempts=1)
    (claim,) = pgq_queue.claim(worker="host-1")
    pgq_queue.fail(claim, "PaymentDeclined: card expired")
    page = dashboard().get(f"/jobs/{job_id}").text
    assert re.search(r'data-field="last-error">PaymentDeclined: card expired<', page)
    assert "previous-attempt-error" not in page
