"""What a claim costs against a deep backlog, with and without limits defined (revision 0010).

    python bench/backlog_claim.py --dsn postgresql://postgres@127.0.0.1:5432/postgres [--queued 1000000]

It creates a scratch database on that server (`pgq_backlog_<random>`), migrates it, and fills one
queue with `--queued` ready jobs of a plain kind. Then, for claims of 16 and of 256 jobs, it times
`--claims` claims (the statement a worker runs, sql/job_claim.sql: pgq.claim) in each of three
cases, alternated claim by claim so that a drifting machine favours none:

- `no limit`: no concurrency or rate limit defined for any kind;
- `unrelated limit`: a concurrency limit defined on a kind with no jobs;
- `full window ahead`: that limit, and `--limited` jobs of a rate-limited kind whose window is full,
  queued ahead of the plain ones (older run_at);
- `grouped`: the queue holds grouped jobs only (revision 0014), of a kind with a group concurrency
  limit of 2, spread over `--groups` group keys: the claim walks the groups;
- `groups ahead`: `--limited` jobs of that kind over `--groups` groups queued ahead of the plain
  ones: the claim takes both, groups in turn.

Each case claims from its own copy of the backlog (three queues filled alike), and every claim is
committed and its jobs completed, so the backlog barely changes. It prints, per case and size, the
median and 90th percentile ms per claim and the ratio of the medians to `no limit`'s. Before
revision 0010 any defined limit sent every claim through the general claim, which read the queue
past every limited job: 70 to 80 ms a claim behind 100,000 jobs of a full window. The database is
dropped at the end, however the run ends. It prints numbers; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import psycopg
from churn import scratch_database

from pgq import _ops

CASES = ("no limit", "unrelated limit", "full window ahead", "grouped", "groups ahead")
CLAIM_SIZES = (16, 256)


def _fill(dsn: str, queued: int, limited: int, groups: int) -> None:
    """The queues (one per case), and the limits of the cases after the first."""
    print(f"filling {queued:,} plain jobs in each of {len(CASES)} queues, {limited:,} limited ones ahead "
          "in the last ...", flush=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n, case in enumerate(CASES):
            if case == "grouped":
                conn.execute("INSERT INTO pgq.jobs (kind, payload, queue, run_at, group_key, limited)"
                             " SELECT 'grouped', jsonb_build_object('n', g), %s, now() - interval '1 hour',"
                             " 'g' || (g %% %s), true FROM generate_series(1, %s) AS g", [f"q{n}", groups, queued])
                continue
            conn.execute("INSERT INTO pgq.jobs (kind, payload, queue, run_at)"
                         " SELECT 'plain', jsonb_build_object('n', g), %s, now() - interval '1 hour'"
                         " FROM generate_series(1, %s) AS g", [f"q{n}", queued])
        # Limits defined through pgq (Queue.set_*), so that the jobs of their kinds are marked.
        _ops.run_sync(conn, _ops.set_concurrency_limit("unrelated", 5), own_transaction=True)
        _ops.run_sync(conn, _ops.set_rate_limit("throttled", (1, 3600.0)), own_transaction=True)
        conn.execute("INSERT INTO pgq.jobs (kind, payload, queue, run_at, limited)"
                     " SELECT 'throttled', '{}', 'q2', now() - interval '2 hours', true"
                     " FROM generate_series(1, %s)", [limited])
        _ops.run_sync(conn, _ops.set_group_limits("grouped", 2, None), own_transaction=True)
        conn.execute("INSERT INTO pgq.jobs (kind, payload, queue, run_at, group_key, limited)"
                     " SELECT 'grouped', '{}', %s, now() - interval '2 hours', 'g' || (g %% %s), true"
                     " FROM generate_series(1, %s) AS g", [f"q{CASES.index('groups ahead')}", groups, limited])
        conn.execute("VACUUM ANALYZE pgq.jobs")
    # Fill the window: the one start the rate allows this hour.
    with psycopg.connect(dsn, autocommit=True) as conn:
        taken = _ops.run_sync(conn, _ops.claim(worker="bench", queues=["q2"], kinds=["throttled"], limit=1, lease=60),
                              own_transaction=True)
        assert len(taken) == 1, taken


def _claim(conn: psycopg.Connection[Any], queue: str, limit: int) -> tuple[float, int]:
    """One claim of `queue`, timed (ms); its jobs are then completed. Returns (ms, jobs claimed)."""
    op = _ops.claim(worker="bench", queues=[queue], kinds=None, limit=limit, lease=60.0)
    started = time.perf_counter()
    claims = _ops.run_sync(conn, op, own_transaction=True)
    took = (time.perf_counter() - started) * 1000
    _ops.run_sync(conn, _ops.complete([(c, None, None) for c in claims], raise_lost=False), own_transaction=True)
    return took, len(claims)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a server to create the scratch database on")
    parser.add_argument("--queued", type=int, default=1_000_000, help="plain jobs per queue (default 1,000,000)")
    parser.add_argument("--limited", type=int, default=100_000,
                        help="jobs of the rate-limited kind ahead of them in the last case (default 100,000)")
    parser.add_argument("--groups", type=int, default=1000, help="group keys of the grouped cases (default 1,000)")
    parser.add_argument("--claims", type=int, default=30, help="claims timed per case and size (default 30)")
    args = parser.parse_args(argv)
    if args.claims < 1 or args.limited < 0 or args.groups < 128:
        parser.error("--claims must be at least 1, --limited at least 0 and --groups at least 128")
    if args.queued < args.claims * sum(CLAIM_SIZES):
        parser.error(f"--queued must be at least {args.claims * sum(CLAIM_SIZES):,} for {args.claims} claims")
    with scratch_database(args.dsn, "pgq_backlog") as dsn:
        _fill(dsn, args.queued, args.limited, args.groups)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for limit in CLAIM_SIZES:
                times: dict[str, list[float]] = {case: [] for case in CASES}
                for n in range(args.claims):
                    order = list(enumerate(CASES)) if n % 2 == 0 else list(enumerate(CASES))[::-1]
                    for q, case in order:
                        ms, got = _claim(conn, f"q{q}", limit)
                        if got != limit:
                            sys.exit(f"{case}: a claim took {got} jobs instead of {limit}")
                        times[case].append(ms)
                base = statistics.median(times[CASES[0]])
                for case in CASES:
                    ms = sorted(times[case])
                    median = statistics.median(ms)
                    print(f"claims of {limit}, {case:17s}: median {median:7.2f} ms, p90 "
                          f"{ms[int(len(ms) * 0.9)]:7.2f} ms, {median / base:4.2f}x no limit's", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
