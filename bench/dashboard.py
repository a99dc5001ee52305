"""Server time of every page and API call of the dashboard (pgq.web) on a big table.

    python bench/dashboard.py --dsn postgresql://postgres@127.0.0.1:5432/postgres

It creates a scratch database on that server (`pgq_dash_bench_<random>`), migrates it, fills it, and
drops it at the end, however the run ends (`--keep` keeps it; `--existing NAME` measures a kept one
again, without filling or dropping it). Never the database of the DSN itself. The fill, set-based:

- `--finished` (1,000,000) finished jobs, finished evenly over the last `--window-h` hours (192, 8
  days: about 5,200 an hour per million; `--window-h 1` puts them all in the hour), 1 in 97 failed
  with an error, 1 in 211 cancelled, a third with a dedupe key, over four queues and seven kinds,
  inserted `--chunk` (500,000) at a time, one transaction each, with a progress line per chunk;
  the four indexes finished jobs enter (FINISHED_INDEXES) are dropped before and built again after
  (10,000,000 jobs: about 6 minutes of inserts and 2 of index builds on the 2-core machine, 3 GB);
- `--queued` (100,000) queued jobs: 9 in 10 due (a backlog up to half an hour old), 1 in 10 scheduled
  within the hour, 1 in 50 waiting for a retry with an error;
- 200 running jobs on ten workers (1 in 40 with an expired lease), some with progress;
- a tick job per minute of the last day for a periodic schedule `tidy_up` (every 60 s), which the
  dashboard is given as its App; two concurrency limits and two rate limits;
- twelve workers in the registry (pgq.workers): the ten running jobs and two idle ones, kept live
  (last_seen set before each route, as their heartbeats would).

Then VACUUM ANALYZE, the counts of finished jobs (pgq.finished_counts, revision 0026: one pass of
pgq.count_finished over the whole history: the counts the workers' passes would have kept as the jobs
finished; minutes for 8 days, hours beyond), and each route is
requested `--warmup` times, then `--repeat` times, in-process
through the ASGI app (httpx's ASGITransport: no network), and the script prints per route the p50,
p95 and max of the time the dashboard spent on it, read from its `Server-Timing` header (from the
request's arrival to the response's start: the database's work and the rendering). The actions are
measured on jobs and a queue of their own: each cancel takes a new queued job, each retry one that
was cancelled, pause and resume alternate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import statistics
import sys
import time
from collections.abc import Iterator
from urllib.parse import urlencode

import httpx
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgq
from pgq import migrate
from pgq.web import create_app

# Modulo is %% in these statements: they are sent with parameters, as psycopg %(name)s placeholders.
# The finished jobs, inserted in chunks of ids lo..hi (of `finished`): ids in the order they finished
# (oldest first), as a queue's are, finished evenly over the last `window_h` hours.
FINISHED = """
    INSERT INTO pgq.jobs (queue, kind, payload, status, run_at, attempts, max_attempts, dedupe_key, claimed_by,
                          last_error, result, created_at, started_at, finished_at)
    SELECT q.queue, (ARRAY['send_email', 'resize_image', 'sync_account', 'charge_card', 'build_report',
                           'deliver_webhook', 'index_document'])[1 + g %% 7],
           jsonb_build_object('n', g, 'to', 'user' || (g %% 5000) || '@example.com'),
           s.status::pgq.job_status, f.at - interval '2 seconds',
           CASE WHEN s.status = 'failed' THEN 5 ELSE 1 END, 5,
           CASE WHEN g %% 3 = 0 THEN 'order:' || g END,
           'host-' || (g %% 10) || '-4242',
           CASE WHEN s.status = 'failed' THEN 'TimeoutError: upstream took too long (attempt ' || g %% 5 || ')' END,
           CASE WHEN s.status = 'succeeded' THEN '{"ok": true}'::jsonb END,
           f.at - interval '3 seconds', f.at - interval '1 second', f.at
    FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g
    CROSS JOIN LATERAL (SELECT CASE WHEN g %% 10 < 5 THEN 'default' WHEN g %% 10 < 8 THEN 'mail'
                                    WHEN g %% 10 < 9 THEN 'reports' ELSE 'webhooks' END AS queue) AS q
    CROSS JOIN LATERAL (SELECT CASE WHEN g %% 97 = 0 THEN 'failed' WHEN g %% 211 = 0 THEN 'cancelled'
                                    ELSE 'succeeded' END AS status) AS s
    CROSS JOIN LATERAL (SELECT %(now)s::timestamptz - make_interval(secs => %(window_h)s * 3600)
                               * ((%(finished)s - g)::float8 / %(finished)s) AS at) AS f
    ORDER BY g
    """

FILL = [
    # Queued jobs: a backlog due now, some scheduled, some waiting for a retry.
    """
    INSERT INTO pgq.jobs (queue, kind, payload, status, run_at, attempts, dedupe_key, last_error, created_at)
    SELECT CASE WHEN g %% 10 < 6 THEN 'default' WHEN g %% 10 < 9 THEN 'mail' ELSE 'reports' END,
           (ARRAY['send_email', 'resize_image', 'sync_account', 'charge_card', 'build_report'])[1 + g %% 5],
           jsonb_build_object('n', g), 'queued',
           CASE WHEN g %% 10 = 9 THEN now() + (g %% 3600) * interval '1 second'
                ELSE now() - ((%(queued)s - g) %% 1800) * interval '1 second' END,
           CASE WHEN g %% 50 = 0 THEN 2 ELSE 0 END,
           CASE WHEN g %% 4 = 0 THEN 'queued-key:' || g END,
           CASE WHEN g %% 50 = 0 THEN 'ConnectionError: reset by peer' END,
           now() - ((%(queued)s - g) %% 1800) * interval '1 second'
    FROM generate_series(1, %(queued)s) AS g
    """,
    # Running jobs on ten workers.
    """
    INSERT INTO pgq.jobs (queue, kind, payload, status, run_at, attempts, lease_token, lease_expires_at,
                          claimed_by, created_at, started_at, progress)
    SELECT CASE WHEN g %% 2 = 0 THEN 'default' ELSE 'mail' END, 'send_email', jsonb_build_object('n', g),
           'running', now() - interval '1 minute', 1, gen_random_uuid(),
           CASE WHEN g %% 40 = 0 THEN now() - interval '5 seconds' ELSE now() + interval '50 seconds' END,
           'host-' || (g %% 10) || '-4242', now() - interval '1 minute', now() - (g %% 60) * interval '1 second',
           CASE WHEN g %% 3 = 0 THEN jsonb_build_object('done', g %% 100, 'total', 100) END
    FROM generate_series(1, 200) AS g
    """,
    # The ticks of the periodic schedule tidy_up (every 60 s) over the last day.
    """
    INSERT INTO pgq.jobs (queue, kind, payload, status, run_at, attempts, dedupe_key, created_at, started_at,
                          finished_at)
    SELECT 'default', 'tidy_up', '{}', 'succeeded', t, 1, 'periodic:tidy_up:' || extract(epoch FROM t)::bigint,
           t, t, t + interval '1 second'
    FROM generate_series(date_trunc('minute', now()) - interval '1 day',
                         date_trunc('minute', now()) - interval '1 minute', interval '1 minute') AS t
    """,
    "INSERT INTO pgq.concurrency_limits (kind, max_running) VALUES ('charge_card', 4), ('build_report', 2)",
    # The registry: the ten workers running jobs, and two idle ones.
    """
    INSERT INTO pgq.workers (claimed_by, host, pid, queues, kinds, slots, lease_s, refresh_s, version)
    SELECT 'host-' || g || '-4242', 'host-' || g, 4242, NULL,
           ARRAY['send_email', 'resize_image', 'sync_account', 'charge_card', 'build_report', 'deliver_webhook',
                 'index_document'], 20, 30, 16.5, 'bench'
    FROM generate_series(0, 11) g
    """,
    "INSERT INTO pgq.rate_limits (kind, max_starts, per_s) "
    "VALUES ('deliver_webhook', 100, 1), ('sync_account', 600, 60)",
    # The actions' own jobs: queued in a queue of their own, cancelled and retried by the bench.
    """
    INSERT INTO pgq.jobs (queue, kind, status)
    SELECT 'bench-actions', 'noop', 'queued' FROM generate_series(1, %(actions)s)
    """,
]


@contextlib.contextmanager
def scratch_database(dsn: str, keep: bool) -> Iterator[str]:
    """Create `pgq_dash_bench_<random>` next to the DSN's database, yield its DSN, drop it (FORCE)."""
    name = f"pgq_dash_bench_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    print(f"created database {name}", flush=True)
    try:
        yield make_conninfo(dsn, dbname=name)
    finally:
        if keep:
            print(f"kept database {name}", flush=True)
        else:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
            print(f"dropped database {name}", flush=True)


# The indexes of pgq.jobs that finished jobs enter: dropped while the finished jobs go in and built
# again after (a build sorts once; 10,000,000 inserts into them cost far more), as they were.
FINISHED_INDEXES = ("jobs_finished_idx", "jobs_failed_idx", "jobs_dedupe_key_idx", "jobs_dedupe_finished_idx")


def fill_finished(conn: psycopg.Connection[tuple[object, ...]], finished: int, window_h: float, chunk: int) -> None:
    """Insert `finished` finished jobs (FINISHED) in chunks of `chunk`, one transaction each, with
    progress lines; drop FINISHED_INDEXES before and build them again after."""
    started = time.monotonic()
    row = conn.execute(b"SELECT now()").fetchone()
    assert row is not None
    # Since revision 0033 these indexes are partitions of the history's indexes (jobs finished in
    # the past land in its first partition, the table as it was): left as they are.
    partitioned = conn.execute(b"SELECT relkind = 'p' FROM pg_class WHERE oid = 'pgq.jobs'::regclass").fetchone()
    defs = [] if partitioned and partitioned[0] else [str(r[0]) for r in conn.execute(
        b"SELECT pg_get_indexdef(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        b"WHERE n.nspname = 'pgq' AND c.relname = ANY(%s)", [list(FINISHED_INDEXES)])]
    for name in FINISHED_INDEXES if defs else ():
        conn.execute(f"DROP INDEX IF EXISTS pgq.{name}".encode())
    conn.execute(b"SET synchronous_commit = off")
    params: dict[str, object] = {"finished": finished, "window_h": window_h, "now": row[0]}
    for lo in range(1, finished + 1, chunk):
        hi = min(finished, lo + chunk - 1)
        conn.execute(FINISHED.encode(), {**params, "lo": lo, "hi": hi})
        elapsed = time.monotonic() - started
        print(f"  finished jobs: {hi:,} of {finished:,} in {elapsed:.0f} s ({hi / elapsed:,.0f}/s)", flush=True)
    building = time.monotonic()
    conn.execute(b"SET maintenance_work_mem = '512MB'")
    for definition in defs:
        conn.execute(definition.encode())
    conn.execute(b"RESET maintenance_work_mem")
    conn.execute(b"RESET synchronous_commit")
    print(f"  built {len(defs)} indexes again in {time.monotonic() - building:.0f} s", flush=True)


def fill(dsn: str, finished: int, queued: int, window_h: float, actions: int, chunk: int) -> None:
    """Migrate the scratch database and fill it (see the module docstring)."""
    started = time.monotonic()
    migrate.upgrade(dsn)
    params = {"queued": queued, "actions": actions}
    with psycopg.connect(dsn, autocommit=True) as conn:
        fill_finished(conn, finished, window_h, chunk)
        for statement in FILL:
            conn.execute(statement.encode(), params)
        vacuuming = time.monotonic()
        conn.execute(b"VACUUM ANALYZE pgq.jobs")
        print(f"  VACUUM ANALYZE pgq.jobs in {time.monotonic() - vacuuming:.0f} s", flush=True)
        kept = conn.execute(b"SELECT to_regprocedure('pgq.count_finished(interval, interval)') IS NOT NULL"
                            ).fetchone()
        if kept is not None and kept[0]:
            # The counts the workers keep (revision 0026), built as the first pass over this history would.
            counting = time.monotonic()
            conn.execute(b"SELECT pgq.count_finished(interval '2 minutes', interval '400 days')")
            conn.execute(b"VACUUM ANALYZE pgq.finished_counts, pgq.finished_counts_hourly")
            print(f"  counted the finished jobs into pgq.finished_counts in {time.monotonic() - counting:.1f} s",
                  flush=True)
        total = conn.execute(b"SELECT count(*) FROM pgq.jobs").fetchone()
        last_hour = conn.execute(b"SELECT count(*) FROM pgq.jobs WHERE finished_at > now() - interval '1 hour'"
                                 ).fetchone()
        size = conn.execute(b"SELECT pg_size_pretty(sum(pg_total_relation_size(t.relid))) "
                            b"FROM pg_partition_tree('pgq.jobs') t").fetchone()  # its partitions since 0033
    assert total is not None and last_hour is not None and size is not None
    print(f"filled: {total[0]:,} jobs ({finished:,} finished, {last_hour[0]:,} of them in the last hour; "
          f"{queued:,} queued; 200 running; pgq.jobs {size[0]}) in {time.monotonic() - started:.0f} s", flush=True)


def server_ms(response: httpx.Response) -> float:
    """The dashboard's own time for `response`, from its Server-Timing header (app;dur=<ms>)."""
    return float(response.headers["server-timing"].partition("dur=")[2])


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


Route = tuple[str, str, dict[str, str]]


def routes(dsn: str, paths: set[str], only: list[str] | None = None) -> tuple[list[Route], list[int]]:
    """The GET routes to measure on the database `dsn` as (label, path, headers), those of the
    dashboard's route `paths` that exist (the queue page, the longer charts), only those labelled as
    one of `only` (or starting so where it ends in "*") when given; and the ids of the actions' jobs."""
    with psycopg.connect(dsn) as conn:
        one = conn.execute(b"SELECT max(id) FROM pgq.jobs WHERE status = 'failed'").fetchone()
        middle = conn.execute(b"SELECT (max(id) + min(id)) / 2 FROM pgq.jobs").fetchone()
        ready = conn.execute(b"SELECT max(id) FROM pgq.jobs WHERE status = 'queued' AND run_at <= now()").fetchone()
        actions = [r[0] for r in conn.execute(b"SELECT id FROM pgq.jobs WHERE queue = 'bench-actions' ORDER BY id")]
    assert one is not None and middle is not None and ready is not None
    job, mid, queued = one[0], middle[0], ready[0]
    gets: list[Route] = [
        ("GET /", "/", {}),
        ("GET / (live refresh)", "/", {"X-Pgq-Live": "1"}),
        ("GET /jobs", "/jobs", {}),
        ("GET /jobs?status=failed", "/jobs?status=failed", {}),
        ("GET /jobs?queue=reports&status=succeeded", "/jobs?queue=reports&status=succeeded", {}),
        (f"GET /jobs?cursor={mid} (deep page)", f"/jobs?cursor={mid}", {}),
        ("GET /jobs?kind=no_such_kind (no match)", "/jobs?kind=no_such_kind", {}),
        ("GET /jobs?q=no-such-text (no match)", "/jobs?q=no-such-text", {}),
        ("GET /jobs/{id}", f"/jobs/{job}", {}),
        ("GET /workers", "/workers", {}),
        ("GET /schedules", "/schedules", {}),
        ("GET /limits", "/limits", {}),
        ("GET /api/queues", "/api/queues", {}),
        ("GET /api/jobs", "/api/jobs", {}),
        ("GET /api/jobs?status=queued&limit=500", "/api/jobs?status=queued&limit=500", {}),
        ("GET /api/jobs?q=order:99999", "/api/jobs?q=order:99999", {}),
        ("GET /api/jobs?kind=no_such_kind (no match)", "/api/jobs?kind=no_such_kind", {}),
        ("GET /api/jobs/{id}", f"/api/jobs/{job}", {}),
        ("GET /api/workers", "/api/workers", {}),
        ("GET /api/limits", "/api/limits", {}),
        ('GET /jobs?payload={"n": N} (payload, one match)', "/jobs?" + urlencode({"payload": f'{{"n": {job}}}'}), {}),
        ('GET /api/jobs?payload={"to": ...} (1 in 5,000)',
         "/api/jobs?" + urlencode({"payload": '{"to": "user7@example.com"}'}), {}),
        ("GET /api/jobs/{id}/explain (failed)", f"/api/jobs/{job}/explain", {}),
        ("GET /api/jobs/{id}/explain (queued)", f"/api/jobs/{queued}/explain", {}),
        ("GET /jobs/bulk?action=retry&status=failed (count)", "/jobs/bulk?action=retry&status=failed", {}),
    ]
    if "/api/throughput" in paths:  # charts beyond the hour (#44)
        gets += [
            ("GET /?range=24h", "/?range=24h", {}),
            ("GET /?range=7d", "/?range=7d", {}),
            ("GET /api/throughput?range=1h", "/api/throughput?range=1h", {}),
            ("GET /api/throughput?range=24h", "/api/throughput?range=24h", {}),
            ("GET /api/throughput?range=7d&queue=mail", "/api/throughput?range=7d&queue=mail", {}),
        ]
    if "/queues/{name:path}" in paths:  # the queue page (#44)
        gets += [
            ("GET /queues/reports", "/queues/reports", {}),
            ("GET /queues/reports?tab=failed", "/queues/reports?tab=failed", {}),
            ("GET /queues/reports?tab=cancelled", "/queues/reports?tab=cancelled", {}),
            ("GET /api/queues/reports?tab=scheduled", "/api/queues/reports?tab=scheduled", {}),
            ("GET /queues/default (ready tab of the biggest queue)", "/queues/default", {}),
        ]
    if only:
        gets = [g for g in gets if any(g[0] == p or (p.endswith("*") and g[0].startswith(p[:-1])) for p in only)]
    return gets, actions


async def measure(dsn: str, warmup: int, repeat: int, only: list[str] | None = None) -> list[tuple[str, list[float]]]:
    """Request every route (those labelled as one of `only`, or starting so where it ends in "*", when
    given; then no action);
    return (label, server times in ms) per route."""
    app_ = pgq.App(dsn)
    app_.periodic(every=60, name="tidy_up")(lambda: None)
    dashboard = create_app(dsn, app=app_, trust_network=True)
    gets, actions = routes(dsn, {getattr(r, "path", "") for r in dashboard.routes}, only)
    results: list[tuple[str, list[float]]] = []
    transport = httpx.ASGITransport(app=dashboard)
    json = {"Content-Type": "application/json"}
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client, \
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as beat:
        for label, path, headers in gets:
            # The registered workers stay live, as their heartbeats keep them (not timed).
            await beat.execute(b"UPDATE pgq.workers SET last_seen = now()")
            times = []
            for i in range(warmup + repeat):
                response = await client.get(path, headers=headers)
                if response.status_code != 200:
                    raise SystemExit(f"{label}: HTTP {response.status_code}: {response.text[:300]}")
                if i >= warmup:
                    times.append(server_ms(response))
            results.append((label, times))
        if only:
            actions = []
        posts = {"POST /api/jobs/{id}/cancel": [], "POST /api/jobs/{id}/retry": [],
                 "POST /api/queues/{name}/pause": [], "POST /api/queues/{name}/resume": []}
        for job_id in actions:
            for action in ("cancel", "retry"):
                response = await client.post(f"/api/jobs/{job_id}/{action}", headers=json)
                assert response.status_code == 200, response.text
                posts[f"POST /api/jobs/{{id}}/{action}"].append(server_ms(response))
            for action in ("pause", "resume"):
                response = await client.post(f"/api/queues/bench-actions/{action}", headers=json)
                assert response.status_code == 200, response.text
                posts[f"POST /api/queues/{{name}}/{action}"].append(server_ms(response))
        results += [(label, times[warmup:]) for label, times in posts.items() if times]
    await dashboard.state.dashboard.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a server to create the scratch database on")
    parser.add_argument("--finished", type=int, default=1_000_000, help="finished jobs (default 1,000,000)")
    parser.add_argument("--queued", type=int, default=100_000, help="queued jobs (default 100,000)")
    parser.add_argument("--window-h", type=float, default=192.0,
                        help="hours over which the finished jobs finished (default 192: 8 days)")
    parser.add_argument("--chunk", type=int, default=500_000,
                        help="finished jobs per INSERT (one transaction each; default 500,000)")
    parser.add_argument("--warmup", type=int, default=3, help="requests per route before measuring (default 3)")
    parser.add_argument("--repeat", type=int, default=30, help="measured requests per route (default 30)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--existing", metavar="DBNAME",
                        help="measure a database an earlier run kept (--keep) again, without filling or dropping it")
    parser.add_argument("--only", action="append", metavar="LABEL",
                        help="measure only the GET route LABEL, or those starting so when it ends in '*' "
                             "(repeatable; no actions)")
    args = parser.parse_args()
    if conninfo_to_dict(args.dsn).get("dbname") is None:
        args.dsn = make_conninfo(args.dsn, dbname="postgres")
    with contextlib.ExitStack() as stack:
        if args.existing:
            dsn = make_conninfo(args.dsn, dbname=args.existing)
        else:
            dsn = stack.enter_context(scratch_database(args.dsn, args.keep))
            fill(dsn, args.finished, args.queued, args.window_h, args.warmup + args.repeat, args.chunk)
        results = asyncio.run(measure(dsn, args.warmup, args.repeat, args.only))
        width = max(len(label) for label, _ in results)
        print(f"{'route':<{width}}  {'p50 ms':>7}  {'p95 ms':>7}  {'max ms':>7}")
        for label, times in results:
            print(f"{label:<{width}}  {statistics.median(times):7.1f}  {pct(times, 0.95):7.1f}  {max(times):7.1f}")
        worst = max(pct(times, 0.95) for _, times in results)
        print(f"slowest p95: {worst:.1f} ms (budget 150 ms)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
