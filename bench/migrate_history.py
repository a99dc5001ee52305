#!/usr/bin/env python3
"""What revision 0033 (issue #43) costs a database that already holds many jobs: on a private
cluster, a database at revision 0032 is filled with --finished finished jobs (over the last 8 days,
1 % failed, 1 % cancelled, 4 queues) and --live queued or running ones, then upgraded to 0033 and
downgraded again, each timed, with its WAL. The upgrade holds pgq.jobs exclusively from its first
statement to its commit, so its time is how long the queue stops.

    python3 bench/migrate_history.py --finished 1000000 --live 10000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import psycopg
from private_cluster import PrivateCluster, throwaway

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FILL = """
INSERT INTO pgq.jobs (queue, kind, payload, status, attempts, finished_at, created_at, run_at, result, last_error)
SELECT 'q' || (g %% 4), 'k', jsonb_build_object('n', g),
       CASE WHEN g %% 100 = 0 THEN 'failed' WHEN g %% 100 = 1 THEN 'cancelled' ELSE 'succeeded' END::pgq.job_status,
       1, now() - (g::double precision / %(n)s) * interval '8 days', now() - interval '9 days',
       now() - interval '9 days', CASE WHEN g %% 100 > 1 THEN '{"ok": true}'::jsonb END,
       CASE WHEN g %% 100 = 0 THEN 'boom' END
FROM generate_series(1, %(n)s) g
"""
LIVE = "INSERT INTO pgq.jobs (queue, kind, payload) SELECT 'q' || (g %% 4), 'k', '{}' FROM generate_series(1, %(n)s) g"


def wal(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
    assert row is not None
    return int(row[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--live", type=int, default=10_000)
    parser.add_argument("--bindir", help="PostgreSQL server binaries (default: pg_config --bindir)")
    args = parser.parse_args()
    from pgq import migrate

    with throwaway(PrivateCluster, args.bindir, "pgq-migrate-") as (cluster, _tmp):
        with psycopg.connect(cluster.dsn + "postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE m")
        dsn = cluster.dsn + "m"
        migrate.upgrade(dsn, "0032")
        with psycopg.connect(dsn, autocommit=True) as conn:
            started = time.monotonic()
            conn.execute(FILL, {"n": args.finished})
            conn.execute(LIVE, {"n": args.live})
            conn.execute("SELECT count(*) FROM pgq.claim(ARRAY['q0'], NULL, %s, 600, 'w')", (args.live // 10,))
            conn.execute("VACUUM ANALYZE pgq.jobs")
            size = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('pgq.jobs'))").fetchone()
            print(f"filled: {args.finished:,} finished and {args.live:,} live jobs in "
                  f"{time.monotonic() - started:.1f} s; pgq.jobs with its indexes: {size[0] if size else '?'}")
            for step, run in (("upgrade to 0033", lambda: migrate.upgrade(dsn)),
                              ("downgrade to 0032", lambda: migrate.downgrade(dsn, "0032"))):
                conn.execute("CHECKPOINT")
                before = wal(conn)
                started = time.monotonic()
                run()
                took = time.monotonic() - started
                print(f"{step}: {took:.2f} s (pgq.jobs locked throughout), WAL {(wal(conn) - before) / 1e6:.1f} MB")
            count = conn.execute("SELECT count(*) FROM pgq.jobs").fetchone()
            print(f"jobs after the round trip: {count[0] if count else '?':,}")


if __name__ == "__main__":
    os.environ.setdefault("PGQ_LOG_LEVEL", "WARNING")
    main()
