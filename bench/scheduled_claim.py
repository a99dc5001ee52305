"""What a claim of 16 costs behind scheduled jobs, before and after revision 0023 (issue #42).

    python bench/scheduled_claim.py --dsn postgresql://postgres@127.0.0.1:5432/postgres [--jobs 1000000]

A scratch database (`pgq_sched_<random>`, migrated, dropped at the end) holds four queues of
`--jobs` jobs each:

- `ready`: ready jobs of a plain kind (the reference: a claim of 16 fills its batch at once);
- `scheduled`: jobs of a plain kind due tomorrow, over priorities 0-2;
- `limited`: jobs of a kind with a concurrency limit, due tomorrow;
- `grouped`: jobs of a kind with a group concurrency limit, due tomorrow, over `--groups` keys;

and each of the last three gets two ready plain jobs before every claim (so the claim comes back
short, as it does from a queue that is not saturated). Each claim is timed as the worker runs it
(sql/job_claim.sql's pgq.claim, one statement, autocommit), alternately with revision 0023's
pgq.claim and with revision 0021's (installed beside it as pgq.claim_0021 from
sql/schema/0021/functions/claim.sql), case by case, order flipped every round, so one run compares
both on the same tables. The claimed jobs are deleted between claims (not timed). Prints per case
and definition the median and p90 ms and the ratio to `ready`'s median with the same definition.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import psycopg
from churn import scratch_database

ROOT = Path(__file__).resolve().parent.parent
CASES = ("ready", "scheduled", "limited", "grouped")
CLAIMS = {"0023": "pgq.claim", "0021": "pgq.claim_0021"}


def _fill(dsn: str, jobs: int, groups: int) -> None:
    """Install revision 0021's claim beside the current one, then fill the four queues."""
    old = (ROOT / "sql/schema/0021/functions/claim.sql").read_text()
    old = old.split("COMMENT ON FUNCTION")[0].replace("FUNCTION pgq.claim(", "FUNCTION pgq.claim_0021(", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(old.encode())
        conn.execute("INSERT INTO pgq.concurrency_limits (kind, max_running) VALUES ('lim', 1000000)")
        conn.execute("INSERT INTO pgq.group_limits (kind, max_running) VALUES ('grp', 2)")
        started = time.monotonic()
        conn.execute("""INSERT INTO pgq.jobs (queue, kind, payload, priority, run_at)
                        SELECT 'ready', 'plain', '{}', 0, now() - interval '1 hour' + g * interval '1 ms'
                        FROM generate_series(1, %(n)s) g""", {"n": jobs})
        conn.execute("""INSERT INTO pgq.jobs (queue, kind, payload, priority, run_at)
                        SELECT 'scheduled', 'plain', '{}', g %% 3, now() + interval '1 day' + g * interval '1 ms'
                        FROM generate_series(1, %(n)s) g""", {"n": jobs})
        conn.execute("""INSERT INTO pgq.jobs (queue, kind, payload, priority, run_at)
                        SELECT 'limited', 'lim', '{}', g %% 3, now() + interval '1 day' + g * interval '1 ms'
                        FROM generate_series(1, %(n)s) g""", {"n": jobs})
        conn.execute("""INSERT INTO pgq.jobs (queue, kind, payload, priority, run_at, group_key, limited)
                        SELECT 'grouped', 'grp', '{}', g %% 3, now() + interval '1 day' + g * interval '1 ms',
                               'g' || (g %% %(groups)s), true
                        FROM generate_series(1, %(n)s) g""", {"n": jobs, "groups": groups})
        conn.execute("VACUUM ANALYZE pgq.jobs")
        print(f"filled 4 x {jobs:,} jobs in {time.monotonic() - started:.0f} s", flush=True)


def _claim(conn: psycopg.Connection, case: str, function: str) -> float:
    """One timed claim of 16 from queue `case` with `function`; returns ms. Deletes what it took."""
    if case != "ready":
        conn.execute("INSERT INTO pgq.jobs (queue, kind, payload) VALUES (%s, 'plain', '{}'), (%s, 'plain', '{}')",
                     (case, case))
    started = time.perf_counter()
    rows = conn.execute(f"SELECT c.id FROM {function}(ARRAY[%s], NULL, 16, 60, 'bench') c".encode(),
                        (case,)).fetchall()
    ms = (time.perf_counter() - started) * 1000
    want = 16 if case == "ready" else 2
    if len(rows) != want:
        sys.exit(f"{case} ({function}): a claim took {len(rows)} jobs instead of {want}")
    conn.execute("DELETE FROM pgq.jobs WHERE id = ANY(%s)", ([r[0] for r in rows],))
    return ms


def main(argv: list[str] | None = None) -> int:
    """Fill, time, print; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a server to create the scratch database on")
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs per queue (default 1,000,000)")
    parser.add_argument("--groups", type=int, default=1000, help="group keys of `grouped` (default 1,000)")
    parser.add_argument("--claims", type=int, default=20, help="claims timed per case and definition (default 20)")
    args = parser.parse_args(argv)
    if args.jobs < args.claims * 16 * 2 or args.groups < 1:
        parser.error("--jobs must cover every claim of `ready` (claims x 32), --groups must be at least 1")
    with scratch_database(args.dsn, "pgq_sched") as dsn:
        _fill(dsn, args.jobs, args.groups)
        times: dict[tuple[str, str], list[float]] = {(c, f): [] for c in CASES for f in CLAIMS}
        runs = [(c, f) for c in CASES for f in CLAIMS]
        with psycopg.connect(dsn, autocommit=True) as conn:
            for n in range(args.claims):
                for case, rev in (runs if n % 2 == 0 else runs[::-1]):
                    times[(case, rev)].append(_claim(conn, case, CLAIMS[rev]))
        for rev in CLAIMS:
            base = statistics.median(times[("ready", rev)])
            for case in CASES:
                ms = sorted(times[(case, rev)])
                median = statistics.median(ms)
                print(f"revision {rev}, claim of 16, {case:9s} ({args.jobs:,} jobs): median {median:8.2f} ms, "
                      f"p90 {ms[int(len(ms) * 0.9)]:8.2f} ms, {median / base:6.2f}x ready", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
