"""Soak: steady enqueue and drain for a long time (default 30 minutes) with retention on, printing a
line a minute, to show that nothing grows: throughput, worker memory, connections, table size, dead
row versions and claim latency.

    python bench/soak.py --dsn postgresql://postgres@127.0.0.1:5432/postgres --minutes 30

It creates a scratch database on that server (`pgq_soak_<random>`), migrates it, and drops it at the
end however the run ends (`--keep` keeps it). Then:

- `--workers` worker processes (pgq.Worker, `--concurrency` each) run a task that works 1 ms, with
  retention on: finished jobs are deleted `--retention` seconds after they finish, checked every
  `--retention-interval` seconds, as a production worker does (with shorter periods);
- this process enqueues `--rate` jobs a second, in batches every 100 ms;
- every `--report-every` seconds it prints: jobs enqueued and completed per second over the
  interval (completed = enqueued - growth of the backlog), the backlog, the oldest queued job's age
  (database clock), each worker's RSS (MB), the database's open connections, pgq.jobs' size (table
  + indexes, MB), its live and dead row versions, and the claim latency p50/p99 of a probe that
  claims one job 50 times in transactions it rolls back.

At the end it prints the first and last full interval side by side. When the server has autovacuum
off, bench/churn.py's stand-in autovacuum runs beside (as it would in production, vacuum matters).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from churn import StandInAutovacuum, pct, probe, scratch_database
from psycopg.rows import dict_row

import pgq

QUEUE = "soak"
PROBES = 50

WORKER = '''
import os, time
import pgq

app = pgq.App(os.environ["SOAK_DSN"])


@app.task(name="soak", queue="soak")
def soak(n: int) -> None:
    time.sleep(0.001)


if __name__ == "__main__":
    import logging
    logging.basicConfig(level=logging.WARNING)
    pgq.Worker(app, queues=["soak"], concurrency=int(os.environ["SOAK_CONCURRENCY"]),
               retention=float(os.environ["SOAK_RETENTION"]),
               retention_interval=float(os.environ["SOAK_RETENTION_INTERVAL"])).run()
'''


def rss_mb(pid: int) -> float:
    """Resident memory of process `pid` in MB (NaN once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def sample(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """The database side of a report line."""
    row = conn.execute("""
        SELECT (SELECT count(*) FROM pgq.jobs WHERE status IN ('queued', 'running')) AS backlog,
               (SELECT coalesce(extract(epoch FROM now() - min(run_at)), 0) FROM pgq.jobs
                 WHERE status = 'queued' AND run_at <= now()) AS oldest_s,
               (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()) - 1 AS connections,
               pg_total_relation_size('pgq.jobs') AS bytes,
               s.n_live_tup AS live, s.n_dead_tup AS dead
        FROM pg_stat_user_tables s WHERE s.relid = 'pgq.jobs'::regclass""").fetchone()
    assert row is not None
    return dict(row)


HEADER = (f"{'min':>5} {'enq/s':>7} {'done/s':>7} {'backlog':>7} {'oldest':>7} {'RSS MB':>15} {'conns':>5} "
          f"{'jobs MB':>7} {'live':>7} {'dead':>7} {'claim p50/p99 ms':>16}")


def run(dsn: str, args: argparse.Namespace) -> None:
    """Start the workers and the producer on scratch database `dsn` and report until the time is up."""
    workdir = Path(tempfile.mkdtemp(prefix="pgq-soak-"))
    (workdir / "soak_worker.py").write_text(WORKER)
    env = dict(os.environ, SOAK_DSN=dsn, SOAK_CONCURRENCY=str(args.concurrency), SOAK_RETENTION=str(args.retention),
               SOAK_RETENTION_INTERVAL=str(args.retention_interval))
    workers = [subprocess.Popen([sys.executable, str(workdir / "soak_worker.py")], env=env)
               for _ in range(args.workers)]
    stop = threading.Event()
    enqueued = [0]

    def produce() -> None:
        batch = max(1, round(args.rate / 10))
        with pgq.Queue(dsn) as queue:
            next_at = time.monotonic()
            n = 0
            while not stop.is_set():
                queue.enqueue_many([pgq.JobSpec("soak", {"n": n + i}, queue=QUEUE) for i in range(batch)])
                n += batch
                enqueued[0] = n
                next_at += 0.1
                time.sleep(max(0.0, next_at - time.monotonic()))

    producer = threading.Thread(target=produce, name="producer", daemon=True)
    vacuum: StandInAutovacuum | None = None
    rows: list[str] = []
    try:
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            if conn.execute("SHOW autovacuum").fetchone()["autovacuum"] == "off":  # type: ignore[index]
                vacuum = StandInAutovacuum(dsn, 15.0)
                vacuum.start()
                print("the server has autovacuum off: a stand-in autovacuum runs beside the soak", flush=True)
            producer.start()
            print(HEADER, flush=True)
            started = time.monotonic()
            last_at, last_enq, last = started, 0, sample(conn)
            end = started + args.minutes * 60
            while time.monotonic() < end:
                time.sleep(max(0.0, min(args.report_every, end - time.monotonic())))
                now, enq, cur = time.monotonic(), enqueued[0], sample(conn)
                span = now - last_at
                done = (enq - last_enq) - (cur["backlog"] - last["backlog"])
                latencies = probe(conn, QUEUE, PROBES)
                rss = "/".join(f"{rss_mb(w.pid):.0f}" for w in workers)
                line = (f"{(now - started) / 60:5.1f} {(enq - last_enq) / span:7.0f} {done / span:7.0f} "
                        f"{cur['backlog']:7d} {cur['oldest_s']:6.1f}s {rss:>15} {cur['connections']:5d} "
                        f"{cur['bytes'] / 1e6:7.1f} {cur['live']:7d} {cur['dead']:7d} "
                        f"{pct(latencies, 0.5):7.2f}/{pct(latencies, 0.99):<8.2f}")
                print(line, flush=True)
                rows.append(line)
                dead = [w.pid for w in workers if w.poll() is not None]
                if dead:
                    raise SystemExit(f"soak: worker processes {dead} exited")
                last_at, last_enq, last = now, enq, cur
    finally:
        stop.set()
        producer.join(10)
        if vacuum is not None:
            vacuum.stop()
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                w.wait(30)
            except subprocess.TimeoutExpired:
                w.kill()
    if len(rows) >= 2:
        print(f"first and last interval:\n{HEADER}\n{rows[0]}\n{rows[-1]}")


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run the soak in a scratch database."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a server to create the scratch database on (any database)")
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to run (default: 30)")
    parser.add_argument("--rate", type=float, default=1000.0, help="jobs enqueued per second (default: 1000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default: 2)")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrency of each worker (default: 16)")
    parser.add_argument("--retention", type=float, default=60.0,
                        help="seconds finished jobs are kept (default: 60)")
    parser.add_argument("--retention-interval", type=float, default=10.0,
                        help="seconds between retention runs (default: 10)")
    parser.add_argument("--report-every", type=float, default=60.0, help="seconds between lines (default: 60)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database (its name is printed)")
    args = parser.parse_args(argv)
    for name in ("minutes", "rate", "retention", "retention_interval", "report_every"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    for name in ("workers", "concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    with scratch_database(args.dsn, "pgq_soak", keep=args.keep) as scratch:
        run(scratch, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
