"""Every operator action attributed and audited (issue #44, revision 0025): single cancels and retries
from Python and straight from SQL write pgq.job_audit, pauses and resumes write pgq.control_audit and
pgq.paused_queues, each with the actor the caller named and the database role, and pgq.explain names
them ("paused by alice via role postgres", "cancelled ... by alice (via role postgres)")."""

from __future__ import annotations

import asyncio

import pytest

from pgq import AsyncQueue, InvalidJob, InvalidState, Queue

from .conftest import SQL


def _audit(db: SQL) -> list[dict[str, object]]:
    return db("SELECT action, actor, db_role, job_ids FROM pgq.job_audit ORDER BY id")


def _control(db: SQL) -> list[dict[str, object]]:
    return db("SELECT action, target, actor, db_role FROM pgq.control_audit ORDER BY id")


def test_a_single_cancel_and_retry_are_audited_with_the_actor_and_the_role(pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("k", queue="q")
    pgq_queue.cancel(job_id, actor="alice")
    detail = pgq_queue.explain(job_id).reasons[0].detail
    assert detail.startswith("finished: cancelled at ") and " by alice (via role postgres) after 0 attempt(s)" in detail
    facts = pgq_queue.explain(job_id).reasons[0].facts
    assert (facts["cancelled_by"], facts["cancelled_role"]) == ("alice", "postgres")
    pgq_queue.retry(job_id, actor="bob")
    pgq_queue.cancel(job_id)  # nobody named: the role stands alone
    assert " by role postgres after " in pgq_queue.explain(job_id).reasons[0].detail
    assert _audit(db) == [
        {"action": "cancel", "actor": "alice", "db_role": "postgres", "job_ids": [job_id]},
        {"action": "retry", "actor": "bob", "db_role": "postgres", "job_ids": [job_id]},
        {"action": "cancel", "actor": None, "db_role": "postgres", "job_ids": [job_id]},
    ]


def test_a_refused_action_records_nothing(pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("k", queue="q")
    with pytest.raises(InvalidState):
        pgq_queue.retry(job_id, actor="alice")  # queued: nothing to retry
    pgq_queue.cancel(job_id, actor="alice")
    with pytest.raises(InvalidState):
        pgq_queue.cancel(job_id, actor="alice")  # finished already
    assert [r["action"] for r in _audit(db)] == ["cancel"]
    assert not pgq_queue.resume("q", actor="alice")  # not paused: no change, no row
    assert _control(db) == []


def test_a_job_cancelled_as_a_dependent_names_nobody(pgq_queue: Queue, db: SQL) -> None:
    parent = pgq_queue.enqueue("k", queue="q")
    [child] = db("SELECT pgq.enqueue('k', queue => 'q', depends_on => ARRAY[%s]::bigint[]) AS id", [parent])
    pgq_queue.cancel(parent, actor="alice")
    detail = pgq_queue.explain(child["id"]).reasons[0].detail
    assert detail.startswith("finished: cancelled at ") and " by " not in detail
    assert [r["job_ids"] for r in _audit(db)] == [[parent]]


def test_pause_and_resume_record_the_actor_and_the_role(pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("k", queue="q")
    assert pgq_queue.pause("q", actor="alice")
    assert not pgq_queue.pause("q", actor="carol")  # paused already: keeps alice, records nothing
    assert db("SELECT paused_by, paused_role FROM pgq.paused_queues") == [
        {"paused_by": "alice", "paused_role": "postgres"}]
    reason = next(r for r in pgq_queue.explain(job_id).reasons if r.code == "queue_paused")
    assert reason.detail.startswith("queue q is paused (by alice via role postgres since ")
    assert (reason.facts["paused_by"], reason.facts["paused_role"]) == ("alice", "postgres")
    assert pgq_queue.resume("q", actor="bob")
    assert pgq_queue.pause("q")  # nobody named: the role is who paused it
    reason = next(r for r in pgq_queue.explain(job_id).reasons if r.code == "queue_paused")
    assert reason.detail.startswith("queue q is paused (by postgres since ")
    assert _control(db) == [
        {"action": "pause", "target": "q", "actor": "alice", "db_role": "postgres"},
        {"action": "resume", "target": "q", "actor": "bob", "db_role": "postgres"},
        {"action": "pause", "target": "q", "actor": None, "db_role": "postgres"},
    ]


def test_actions_straight_in_sql_are_audited_with_the_role(pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("k", queue="q")
    db("SELECT pgq.pause('q')")
    db("SELECT pgq.resume(queue_name => 'q', actor => 'dba:eve')")
    db("SELECT * FROM pgq.cancel(%s)", [job_id])
    [retried] = db("SELECT id, status::text FROM pgq.retry(%s, 'dba:eve')", [job_id])
    assert retried == {"id": job_id, "status": "queued"}
    assert db("SELECT * FROM pgq.retry(%s)", [job_id]) == []  # queued: not retried, not recorded
    assert _audit(db) == [{"action": "cancel", "actor": None, "db_role": "postgres", "job_ids": [job_id]},
                          {"action": "retry", "actor": "dba:eve", "db_role": "postgres", "job_ids": [job_id]}]
    assert _control(db) == [
        {"action": "pause", "target": "q", "actor": None, "db_role": "postgres"},
        {"action": "resume", "target": "q", "actor": "dba:eve", "db_role": "postgres"},
    ]


def test_the_async_client_takes_the_actor_too(pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("k", queue="q")

    async def act() -> None:
        async with AsyncQueue(pgq_dsn) as q:
            await q.pause("q", actor="alice")
            await q.cancel(job_id, actor="alice")
            await q.retry(job_id, actor="alice")
            await q.resume("q", actor="alice")

    asyncio.run(act())
    assert [(r["action"], r["actor"]) for r in _audit(db)] == [("cancel", "alice"), ("retry", "alice")]
    assert [(r["action"], r["actor"]) for r in _control(db)] == [("pause", "alice"), ("resume", "alice")]


@pytest.mark.parametrize("actor", ["x" * 201, "a\x00b", 7])
def test_a_bad_actor_is_refused_before_anything_is_sent(pgq_queue: Queue, db: SQL, actor: object) -> None:
    job_id = pgq_queue.enqueue("k", queue="q")
    for call in (lambda: pgq_queue.cancel(job_id, actor=actor),  # type: ignore[arg-type]
                 lambda: pgq_queue.pause("q", actor=actor),  # type: ignore[arg-type]
                 lambda: pgq_queue.cancel_where(queue="q", actor=actor)):  # type: ignore[arg-type]
        with pytest.raises(InvalidJob, match="actor must be"):
            call()
    assert db("SELECT status::text FROM pgq.jobs") == [{"status": "queued"}]
    assert _audit(db) == [] and _control(db) == []


def test_limit_changes_are_audited_once_each_with_before_and_after(pgq_queue: Queue, db: SQL) -> None:
    pgq_queue.set_concurrency_limit("mail", 3, actor="alice")
    pgq_queue.set_concurrency_limit("mail", 3, actor="alice")  # no change: no row
    pgq_queue.set_concurrency_limit("mail", 5)
    pgq_queue.set_concurrency_limit("mail", None, actor="bob")
    pgq_queue.set_concurrency_limit("mail", None, actor="bob")  # nothing to remove: no row
    pgq_queue.set_rate_limit("mail", "10/min", actor="alice")
    pgq_queue.set_rate_limit("mail", (10, 60), actor="alice")  # the same rate
    pgq_queue.set_rate_limit("mail", None, actor="alice")
    pgq_queue.set_group_limits("mail", concurrency=2, actor="carol")
    pgq_queue.set_group_limits("mail", concurrency=2, actor="carol")
    pgq_queue.set_group_limits("mail", concurrency=2, rate="1/s", actor="carol")
    pgq_queue.set_group_limits("mail", actor="carol")
    rows = db("SELECT action, target, actor, db_role, details FROM pgq.control_audit ORDER BY id")
    assert {r["target"] for r in rows} == {"mail"} and {r["db_role"] for r in rows} == {"postgres"}
    assert [(r["action"], r["actor"], r["details"]) for r in rows] == [
        ("concurrency_limit", "alice", {"was": None, "now": {"max_running": 3}}),
        ("concurrency_limit", None, {"was": {"max_running": 3}, "now": {"max_running": 5}}),
        ("concurrency_limit", "bob", {"was": {"max_running": 5}, "now": None}),
        ("rate_limit", "alice", {"was": None, "now": {"max_starts": 10, "per_s": 60.0}}),
        ("rate_limit", "alice", {"was": {"max_starts": 10, "per_s": 60}, "now": None}),
        ("group_limits", "carol", {"was": None, "now": {"max_running": 2}}),
        ("group_limits", "carol", {"was": {"max_running": 2},
                                   "now": {"max_running": 2, "max_starts": 1, "per_s": 1.0}}),
        ("group_limits", "carol", {"was": {"max_running": 2, "max_starts": 1, "per_s": 1}, "now": None}),
    ]
    assert db("SELECT count(*) AS n FROM pgq.concurrency_limits") == [{"n": 0}]
