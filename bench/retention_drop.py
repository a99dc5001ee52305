"""Retention of N finished jobs (default 1,000,000) of one past UTC day: row deletes (job_purge.sql in
batches of 5,000, what retention did before issue #43) against dropping the day's partition
(pgq.finished_partitions_drop, then the row deletes of what is left: nothing). Prints, per run, the
wall time, the WAL written (pg_current_wal_lsn before and after) and, for the drop, how long the call
itself held its locks. Runs in a scratch database it creates, migrates and drops (the server of --dsn).

Usage: python bench/retention_drop.py [--dsn postgresql://postgres@127.0.0.1:5432/postgres] [--jobs N]
       [--rounds R] (runs alternate: rows, drop, drop, rows, ...)
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import psycopg.rows
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pgq import Queue, _ops, _sql
from pgq._ops.admin import partition_drop_stmt

SHRINK = [
    "ALTER TABLE pgq.finished_jobs DETACH PARTITION pgq.finished_jobs_before_0033",
    "ALTER TABLE pgq.finished_jobs_before_0033 DROP CONSTRAINT finished_jobs_before_0033_bound",
    "ALTER TABLE pgq.finished_jobs_before_0033 ADD CONSTRAINT finished_jobs_before_0033_bound"
    " CHECK (status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL"
    " AND finished_at < '2000-01-01 00:00:00+00')",
    "ALTER TABLE pgq.finished_jobs ATTACH PARTITION pgq.finished_jobs_before_0033"
    " FOR VALUES FROM (MINVALUE) TO ('2000-01-01 00:00:00+00')",
]
BACK = 3  # the day filled: three days before today (UTC)


def day_partition(conn: psycopg.Connection) -> str:
    day = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=BACK)
    part = "finished_jobs_" + day.strftime("%Y%m%d")
    if conn.execute("SELECT to_regclass(%s)", [f"pgq.{part}"]).fetchone() == (None,):
        conn.execute(f"CREATE TABLE pgq.{part} (LIKE pgq.finished_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
        conn.execute(f"CREATE INDEX {part}_job_id_idx ON pgq.{part} (id)")
        conn.execute(f"ALTER TABLE pgq.finished_jobs ATTACH PARTITION pgq.{part}"
                     f" FOR VALUES FROM ('{day} 00:00:00+00') TO ('{day + dt.timedelta(days=1)} 00:00:00+00')")
    return part


def fill(conn: psycopg.Connection, n: int) -> None:
    # N jobs spread over the day; 1 % with a dedupe key, as a mix of plain and keyed jobs.
    day_partition(conn)
    conn.execute(
        "INSERT INTO pgq.finished_jobs (kind, queue, payload, status, finished_at, created_at, started_at,"
        " attempts, dedupe_key)"
        " SELECT 'bench', 'q' || (g %% 4), jsonb_build_object('i', g), 'succeeded',"
        " ((statement_timestamp() AT TIME ZONE 'UTC')::date - %s)::timestamp AT TIME ZONE 'UTC'"
        "   + make_interval(secs => (g::double precision / %s) * 86399),"
        " now() - interval '4 days', now() - interval '4 days', 1,"
        " CASE WHEN g %% 100 = 0 THEN 'key-' || g END"
        " FROM generate_series(1, %s) g", [BACK, n, n])
    conn.execute("VACUUM (ANALYZE) pgq.finished_jobs")
    conn.execute("CHECKPOINT")


def wal(conn: psycopg.Connection) -> str:
    return str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])  # type: ignore[index]


def wal_bytes(conn: psycopg.Connection, start: str) -> int:
    return int(conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [start]).fetchone()[0])  # type: ignore[index]


def by_rows(conn: psycopg.Connection, dsn: str) -> dict[str, float]:
    start, t0, deleted = wal(conn), time.perf_counter(), 0
    with psycopg.connect(dsn, autocommit=True) as c:
        while True:
            cur = c.execute(_sql.query("job_purge"), {"older_than_s": 86400.0, "batch": _ops.PURGE_BATCH})
            deleted += cur.rowcount
            if cur.rowcount == 0:
                break
    return {"s": time.perf_counter() - t0, "wal": wal_bytes(conn, start), "jobs": deleted, "lock_s": float("nan")}


def by_drop(conn: psycopg.Connection, dsn: str) -> dict[str, float]:
    start, t0 = wal(conn), time.perf_counter()
    call_s = 0.0
    drops = _ops.PartitionDrops()
    with psycopg.connect(dsn, autocommit=True) as c:
        c.row_factory = psycopg.rows.dict_row
        while not drops.done:
            stmt = partition_drop_stmt(86400.0, drops.after)
            c0 = time.perf_counter()
            rows = c.execute(_sql.query(stmt.name), stmt.params).fetchall()
            call_s += time.perf_counter() - c0
            drops.record(rows)
    with Queue(dsn) as q:
        rest = q._run(_ops.purge_report(dt.timedelta(days=1)))
    jobs = sum(n for _, n in drops.dropped) + rest.jobs
    return {"s": time.perf_counter() - t0, "wal": wal_bytes(conn, start), "jobs": jobs, "lock_s": call_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2, help="pairs of runs (rows, drop), alternated ABBA")
    ap.add_argument("--drop-first", action="store_true", help="start with the drop (drop, rows, rows, drop, ...)")
    args = ap.parse_args()
    name = f"retain43_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    dsn = make_conninfo(args.dsn, dbname=name)
    try:
        subprocess.run([sys.executable, "-m", "pgq", "migrate", "--dsn", dsn], check=True, capture_output=True)
        results: dict[str, list[dict[str, float]]] = {"rows": [], "drop": []}
        with psycopg.connect(dsn, autocommit=True) as conn:
            for stmt in SHRINK:
                conn.execute(stmt)
            order = []
            for r in range(args.rounds):
                order += ["rows", "drop"] if (r % 2 == 0) != args.drop_first else ["drop", "rows"]
            for how in order:
                t = time.perf_counter()
                fill(conn, args.jobs)
                print(f"filled {args.jobs} finished jobs in {time.perf_counter() - t:.1f} s", flush=True)
                res = (by_rows if how == "rows" else by_drop)(conn, dsn)
                results[how].append(res)
                print(f"{how:5} {int(res['jobs']):>9} jobs  {res['s']:8.2f} s  WAL {res['wal'] / 1e6:9.2f} MB"
                      + ("" if how == "rows" else f"  (drop call {res['lock_s'] * 1000:.0f} ms)"), flush=True)
        for how, runs in results.items():
            print(f"median {how:5}: {statistics.median(r['s'] for r in runs):8.2f} s, "
                  f"WAL {statistics.median(r['wal'] for r in runs) / 1e6:9.2f} MB")
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


if __name__ == "__main__":
    main()
