"""One connection drains N jobs, claiming 200 at a time with one of these statements.

P: pgq.claim, as the worker calls it (reservations, pauses, limits, groups, sequences);
S: the bare claim any queue on this table needs: the head's first 200 rows FOR NO KEY UPDATE SKIP
   LOCKED, set running with a lease.
Each batch is then deleted (the same for both), and only the claim is timed: µs per job, wall time
on one connection. A scratch database migrated by `pgq migrate` ($EXP_DSN).
Usage: python3 claims.py N P,S,S,P
"""

import os
import statistics
import sys
import time
import uuid

import psycopg

DSN = os.environ.get("EXP_DSN", "postgresql://postgres@127.0.0.1:5432/exp")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
ORDER = sys.argv[2].split(",") if len(sys.argv) > 2 else ["P", "S", "S", "P"]

CLAIMS = {
    "P": "SELECT c.id, c.lease_token FROM pgq.claim(ARRAY['bench'], NULL, 200, 60, 'exp') c",
    "S": (
        "WITH c AS (SELECT j.id FROM pgq.jobs j"
        " WHERE j.status = 'queued' AND j.queue = 'bench' AND j.limited = false AND j.run_at <= now()"
        " ORDER BY j.priority, j.run_at, j.id LIMIT 200 FOR NO KEY UPDATE SKIP LOCKED)"
        " UPDATE pgq.jobs j SET status = 'running', attempts = j.attempts + 1, lease_token = gen_random_uuid(),"
        " lease_expires_at = now() + interval '60 s', claimed_by = 'exp', started_at = now()"
        " FROM c WHERE j.id = c.id RETURNING j.id, j.lease_token"
    ),
}
DROP = (
    "DELETE FROM pgq.jobs j USING unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) d(id, token)"
    " WHERE j.id = d.id AND j.lease_token = d.token"
)
FILL = (
    "INSERT INTO pgq.jobs (kind, queue, payload)"
    " SELECT 'bench', 'bench', jsonb_build_object('i', g) FROM generate_series(1, %s) g"
)

res: dict[str, list[float]] = {}
with psycopg.connect(DSN, autocommit=True) as c:
    for v in ORDER:
        c.execute("TRUNCATE pgq.jobs")
        c.execute(FILL, (N,))
        c.execute("VACUUM ANALYZE pgq.jobs")
        tc = 0.0
        done = 0
        while True:
            t0 = time.perf_counter()
            rows = c.execute(CLAIMS[v]).fetchall()
            tc += time.perf_counter() - t0
            if not rows:
                break
            done += len(rows)
            c.execute(DROP, {"ids": [r[0] for r in rows], "tokens": [uuid.UUID(str(r[1])) for r in rows]})
        assert done == N, done
        res.setdefault(v, []).append(tc * 1e6 / N)
        print(f"{v}: claim {tc * 1e6 / N:.1f} us/job", flush=True)
for v, xs in res.items():
    print(f"{v} claim {statistics.mean(xs):.1f} us/job (mean of {len(xs)})")
