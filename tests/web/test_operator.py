"""Issue #44's operator features on a real database: the queue page and its tabs, searches that answer
in one request (with the partial flag), the job-id box, run now, error groups, pause all, limits
editing (admin only), and actions attributed to the dashboard's user in the audit and paused_by."""

from __future__ import annotations

import re
from html import unescape

import pytest
from psycopg.conninfo import conninfo_to_dict
from starlette.requests import Request

from pgq import Queue
from pgq.web import queries
from tests.conftest import SQL
from tests.privileges.test_roles import rows
from tests.web.test_queries import read

from .conftest import Client, Roles, basic, csrf_token

JSON = {"Content-Type": "application/json"}


def _fail(queue: Queue, name: str, kind: str, error: str, n: int) -> list[int]:
    ids = queue.enqueue_many([{"kind": kind, "queue": name, "max_attempts": 1}] * n)
    for claim in queue.claim(worker="w", queues=[name], limit=n):
        queue.fail(claim, error)
    return ids


def test_queue_page_tabs_count_and_list_each_state(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    failed = _fail(pgq_queue, "billing", "charge", "card declined", 2)
    ready = pgq_queue.enqueue_many([{"kind": "send", "queue": "billing"}] * 3)
    later = pgq_queue.enqueue("send", queue="billing", delay=3600)
    cancelled = pgq_queue.enqueue("send", queue="billing", delay=7200)
    pgq_queue.cancel(cancelled)
    pgq_queue.enqueue_many([{"kind": "send", "queue": "other"}] * 5)
    pgq_queue.pause("billing")
    client = dashboard()

    overview = client.get("/").text
    assert 'href="/queues/billing"' in overview  # queue names link to their page
    page = client.get("/queues/billing")
    assert page.status_code == 200
    text = page.text
    counts = dict(re.findall(r'data-tab="(\w+)"[^>]*>\w+ <span class="count">([\d,+]+)</span>', text))
    assert counts == {"ready": "3", "scheduled": "1", "retrying": "0", "running": "0", "waiting": "0",
                      "failed": "2", "cancelled": "1"}, counts  # cancelled: on every tab (revision 0031)
    assert re.search(r'data-tab="cancelled" class="active"[^>]*>cancelled <span class="count">1<',
                     client.get("/queues/billing?tab=cancelled").text)
    assert 'id="paused-banner"' in text and "Resume" in text  # paused, with the button to resume
    assert sorted(int(i) for i in re.findall(r'<tr data-job-id="(\d+)"', text)) == sorted(ready)
    for tab, wanted in (("scheduled", {later}), ("failed", set(failed)), ("cancelled", {cancelled})):
        shown = client.get(f"/queues/billing?tab={tab}").text
        assert {int(i) for i in re.findall(r'<tr data-job-id="(\d+)"', shown)} >= wanted, tab
    assert client.get("/queues/billing?tab=nope").status_code == 400

    api = client.get("/api/queues/billing?tab=failed").json()
    assert api["counts"]["failed"] == 2 and api["paused"] is True and api["cancelled_partial"] is False
    assert sorted(j["id"] for j in api["jobs"]) == sorted(failed)

    # Resume from the queue page comes back to it.
    token = csrf_token(client, "/queues/billing")
    answer = client.post("/queues/resume", data={"csrf_token": token, "queue": "billing", "back": "queue"},
                         follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/queues/billing?done=resume"
    assert db("SELECT count(*) AS n FROM pgq.paused_queues") == [{"n": 0}]


def test_the_cancelled_tab_lists_the_queues_newest_and_says_when_its_count_stopped(pgq_dsn: str,
                                                                                  pgq_queue: Queue) -> None:
    from pgq.web.queue_page import queue_page

    mine = [pgq_queue.enqueue("k", queue="q") for _ in range(3)]
    for job_id in mine:
        pgq_queue.cancel(job_id)
    pgq_queue.cancel(pgq_queue.enqueue("k", queue="other"))  # another queue's: neither counted nor listed
    full = read(pgq_dsn, queue_page("q", "ready"))
    assert full.counts["cancelled"] == 3 and not full.cancelled_partial  # counted on every tab
    listed = read(pgq_dsn, queue_page("q", "cancelled"))
    assert [j["id"] for j in listed.jobs] == mine[::-1]  # newest first
    cut = read(pgq_dsn, queue_page("q", "cancelled", cancelled_cap=2))
    assert cut.cancelled_partial and cut.counts["cancelled"] == 2 and len(cut.jobs) == 3  # the list is not cut


def test_a_rare_match_is_found_in_one_request_and_partial_says_when_not(pgq_dsn: str, pgq_queue: Queue,
                                                                        dashboard: Client) -> None:
    target = pgq_queue.enqueue("mail", payload={"to": "ann"})
    pgq_queue.enqueue_many([{"kind": "other", "payload": {"n": i}} for i in range(200)])
    # Windows of 4 ids: 50 statements before the match. One request finds it.
    page = read(pgq_dsn, queries.find_jobs(queries.JobFilter(payload='{"to": "ann"}'), before=None, limit=50,
                                           window=4))
    assert [j["id"] for j in page.jobs] == [target] and page.next_cursor is None and not page.partial
    # Without the time to reach it, the answer says it is partial.
    cut = read(pgq_dsn, queries.find_jobs(queries.JobFilter(payload='{"to": "ann"}'), before=None, limit=50,
                                          window=4, budget_s=0.0, empty_budget_s=0.0))
    assert cut.jobs == [] and cut.partial and cut.next_cursor is not None

    client = dashboard()
    api = client.get("/api/jobs", params={"payload": '{"to": "ann"}'}).json()
    assert [j["id"] for j in api["jobs"]] == [target] and api["partial"] is False
    assert client.get("/api/jobs", params={"kind": "mail"}).json()["jobs"][0]["id"] == target


def test_a_search_by_an_indexed_status_is_complete_in_one_statement(pgq_dsn: str, pgq_queue: Queue) -> None:
    failed = _fail(pgq_queue, "q", "k", "boom: disk full\ntrace", 3)
    pgq_queue.enqueue_many([{"kind": "k", "queue": "q"}] * 50)
    page = read(pgq_dsn, queries.find_jobs(queries.JobFilter(status=queries.JobStatus.FAILED, text="disk"),
                                           before=None, limit=2, window=1, budget_s=0.0, empty_budget_s=0.0))
    assert [j["id"] for j in page.jobs] == sorted(failed, reverse=True)[:2] and not page.partial
    rest = read(pgq_dsn, queries.find_jobs(queries.JobFilter(status=queries.JobStatus.FAILED), before=page.next_cursor,
                                           limit=2, window=1, budget_s=0.0, empty_budget_s=0.0))
    assert [j["id"] for j in rest.jobs] == [min(failed)] and rest.next_cursor is None


def test_the_job_id_box_goes_to_the_job(dashboard: Client, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("k")
    client = dashboard()
    assert 'name="id"' in client.get("/").text
    answer = client.get("/jobs", params={"id": f" {job_id} "}, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == f"/jobs/{job_id}"
    assert client.get("/jobs", params={"id": "x1"}).status_code == 400
    assert [j["id"] for j in client.get("/api/jobs", params={"id": str(job_id)}).json()["jobs"]] == [job_id]


def test_run_now_makes_a_scheduled_job_due_and_is_audited(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    later = pgq_queue.enqueue("k", delay=3600)
    ready = pgq_queue.enqueue("k")
    client = dashboard(auth="ops:pw")
    auth = basic("ops", "pw")
    assert 'id="run-now"' in client.get(f"/jobs/{later}", headers=auth).text
    assert 'id="run-now"' not in client.get(f"/jobs/{ready}", headers=auth).text
    job = client.post(f"/api/jobs/{later}/run-now", headers={**JSON, **auth}).json()["job"]
    assert db("SELECT run_at <= now() AS due FROM pgq.jobs WHERE id = %s", [later]) == [{"due": True}]
    assert job["status"] == "queued"
    refused = client.post(f"/api/jobs/{ready}/run-now", headers={**JSON, **auth})
    assert refused.status_code == 409
    assert db("SELECT action, actor, job_ids FROM pgq.job_audit") == [
        {"action": "run_now", "actor": "dashboard:ops", "job_ids": [later]}]
    page = client.get(f"/jobs/{later}", headers=auth).text
    assert 'data-field="actor">dashboard:ops<' in page


def test_single_actions_and_pauses_name_the_hosts_user(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    def who(request: Request) -> str | None:
        return request.headers.get("x-user")

    cancelled = pgq_queue.enqueue("k", queue="mail")
    client = dashboard(actor=who)
    assert client.post(f"/api/jobs/{cancelled}/cancel", headers={**JSON, "X-User": "alice"}).status_code == 200
    assert client.post(f"/api/jobs/{cancelled}/retry", headers=JSON).status_code == 200  # nobody named
    assert db("SELECT action, actor FROM pgq.job_audit ORDER BY id") == [
        {"action": "cancel", "actor": "alice"}, {"action": "retry", "actor": "dashboard"}]
    client.post("/api/queues/mail/pause", headers={**JSON, "X-User": "bob"})
    client.post("/api/queues/mail/pause", headers={**JSON, "X-User": "carol"})  # paused already: keeps bob
    assert db("SELECT paused_by, paused_role FROM pgq.paused_queues") == [
        {"paused_by": "bob", "paused_role": "postgres"}]
    waiting = pgq_queue.enqueue("k", queue="mail")
    explain = client.get(f"/api/jobs/{waiting}/explain").json()
    assert any(r["facts"].get("paused_by") == "bob" for r in explain["reasons"])
    assert "queue mail is paused (by bob via role postgres since " in unescape(client.get(f"/jobs/{waiting}").text)
    client.post("/api/queues/mail/resume", headers={**JSON, "X-User": "dave"})
    assert db("SELECT action, target, actor, db_role FROM pgq.control_audit ORDER BY id") == [
        {"action": "pause", "target": "mail", "actor": "bob", "db_role": "postgres"},
        {"action": "resume", "target": "mail", "actor": "dave", "db_role": "postgres"}]
    client.post(f"/api/jobs/{cancelled}/cancel", headers={**JSON, "X-User": "alice"})
    page = unescape(client.get(f"/jobs/{cancelled}").text)
    assert 'data-field="actor">alice<' in page
    assert re.search(r'cancelled at <span class="fact-time" data-fact="finished_at"><time [^>]*>[\d:]+ UTC</time> '
                     r'<span class="subtle">\([^)]+\)</span></span> by alice \(via role postgres\) after 0 attempt',
                     page)


def test_pause_all_pauses_every_queue_listed(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    for name in ("a", "b", "c"):
        pgq_queue.enqueue("k", queue=name)
    pgq_queue.pause("b")
    client = dashboard()
    token = csrf_token(client, "/")
    assert 'id="pause-all"' in client.get("/").text
    answer = client.post("/queues/pause-all", data={"csrf_token": token}, follow_redirects=False)
    assert answer.status_code == 303
    rows = db("SELECT queue, paused_by FROM pgq.paused_queues ORDER BY queue")
    assert [r["queue"] for r in rows] == ["a", "b", "c"] and rows[0]["paused_by"] == "dashboard"
    assert rows[1]["paused_by"] != "dashboard"  # b was paused before, by the role


def test_error_groups_link_to_their_jobs_and_offer_delete(dashboard: Client, pgq_queue: Queue) -> None:
    declined = _fail(pgq_queue, "q", "charge", "card declined", 2)
    _fail(pgq_queue, "q", "charge", "timeout", 1)
    client = dashboard()
    page = client.get("/jobs", params={"status": "failed"}).text
    row = re.search(r'data-group-kind="charge">(?:(?!</tr>).)*card declined.*?</tr>', page, re.S)
    assert row
    listing = unescape(re.search(r'data-group-list href="([^"]+)"', row.group(0)).group(1))
    listed = client.get(listing).text
    assert sorted(int(i) for i in re.findall(r'<tr data-job-id="(\d+)"', listed)) == sorted(declined)
    delete = unescape(re.search(r'data-group-delete href="([^"]+)"', row.group(0)).group(1))
    confirm = client.get(delete).text
    assert re.search(r'id="bulk-count">2<', confirm)


def test_limits_are_edited_by_the_admin_only(dashboard: Client, roles: Roles) -> None:
    admin = dashboard(roles.admin, csrf_secret="k")
    token = csrf_token(admin, "/limits")
    for form in ({"limit": "concurrency", "kind": "mail", "max_running": "3"},
                 {"limit": "rate", "kind": "mail", "rate": "10/min"},
                 {"limit": "group", "kind": "mail", "max_running": "1", "rate": ""}):
        answer = admin.post("/limits", data={"csrf_token": token, **form}, follow_redirects=False)
        assert answer.status_code == 303, answer.text
    bad = admin.post("/limits", data={"csrf_token": token, "limit": "concurrency", "kind": "mail",
                                      "max_running": "-1"})
    assert bad.status_code == 400
    for form in ({"limit": "rate", "kind": "mail", "rate": "lots"}, {"limit": "nope", "kind": "mail"},
                 {"limit": "concurrency", "kind": "", "max_running": "2"}):
        assert admin.post("/limits", data={"csrf_token": token, **form}).status_code == 400, form
    assert admin.post("/limits", data={"limit": "concurrency", "kind": "mail", "max_running": "7"}).status_code == 403
    limits = admin.get("/api/limits").json()
    assert [(c["kind"], c["max_running"]) for c in limits["concurrency"]] == [("mail", 3)]
    audit = rows(roles.dsn, "SELECT action, actor, db_role FROM pgq.control_audit ORDER BY id")
    assert audit == [{"action": a, "actor": "dashboard", "db_role": conninfo_to_dict(roles.admin)["user"]}
                     for a in ("concurrency_limit", "rate_limit", "group_limits")]

    for who in ("worker", "producer"):
        viewer = dashboard(getattr(roles, who), csrf_secret="k")
        assert 'id="edit-limits"' not in viewer.get("/limits").text
        viewer_token = csrf_token(viewer, "/jobs") if "csrf_token" in viewer.get("/jobs").text else token
        refused = viewer.post("/limits", data={"csrf_token": viewer_token, "limit": "concurrency", "kind": "mail",
                                               "max_running": "9"})
        assert refused.status_code == 403, (who, refused.text[:200])
    assert [(c["kind"], c["max_running"]) for c in admin.get("/api/limits").json()["concurrency"]] == [("mail", 3)]


def test_job_page_shows_progress_as_a_bar_and_explain_with_times_and_blockers(
        dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    parent = pgq_queue.enqueue("k", queue="q")
    child = db("SELECT pgq.enqueue('k', queue => 'q', depends_on => ARRAY[%s]::bigint[]) AS id", [parent])[0]["id"]
    later = pgq_queue.enqueue("k", queue="q", delay=7200)
    db("UPDATE pgq.jobs SET progress = '{\"pct\": 40, \"step\": \"upload\"}' WHERE id = %s", [parent])
    client = dashboard()
    page = client.get(f"/jobs/{parent}").text
    assert re.search(r'<progress max="100" value="40.0" data-field="progress-bar">', page)
    waiting = client.get(f"/jobs/{child}").text
    assert re.search(rf'data-blocker="{parent}"><span class="badge badge-queued">queued', waiting)
    scheduled = client.get(f"/jobs/{later}").text
    assert re.search(r'data-fact="run_at"><time [^>]*>[\d:]+ UTC</time> <span class="subtle">\(in (1h 59m|2h)',
                     scheduled), scheduled[:0]


def test_the_overview_says_plainly_when_its_counts_are_partial(dashboard: Client, pgq_queue: Queue,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(4):
        pgq_queue.cancel(pgq_queue.enqueue("k", queue="q"))
    client = dashboard()
    assert 'id="counts-partial"' not in client.get("/").text
    assert client.get("/api/queues").json()["last_hour_partial"] is False
    whole = queries.overview
    monkeypatch.setattr(queries, "overview", lambda cap=2, chart_range="1h": whole(cap, chart_range))
    page = client.get("/").text
    assert 'id="counts-partial"' in page and "counted the newest 50,000 finished jobs since them only" in page
    api = client.get("/api/queues").json()
    assert api["last_hour_partial"] is True and api["counted_over_finished"] == queries.FINISHED_CAP


def test_the_authenticated_user_of_the_host_app_is_the_actor(pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    from starlette.authentication import SimpleUser
    from starlette.testclient import TestClient
    from starlette.types import ASGIApp, Receive, Scope, Send

    from pgq.web import create_app

    def signed_in(app: ASGIApp) -> ASGIApp:
        async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                scope["user"] = SimpleUser("zoe")  # what AuthenticationMiddleware leaves in the scope
            await app(scope, receive, send)
        return wrapped

    job_id = pgq_queue.enqueue("k", queue="mail")
    with TestClient(signed_in(create_app(pgq_dsn, trust_network=True))) as client:
        assert client.post(f"/api/jobs/{job_id}/cancel", headers=JSON).status_code == 200
        assert client.post("/api/queues/mail/pause", headers=JSON).status_code == 200
    assert db("SELECT actor FROM pgq.job_audit") == [{"actor": "dashboard:zoe"}]
    assert db("SELECT paused_by FROM pgq.paused_queues") == [{"paused_by": "dashboard:zoe"}]


def test_the_queue_pages_workers_count_that_queues_running_jobs_only(dashboard: Client, pgq_queue: Queue,
                                                                    db: SQL) -> None:
    """Issue #44: "Workers serving it" counts each worker's running jobs of that queue (and says how many
    it runs in all), not of every queue it serves."""
    db("SELECT * FROM pgq.worker_register('both', 'h', 1, NULL, '{k}', 4, 30, 15, 'v')")
    db("SELECT * FROM pgq.worker_register('other', 'h', 2, '{b}', '{k}', 4, 30, 15, 'v')")
    pgq_queue.enqueue_many([{"kind": "k", "queue": q} for q in ("a", "b", "b", "b")])
    pgq_queue.claim(worker="both", queues=["a"], limit=1)
    pgq_queue.claim(worker="both", queues=["b"], limit=2)
    pgq_queue.claim(worker="stray", queues=["b"], limit=1)  # not registered
    client = dashboard()

    a = client.get("/api/queues/a").json()["workers"]
    assert [(w["worker"], w["running"], w["running_all"]) for w in a] == [("both", 1, 3)]  # not "other": serves b
    b = client.get("/api/queues/b").json()["workers"]
    assert sorted((w["worker"], w["running"], w["running_all"]) for w in b) == [
        ("both", 2, 3), ("other", 0, 0), ("stray", 1, 1)]
    page = client.get("/queues/a").text
    row = re.search(r'<tr data-worker="both">.*?</tr>', page, re.S)
    assert row and 'data-col="running">1 <span class="subtle small" data-col="running-all">of 3 in all' in row[0]
