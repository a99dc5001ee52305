#!/usr/bin/env python3
"""What each part of pgq.jobs costs an enqueue, in server instructions per job (callgrind): the
batch INSERT of `pgq._ops.enqueue` (sql/job_insert.sql) on a database of this checkout as migrated,
then with one part taken away at a time (an index, the JSON bounds' insert trigger, the CHECKs added
since caf8cde, the `limited` expression) in a database of its own.

    python3 bench/enqueue_parts.py                 # 5,000 jobs in batches of 1,000 per variant

Each variant's backend runs two warm-up batches, a second backend the same two and --jobs more; the
difference, divided by --jobs, is the figure (repeatable to a few hundred instructions). The
parts taken away are experiments on a throwaway cluster: what the difference says is what the part
costs, not that it could go.
"""

from __future__ import annotations

import argparse
import shutil
import sys

import psycopg
from private_cluster import ROOT, CallgrindCluster, throwaway

VARIANTS: dict[str, list[str]] = {
    "as migrated": [],
    "without jobs_claim_kind_idx": ["DROP INDEX pgq.live_jobs_claim_kind_idx"],
    "without jobs_claim_idx": ["DROP INDEX pgq.live_jobs_claim_idx"],
    "without both claim indexes": ["DROP INDEX pgq.live_jobs_claim_idx",
                                   "DROP INDEX pgq.live_jobs_claim_kind_idx"],
    "kind index in the C collation": [
        "DROP INDEX pgq.live_jobs_claim_kind_idx",
        'CREATE INDEX live_jobs_claim_kind_idx ON pgq.live_jobs '
        '(queue COLLATE "C", kind COLLATE "C", priority, run_at, id) '
        "WHERE status = 'queued' AND limited IS NOT TRUE"],
    "without the JSON insert trigger": ["ALTER TABLE pgq.live_jobs DISABLE TRIGGER jobs_json_bounded_insert"],
    "without the CHECKs added since caf8cde": [
        "ALTER TABLE pgq.live_jobs DROP CONSTRAINT jobs_run_at_bounded, DROP CONSTRAINT jobs_lease_bounded, "
        "DROP CONSTRAINT jobs_group_key_limited"],
}
NOT_LIMITED = "without the limited expression"  # the statement itself, with `limited` a constant
LIMITED_EXPR = """           i.group_key IS NOT NULL
           OR coalesce(i.kind, %(kind)s::text) IN (SELECT l.kind FROM pgq.concurrency_limits l
                                                   UNION ALL SELECT r.kind FROM pgq.rate_limits r),"""


def per_job(cluster: CallgrindCluster, db: str, ddl: list[str], statement: str, jobs: int, batch: int) -> float:
    """Instructions per job of `statement` (job_insert.sql) in a new database `db` changed by `ddl`."""
    with psycopg.connect(cluster.migrated_database(db, ROOT), autocommit=True) as conn:
        for step in ddl:
            conn.execute(step.encode())
    params = {"kind": "k", "kinds": None, "queue": "q", "queues": None, "priority": 0, "priorities": None,
              "run_ats": None, "delays": None, "watermarks": None, "max_attempts": None, "group_keys": None}
    counts = []
    for batches in (2, 2 + jobs // batch):
        with psycopg.connect(cluster.dsn + db, autocommit=True) as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            for _ in range(batches):
                conn.execute(statement.encode(), {**params, "payloads": [f'{{"i": {i}}}' for i in range(batch)]})
        counts.append(cluster.instructions(int(row[0])))
    return (counts[1] - counts[0]) / (jobs // batch * batch)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=5000, help="jobs measured per variant (default 5,000)")
    parser.add_argument("--batch", type=int, default=1000, help="jobs per INSERT (default 1,000: W2's)")
    parser.add_argument("--bindir", help="PostgreSQL server binaries (default: pg_config --bindir)")
    opts = parser.parse_args()
    if opts.batch < 1 or opts.jobs < opts.batch:
        parser.error("--batch must be at least 1 and --jobs at least --batch")
    if not shutil.which("valgrind"):
        parser.error("valgrind is not installed (Debian: apt-get install valgrind)")
    statement = (ROOT / "sql" / "job_insert.sql").read_text()
    if LIMITED_EXPR not in statement:
        parser.error("sql/job_insert.sql no longer computes `limited` as this script expects")
    variants = [(name, ddl, statement) for name, ddl in VARIANTS.items()]
    variants.append((NOT_LIMITED, [], statement.replace(LIMITED_EXPR, "           false,")))
    with throwaway(CallgrindCluster, opts.bindir, "pgq-enqueue-parts-") as (cluster, _tmp):
        print(f"server instructions per enqueued job, {opts.jobs} jobs in batches of {opts.batch}")
        base = None
        for i, (name, ddl, sql) in enumerate(variants):
            got = per_job(cluster, f"parts_{i}", ddl, sql, opts.jobs, opts.batch)
            base = got if base is None else base
            print(f"  {name:<40} {got:9,.0f}  ({got - base:+9,.0f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
