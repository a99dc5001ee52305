"""Revision 0033 (issue #43): pgq.jobs is partitioned. The jobs that can still run live in
pgq.live_jobs; finished jobs in pgq.finished_jobs, one partition per UTC day, the table as it was before
the upgrade attached (not copied) as the history's first partition. Its upgrade moves only the live
jobs, keeps every id and the id sequence, and its downgrade makes pgq.jobs one table again with every
job in it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pgq import migrate

SQL = Callable[..., list[dict[str, Any]]]

JOBS = ("SELECT id, queue, kind, payload, status::text, attempts, dedupe_key, result, finished_at, "
        "lease_token IS NOT NULL AS leased FROM pgq.jobs ORDER BY id")
TODAY = "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') AS day"
INDEXES = ("SELECT indexrelid::regclass::text AS name, pg_relation_filenode(indexrelid) AS node FROM pg_index "
           "WHERE indrelid = %s::regclass ORDER BY 1")


def _populate(db: SQL) -> None:
    """Jobs in every state, at revision 0032: finished ones, queued, running and waiting ones."""
    db("INSERT INTO pgq.jobs (queue, kind, payload) SELECT 'q', 'k', jsonb_build_object('n', g) "
       "FROM generate_series(1, 60) g")
    db("SELECT count(*) FROM pgq.claim(ARRAY['q'], NULL, 30, 30, 'w')")
    db("UPDATE pgq.jobs SET status = 'succeeded', finished_at = now() - interval '3 days', "
       "lease_token = NULL, lease_expires_at = NULL, result = '{\"ok\": true}' WHERE id <= 10")
    db("UPDATE pgq.jobs SET status = 'failed', finished_at = now() - interval '1 hour', "
       "lease_token = NULL, lease_expires_at = NULL, last_error = 'boom' WHERE id BETWEEN 11 AND 15")
    db("UPDATE pgq.jobs SET status = 'cancelled', finished_at = now(), lease_token = NULL, lease_expires_at = NULL "
       "WHERE id BETWEEN 16 AND 20")
    db("INSERT INTO pgq.jobs (queue, kind, status, dedupe_key) VALUES ('q', 'later', 'waiting', 'w1')")


def test_0033_moves_only_live_jobs_attaches_the_old_table_and_downgrades_with_every_job(
        pgq_dsn: str, db: SQL) -> None:
    migrate.downgrade(pgq_dsn, "0032")
    try:
        _populate(db)
        before = db(JOBS)
        old_oid = db("SELECT 'pgq.jobs'::regclass::oid AS oid")[0]["oid"]
        old_indexes = db(INDEXES, ("pgq.jobs",))
        [seq] = db("SELECT last_value FROM pgq.jobs_id_seq")
        migrate.upgrade(pgq_dsn)

        # Every job readable through pgq.jobs, unchanged; live ones in the live partition only.
        assert db(JOBS) == before
        placed = db("SELECT tableoid::regclass::text AS part, status::text, count(*) AS n FROM pgq.jobs "
                    "GROUP BY 1, 2 ORDER BY 1, 2")
        assert {(r["part"], r["status"]): r["n"] for r in placed} == {
            ("pgq.finished_jobs_before_0033", "cancelled"): 5,
            ("pgq.finished_jobs_before_0033", "failed"): 5,
            ("pgq.finished_jobs_before_0033", "succeeded"): 10,
            ("pgq.live_jobs", "queued"): 30,
            ("pgq.live_jobs", "running"): 10,
            ("pgq.live_jobs", "waiting"): 1,
        }
        # The old table is the history's first partition itself, its indexes kept, none rebuilt.
        assert db("SELECT 'pgq.finished_jobs_before_0033'::regclass::oid AS oid")[0]["oid"] == old_oid
        assert db(INDEXES, ("pgq.finished_jobs_before_0033",)) == old_indexes
        # Days ahead exist, and ids go on from the old identity.
        assert db("SELECT count(*) AS n FROM pg_inherits WHERE inhparent = 'pgq.finished_jobs'::regclass")[0]["n"] >= 8
        [new] = db("INSERT INTO pgq.jobs (queue, kind) VALUES ('q', 'k') RETURNING id")
        assert new["id"] == seq["last_value"] + 1
        # A job finished now arrives in today's partition of the history (the rest of the day after the
        # upgrade), not in the old table.
        [claimed] = db("SELECT id, lease_token FROM pgq.claim(ARRAY['q'], NULL, 1, 30, 'w')")
        db("SELECT * FROM pgq.complete(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[], ARRAY[NULL]::jsonb[], "
           "ARRAY[NULL]::bigint[], NULL, NULL)", (claimed["id"], claimed["lease_token"]))
        assert db("SELECT tableoid::regclass::text AS part, status::text FROM pgq.jobs WHERE id = %s",
                  (claimed["id"],)) == [{"part": "pgq.finished_jobs_" + db(TODAY)[0]["day"], "status": "succeeded"}]
        after = db(JOBS)

        migrate.downgrade(pgq_dsn, "0032")
        assert db("SELECT relkind::text FROM pg_class WHERE oid = 'pgq.jobs'::regclass") == [{"relkind": "r"}]
        assert db(JOBS) == after
        assert db("SELECT attidentity::text FROM pg_attribute WHERE attrelid = 'pgq.jobs'::regclass "
                  "AND attname = 'id'") == [{"attidentity": "d"}]
        [again] = db("INSERT INTO pgq.jobs (queue, kind) VALUES ('q', 'k') RETURNING id")
        assert again["id"] == new["id"] + 1
    finally:
        migrate.upgrade(pgq_dsn)


def test_a_finished_job_leaves_the_live_table_and_a_retried_one_comes_back(db: SQL) -> None:
    [job] = db("INSERT INTO pgq.jobs (queue, kind) VALUES ('q', 'k') RETURNING id")
    [claimed] = db("SELECT id, lease_token FROM pgq.claim(ARRAY['q'], NULL, 1, 30, 'w')")
    db("SELECT * FROM pgq.complete(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[], ARRAY['{\"r\": 1}']::jsonb[], "
       "ARRAY[NULL]::bigint[], NULL, NULL)", (claimed["id"], claimed["lease_token"]))
    assert db("SELECT count(*) AS n FROM pgq.live_jobs WHERE id = %s", (job["id"],)) == [{"n": 0}]
    assert db("SELECT status::text, result FROM pgq.finished_jobs WHERE id = %s", (job["id"],)) == [
        {"status": "succeeded", "result": {"r": 1}}]
    # An administrator's UPDATE of pgq.jobs moves the row back (PostgreSQL moves it between partitions).
    db("UPDATE pgq.jobs SET status = 'queued', finished_at = NULL, run_at = now() WHERE id = %s", (job["id"],))
    assert db("SELECT tableoid::regclass::text AS part FROM pgq.jobs WHERE id = %s", (job["id"],)) == [
        {"part": "pgq.live_jobs"}]


def test_partitions_ahead_are_made_once_and_a_day_without_one_goes_to_the_default(db: SQL) -> None:
    assert db("SELECT pgq.finished_partitions_ensure(7) AS n") == [{"n": 0}]
    made = db("SELECT pgq.finished_partitions_ensure(12) AS n")[0]["n"]
    assert made == 5
    [job] = db("INSERT INTO pgq.jobs (queue, kind) VALUES ('q', 'k') RETURNING id")
    db("UPDATE pgq.jobs SET status = 'succeeded', finished_at = now() + interval '400 days' WHERE id = %s",
       (job["id"],))
    assert db("SELECT tableoid::regclass::text AS part FROM pgq.jobs WHERE id = %s", (job["id"],)) == [
        {"part": "pgq.finished_jobs_default"}]
