"""The HTML pages on a real database (what a browser test would be slow to check one by one): what
each shows, the live fragments, paging links, and the schedules of an App."""

from __future__ import annotations

import html
import re

import pgq
from pgq import Queue
from tests.conftest import SQL

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
    assert "badge-paused" in page.text and "/queues/mail/resume" in page.text

    fragment = client.get("/", headers=LIVE)
    assert fragment.status_code == 200 and "<html" not in fragment.text and 'data-queue="mail"' in fragment.text
    assert fragment.headers["vary"] == "X-Pgq-Live"


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
    assert re.search(r"in \d+m \d\ds|in \d+s", page)
    jobs = dashboard(app=app).get("/jobs").text
    assert '<option value="other">' in jobs and '<option value="cleanup">' in jobs


def test_workers_and_limits_pages(dashboard: Client, pgq_queue: Queue) -> None:
    pgq_queue.enqueue_many([{"kind": "charge", "queue": "billing"}] * 2)
    pgq_queue.claim(worker="host-5", limit=2)
    pgq_queue.set_concurrency_limit("charge", 2)
    pgq_queue.set_rate_limit("charge", (30, 90))
    client = dashboard()

    workers = client.get("/workers").text
    assert "host-5" in workers and len(re.findall(r'<a href="/jobs/\d+"', workers)) == 2
    assert "<html" not in client.get("/workers", headers=LIVE).text
    limits = client.get("/limits").text
    assert '<meter min="0" max="2" value="2"' in limits and "30 per 90 s" in limits


def test_pages_say_when_there_is_nothing(dashboard: Client) -> None:
    client = dashboard()
    assert "No queue holds queued or running jobs" in client.get("/").text
    assert "No worker holds a job right now" in client.get("/workers").text
    assert "No concurrency limit is set" in client.get("/limits").text
    assert "No job matches." in client.get("/jobs").text
