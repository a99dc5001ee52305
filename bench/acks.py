"""One connection drains N jobs: claim 200 with pgq.claim, acknowledge them with one of these statements.

A: pgq.complete, as the worker calls it (fenced, watermarks, triggers, notifications);
B: a bare fenced UPDATE to succeeded (a new row version, as A writes);
C: the row moves out: a fenced DELETE, its columns INSERTed into a narrow table of finished jobs;
D: a fenced DELETE alone (a lower bound);
F: A with pgq.jobs at fillfactor 50.
Prints, per run and then per variant, the µs per job spent in claims and in acknowledgements: wall
time on one connection, so server time plus one round trip per 200 jobs. Runs in a scratch database
migrated by `pgq migrate` (DSN below, or $EXP_DSN). Usage: python3 acks.py N A,B,C,D,D,C,B,A
"""

import os
import statistics
import sys
import time
import uuid

import psycopg

DSN = os.environ.get("EXP_DSN", "postgresql://postgres@127.0.0.1:5432/exp")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
ORDER = sys.argv[2].split(",") if len(sys.argv) > 2 else ["A", "B", "C", "D", "D", "C", "B", "A"]

FENCE = "unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) d(id, token)"
COMPLETE = (
    "SELECT c.id FROM pgq.complete(%(ids)s::bigint[], %(tokens)s::uuid[],"
    " NULL::jsonb[], NULL::bigint[], NULL::jsonb[], NULL::text) c"
)
COLUMNS = "id, queue, kind, payload, priority, run_at, attempts, max_attempts, created_at, started_at"
ACKS = {  # variant: (statement, fillfactor)
    "A": (COMPLETE, 100),
    "B": (
        "UPDATE pgq.jobs j SET status = 'succeeded', finished_at = now(), lease_token = NULL,"
        f" lease_expires_at = NULL FROM {FENCE} WHERE j.id = d.id AND j.lease_token = d.token",
        100,
    ),
    "C": (
        f"WITH gone AS (DELETE FROM pgq.jobs j USING {FENCE}"
        " WHERE j.id = d.id AND j.lease_token = d.token RETURNING j.*)"
        f" INSERT INTO exp_done ({COLUMNS}, finished_at) SELECT {COLUMNS}, now() FROM gone",
        100,
    ),
    "D": (f"DELETE FROM pgq.jobs j USING {FENCE} WHERE j.id = d.id AND j.lease_token = d.token", 100),
    "F": (COMPLETE, 50),
}
CLAIM = "SELECT c.id, c.lease_token FROM pgq.claim(ARRAY['bench'], NULL, 200, 60, 'exp') c"
DONE_TABLE = (
    "CREATE TABLE IF NOT EXISTS exp_done (id bigint PRIMARY KEY, queue text, kind text, payload jsonb,"
    " priority smallint, run_at timestamptz, attempts int, max_attempts int, created_at timestamptz,"
    " started_at timestamptz, finished_at timestamptz)"
)
FILL = (
    "INSERT INTO pgq.jobs (kind, queue, payload)"
    " SELECT 'bench', 'bench', jsonb_build_object('i', g) FROM generate_series(1, %s) g"
)

res: dict[str, list[tuple[float, float]]] = {}
with psycopg.connect(DSN, autocommit=True) as c:
    c.execute(DONE_TABLE)
    for v in ORDER:
        sql, ff = ACKS[v]
        c.execute("TRUNCATE pgq.jobs, exp_done")
        c.execute(f"ALTER TABLE pgq.jobs SET (fillfactor = {ff})")
        c.execute(FILL, (N,))
        c.execute("VACUUM ANALYZE pgq.jobs")
        c.execute("VACUUM ANALYZE exp_done")
        tc = ta = 0.0
        done = 0
        while True:
            t0 = time.perf_counter()
            rows = c.execute(CLAIM).fetchall()
            t1 = time.perf_counter()
            if not rows:
                break
            c.execute(sql, {"ids": [r[0] for r in rows], "tokens": [uuid.UUID(str(r[1])) for r in rows]})
            t2 = time.perf_counter()
            tc += t1 - t0
            ta += t2 - t1
            done += len(rows)
        assert done == N, done
        res.setdefault(v, []).append((tc, ta))
        print(f"{v}: claim {tc * 1e6 / N:.1f} us/job, ack {ta * 1e6 / N:.1f} us/job", flush=True)
    c.execute("ALTER TABLE pgq.jobs RESET (fillfactor)")
for v, xs in res.items():
    claim = statistics.mean(x[0] for x in xs) * 1e6 / N
    ack = statistics.mean(x[1] for x in xs) * 1e6 / N
    print(f"{v} claim {claim:.1f} ack {ack:.1f} us/job (mean of {len(xs)})")
