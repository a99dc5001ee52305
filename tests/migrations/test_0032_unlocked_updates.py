"""Revision 0032 (issues #43 and #47): pgq.jobs has no BEFORE UPDATE row trigger, since any such
trigger makes PostgreSQL lock each updated row first and log that lock (a third of the drain's WAL
records); the guard, the JSON bound and the collection of finished parents are AFTER triggers, and the
release of dependents is a statement trigger that runs once the statement's rows are all noted. A claim
draws one lease token for the jobs it takes. Its downgrade restores revision 0031's triggers and a
token per job."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgq import Queue, migrate

SQL = Callable[..., list[dict[str, Any]]]

# pg_trigger.tgtype bits: ROW 1, BEFORE 2, UPDATE 16.
BEFORE_UPDATE_ROW = ("SELECT tgname FROM pg_trigger WHERE tgrelid = 'pgq.jobs'::regclass AND NOT tgisinternal "
                     "AND tgtype & 19 = 19 ORDER BY tgname")
CLAIM = "SELECT id, lease_token FROM pgq.claim(ARRAY['q'], NULL, %s, 30, 'w') ORDER BY id"
COMPLETE = ("SELECT id, status FROM pgq.complete(%s::bigint[], %s::uuid[], array_fill(NULL::jsonb, ARRAY[%s]), "
            "array_fill(NULL::bigint, ARRAY[%s]), NULL, NULL) ORDER BY id")


def _complete(db: SQL, ids: list[int], tokens: list[str]) -> list[dict[str, Any]]:
    return db(COMPLETE, (ids, tokens, len(ids), len(ids)))


def test_no_before_update_row_trigger_and_the_same_refusals(db: SQL) -> None:
    assert db(BEFORE_UPDATE_ROW) == []
    [job] = db("INSERT INTO pgq.jobs (queue, kind) VALUES ('q', 'k') RETURNING id")
    # The JSON bound on update, now checked after the row: the statement is undone all the same.
    deep = "[" * 70 + "]" * 70
    with pytest.raises(psycopg.errors.CheckViolation, match="nests deeper than 64 levels"):
        db("UPDATE pgq.jobs SET payload = %s::jsonb WHERE id = %s", (deep, job["id"]))
    assert db("SELECT payload FROM pgq.jobs WHERE id = %s", (job["id"],)) == [{"payload": {}}]


def test_a_claim_shares_one_token_and_the_fence_still_holds(db: SQL) -> None:
    db("INSERT INTO pgq.jobs (queue, kind) SELECT 'q', 'k' FROM generate_series(1, 6)")
    first = db(CLAIM, (3,))
    second = db(CLAIM, (3,))
    assert len(first) == len(second) == 3
    assert len({r["lease_token"] for r in first}) == 1
    assert len({r["lease_token"] for r in second}) == 1
    assert first[0]["lease_token"] != second[0]["lease_token"]
    # Another claim's token finishes nothing; the job's own claim's does.
    assert _complete(db, [first[0]["id"]], [second[0]["lease_token"]]) == []
    done = _complete(db, [r["id"] for r in first], [r["lease_token"] for r in first])
    assert [r["status"] for r in done] == ["succeeded"] * 3
    # A job claimed again (here: retried and claimed anew) gets its new claim's token only.
    db("UPDATE pgq.jobs SET status = 'queued', finished_at = NULL, run_at = now() WHERE id = %s", (first[0]["id"],))
    [again] = db(CLAIM, (3,))
    assert again["lease_token"] not in {first[0]["lease_token"], second[0]["lease_token"]}
    assert _complete(db, [again["id"]], [first[0]["lease_token"]]) == []


def test_one_statement_finishing_parents_releases_their_children_once(pgq_queue: Queue, db: SQL) -> None:
    """The release is a statement trigger now: every parent an acknowledgement finishes is noted by
    the row trigger before it runs, so a child of several parents of one statement is released
    once, when the last of its parents is done, with nothing left noted after."""
    a = pgq_queue.enqueue("k", {}, queue="q")
    b = pgq_queue.enqueue("k", {}, queue="q")
    both = pgq_queue.enqueue("k", {}, queue="q", depends_on=[a, b])
    only_b = pgq_queue.enqueue("k", {}, queue="q", depends_on=[b])
    claimed = db(CLAIM, (10,))
    assert [r["id"] for r in claimed] == [a, b]
    _complete(db, [a, b], [r["lease_token"] for r in claimed])
    rows = db("SELECT id, status::text FROM pgq.jobs WHERE id = ANY(%s) ORDER BY id", ([both, only_b],))
    assert rows == [{"id": both, "status": "queued"}, {"id": only_b, "status": "queued"}]
    assert db("SELECT coalesce(current_setting('pgq.finished_parents', true), '') AS s") == [{"s": ""}]


def test_0032_downgrade_restores_the_before_triggers_and_a_token_per_job(pgq_dsn: str, db: SQL) -> None:
    migrate.downgrade(pgq_dsn, "0031")
    try:
        names = [r["tgname"] for r in db(BEFORE_UPDATE_ROW)]
        assert names == ["jobs_collect_finished", "jobs_guard_admin_transition", "jobs_json_bounded_update"]
        db("INSERT INTO pgq.jobs (queue, kind) SELECT 'q', 'k' FROM generate_series(1, 3)")
        assert len({r["lease_token"] for r in db(CLAIM, (3,))}) == 3
    finally:
        migrate.upgrade(pgq_dsn)
    assert db(BEFORE_UPDATE_ROW) == []


def test_a_cancel_notice_names_no_token_that_fences_the_claims_other_jobs(pgq_dsn: str, db: SQL) -> None:
    """Anyone who may connect can LISTEN on pgq_cancel. A claim's jobs share one token, so the notice
    of one job's cancellation carries the md5 of the token, not the token: a listener can finish
    neither that job nor the others of its claim."""
    db("INSERT INTO pgq.jobs (queue, kind) SELECT 'q', 'k' FROM generate_series(1, 2)")
    claimed = db(CLAIM, (2,))
    token = claimed[0]["lease_token"]
    assert claimed[1]["lease_token"] == token
    with psycopg.connect(pgq_dsn, autocommit=True) as listener:
        listener.execute(b"LISTEN pgq_cancel")
        db("SELECT pgq.cancel(%s, 'test')", (claimed[0]["id"],))
        [notice] = list(listener.notifies(timeout=5, stop_after=1))
    job_id, _, mark = notice.payload.partition(":")
    assert int(job_id) == claimed[0]["id"]
    assert token not in notice.payload
    assert mark == db("SELECT md5(%s) AS m", (token,))[0]["m"]
    # The mark reads as a uuid (32 hex digits) but fences nothing: the claim's other job stays running.
    assert _complete(db, [claimed[1]["id"]], [mark]) == []
    assert db("SELECT status::text FROM pgq.jobs WHERE id = %s", (claimed[1]["id"],)) == [{"status": "running"}]
