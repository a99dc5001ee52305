"""The SQL API for other services and DBAs: pgq.enqueue(), the views, NOTIFY, comments."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from pgq import JobSpec, JobStatus, Queue

from .conftest import SQL, expire_lease


def test_sql_enqueue_with_defaults_and_named_arguments(pgq_queue: Queue, db: SQL) -> None:
    [row] = db("SELECT pgq.enqueue('report') AS a, "
               "pgq.enqueue('mail', '{\"to\": \"x\"}', queue => 'mail', priority => 3, "
               "run_at => now() + interval '1 hour', max_attempts => 2) AS b")
    a, b = pgq_queue.get(row["a"]), pgq_queue.get(row["b"])
    assert a is not None and (a.queue, a.payload, a.priority, a.max_attempts) == ("default", {}, 0, 25)
    assert b is not None and (b.queue, b.payload, b.priority, b.max_attempts) == ("mail", {"to": "x"}, 3, 2)
    assert pgq_queue.claim(worker="w", queues=["mail"]) == []  # scheduled an hour out


def test_sql_enqueue_dedupes_like_python(pgq_queue: Queue, db: SQL) -> None:
    [row] = db("SELECT pgq.enqueue('k', dedupe_key => 'x') AS a, pgq.enqueue('k', dedupe_key => 'x') AS b")
    assert row["a"] == row["b"] == pgq_queue.enqueue("k", dedupe_key="x")


def test_sql_enqueue_bad_input_is_refused_by_constraints(db: SQL) -> None:
    import pytest

    with pytest.raises(psycopg.errors.CheckViolation):
        db("SELECT pgq.enqueue('')")


def test_queue_stats_view(pgq_queue: Queue, db: SQL) -> None:
    pgq_queue.enqueue_many([JobSpec("k", queue="a") for _ in range(3)] + [JobSpec("k", queue="b", delay=3600)])
    claims = pgq_queue.claim(worker="w", queues=["a"], limit=2)
    pgq_queue.complete(claims[0])
    expire_lease(db, claims[1].id)
    stats = {r["queue"]: r for r in pgq_queue.stats()}
    a, b = stats["a"], stats["b"]
    assert (a["ready"], a["running"], a["expired_leases"], a["succeeded"], a["succeeded_last_minute"]) == (
        1, 1, 1, 1, 1)
    assert a["oldest_ready_age"] is not None
    assert (b["ready"], b["scheduled"], b["oldest_ready_age"]) == (0, 1, None)
    running = db("SELECT id, claimed_by, lease_expired FROM pgq.running_jobs")
    assert running == [{"id": claims[1].id, "claimed_by": "w", "lease_expired": True}]
    counts = db("SELECT queue, kind, status::text, jobs FROM pgq.job_counts ORDER BY 1, 3")
    assert {(r["queue"], r["status"], r["jobs"]) for r in counts} == {
        ("a", "queued", 1), ("a", "running", 1), ("a", "succeeded", 1), ("b", "queued", 1)}


def _drain_notifies(conn: psycopg.Connection[tuple[object, ...]], quiet: float = 0.3) -> list[tuple[str, str]]:
    got: list[tuple[str, str]] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        batch = list(conn.notifies(timeout=quiet, stop_after=1000))
        if not batch:
            break
        got.extend((n.channel, n.payload) for n in batch)
    return got


def test_notify_once_per_queue_per_transaction_even_for_100k_jobs(pgq_queue: Queue, pgq_dsn: str) -> None:
    with psycopg.connect(pgq_dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgq")
        pgq_queue.enqueue_many([JobSpec("k", queue="q1" if i % 2 else "q2") for i in range(100_000)])
        assert sorted(_drain_notifies(listener)) == [("pgq", "q1"), ("pgq", "q2")]
        with psycopg.connect(pgq_dsn) as tx:  # several enqueues, one transaction: still once per queue
            for _ in range(5):
                pgq_queue.enqueue("k", queue="q3", conn=tx)
            pgq_queue.enqueue("k", queue="q4", conn=tx)
        assert sorted(_drain_notifies(listener)) == [("pgq", "q3"), ("pgq", "q4")]
        [claim] = pgq_queue.claim(worker="w", queues=["q3"])
        pgq_queue.fail(claim, "x", retry_in=0)
        assert _drain_notifies(listener) == []
        assert pgq_queue.get(claim.id) is not None


def test_notify_payload_for_a_huge_queue_name_wakes_everyone(pgq_queue: Queue, pgq_dsn: str) -> None:
    with psycopg.connect(pgq_dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgq")
        pgq_queue.enqueue("k", queue="q" * 9000)
        assert _drain_notifies(listener) == [("pgq", "*")]


def test_every_table_view_and_column_is_commented(db: SQL) -> None:
    missing = db("""
        SELECT c.relname, a.attname
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'pgq'
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        WHERE c.relkind = 'r' AND c.relname <> 'alembic_version'
          AND col_description(c.oid, a.attnum) IS NULL
        UNION ALL
        SELECT c.relname, NULL FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'pgq'
        WHERE c.relkind IN ('r', 'v') AND c.relname <> 'alembic_version' AND obj_description(c.oid) IS NULL
    """)
    assert missing == []


def test_claim_statement_reads_the_claim_index_not_the_table(pgq_queue: Queue, pgq_dsn: str, db: SQL) -> None:
    """The real job_claim statement, planned with a backlog: it must stop after `limit` rows of
    jobs_claim_idx instead of reading (and sorting) every queued job."""
    from pgq import _sql

    pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(5000)])
    pgq_queue.complete_many([(c, None) for c in pgq_queue.claim(worker="w", queues=["q"], limit=1000)])
    db("VACUUM ANALYZE pgq.jobs")
    params = {"queues": ["q"], "kinds": None, "limit": 16, "lease_s": 60.0, "worker": "w",
              "limited_kinds": [], "limited_max": []}
    with psycopg.connect(pgq_dsn) as conn:
        rows = conn.execute(b"EXPLAIN " + _sql.query("job_claim").encode(), params).fetchall()
    plan = "\n".join(r[0] for r in rows)
    assert "Index Scan using jobs_claim_idx on jobs" in plan, plan
    assert "Seq Scan on jobs" not in plan, plan
    assert JobStatus.QUEUED.value == "queued"


@pytest.mark.parametrize("name", ["job_complete", "job_fail", "job_heartbeat", "job_snooze"])
def test_acknowledgements_probe_the_primary_key_not_the_running_index(
    pgq_queue: Queue, pgq_dsn: str, db: SQL, name: str
) -> None:
    """Statistics taken while nothing ran (as after a routine VACUUM ANALYZE) make jobs_running_idx look
    empty; an acknowledgement that read it would visit every entry left by jobs finished since the
    last vacuum, growing slower with each batch. Each acknowledged row must be a probe of jobs_pkey."""
    from pgq import _sql

    pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(20_000)])
    db("VACUUM ANALYZE pgq.jobs")
    claims = pgq_queue.claim(worker="w", queues=["q"], limit=200)
    ids, tokens = [c.id for c in claims], [c.token for c in claims]
    params: dict[str, dict[str, Any]] = {
        "job_complete": {"ids": ids, "tokens": tokens, "results": [None] * 200, "watermarks": [None] * 200},
        "job_fail": {"ids": ids, "tokens": tokens, "errors": ["e"] * 200, "retry_in": [None] * 200,
                     "finals": [False] * 200},
        "job_heartbeat": {"ids": ids, "tokens": tokens, "lease_s": [60.0] * 200},
        "job_snooze": {"ids": ids, "tokens": tokens, "delays": [1.0] * 200},
    }
    with psycopg.connect(pgq_dsn) as conn:
        rows = conn.execute(b"EXPLAIN " + _sql.query(name).encode(), params[name]).fetchall()
    plan = "\n".join(r[0] for r in rows)
    assert "jobs_pkey" in plan, plan
    assert "jobs_running_idx" not in plan, plan
    assert "Seq Scan on jobs" not in plan, plan


def test_released_jobs_wake_workers_but_snoozed_ones_do_not(pgq_queue: Queue, pgq_dsn: str) -> None:
    pgq_queue.enqueue_many([JobSpec("k", queue="r"), JobSpec("k", queue="s")])
    released, snoozed = sorted(pgq_queue.claim(worker="w", limit=2), key=lambda c: c.job.queue)
    with psycopg.connect(pgq_dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgq")
        pgq_queue.snooze(snoozed, 60)
        pgq_queue.release([released])
        assert _drain_notifies(listener) == [("pgq", "r")]
