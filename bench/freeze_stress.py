"""Freeze stress: how long the jobs of a frozen worker take to come back, over many freezes.

    python bench/freeze_stress.py --dsn postgresql://postgres@127.0.0.1:5432/postgres [--jobs 300000]

Four `pgq worker` processes (concurrency 8, lease 2 s) drain 3 ms jobs. Every 0.5-2 s the busiest one
is frozen with SIGSTOP, as a paused process or a suspended VM would be, until every job it held is
queued again (rescued) or running elsewhere; then it is thawed, and every other round some worker is
SIGKILLed and replaced. A frozen worker keeps whatever its statements and open transactions hold,
so this finds the ways one hung client can stall other workers' acknowledgements or the rescue (a
claim left open by a frozen worker, found this way, is why pgq guards its own transactions: see
sql/transaction_guard.sql). A freeze whose jobs are not back within --stall seconds is a stall: the
script prints the sessions that block others. One line per freeze on stderr, a JSON summary on
stdout; exit status 1 after any stall.

A scratch database is created, migrated and dropped (see bench/churn.py). The run stops once fewer
than 2,000 jobs are left or after --seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from churn import scratch_database
from psycopg.rows import dict_row

import pgq

QUEUE = "freeze"
app = pgq.App(os.environ.get("PGQ_DSN", ""))


@app.task(queue=QUEUE)
def work(n: int) -> int:
    """The stress job: 3 ms of waiting."""
    time.sleep(0.003)
    return n


BLOCKERS = """
SELECT a.pid, pg_blocking_pids(a.pid) AS blocked_by, a.state, a.wait_event, left(a.query, 50) AS query,
       round(extract(epoch FROM now() - a.state_change)::numeric, 1) AS for_s
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
  AND (cardinality(pg_blocking_pids(a.pid)) > 0 OR a.state LIKE 'idle in transaction%%'
       OR a.wait_event = 'ClientWrite')
"""


class Worker:
    """One `pgq worker` process of this module's app, its log in `logs`."""

    def __init__(self, dsn: str, logs: Path, name: str) -> None:
        self.name = name
        self.log = open(logs / f"{name}.log", "w")  # noqa: SIM115 - closed in kill()
        env = dict(os.environ, PGQ_DSN=dsn, PYTHONPATH=str(Path(__file__).resolve().parent))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pgq", "worker", "freeze_stress:app", "--dsn", dsn, "--queue", QUEUE,
             "--concurrency", "8", "--lease", "2", "--poll-interval", "0.5", "--log-level", "WARNING",
             "--claimed-by", name],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        """SIGKILL (after SIGCONT, should it be frozen) and reap."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)
        self.log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True, help="a server to create the scratch database on (any database)")
    parser.add_argument("--jobs", type=int, default=300_000, help="jobs enqueued first (default: 300000)")
    parser.add_argument("--seconds", type=float, default=600.0, help="stop after this long (default: 600)")
    parser.add_argument("--stall", type=float, default=15.0,
                        help="a frozen worker's jobs not back after this many seconds count as a stall (default: 15)")
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="pgq-freeze-"))
    with scratch_database(args.dsn, "pgq_freeze") as dsn:
        with pgq.Queue(dsn) as queue:
            for start in range(0, args.jobs, 10_000):
                queue.enqueue_many([pgq.JobSpec("work", {"n": n}, queue=QUEUE)
                                    for n in range(start, min(start + 10_000, args.jobs))])
        db = psycopg.connect(dsn, autocommit=True, row_factory=dict_row)
        spawned = 0

        def spawn(slot: int) -> Worker:
            nonlocal spawned
            spawned += 1
            return Worker(dsn, logs, f"w{slot}-{spawned}")

        workers = [spawn(slot) for slot in range(4)]
        times: list[float] = []
        stalls = 0
        started = time.monotonic()
        try:
            while time.monotonic() - started < args.seconds:
                left = db.execute("SELECT count(*) AS c FROM pgq.jobs WHERE status <> 'succeeded'").fetchone()
                if left is None or left["c"] < 2000:
                    break
                time.sleep(random.uniform(0.5, 2.0))
                slots = {w.name: slot for slot, w in enumerate(workers)}
                busiest = db.execute("SELECT claimed_by AS name FROM pgq.jobs WHERE status = 'running' "
                                     "AND claimed_by = ANY(%s) GROUP BY 1 ORDER BY count(*) DESC LIMIT 1",
                                     (list(slots),)).fetchone()
                if busiest is None:
                    continue
                frozen = workers[slots[busiest["name"]]]
                frozen.proc.send_signal(signal.SIGSTOP)
                froze_at = time.monotonic()
                ids = [r["id"] for r in db.execute("SELECT id FROM pgq.jobs WHERE status = 'running' "
                                                    "AND claimed_by = %s", (frozen.name,))]
                while True:
                    held = _held(db, ids, frozen.name)
                    waited = time.monotonic() - froze_at
                    if held == 0:
                        times.append(waited)
                        print(f"froze {frozen.name} with {len(ids)} jobs: back in {waited:.1f} s",
                              file=sys.stderr, flush=True)
                        break
                    if waited > args.stall:
                        stalls += 1
                        print(f"STALL: {held} of the {len(ids)} jobs of {frozen.name} not back after "
                              f"{args.stall:g} s; sessions holding others up:", file=sys.stderr, flush=True)
                        for row in db.execute(BLOCKERS):
                            print(f"  {row}", file=sys.stderr, flush=True)
                        break
                    time.sleep(0.05)
                frozen.proc.send_signal(signal.SIGCONT)
                if random.random() < 0.5:
                    slot = random.randrange(len(workers))
                    workers[slot].kill()
                    workers[slot] = spawn(slot)
        finally:
            for worker in workers:
                worker.kill()
            db.close()
    summary: dict[str, Any] = {
        "freezes": len(times) + stalls, "stalls": stalls, "spawned": spawned, "worker_logs": str(logs),
        "back_p50_s": round(statistics.median(times), 2) if times else None,
        "back_max_s": round(max(times), 2) if times else None,
    }
    print(json.dumps(summary))
    return 1 if stalls else 0


def _held(db: psycopg.Connection[dict[str, Any]], ids: list[int], name: str) -> int:
    row = db.execute("SELECT count(*) AS c FROM pgq.jobs WHERE id = ANY(%s) AND status = 'running' "
                     "AND claimed_by = %s", (ids, name)).fetchone()
    return int(row["c"]) if row else 0


if __name__ == "__main__":
    sys.exit(main())
