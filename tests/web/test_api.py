"""The dashboard's JSON API on a real database: what it reads, the four actions, keyset pagination,
and the 400 / 404 / 405 / 409 answers to bad requests (never a 500)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import pgq.web.dashboard
from pgq import AsyncQueue, JobSpec, Queue
from tests.conftest import SQL, enqueue_after

from .conftest import Client

JSON = {"Content-Type": "application/json"}


def test_queues_counts_backlog_running_and_the_last_hour(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    pgq_queue.enqueue_many([{"kind": "a", "queue": "mail"} for _ in range(4)])
    pgq_queue.enqueue("b", queue="mail", delay=3600)
    pgq_queue.enqueue("c", queue="reports")
    claims = pgq_queue.claim(worker="w1", queues=["mail"], limit=3)
    pgq_queue.complete(claims[0], {"ok": True})
    pgq_queue.fail(claims[1], "boom", final=True)
    pgq_queue.pause("idle")

    body = dashboard().get("/api/queues").json()

    queues = {q["name"]: q for q in body["queues"]}
    assert sorted(queues) == ["idle", "mail", "reports"]
    mail = queues["mail"]
    assert (mail["ready"], mail["scheduled"], mail["running"], mail["workers"]) == (1, 1, 1, 1)
    assert mail["last_hour"]["succeeded"] == 1 and mail["last_hour"]["failed"] == 1
    assert sum(mail["last_hour"]["finished_per_minute"]) == 2 and sum(mail["last_hour"]["failed_per_minute"]) == 1
    assert len(body["minutes"]) == 60
    assert mail["paused"] is False and queues["idle"]["paused"] is True and queues["idle"]["ready"] == 0
    assert queues["reports"]["oldest_ready_age_s"] >= 0
    assert body["busy_workers"] == 1


def test_job_list_filters_by_queue_kind_status_and_text(dashboard: Client, pgq_queue: Queue) -> None:
    a = pgq_queue.enqueue("send", queue="mail", dedupe_key="Order-17")
    b = pgq_queue.enqueue("send", queue="sms")
    c = pgq_queue.enqueue("resize", queue="mail")
    (claim,) = pgq_queue.claim(worker="w", kinds=["resize"])
    pgq_queue.fail(claim, "ValueError: Bad Pixel", final=True)
    client = dashboard()

    def ids(query: str) -> list[int]:
        response = client.get(f"/api/jobs?{query}")
        assert response.status_code == 200, response.text
        return [j["id"] for j in response.json()["jobs"]]

    assert ids("") == [c, b, a]  # newest first
    assert ids("queue=mail") == [c, a]
    assert ids("kind=send") == [b, a]
    assert ids("status=failed") == [c] == ids("status=FAILED")
    assert ids("q=order-1") == [a]  # in the dedupe key, ignoring case
    assert ids("q=bad%20pixel") == [c]  # in the error
    assert ids("q=RESIZ") == [c]  # in the kind
    assert ids("q=%25") == []  # no LIKE wildcards
    assert ids("queue=mail&kind=send&status=queued") == [a]
    assert ids("queue=nope") == []
    job = client.get("/api/jobs?status=failed").json()["jobs"][0]
    assert job["last_error"] == "ValueError: Bad Pixel" and job["status"] == "failed" and job["attempts"] == 1
    assert job["previous_attempt_error"] is None


def test_api_gives_an_earlier_attempts_error_as_previous_attempt_error_after_a_success(
        dashboard: Client, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("charge")
    (first,) = pgq_queue.claim(worker="w1")
    pgq_queue.fail(first, "TimeoutError: gateway slow", retry_in=0)
    (second,) = pgq_queue.claim(worker="w2")
    pgq_queue.complete(second)
    client = dashboard()

    job = client.get(f"/api/jobs/{job_id}").json()["job"]
    assert job["status"] == "succeeded" and job["last_error"] is None
    assert job["previous_attempt_error"] == "TimeoutError: gateway slow"
    (row,) = client.get("/api/jobs?status=succeeded").json()["jobs"]
    assert row["last_error"] is None and row["previous_attempt_error"] == "TimeoutError: gateway slow"


def test_keyset_pages_list_every_job_once_while_jobs_are_enqueued(dashboard: Client, pgq_queue: Queue) -> None:
    original = set(pgq_queue.enqueue_many([{"kind": "k", "queue": "q" if i % 3 else "other"} for i in range(130)]))
    client = dashboard()
    seen: list[int] = []
    cursor = ""
    pages = 0
    while True:
        body = client.get(f"/api/jobs?limit=25&cursor={cursor}").json()
        seen += [j["id"] for j in body["jobs"]]
        pgq_queue.enqueue_many([{"kind": "k", "queue": "q"} for _ in range(7)])  # newer than every page
        pages += 1
        if body["next_cursor"] is None:
            break
        cursor = body["next_cursor"]
        assert isinstance(cursor, str)
    assert len(seen) == len(set(seen)) == 130 and set(seen) == original
    assert seen == sorted(seen, reverse=True)
    assert pages == 6


def test_filtered_pages_list_every_match_once(dashboard: Client, pgq_queue: Queue) -> None:
    ids = pgq_queue.enqueue_many([{"kind": "k", "queue": "a" if i % 4 == 0 else "b"} for i in range(90)])
    wanted = {i for n, i in enumerate(ids) if n % 4 == 0}
    client = dashboard()
    seen: list[int] = []
    cursor = ""
    while True:
        body = client.get(f"/api/jobs?queue=a&limit=7&cursor={cursor}").json()
        seen += [j["id"] for j in body["jobs"]]
        if not body["next_cursor"]:
            break
        cursor = body["next_cursor"]
    assert sorted(seen) == sorted(wanted) and len(seen) == len(wanted)


def test_one_job(dashboard: Client, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("send", {"to": "a@example.com"}, queue="mail", dedupe_key="k1", watermark=3)
    pgq_queue.claim(worker="w7", queues=["mail"])

    job = dashboard().get(f"/api/jobs/{job_id}").json()["job"]

    assert job["id"] == job_id and job["status"] == "running" and job["claimed_by"] == "w7"
    assert job["payload"] == {"to": "a@example.com"} and job["input_watermark"] == 3
    assert job["lease_held"] is True and "lease_token" not in job
    assert job["lease_expires_at"].startswith("20") and job["created_at"]


def test_one_job_with_its_dependencies_and_the_waiting_counts(dashboard: Client, pgq_queue: Queue,
                                                                db: SQL) -> None:
    parent = pgq_queue.enqueue("fetch", queue="mail")
    child = enqueue_after(db, "merge", [parent], queue="mail", run=True)
    client = dashboard()

    body = client.get(f"/api/jobs/{child}").json()
    assert body["job"]["status"] == "waiting"
    assert body["dependencies"] == {
        "pending_parents": 1, "parent_count": 1, "child_count": 0, "children": [],
        "parents": [{"id": parent, "kind": "fetch", "status": "queued", "needs_success": False,
                     "parent_outcome": None,
                     "sequence_hold": None}]}
    assert client.get(f"/api/jobs/{parent}").json()["dependencies"]["children"] == [
        {"id": child, "kind": "merge", "status": "waiting", "needs_success": False, "parent_outcome": None,
         "sequence_hold": None}]
    plain = client.get(f"/api/jobs/{pgq_queue.enqueue('plain')}").json()["dependencies"]
    assert plain == {"pending_parents": None, "parent_count": 0, "child_count": 0, "parents": [], "children": []}

    mail = {q["name"]: q for q in client.get("/api/queues").json()["queues"]}["mail"]
    assert (mail["waiting"], mail["ready"]) == (1, 1)


def test_cancel_a_waiting_job_cancels_the_children_that_need_it(dashboard: Client, pgq_queue: Queue,
                                                                 db: SQL) -> None:
    parent = pgq_queue.enqueue("fetch")
    middle = enqueue_after(db, "merge", [parent])
    child = enqueue_after(db, "report", [middle])
    body = dashboard().post(f"/api/jobs/{middle}/cancel", headers=JSON).json()
    assert body["job"]["status"] == "cancelled"
    assert db("SELECT id, status::text, last_error FROM pgq.jobs WHERE id IN (%s, %s) ORDER BY id",
              [parent, child]) == [{"id": parent, "status": "queued", "last_error": None},
                                   {"id": child, "status": "cancelled", "last_error": f"parent job {middle} cancelled"}]


@pytest.mark.parametrize("bad", ["abc", "0", "-1", "1.5", "99999999999999999999", "%20", "1e3", "٣"])
def test_a_malformed_job_id_is_400(dashboard: Client, bad: str) -> None:
    client = dashboard()
    for response in (client.get(f"/api/jobs/{bad}"), client.post(f"/api/jobs/{bad}/cancel", headers=JSON),
                     client.get(f"/jobs/{bad}")):
        assert response.status_code == 400, (bad, response.text)
    assert "job id" in client.get(f"/api/jobs/{bad}").json()["error"]


def test_an_unknown_job_is_404(dashboard: Client) -> None:
    client = dashboard()
    assert client.get("/api/jobs/424242").status_code == 404
    assert client.get("/api/jobs/424242").json() == {"error": "job 424242 not found"}
    assert client.post("/api/jobs/424242/cancel", headers=JSON).status_code == 404
    assert client.post("/api/jobs/424242/retry", headers=JSON).status_code == 404
    page = client.get("/jobs/424242")
    assert page.status_code == 404 and "job 424242 not found" in page.text


@pytest.mark.parametrize("query", [
    "status=bogus", "status=%3Cscript%3E", "limit=-1", "limit=0", "limit=501", "limit=abc", "limit=1.0",
    "cursor=garbage", "cursor=-5", "cursor=0", "cursor=1%3B%20DROP%20TABLE%20pgq.jobs",
    "cursor=999999999999999999999", "queue=a%00b", "kind=" + "x" * 2001, "q=%00",
])
def test_a_bad_filter_is_400_with_a_message(dashboard: Client, query: str) -> None:
    client = dashboard()
    response = client.get(f"/api/jobs?{query}")
    assert response.status_code == 400, response.text
    assert response.json()["error"]
    assert client.get(f"/jobs?{query}").status_code == 400


def test_unknown_routes_and_methods(dashboard: Client) -> None:
    client = dashboard()
    assert client.get("/api/nope").status_code == 404
    assert client.get("/api/nope").json()["error"]
    wrong = client.get("/api/jobs/1/cancel")
    assert wrong.status_code == 405 and wrong.json()["error"] and "POST" in wrong.headers["allow"]
    assert client.delete("/api/jobs/1").status_code == 405


def test_cancel_and_retry(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("k")
    client = dashboard()

    cancelled = client.post(f"/api/jobs/{job_id}/cancel", headers=JSON)
    assert cancelled.status_code == 200 and cancelled.json()["job"]["status"] == "cancelled"
    assert db("SELECT status::text FROM pgq.jobs WHERE id = %s", [job_id]) == [{"status": "cancelled"}]

    again = client.post(f"/api/jobs/{job_id}/cancel", headers=JSON)
    assert again.status_code == 409 and "cannot cancel job" in again.json()["error"]

    retried = client.post(f"/api/jobs/{job_id}/retry", json={})
    assert retried.status_code == 200 and retried.json()["job"]["status"] == "queued"
    assert client.post(f"/api/jobs/{job_id}/retry", headers=JSON).status_code == 409


def test_cancel_a_running_job(dashboard: Client, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("k")
    pgq_queue.claim(worker="w")
    body = dashboard().post(f"/api/jobs/{job_id}/cancel", headers=JSON).json()
    assert body["job"]["status"] == "cancelled" and body["job"]["lease_held"] is False


@pytest.mark.parametrize("name", ["mail", "a/b", "with space", "naïve-ключ", "../../etc"])
def test_pause_and_resume(dashboard: Client, pgq_queue: Queue, db: SQL, name: str) -> None:
    from urllib.parse import quote

    client = dashboard()
    path = f"/api/queues/{quote(name, safe='')}"

    assert client.post(f"{path}/pause", headers=JSON).json() == {"queue": name, "paused": True, "changed": True}
    assert db("SELECT queue FROM pgq.paused_queues") == [{"queue": name}]
    assert client.post(f"{path}/pause", headers=JSON).json()["changed"] is False
    assert client.post(f"{path}/resume", headers=JSON).json() == {"queue": name, "paused": False, "changed": True}
    assert db("SELECT queue FROM pgq.paused_queues") == []


def test_an_empty_queue_name_is_400(dashboard: Client) -> None:
    response = dashboard().post("/api/queues//pause", headers=JSON)
    assert response.status_code == 400 and "queue name" in response.json()["error"]


def test_workers_and_limits(dashboard: Client, pgq_queue: Queue) -> None:
    pgq_queue.enqueue_many([{"kind": "k", "queue": "q"}, {"kind": "k", "queue": "q"}])
    pgq_queue.claim(worker="host-1", limit=2)
    pgq_queue.set_concurrency_limit("k", 3)
    pgq_queue.set_rate_limit("k", "10/min")
    client = dashboard()

    workers = client.get("/api/workers").json()
    assert [(w["worker"], w["running"], w["queues"], w["registered"]) for w in workers["workers"]] == [
        ("host-1", 2, ["q"], False)]
    assert len(workers["running"]) == 2

    limits = client.get("/api/limits").json()
    assert [(c["kind"], c["max_running"], c["running"]) for c in limits["concurrency"]] == [("k", 3, 2)]
    assert [(r["kind"], r["max_starts"], r["per_s"]) for r in limits["rate"]] == [("k", 10, 60.0)]
    assert limits["group"] == []


def test_job_list_items_carry_the_group_key(dashboard: Client, pgq_queue: Queue) -> None:
    [grouped] = pgq_queue.enqueue_many([JobSpec("export", group_key="acct:7")])
    plain = pgq_queue.enqueue("export")
    client = dashboard()
    jobs = {j["id"]: j for j in client.get("/api/jobs").json()["jobs"]}
    assert (jobs[grouped]["group_key"], jobs[plain]["group_key"]) == ("acct:7", None)
    page = client.get("/jobs").text
    assert '<div class="subtle small mono" title="group key">acct:7</div>' in page


def test_limits_list_per_group_limits_with_running_groups(dashboard: Client, pgq_queue: Queue) -> None:
    pgq_queue.set_group_limits("export", concurrency=2, rate="5/s")
    pgq_queue.enqueue_many([JobSpec("export", group_key=g) for g in ("a", "a", "a", "b")]
                           + [JobSpec("sync", group_key="x")])  # grouped, without limits
    assert len(pgq_queue.claim(worker="w", limit=10)) == 4  # a twice (its limit), b, x
    group = dashboard().get("/api/limits").json()["group"]
    assert [(g["kind"], g["max_running"], g["max_starts"], g["per_s"], g["running"], g["running_groups"])
            for g in group] == [("export", 2, 5, 1.0, 3, 2), ("sync", None, None, None, 1, 1)]
    assert group[1]["turn_after"] == "x"  # the claim added sync's row, to keep its groups' turn


def test_workers_include_idle_registered_ones(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    db("SELECT * FROM pgq.worker_register('idle', 'h', 1, '{q}', '{k}', 4, 30, 15, 'v')")
    workers = dashboard().get("/api/workers").json()["workers"]
    assert [(w["worker"], w["registered"], w["live"], w["running"], w["serves"], w["knows"], w["slots"])
            for w in workers] == [("idle", True, True, 0, ["q"], ["k"], 4)]
    assert "token" not in workers[0]


def test_explain_answers_the_reasons_and_404_for_an_unknown_job(dashboard: Client, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("k", queue="q", delay=3600)
    client = dashboard()
    body = client.get(f"/api/jobs/{job_id}/explain").json()
    assert (body["job_id"], body["status"]) == (job_id, "queued")
    assert [r["code"] for r in body["reasons"]] == ["scheduled", "no_live_worker"]
    job = pgq_queue.get(job_id)
    assert job is not None and dt.datetime.fromisoformat(body["reasons"][0]["facts"]["run_at"]) == job.run_at
    assert client.get("/api/jobs/99999/explain").status_code == 404
    assert client.get("/api/jobs/x/explain").status_code == 400


def test_a_database_that_is_not_migrated_is_a_503_that_says_so(dashboard: Client, pgq_empty_dsn: str) -> None:
    client = dashboard(pgq_empty_dsn)
    response = client.get("/api/queues")
    assert response.status_code == 503 and "pgq migrate" in response.json()["error"]
    assert client.get("/").status_code == 503


def test_an_unreachable_database_is_a_503(dashboard: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # The dashboard's pool waits 5 s for a connection before it gives up; half a second ends the same
    # way (nothing listens on port 1), without the wait.
    opened: list[QuickQueue] = []

    class QuickQueue(AsyncQueue):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "timeout": 0.5})
            opened.append(self)

    monkeypatch.setattr(pgq.web.dashboard, "AsyncQueue", QuickQueue)
    client = dashboard("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1")
    response = client.get("/api/queues")
    assert response.status_code == 503 and "cannot be reached" in response.json()["error"]
    assert len(opened) == 1  # the dashboard's pool was the quick one
