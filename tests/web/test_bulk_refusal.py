"""The dashboard's bulk actions keep the rule of `Queue.cancel_where` (issue 40, finding 6): a POST
with `all=1` and no filter used to cancel every active job. It is now a 400 that changes nothing,
the confirmation page refuses it alike, and the jobs page offers no "all matching" action without a
filter. The confirmation's count has a time budget, as the job search has."""

from __future__ import annotations

import re

import pytest

from pgq import JobSpec, Queue
from pgq.web import actions
from tests.conftest import SQL

from .conftest import Client, csrf_token


def _statuses(db: SQL) -> dict[int, str]:
    return {r["id"]: r["status"] for r in db("SELECT id, status::text FROM pgq.jobs")}


@pytest.mark.parametrize("action", ["cancel", "retry", "delete"])
def test_bulk_all_without_a_filter_is_refused_and_changes_nothing(dashboard: Client, pgq_queue: Queue, db: SQL,
                                                                   action: str) -> None:
    ids = [pgq_queue.enqueue("k", {"n": n}) for n in range(5)]
    [claim] = pgq_queue.claim(worker="w", limit=1)
    pgq_queue.fail(claim, "boom", final=True)
    before = _statuses(db)
    client = dashboard()
    token = csrf_token(client, "/jobs")
    done = client.post("/jobs/bulk", data={"csrf_token": token, "action": action, "all": "1"})
    assert done.status_code == 400, done.text
    assert "needs at least one filter" in done.text
    assert _statuses(db) == before and len(before) == len(ids)
    assert db("SELECT count(*) AS n FROM pgq.job_audit") == [{"n": 0}]
    confirm = client.get("/jobs/bulk", params={"action": action})
    assert confirm.status_code == 200 and "needs at least one filter" in confirm.text
    assert 'id="bulk-apply"' not in confirm.text
    assert not re.search(r'id="(cancel|retry|delete)-all"', client.get("/jobs").text)
    # With a filter (the state is one) it still works.
    assert re.search(r'id="cancel-all"', client.get("/jobs", params={"status": "queued"}).text)


def test_the_confirmation_count_stops_at_its_budget(dashboard: Client, pgq_queue: Queue,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pgq_queue.enqueue_many([JobSpec("k", {"n": n}, queue="q") for n in range(7)])
    monkeypatch.setattr(actions, "BULK_COUNT_BATCH", 2)
    monkeypatch.setattr(actions, "BULK_COUNT_BUDGET_S", 0.0)
    client = dashboard()
    page = client.get("/jobs/bulk", params={"action": "cancel", "queue": "q"})
    assert page.status_code == 200, page.text
    assert re.search(r'data-complete="false" id="bulk-count">2<', page.text), page.text
    assert "Cancel all matching jobs" in page.text
    monkeypatch.setattr(actions, "BULK_COUNT_BUDGET_S", 10.0)
    page = client.get("/jobs/bulk", params={"action": "cancel", "queue": "q"})
    assert re.search(r'data-complete="true" id="bulk-count">7<', page.text), page.text
