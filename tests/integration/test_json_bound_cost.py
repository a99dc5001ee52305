"""The JSON bounds' triggers (revision 0019) on the hot path (issue #42, revision 0023): a trigger's
WHEN clause is planned again by every statement that fires it, which inlined pgq.json_bounded and
pgq.trace_context_valid from their source each time: 0.15 ms of an enqueue's 0.38 ms. The clauses
now pass small, uncompressed values with built-in functions only, and the trigger's function
decides for the rest; what they refuse is unchanged."""

from __future__ import annotations

import json

import psycopg
import pytest

from pgq import JobSpec, Queue

from .conftest import SQL

DEEP = json.loads("[" * 70 + "]" * 70)  # small, nested past the bound
INSERT = "INSERT INTO pgq.jobs (queue, kind, payload) VALUES ('q', 'k', %s::jsonb)"


def test_the_triggers_when_clauses_call_built_in_functions_only(db: SQL) -> None:
    """Neither trigger's WHEN clause names a function of schema pgq (each would be inlined from its
    source again by every statement that fires the trigger)."""
    rows = db("SELECT DISTINCT ON (t.tgname) t.tgname, pg_get_triggerdef(t.oid) AS d FROM pg_trigger t "
              "WHERE t.tgrelid IN ('pgq.jobs'::regclass, 'pgq.live_jobs'::regclass) "
              "AND t.tgname LIKE 'jobs_json_bounded_%%' ORDER BY 1")
    assert [r["tgname"] for r in rows] == ["jobs_json_bounded_insert", "jobs_json_bounded_update"]
    for r in rows:
        when = r["d"].split(" WHEN ", 1)[1].split(" EXECUTE FUNCTION ", 1)[0]
        assert "pgq." not in when, when


def test_small_values_pass_and_an_older_row_out_of_bounds_stays_updatable(pgq_queue: Queue, db: SQL) -> None:
    """Small payloads, results, progress and a valid trace context are written; a row whose payload
    is out of bounds (written before revision 0019) still takes a result."""
    [job] = pgq_queue.enqueue_many([JobSpec("k", {"to": "a@example.com"}, queue="q")])
    db("UPDATE pgq.jobs SET result = '{\"ok\": true}', progress = '{\"p\": 1}', "
       "trace_context = '{\"traceparent\": \"00-x-y-01\"}' WHERE id = %s", [job])
    db("ALTER TABLE pgq.jobs DISABLE TRIGGER jobs_json_bounded_update")
    db("UPDATE pgq.jobs SET payload = %s::jsonb WHERE id = %s", [json.dumps(DEEP), job])
    db("ALTER TABLE pgq.jobs ENABLE TRIGGER jobs_json_bounded_update")
    db("UPDATE pgq.jobs SET result = '{\"ok\": 2}' WHERE id = %s", [job])
    assert db("SELECT result FROM pgq.jobs WHERE id = %s", [job]) == [{"result": {"ok": 2}}]


@pytest.mark.parametrize("payload", [
    {"deep": DEEP},  # small: the trigger's function decides all the same
    {"big": "x" * 600, "deep": DEEP},  # past 512 bytes
])
def test_the_triggers_still_refuse_what_they_refused(pgq_queue: Queue, pgq_dsn: str, payload: object) -> None:
    """Nested past the bound, small or not: refused on insert and on update, nothing written."""
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(INSERT.encode(), (json.dumps(payload),))
        [job] = pgq_queue.enqueue_many([JobSpec("k", queue="q")])
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(b"UPDATE pgq.jobs SET result = %s::jsonb WHERE id = %s", (json.dumps(payload), job))
        assert conn.execute(b"SELECT count(*), count(result) FROM pgq.jobs").fetchone() == (1, 0)
