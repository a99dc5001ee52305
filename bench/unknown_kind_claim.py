"""What a claim of 16 known-kind jobs costs behind jobs of kinds the claimer does not know (issue #42).

    python bench/unknown_kind_claim.py --dsn postgresql://postgres@127.0.0.1:5432/postgres [--jobs 1000000]
        [--old 0023]

A scratch database (`pgq_unk_<random>`, migrated, dropped at the end) holds three queues of `--jobs`
jobs each:

- `ready`: ready jobs of the known kind `plain` (the reference: a claim of 16 fills its batch at once);
- `same`: ready jobs of the kind `other`, which the claimer does not ask for, at the same priority
  as the known jobs and due earlier (they come first in jobs_claim_idx's order);
- `better`: the same, at a better priority (0) than the known jobs (1);

and each of the last two gets 16 ready `plain` jobs before every claim, as does `fresh`, a queue with
nothing else (the twin of the last two: a claim of 16 just-inserted jobs). Every claim asks for the
kinds `--kinds` (default `plain,extra`: a worker with two tasks; `plain` alone takes pgq.claim's
one-kind path), 16 jobs, from one queue, as the worker runs it
(pgq.claim, one statement, autocommit). With `--old REV`, revision REV's pgq.claim
(sql/schema/REV/functions/claim.sql) is installed beside the current one as pgq.claim_old and timed
alternately, case by case, order flipped every round. The claimed jobs are deleted between claims
(not timed). Prints per case and definition the median and p90 ms and the ratio to `ready`'s median
with the same definition, and for `same` and `better` to `fresh`'s. Nothing is asserted.

    python bench/unknown_kind_claim.py --dsn ... --from-start [--jobs 1000000]

times instead what a worker sees: `--jobs` jobs of the kind `resize` in queue `default` (priority 0,
due first), then one `ping` job there and one `pong` job in queue `other`; a worker whose app has
only `ping` and `pong` (concurrency 10, poll 1 s) starts, and the script prints the seconds from
`Worker.run_async` until each handler ran, and how many `resize` rows it touched. Run it with
PYTHONPATH naming another checkout to time that checkout's worker.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import psycopg
from churn import scratch_database

ROOT = Path(__file__).resolve().parent.parent
CASES = ("ready", "fresh", "same", "better")


def _fill(dsn: str, jobs: int, old: str | None) -> None:
    """Install the old claim beside the current one (with `old`), then fill the three queues."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if old:
            text = (ROOT / f"sql/schema/{old}/functions/claim.sql").read_text()
            text = text.split("COMMENT ON FUNCTION")[0].replace("FUNCTION pgq.claim(", "FUNCTION pgq.claim_old(", 1)
            conn.execute(text.encode())
        started = time.monotonic()
        conn.execute("""INSERT INTO pgq.jobs (queue, kind, payload, priority, run_at)
                        SELECT 'ready', 'plain', '{}', 1, now() - interval '1 hour' + g * interval '1 ms'
                        FROM generate_series(1, %(n)s) g""", {"n": jobs})
        conn.execute("""INSERT INTO pgq.jobs (queue, kind, payload, priority, run_at)
                        SELECT 'same', 'other', '{}', 1, now() - interval '1 hour' + g * interval '1 ms'
                        FROM generate_series(1, %(n)s) g""", {"n": jobs})
        conn.execute("""INSERT INTO pgq.jobs (queue, kind, payload, priority, run_at)
                        SELECT 'better', 'other', '{}', 0, now() - interval '1 hour' + g * interval '1 ms'
                        FROM generate_series(1, %(n)s) g""", {"n": jobs})
        conn.execute("VACUUM ANALYZE pgq.jobs")
        print(f"filled 3 x {jobs:,} jobs in {time.monotonic() - started:.0f} s", flush=True)


def _claim(conn: psycopg.Connection, case: str, function: str, kinds: list[str]) -> float:
    """One timed claim of 16 from queue `case` with `function`; returns ms. Deletes what it took."""
    if case != "ready":
        conn.execute("INSERT INTO pgq.jobs (queue, kind, payload, priority) "
                     "SELECT %s, 'plain', '{}', 1 FROM generate_series(1, 16)", (case,))
    started = time.perf_counter()
    rows = conn.execute(f"SELECT c.id, c.kind FROM {function}(ARRAY[%s], %s, 16, 60, 'bench') c".encode(),
                        (case, kinds)).fetchall()
    ms = (time.perf_counter() - started) * 1000
    if len(rows) != 16 or {r[1] for r in rows} != {"plain"}:
        sys.exit(f"{case} ({function}): a claim took {len(rows)} jobs ({sorted({r[1] for r in rows})})")
    conn.execute("DELETE FROM pgq.jobs WHERE id = ANY(%s)", ([r[0] for r in rows],))
    return ms


def _from_start(dsn: str, jobs: int) -> None:
    """Fill `default` and `other`, start a worker that knows only the known kinds, print its timings."""
    import pgq

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""INSERT INTO pgq.jobs (queue, kind, payload, priority, run_at)
                        SELECT 'default', 'resize', '{}', 0, now() - interval '1 hour' + g * interval '1 ms'
                        FROM generate_series(1, %(n)s) g""", {"n": jobs})
        conn.execute("VACUUM ANALYZE pgq.jobs")
        before = conn.execute("SELECT sum(xmin::text::bigint) FROM pgq.jobs WHERE kind = 'resize'").fetchone()
    app = pgq.App(dsn)
    ran: dict[str, float] = {}

    @app.task(name="ping")
    def ping() -> None:
        ran.setdefault("ping", time.monotonic())

    @app.task(name="pong", queue="other")
    def pong() -> None:
        ran.setdefault("pong", time.monotonic())

    async def run() -> float:
        with pgq.Queue(dsn) as queue:
            queue.enqueue("ping")
            queue.enqueue("pong", queue="other")
        worker = pgq.Worker(app, concurrency=10, poll_interval=1.0, queues=["default", "other"])
        started = time.monotonic()
        task = asyncio.create_task(worker.run_async())
        while len(ran) < 2 and time.monotonic() - started < 120:
            await asyncio.sleep(0.002)
        worker.stop()
        await asyncio.wait_for(task, 30)
        return started

    started = asyncio.run(run())
    with psycopg.connect(dsn, autocommit=True) as conn:
        after = conn.execute("SELECT sum(xmin::text::bigint) FROM pgq.jobs WHERE kind = 'resize'").fetchone()
    for kind in ("ping", "pong"):
        took = f"{ran[kind] - started:.3f} s" if kind in ran else "not run within 120 s"
        print(f"{jobs:,} unknown jobs ahead: {kind} ran {took} after the worker started", flush=True)
    print(f"unknown rows touched: {'none' if before == after else 'some (their xmin changed)'}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Fill, time, print; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a server to create the scratch database on")
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs per queue (default 1,000,000)")
    parser.add_argument("--claims", type=int, default=20, help="claims timed per case and definition (default 20)")
    parser.add_argument("--old", help="a revision whose pgq.claim to time beside the current one (e.g. 0023)")
    parser.add_argument("--kinds", default="plain,extra",
                        help="the kinds each claim asks for, comma-separated (default plain,extra)")
    parser.add_argument("--from-start", action="store_true",
                        help="time a worker from its start instead (see above)")
    args = parser.parse_args(argv)
    if args.from_start:
        with scratch_database(args.dsn, "pgq_unk") as dsn:
            _from_start(dsn, args.jobs)
        return 0
    if args.jobs < args.claims * 16 * 2:
        parser.error("--jobs must cover every claim of `ready` (claims x 32)")
    claims = {"current": "pgq.claim", **({args.old: "pgq.claim_old"} if args.old else {})}
    with scratch_database(args.dsn, "pgq_unk") as dsn:
        _fill(dsn, args.jobs, args.old)
        times: dict[tuple[str, str], list[float]] = {(c, f): [] for c in CASES for f in claims}
        runs = [(c, f) for c in CASES for f in claims]
        with psycopg.connect(dsn, autocommit=True) as conn:
            for n in range(args.claims):
                for case, rev in (runs if n % 2 == 0 else runs[::-1]):
                    times[(case, rev)].append(_claim(conn, case, claims[rev], args.kinds.split(",")))
        for rev in claims:
            base = statistics.median(times[("ready", rev)])
            twin = statistics.median(times[("fresh", rev)])
            for case in CASES:
                ms = sorted(times[(case, rev)])
                median = statistics.median(ms)
                vs_fresh = f", {median / twin:6.2f}x fresh" if case in ("same", "better") else ""
                print(f"claim {rev:7s}, kinds {args.kinds}, 16 known, {case:6s} ({args.jobs:,} jobs): "
                      f"median {median:8.2f} ms, p90 {ms[int(len(ms) * 0.9)]:8.2f} ms, {median / base:6.2f}x ready"
                      f"{vs_fresh}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
