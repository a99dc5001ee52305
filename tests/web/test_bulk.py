"""The dashboard's bulk actions (issue 33): the jobs page's selection, "apply to all N matching" with
a confirmation that shows the count, the audit's actor, the security model (CSRF, read-only, rights:
4xx, never a 500), and the payload search of the jobs list and the API."""

from __future__ import annotations

import html
import re

import pytest

from pgq import Queue, _ops
from tests.conftest import SQL

from .conftest import Client, Roles, basic, csrf_token


def _failed(pgq_queue: Queue, n: int, payload: dict[str, int], error: str = "SMTP timeout") -> list[int]:
    ids = [pgq_queue.enqueue("mail", payload, queue="q", max_attempts=1) for _ in range(n)]
    for claim in pgq_queue.claim(worker="w", queues=["q"], limit=n):
        pgq_queue.fail(claim, error)
    return ids


def _statuses(db: SQL) -> dict[int, str]:
    return {r["id"]: r["status"] for r in db("SELECT id, status::text FROM pgq.jobs")}


def test_selected_jobs_are_retried_and_audited_as_the_dashboard_user(dashboard: Client, pgq_queue: Queue,
                                                                     db: SQL) -> None:
    a, b, c = _failed(pgq_queue, 3, {"tenant": 1})
    client = dashboard(auth="ops:secret", trust_network=False)
    client.headers.update(basic("ops", "secret"))
    page = client.get("/jobs").text
    assert re.findall(r'name="id" value="(\d+)" form="bulk-selected"', page) == [str(c), str(b), str(a)]
    token = csrf_token(client, "/jobs")

    done = client.post("/jobs/bulk", data={"csrf_token": token, "action": "retry", "id": [str(a), str(c)]})

    assert done.status_code == 200, done.text
    assert 'data-changed="2"' in done.text
    assert _statuses(db) == {a: "queued", b: "failed", c: "queued"}
    assert db("SELECT action, actor, job_ids, filters FROM pgq.job_audit") == [
        {"action": "retry", "actor": "dashboard:ops", "job_ids": [a, c], "filters": {"ids": [a, c]}}]


def test_apply_to_all_matching_confirms_the_count_then_applies(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    hits = _failed(pgq_queue, 3, {"tenant": 7, "x": 1})
    miss = _failed(pgq_queue, 1, {"tenant": 8})
    client = dashboard()
    jobs = client.get("/jobs", params={"payload": '{"tenant": 7}', "status": "failed"}).text
    link = re.search(r'id="retry-all" href="([^"]+)"', jobs)
    assert link is not None
    confirm = client.get(link.group(1).replace("&amp;", "&"))
    assert confirm.status_code == 200, confirm.text
    assert re.search(r'id="bulk-count">3<', confirm.text)
    assert "Retry all 3 jobs" in confirm.text
    assert _statuses(db) == dict.fromkeys(hits + miss, "failed")  # the confirmation changes nothing
    hidden = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', confirm.text))
    hidden = {k: v.replace("&#34;", '"').replace("&quot;", '"') for k, v in hidden.items()}
    assert hidden["all"] == "1" and hidden["payload"] == '{"tenant": 7}' and hidden["status"] == "failed"

    done = client.post("/jobs/bulk", data=hidden)

    assert done.status_code == 200 and 'data-changed="3"' in done.text, done.text
    assert _statuses(db) == {**dict.fromkeys(hits, "queued"), miss[0]: "failed"}
    [audit] = db("SELECT actor, filters FROM pgq.job_audit")
    assert audit == {"actor": "dashboard", "filters": {"status": ["failed"], "payload": {"tenant": 7}}}


def test_apply_to_all_after_a_text_search_acts_on_the_jobs_the_list_shows(dashboard: Client, pgq_queue: Queue,
                                                                           db: SQL) -> None:
    # The list's search text is found in the kind, the dedupe key or the error; "Retry all…" must
    # match the same jobs, not only those whose error holds the text.
    by_kind = [pgq_queue.enqueue("Invoice-Sync", queue="q", max_attempts=1) for _ in range(2)]
    by_key = pgq_queue.enqueue("mail", queue="q", max_attempts=1, dedupe_key="invoice-7")
    by_error = pgq_queue.enqueue("mail", {"n": 1}, queue="q", max_attempts=1)
    other = pgq_queue.enqueue("mail", {"n": 2}, queue="q", max_attempts=1)
    waiting = pgq_queue.enqueue("mail", queue="later")
    for claim in pgq_queue.claim(worker="w", queues=["q"], limit=10):
        pgq_queue.fail(claim, "no INVOICE found" if claim.job.id == by_error else "smtp down")
    hits = [*by_kind, by_key, by_error]
    client = dashboard()
    jobs = client.get("/jobs", params={"q": "invoice", "status": "failed"}).text
    assert sorted(int(i) for i in re.findall(r'<tr data-job-id="(\d+)"', jobs)) == sorted(hits)
    # Only the actions that apply to the status filter are offered for all matching jobs.
    assert [a for a in ("retry", "cancel", "delete") if f'id="{a}-all"' in jobs] == ["retry", "delete"]
    queued = client.get("/jobs", params={"status": "queued"}).text
    assert [a for a in ("retry", "cancel", "delete") if f'id="{a}-all"' in queued] == ["cancel"]
    link = re.search(r'id="retry-all" href="([^"]+)"', jobs)
    assert link is not None
    confirm = client.get(html.unescape(link.group(1)))
    assert re.search(r'id="bulk-count">4<', confirm.text), confirm.text
    assert "Kind, dedupe key or error contains" in confirm.text
    hidden = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', confirm.text))

    done = client.post("/jobs/bulk", data={k: html.unescape(v) for k, v in hidden.items()})

    assert done.status_code == 200 and 'data-changed="4"' in done.text, done.text
    assert _statuses(db) == {**dict.fromkeys(hits, "queued"), other: "failed", waiting: "queued"}
    [audit] = db("SELECT filters FROM pgq.job_audit")
    assert audit == {"filters": {"status": ["failed"], "text": "invoice"}}


def test_bulk_forms_follow_the_security_model(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    [job_id] = _failed(pgq_queue, 1, {"tenant": 1})
    client = dashboard()
    token = csrf_token(client, "/jobs")
    form = {"csrf_token": token, "action": "delete", "id": str(job_id)}
    assert client.post("/jobs/bulk", data={k: v for k, v in form.items() if k != "csrf_token"}).status_code == 403
    assert client.post("/jobs/bulk", data=form, headers={"Origin": "http://evil.example"}).status_code == 403
    assert client.post("/jobs/bulk", data={**form, "action": "explode"}).status_code == 400
    assert client.post("/jobs/bulk", data={**form, "id": "abc"}).status_code == 400
    assert client.post("/jobs/bulk", data={"csrf_token": token, "action": "retry"}).status_code == 400
    assert client.post("/jobs/bulk", data={**form, "all": "1", "status": "queued"}).status_code == 400
    assert client.get("/jobs/bulk", params={"action": "cancel", "status": "failed"}).status_code == 400
    assert client.get("/jobs/bulk", params={"action": "retry", "payload": "{nope"}).status_code == 400
    read_only = dashboard(read_only=True)
    assert 'form="bulk-selected"' not in read_only.get("/jobs").text
    assert "read-only" in read_only.get("/jobs/bulk", params={"action": "retry"}).text
    assert _statuses(db) == {job_id: "failed"}
    assert db("SELECT count(*) AS n FROM pgq.job_audit") == [{"n": 0}]
    assert client.post("/jobs/bulk", data=form).status_code == 200
    assert _statuses(db) == {}


def test_a_role_without_the_right_gets_no_selection_and_a_403(dashboard: Client, roles: Roles) -> None:
    with Queue(roles.dsn) as q:
        job_id = q.enqueue("k", queue="q", max_attempts=1)
        [claim] = q.claim(worker="w", queues=["q"])
        q.fail(claim, "x")
    client = dashboard(roles.producer)
    assert 'form="bulk-selected"' not in client.get("/jobs").text
    page = client.get("/jobs/bulk", params={"action": "retry"}).text
    assert "may not cancel or retry jobs" in page and 'id="bulk-apply"' not in page
    # The registry and explain read no column a producer may not read (the workers' tokens).
    with Queue(roles.worker) as w:
        w._run(_ops.worker_register(claimed_by="w1", host="h", pid=1, queues=None, kinds=["k"], slots=1, lease_s=10,
                                    refresh_s=5, version="t"))
    assert "w1" in client.get("/workers").text
    assert client.get(f"/api/jobs/{job_id}/explain").json()["reasons"][0]["code"] == "finished"


@pytest.mark.parametrize(("payload", "expected"), [('{"tenant": 7}', 2), ('{"tenant": 7, "x": 1}', 1),
                                                    ('{"tags": ["a"]}', 1), ("[2]", 1), ('{"tenant": 9}', 0), ("", 4)])
def test_jobs_list_and_api_search_payloads_by_containment(dashboard: Client, pgq_queue: Queue, payload: str,
                                                          expected: int) -> None:
    pgq_queue.enqueue("k", {"tenant": 7, "x": 1})
    pgq_queue.enqueue("k", {"tenant": 7, "tags": ["a", "b"]})
    pgq_queue.enqueue("k", {"tenant": 8})
    pgq_queue.enqueue("k", [1, 2])
    client = dashboard()
    body = client.get("/api/jobs", params={"payload": payload}).json()
    assert len(body["jobs"]) == expected
    page = client.get("/jobs", params={"payload": payload}).text
    assert len(re.findall(r"<tr data-job-id=", page)) == expected


@pytest.mark.parametrize("bad", ["{", "nope", '"\\u0000"', "x" * 3000])
def test_a_bad_payload_filter_is_a_400(dashboard: Client, bad: str) -> None:
    client = dashboard()
    assert client.get("/api/jobs", params={"payload": bad}).status_code == 400
    assert client.get("/jobs", params={"payload": bad}).status_code == 400


def test_failed_filter_groups_dead_letters_and_retries_one_group(dashboard: Client, pgq_queue: Queue,
                                                                 db: SQL) -> None:
    timeouts = _failed(pgq_queue, 3, {"tenant": 1}, "TimeoutError: smtp\nTraceback ...")
    refused = _failed(pgq_queue, 1, {"tenant": 1}, "ConnectionRefusedError: 25")
    client = dashboard()
    page = client.get("/jobs", params={"status": "failed"}).text
    groups = re.findall(r'<tr data-group-kind="mail">.*?title="([^"]*)".*?<td class="num">(\d+)</td>.*?'
                        r'href="([^"]+)">Retry all in this group', page, flags=re.S)
    assert [(error, int(n)) for error, n, _ in groups] == [("TimeoutError: smtp", 3), ("ConnectionRefusedError: 25", 1)]
    confirm = client.get(groups[0][2].replace("&amp;", "&"))
    assert re.search(r'id="bulk-count">3<', confirm.text), confirm.text
    hidden = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', confirm.text))
    assert client.post("/jobs/bulk", data={k: html.unescape(v) for k, v in hidden.items()}).status_code == 200
    assert _statuses(db) == {**dict.fromkeys(timeouts, "queued"), refused[0]: "failed"}
    assert "No job failed for good" not in client.get("/jobs", params={"status": "failed"}).text


def test_retry_all_in_a_group_takes_that_group_only(dashboard: Client, pgq_queue: Queue, db: SQL) -> None:
    # One group's first line is the start of another's, and a third has no first line: the group's
    # retry must take exactly the jobs the group counts, not every error containing its text.
    short = _failed(pgq_queue, 3, {"tenant": 1}, "TimeoutError: smtp\nTraceback ...")
    longer = _failed(pgq_queue, 2, {"tenant": 1}, "TimeoutError: smtp relay down")
    blank = _failed(pgq_queue, 1, {"tenant": 1}, "\nonly a second line")
    client = dashboard()
    page = client.get("/jobs", params={"status": "failed"}).text
    links = dict(re.findall(r'<tr data-group-kind="mail">.*?title="([^"]*)".*?'
                            r'href="([^"]+)">Retry all in this group', page, flags=re.S))
    assert set(links) == {"TimeoutError: smtp", "TimeoutError: smtp relay down", ""}
    for error, ids, n_before in (("TimeoutError: smtp", short, 3), ("", blank, 1)):
        confirm = client.get(html.unescape(links[error]))
        assert re.search(rf'id="bulk-count">{n_before}<', confirm.text), confirm.text
        hidden = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', confirm.text))
        done = client.post("/jobs/bulk", data={k: html.unescape(v) for k, v in hidden.items()})
        assert done.status_code == 200 and f'data-changed="{n_before}"' in done.text, done.text
        assert {_statuses(db)[i] for i in ids} == {"queued"}
    assert {_statuses(db)[i] for i in longer} == {"failed"}
    # The jobs list takes the group's filter too, and says so.
    listed = client.get("/jobs", params={"status": "failed", "error_line": '"TimeoutError: smtp relay down"'}).text
    assert sorted(int(i) for i in re.findall(r'<tr data-job-id="(\d+)"', listed)) == sorted(longer)
    assert "first line of the error is" in listed


@pytest.mark.parametrize("bad", ["nope", "7", '["x"]', '"a\\nb"', '"a\\u0000"', '"' + "x" * 201 + '"'])
def test_a_bad_error_line_filter_is_a_400(dashboard: Client, bad: str) -> None:
    client = dashboard()
    assert client.get("/jobs", params={"error_line": bad}).status_code == 400
    assert client.get("/jobs/bulk", params={"action": "retry", "error_line": bad}).status_code == 400
