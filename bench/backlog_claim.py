"""The general claim against a deep backlog: how long a claim takes in the transaction pgq opens for
it, and how long the same statements take in a transaction without pgq's settings.

    python bench/backlog_claim.py --dsn postgresql://postgres@127.0.0.1:5432/postgres [--queued 300000]

A worker runs pgq's general claim (`sql/claim_limits_lock.sql`, then `sql/job_claim.sql`, in one
transaction) for every claim when it serves all queues (the `pgq worker` default) or several, and for
every claim of a single queue once any concurrency limit exists. That statement's estimated cost grows
with the backlog (`sql/transaction_guard.sql` says why) and, past the server's `jit_above_cost`, a
server with JIT would compile it with LLVM on every execution, for far longer than it runs. pgq's own
transactions turn JIT off (`transaction_guard.sql`); the comparison runs the same statements in a
transaction that sets only the idle limit and keeps the server's JIT settings, as pgq's own did
before (and as a caller's transaction does).

It creates a scratch database on that server (`pgq_backlog_<random>`), migrates it, fills it with
`--queued` ready jobs spread over `--queues` queues and two kinds, one of them with a concurrency
limit, runs VACUUM ANALYZE, and prints the server's JIT settings. Then, for each case (all queues, and
the first queue alone; claims of 16 jobs and of 512), it prints the plan's estimated cost and the
median and 90th percentile of `--claims` claims of each variant, alternated. Claims are committed (the
jobs they take stay running), a few thousand jobs in all, so the backlog barely changes. The database
is dropped at the end, however the run ends.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import psycopg
from churn import scratch_database

from pgq import _ops, _sql

LIMITED_KIND = "limited"


def _fill(dsn: str, queued: int, queues: int) -> None:
    print(f"filling {queued:,} queued jobs over {queues} queues ...", flush=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgq.jobs (kind, payload, queue)"
            " SELECT CASE WHEN g %% 10 = 0 THEN %(limited)s ELSE 'plain' END, jsonb_build_object('n', g),"
            "        'q' || (g %% %(queues)s)"
            " FROM generate_series(1, %(queued)s) AS g",
            {"limited": LIMITED_KIND, "queues": queues, "queued": queued},
        )
        conn.execute("INSERT INTO pgq.concurrency_limits (kind, max_running) VALUES (%s, 1000000)",
                     [LIMITED_KIND])
        conn.execute("VACUUM ANALYZE pgq.jobs")
        settings = conn.execute(
            "SELECT pg_jit_available(), current_setting('jit'), current_setting('jit_above_cost'),"
            " current_setting('jit_inline_above_cost'), current_setting('jit_optimize_above_cost')").fetchone()
    assert settings is not None
    print(f"server JIT available: {settings[0]}; jit = {settings[1]}, jit_above_cost = {settings[2]}, "
          f"jit_inline_above_cost = {settings[3]}, jit_optimize_above_cost = {settings[4]}", flush=True)


def _claim_params(queues: list[str] | None, limit: int) -> dict[str, Any]:
    return {"queues": queues, "kinds": None, "limit": limit, "lease_s": 60.0, "worker": "bench",
            "limited_kinds": [LIMITED_KIND], "limited_max": [1000000], "limited_starts": [None],
            "limited_per_s": [None]}


def _pgq_claim(conn: psycopg.Connection[Any], queues: list[str] | None, limit: int) -> int:
    # Exactly what a worker runs (with two or more queues, or a limit, the general claim).
    claim = _ops.claim(worker="bench", queues=queues, kinds=None, limit=limit, lease=60.0)
    return len(_ops.run_sync(conn, claim, own_transaction=True))


def _plain_claim(conn: psycopg.Connection[Any], queues: list[str] | None, limit: int) -> int:
    # The same statements in a transaction that sets only the idle limit (one round trip, as pgq's
    # guard), under the session's (the server's) JIT settings.
    with conn.transaction():
        conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, true)",
                     [_ops.TRANSACTION_IDLE_LIMIT])
        conn.execute(_sql.query("claim_limits_lock"), {"kinds": None})
        return len(conn.execute(_sql.query("job_claim"), _claim_params(queues, limit)).fetchall())


def _estimate(conn: psycopg.Connection[Any], queues: list[str] | None, limit: int) -> float:
    plan = conn.execute(b"EXPLAIN (FORMAT JSON) " + _sql.query("job_claim").encode(),
                        _claim_params(queues, limit)).fetchone()
    assert plan is not None
    return float(plan[0][0]["Plan"]["Total Cost"])


VARIANTS = {"pgq": _pgq_claim, "server JIT settings": _plain_claim}
CLAIM_SIZES = (16, 512)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a server to create the scratch database on")
    parser.add_argument("--queued", type=int, default=300_000, help="ready jobs in the backlog (default 300,000)")
    parser.add_argument("--queues", type=int, default=3, help="queues they are spread over (default 3)")
    parser.add_argument("--claims", type=int, default=15, help="claims timed per variant and case (default 15)")
    args = parser.parse_args(argv)
    if args.queues < 1 or args.claims < 1:
        parser.error("--queues and --claims must be at least 1")
    # Every claim must get its full count, from the first queue alone in the one-queue cases, after
    # the all-queue cases took their share of it (twice as much, as a margin).
    needed = args.claims * len(VARIANTS) * sum(CLAIM_SIZES) * 2 * args.queues
    if args.queued < needed:
        parser.error(f"--queued must be at least {needed:,} for {args.claims} claims per variant and case")

    with scratch_database(args.dsn, "pgq_backlog") as dsn:
        _fill(dsn, args.queued, args.queues)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for queues in (None, ["q0"]):
                for limit in CLAIM_SIZES:
                    where = "all queues" if queues is None else "one queue"
                    print(f"{where}, claims of {limit}: estimated cost {_estimate(conn, queues, limit):,.0f}",
                          flush=True)
                    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
                    for n in range(args.claims):
                        for name, run in (list(VARIANTS.items()) if n % 2 == 0 else list(VARIANTS.items())[::-1]):
                            started = time.perf_counter()
                            got = run(conn, queues, limit)
                            times[name].append((time.perf_counter() - started) * 1000)
                            if got != limit:
                                sys.exit(f"a claim took {got} jobs instead of {limit}: the backlog is too small")
                    for name, ms in times.items():
                        ms.sort()
                        print(f"  {name:20s} ms per claim: median {statistics.median(ms):8.1f}, "
                              f"p90 {ms[int(len(ms) * 0.9)]:8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
