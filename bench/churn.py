"""Table health under churn: run N jobs through pgq the way a busy deployment does, and watch the
claim statement's latency and the size of pgq.jobs and its indexes while finished jobs accumulate
and retention deletes them.

    python bench/churn.py --dsn postgresql://postgres@127.0.0.1:5432/postgres --jobs 1000000

It creates a scratch database on that server (`pgq_churn_<random>`), migrates it, and drops it at
the end, however the run ends (`--keep` keeps it). One loop, one connection, like one busy worker
with a producer and the retention step beside it:

- enqueue in batches (`--enqueue-batch`) whenever the backlog of queued jobs falls below `--backlog`;
- claim in batches (`--claim-batch`) with the real claim statement (`sql/job_claim_fast.sql`), each
  execution timed;
- complete each claimed batch with one `sql/job_complete.sql` statement;
- every second, delete the jobs that finished more than `--retention` seconds ago, in batches
  (`sql/job_purge.sql`), as the worker's retention step does.

Every `--report-every` completed jobs (and at the start and the end) it prints: the jobs kept per
status, the size of the table and of each index, dead row versions and autovacuum runs so far, and
the claim latency p50/p99 over the interval: of the loop's batch claims, and of a probe that claims
one job 200 times in transactions it rolls back (the latency a freshly woken worker sees).
`--default-storage` resets pgq.jobs' storage parameters to the server defaults first, for comparison
with the settings of revision 0003; `--fillfactor N` then sets the table's fillfactor.

Vacuum: when the server runs autovacuum, the script leaves vacuuming to it. When the server has
autovacuum off (some shared development servers do), a thread of the script stands in for it: every
`--naptime` seconds (default: the server's autovacuum_naptime) it applies autovacuum's own rule to
pgq.jobs with the table's effective settings (reloptions over server settings: dead versions over
threshold + scale_factor x reltuples, likewise for inserts and analyze) and runs VACUUM / ANALYZE on
its own connection, throttled by the table's autovacuum cost delay and limit, concurrently with the
churn, as an autovacuum worker would.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import secrets
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

from pgq import _ops, _sql, migrate
from pgq.models import Claim, Job, JobSpec

QUEUE = "churn"
PROBE_CLAIMS = 200


@dataclass
class Interval:
    """Claim latencies (seconds) measured since the last report."""

    batch: list[float] = field(default_factory=list)


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`, in milliseconds; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def claim_params(limit: int, queue: str = QUEUE) -> dict[str, Any]:
    """Parameters of job_claim_fast for `limit` jobs of `queue` (default: the bench queue)."""
    return {"queue": queue, "kinds": None, "limit": limit, "lease_s": 300.0, "worker": "churn-bench"}


def probe(conn: psycopg.Connection[Any], queue: str = QUEUE, claims: int = PROBE_CLAIMS) -> list[float]:
    """Claim one job of `queue` `claims` times, each in a transaction rolled back: latencies in seconds."""
    query = _sql.query("job_claim_fast")
    latencies = []
    for _ in range(claims):
        with conn.transaction(force_rollback=True), conn.cursor() as cur:
            started = time.perf_counter()
            cur.execute(query, claim_params(1, queue))
            cur.fetchall()
            latencies.append(time.perf_counter() - started)
    return latencies


# The table the hot path writes: pgq.live_jobs since revision 0033, pgq.jobs before.
HOT = "coalesce(to_regclass('pgq.live_jobs'), 'pgq.jobs'::regclass)"


def hot_name(conn: psycopg.Connection[Any]) -> str:
    """pgq.live_jobs where the schema has it (revision 0033), else pgq.jobs."""
    row = conn.execute(f"SELECT {HOT}::text AS t").fetchone()
    assert row is not None
    return str(row["t"] if isinstance(row, dict) else row[0])


def sizes(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Table and index sizes (bytes), row counts per status, dead versions and vacuum counters."""
    table = conn.execute(f"SELECT pg_table_size({HOT}) AS b").fetchone()
    indexes = conn.execute(
        "SELECT c.relname AS name, pg_relation_size(c.oid) AS b FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = " + HOT + " ORDER BY 1"
    ).fetchall()
    statuses = conn.execute("SELECT status::text AS s, count(*) AS n FROM pgq.jobs GROUP BY 1").fetchall()
    stats = conn.execute(
        "SELECT n_live_tup, n_dead_tup, autovacuum_count + vacuum_count AS vacuums FROM pg_stat_user_tables "
        "WHERE relid = " + HOT
    ).fetchone()
    assert table is not None and stats is not None
    return {"table": table["b"], "indexes": {r["name"]: r["b"] for r in indexes},
            "status": {r["s"]: r["n"] for r in statuses}, **stats}


class StandInAutovacuum(threading.Thread):
    """Applies autovacuum's trigger rule to pgq.jobs every `naptime` seconds, on its own connection,
    with the table's effective autovacuum settings; counts the VACUUM and ANALYZE runs it did."""

    def __init__(self, dsn: str, naptime: float) -> None:
        super().__init__(name="stand-in-autovacuum", daemon=True)
        self._dsn = dsn
        self._naptime = naptime
        self._stop_event = threading.Event()
        self.vacuums = self.analyzes = 0
        self.error: BaseException | None = None

    def stop(self) -> None:
        """Stop after the current run."""
        self._stop_event.set()
        self.join()

    def run(self) -> None:
        try:
            with psycopg.connect(self._dsn, autocommit=True, row_factory=dict_row) as conn:
                setting = effective_settings(conn)
                conn.execute("SELECT set_config('vacuum_cost_delay', %s, false), "
                             "set_config('vacuum_cost_limit', %s, false)",
                             [str(setting["autovacuum_vacuum_cost_delay"]),
                              str(int(setting["autovacuum_vacuum_cost_limit"]))])
                while not self._stop_event.wait(self._naptime):
                    self._once(conn, setting)
        except BaseException as exc:
            self.error = exc

    def _once(self, conn: psycopg.Connection[Any], setting: dict[str, float]) -> None:
        row = conn.execute(
            "SELECT greatest(c.reltuples, 0) AS reltuples, s.n_dead_tup, s.n_ins_since_vacuum, s.n_mod_since_analyze "
            "FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.oid = " + HOT
        ).fetchone()
        assert row is not None
        tuples = float(row["reltuples"])
        vacuum = (row["n_dead_tup"] > setting["autovacuum_vacuum_threshold"]
                  + setting["autovacuum_vacuum_scale_factor"] * tuples
                  or row["n_ins_since_vacuum"] > setting["autovacuum_vacuum_insert_threshold"]
                  + setting["autovacuum_vacuum_insert_scale_factor"] * tuples)
        analyze = (row["n_mod_since_analyze"] > setting["autovacuum_analyze_threshold"]
                   + setting["autovacuum_analyze_scale_factor"] * tuples)
        if vacuum:
            conn.execute("VACUUM (ANALYZE) pgq.jobs" if analyze else "VACUUM pgq.jobs")
            self.vacuums += 1
        elif analyze:
            conn.execute("ANALYZE pgq.jobs")
        self.analyzes += analyze


AUTOVACUUM_SETTINGS = ("autovacuum_vacuum_threshold", "autovacuum_vacuum_scale_factor",
                       "autovacuum_vacuum_insert_threshold", "autovacuum_vacuum_insert_scale_factor",
                       "autovacuum_analyze_threshold", "autovacuum_analyze_scale_factor",
                       "autovacuum_vacuum_cost_delay", "autovacuum_vacuum_cost_limit")


def effective_settings(conn: psycopg.Connection[Any]) -> dict[str, float]:
    """pgq.jobs' autovacuum settings: its reloptions, else the server's settings (cost limit -1 means
    vacuum_cost_limit, as for autovacuum)."""
    rows = conn.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                        [[*AUTOVACUUM_SETTINGS, "vacuum_cost_limit"]]).fetchall()
    setting = {r["name"]: float(r["setting"]) for r in rows}
    options = conn.execute("SELECT reloptions FROM pg_class WHERE oid = " + HOT).fetchone()
    for option in (options or {}).get("reloptions") or []:
        name, _, value = option.partition("=")
        if name in AUTOVACUUM_SETTINGS:
            setting[name] = float(value)
    if setting["autovacuum_vacuum_cost_limit"] < 0:
        setting["autovacuum_vacuum_cost_limit"] = setting["vacuum_cost_limit"]
    return setting


def mb(size: int) -> str:
    """Bytes as MB with one decimal."""
    return f"{size / 2**20:.1f}"


HEADER = (f"{'phase':>6} {'done':>9} {'secs':>6} {'queued':>7} {'finished':>9} {'table MB':>8} "
          f"{'index MB':>8} {'claim_idx':>9} {'dead':>8} {'vacuums':>7} "
          f"{'claim batch p50/p99 ms':>22} {'claim 1 p50/p99 ms':>18}")


def report(conn: psycopg.Connection[Any], phase: str, done: int, elapsed: float, interval: Interval) -> None:
    """Print one line of the progress table."""
    one = probe(conn)
    s = sizes(conn)
    finished = sum(n for status, n in s["status"].items() if status in ("succeeded", "failed", "cancelled"))
    claim_idx = s["indexes"].get("live_jobs_claim_idx", s["indexes"].get("jobs_claim_idx", 0))
    print(f"{phase:>6} {done:>9,} {elapsed:>6.0f} {s['status'].get('queued', 0):>7,} {finished:>9,} "
          f"{mb(s['table']):>8} {mb(sum(s['indexes'].values())):>8} {mb(claim_idx):>9} "
          f"{s['n_dead_tup']:>8,} {s['vacuums']:>7} "
          f"{pct(interval.batch, 0.5):>10.2f} / {pct(interval.batch, 0.99):>7.2f} "
          f"{pct(one, 0.5):>7.2f} / {pct(one, 0.99):>7.2f}", flush=True)
    if phase in ("start", "end"):
        details = ", ".join(f"{name} {mb(size)}" for name, size in s["indexes"].items())
        print(f"       {phase}: table {mb(s['table'])} MB; indexes (MB): {details}", flush=True)
    interval.batch.clear()


def run(dsn: str, args: argparse.Namespace) -> None:
    """The churn loop on the migrated database at `dsn`."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        if args.default_storage:
            conn.execute(
                "ALTER TABLE pgq.jobs RESET (fillfactor, autovacuum_vacuum_scale_factor, "
                "autovacuum_vacuum_threshold, autovacuum_vacuum_insert_scale_factor, "
                "autovacuum_vacuum_insert_threshold, autovacuum_analyze_scale_factor, "
                "autovacuum_analyze_threshold, autovacuum_vacuum_cost_limit, autovacuum_vacuum_cost_delay)"
            )
        if args.fillfactor is not None:
            conn.execute(f"ALTER TABLE {hot_name(conn)} SET (fillfactor = {args.fillfactor:d})".encode())
        options = conn.execute("SELECT reloptions FROM pg_class WHERE oid = " + HOT).fetchone()
        print(f"{hot_name(conn)} storage parameters: {options['reloptions'] if options else None}")
        autovacuum = conn.execute(
            "SELECT current_setting('autovacuum') = 'on' AS on, "
            "(SELECT setting::float FROM pg_settings WHERE name = 'autovacuum_naptime') AS naptime"
        ).fetchone()
        assert autovacuum is not None
        stand_in: StandInAutovacuum | None = None
        if not autovacuum["on"]:
            naptime = args.naptime if args.naptime is not None else autovacuum["naptime"]
            stand_in = StandInAutovacuum(dsn, naptime)
            stand_in.start()
            print(f"the server runs without autovacuum: a stand-in applies its rule every {naptime:g} s")
        else:
            print(f"autovacuum is on (naptime {autovacuum['naptime']:g} s)")
        try:
            churn(conn, args)
        finally:
            if stand_in is not None:
                stand_in.stop()
                print(f"stand-in autovacuum: {stand_in.vacuums} VACUUM, {stand_in.analyzes} ANALYZE"
                      + (f"; it failed: {stand_in.error!r}" if stand_in.error else ""))


def churn(conn: psycopg.Connection[Any], args: argparse.Namespace) -> None:
    """The loop itself, on `conn`."""
    print(f"{args.jobs:,} jobs; backlog {args.backlog:,}; enqueue batch {args.enqueue_batch}; claim batch "
          f"{args.claim_batch}; retention {args.retention:g} s", flush=True)
    print(HEADER, flush=True)
    claim_sql = _sql.query("job_claim_fast")
    lease = dt.timedelta(seconds=300)
    enqueued = done = 0
    interval = Interval()
    started = time.monotonic()
    next_purge = started + 1.0
    next_report = min(args.report_every, max(args.jobs // 100, 1))  # "start": after the first 1 %
    first = True
    while done < args.jobs:
        while enqueued < args.jobs and enqueued - done < args.backlog:
            count = min(args.enqueue_batch, args.jobs - enqueued)
            specs = [JobSpec("churn.job", {"n": enqueued + i}, queue=QUEUE) for i in range(count)]
            _ops.run_sync(conn, _ops.enqueue(specs), own_transaction=True)
            enqueued += count
        with conn.cursor() as cur:
            t0 = time.perf_counter()
            cur.execute(claim_sql, claim_params(args.claim_batch))
            rows = cur.fetchall()
            interval.batch.append(time.perf_counter() - t0)
        if not rows:
            raise SystemExit(f"claim returned nothing with {enqueued - done} jobs queued")
        claims = [Claim(job=job, token=str(job.lease_token), lease=lease) for job in map(Job.from_row, rows)]
        _ops.run_sync(conn, _ops.complete([(c, None, None) for c in claims], raise_lost=True),
                      own_transaction=True)
        done += len(claims)
        now = time.monotonic()
        if now >= next_purge:
            _ops.run_sync(conn, _ops.purge(args.retention), own_transaction=True)
            next_purge = now + 1.0
        if done >= next_report or done >= args.jobs:
            phase = "start" if first else ("end" if done >= args.jobs else "")
            report(conn, phase, done, time.monotonic() - started, interval)
            first = False
            next_report = (done // args.report_every + 1) * args.report_every
    elapsed = time.monotonic() - started
    print(f"{done:,} jobs in {elapsed:.0f} s ({done / elapsed:,.0f} jobs/s, single connection)", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, create the scratch database, run, drop it."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a server to create the scratch database on (any database)")
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs to run through (default: 1000000)")
    parser.add_argument("--backlog", type=int, default=20_000, help="queued jobs kept waiting (default: 20000)")
    parser.add_argument("--enqueue-batch", type=int, default=1000, help="jobs per enqueue (default: 1000)")
    parser.add_argument("--claim-batch", type=int, default=100, help="jobs per claim (default: 100)")
    parser.add_argument("--retention", type=float, default=60.0,
                        help="delete jobs finished longer ago than this, seconds (default: 60)")
    parser.add_argument("--report-every", type=int, default=100_000, help="jobs between reports (default: 100000)")
    parser.add_argument("--default-storage", action="store_true",
                        help="reset pgq.jobs' fillfactor and autovacuum settings to the server's defaults first")
    parser.add_argument("--fillfactor", type=int, choices=range(10, 101), metavar="10..100", default=None,
                        help="set pgq.jobs' fillfactor to this before the run (after --default-storage)")
    parser.add_argument("--naptime", type=float, default=None,
                        help="seconds between runs of the stand-in autovacuum, when the server has autovacuum "
                        "off (default: the server's autovacuum_naptime)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database (its name is printed)")
    args = parser.parse_args(argv)
    for name in ("jobs", "backlog", "enqueue_batch", "claim_batch", "report_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if not args.retention > 0:
        parser.error("--retention must be > 0")

    with scratch_database(args.dsn, "pgq_churn", keep=args.keep) as scratch:
        run(scratch, args)
    return 0


@contextlib.contextmanager
def scratch_database(dsn: str, prefix: str, *, keep: bool = False) -> Iterator[str]:
    """Create a database `<prefix>_<random>` on the server of `dsn`, migrate it, yield its DSN, and
    drop it however the block ends (unless `keep`). SIGTERM ends the run as Ctrl-C does, so the
    database is dropped on that way out too. Prints one line on creation and one at the end."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    name = f"{prefix}_{secrets.token_hex(4)}"
    scratch = make_conninfo(dsn, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as admin:
        version = admin.execute("SHOW server_version").fetchone()
        admin.execute(f'CREATE DATABASE "{name}"'.encode())
    print(f"scratch database {name} on {conninfo_to_dict(dsn).get('host', 'localhost')} "
          f"(PostgreSQL {version[0] if version else '?'})", flush=True)
    try:
        migrate.upgrade(scratch)
        yield scratch
    finally:
        if keep:
            print(f"kept database {name}")
        else:
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)'.encode())
            print(f"dropped database {name}")


if __name__ == "__main__":
    sys.exit(main())
