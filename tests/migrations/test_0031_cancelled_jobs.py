"""Revision 0031 (issue #44): jobs_cancelled_idx holds each queue's cancelled jobs newest first. The
queue page's cancelled tab and its count read it (they read the newest 100,000 finished jobs of every
queue before); other searches of cancelled jobs do not, since its condition has a term only the
dashboard's statements say (`id >= least bigint`, as revision 0029's failed-id index). Its downgrade
drops it."""

from __future__ import annotations

from typing import Any

import psycopg

from pgq import _sql, migrate

INDEX = "SELECT count(*) FROM pg_indexes WHERE schemaname = 'pgq' AND indexname = 'jobs_cancelled_idx'"


def _plan(dsn: str, statement: str, params: dict[str, Any]) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(b"SET enable_seqscan = off")
        return "\n".join(r[0] for r in conn.execute(("EXPLAIN " + statement).encode(), params))


def _one(dsn: str, statement: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement.encode())
        return cur.fetchone()[0] if cur.description else None  # type: ignore[index]


def test_0031_serves_the_cancelled_tab_only_and_its_downgrade_drops_it(pgq_dsn: str) -> None:
    _one(pgq_dsn, "INSERT INTO pgq.jobs (queue, kind, status, attempts, finished_at) "
                  "SELECT CASE WHEN g % 2 = 0 THEN 'q' ELSE 'r' END, 'k', "
                  "CASE WHEN g % 20 = 0 THEN 'cancelled' ELSE 'succeeded' END::pgq.job_status, 1, "
                  "now() - g * interval '1 second' FROM generate_series(1, 4000) g")
    _one(pgq_dsn, "ANALYZE pgq.jobs")
    assert _one(pgq_dsn, INDEX) == 1

    tab = _plan(pgq_dsn, _sql.query("dashboard_queue_tab"), {"tab": "cancelled", "queue": "q", "limit": 50})
    assert "jobs_cancelled_idx" in tab, tab
    counts = _plan(pgq_dsn, _sql.query("dashboard_queue_counts"), {"queue": "q", "cap": 10})
    assert "jobs_cancelled_idx" in counts, counts  # index-only once vacuum marked the pages all-visible
    listed = _plan(pgq_dsn, _sql.query("job_list"), {"status": "cancelled", "queue": "q", "kind": None,
                                                     "before_id": None, "limit": 50})
    assert "jobs_cancelled_idx" not in listed, listed

    migrate.downgrade(pgq_dsn, "0029")
    assert _one(pgq_dsn, INDEX) == 0
    migrate.upgrade(pgq_dsn)
    assert _one(pgq_dsn, INDEX) == 1
