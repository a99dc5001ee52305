"""A long-horizon run (issue #43): a steady rate of jobs through a `pgq worker`, then a pinned horizon
(an idle-in-transaction session holding an xid, so that vacuum can reclaim nothing), then recovery;
latency, throughput, dead row versions and size of pgq's tables, phase by phase.

    python bench/long_horizon.py                               # 200 jobs/s: 60 s, 300 s pinned, 120 s
    python bench/long_horizon.py --baseline ed8b688            # then the same run for another commit
    python bench/long_horizon.py --warm 5 --pin 10 --recover 10 --rate 100 --sample 1   # a quick look

It runs on a private PostgreSQL cluster of its own (initdb in a temporary folder) with the server's
defaults, autovacuum on, since the horizon's effect is what autovacuum can and cannot do (the shared
machine's server runs with autovacuum off). `--settings` appends lines to its postgresql.conf.

Per side (this checkout, then `--baseline` if given, each on a new database migrated by its own pgq):
a producer process enqueues `--rate` jobs a second, in batches every 50 ms, for the whole run; a
`pgq worker` (the bench app's no-op task, `--concurrency` slots, default settings otherwise, so
finished jobs stay as long as a production worker keeps them: 7 days) drains them. After `--warm`
seconds a session runs `BEGIN; SELECT pg_current_xact_id();` and stays idle in that transaction for
`--pin` seconds, then rolls back; `--recover` seconds follow.

With `--explain N` (a diagnosis, not for the figures), at the start and every N seconds after, a
session of its own (kept for the run, as the worker's) enqueues 16 jobs, claims them as the worker
does (pgq.claim) and acknowledges them (pgq.complete) under auto_explain (analyze, buffers, nested
statements), then rolls it all back; it prints the plans of the statements that read pgq's job
tables: what a claim and an acknowledgement walk, before, during and after the pin.

Every `--sample` seconds it prints: seconds since the start, the phase, jobs finished per second over
the interval, dead and live row versions of pgq.jobs with all its partitions (pg_stat_user_tables),
dead row versions of the hot table (pgq.live_jobs since revision 0033, pgq.jobs itself before) and
of the history (pgq.finished_jobs' partitions; none before 0033), dead row versions of all of pgq's
tables, and the size with indexes (MB) of the hot table and of all of pgq's tables. At the end, per
phase: end-to-end latency (enqueue to finish: `finished_at - created_at`) p50/p95/p99 and the claim
latency (`started_at - created_at`) p50/p99 of the jobs enqueued in the phase, all on the database
clock; jobs finished per second; the peak of the dead row versions of pgq.jobs, of the hot table
and of the history; the sizes at the phase's end; and how long after the pin's end the dead row
versions of pgq.jobs, and of the hot table, fell back to at most their level before it (or 1,000,
whichever is more).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from private_cluster import ROOT, PrivateCluster, export_tree, throwaway

QUEUE = "pgq-bench"  # the bench app's queue
KIND = "pgq.bench.noop"  # the bench App's task (pgq.cli.bench.workers)
PHASES = ("warm", "pinned", "recovery")

PRODUCER = r'''
import sys, time
from pgq import JobSpec, Queue
dsn, queue, kind, rate, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
tick = 0.05
with Queue(dsn, min_size=1, max_size=1) as q:
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < seconds:
        due = int((time.monotonic() - start + tick) * rate)
        if due > sent:
            q.enqueue_many([JobSpec(kind, {"i": i}, queue=queue) for i in range(sent, due)])
            sent = due
        time.sleep(max(0.0, start + (sent / rate) - time.monotonic()) if sent else tick)
print(sent)
'''

SAMPLE = """
SELECT now() AS at,
       (SELECT count(*) FROM pgq.jobs WHERE queue = %(q)s AND finished_at IS NOT NULL) AS finished,
       -- pgq.jobs and, since revision 0033, its partitions (pg_partition_tree lists nothing for the
       -- plain table of the revisions before)
       (SELECT coalesce(sum(s.n_dead_tup), 0)::bigint FROM pg_stat_user_tables s
        WHERE s.relid = 'pgq.jobs'::regclass
           OR s.relid IN (SELECT t.relid FROM pg_partition_tree('pgq.jobs') t)) AS jobs_dead,
       (SELECT coalesce(sum(s.n_live_tup), 0)::bigint FROM pg_stat_user_tables s
        WHERE s.relid = 'pgq.jobs'::regclass
           OR s.relid IN (SELECT t.relid FROM pg_partition_tree('pgq.jobs') t)) AS jobs_live,
       -- the hot table: pgq.live_jobs since revision 0033, pgq.jobs before it
       (SELECT coalesce(sum(s.n_dead_tup), 0)::bigint FROM pg_stat_user_tables s
        WHERE s.relid = coalesce(to_regclass('pgq.live_jobs'), 'pgq.jobs'::regclass)) AS live_dead,
       -- the history: pgq.finished_jobs' partitions (no such table before revision 0033)
       (SELECT coalesce(sum(s.n_dead_tup), 0)::bigint FROM pg_stat_user_tables s
        WHERE s.relid IN (SELECT t.relid FROM pg_partition_tree(to_regclass('pgq.finished_jobs')) t)) AS hist_dead,
       (SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = 'pgq') AS pgq_dead,
       pg_total_relation_size(coalesce(to_regclass('pgq.live_jobs'), 'pgq.jobs'::regclass)) AS live_bytes,
       (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'pgq' AND c.relkind IN ('r', 'p')) AS pgq_bytes
"""

# A claim and an acknowledgement as the worker's (one queue, one kind, 16 jobs), the plans of their
# statements sent to the client. The 16 jobs are this transaction's own (due at its start, as the
# claim's `run_at <= now()` wants): the claim finds them behind whatever the claim index holds, and the
# rollback gives them back.
EXPLAIN_JOBS = """
INSERT INTO pgq.jobs (queue, kind, payload, run_at)
SELECT %s, %s, jsonb_build_object('explain', g), now() FROM generate_series(1, 16) g
""".strip()
EXPLAIN_SETUP = ("LOAD 'auto_explain'", "SET LOCAL auto_explain.log_min_duration = 0",
                 "SET LOCAL auto_explain.log_analyze = on", "SET LOCAL auto_explain.log_buffers = on",
                 "SET LOCAL auto_explain.log_nested_statements = on", "SET LOCAL client_min_messages = log")
EXPLAIN_CLAIM = """
SELECT c.id, c.lease_token::uuid FROM pgq.claim(ARRAY[%s], ARRAY[%s], 16, 60, 'long-horizon-explain') c
""".strip()
EXPLAIN_COMPLETE = """
SELECT count(*) FROM pgq.complete(%(ids)s::bigint[], %(tokens)s::uuid[],
                                  array_fill(NULL::jsonb, ARRAY[%(n)s::integer]),
                                  array_fill(NULL::bigint, ARRAY[%(n)s::integer]), NULL, NULL)
""".strip()

LATENCY = """
SELECT count(*) AS jobs,
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at))
           AS e2e,
       percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at))
           AS claim
FROM pgq.jobs
WHERE queue = %(q)s AND created_at >= %(start)s AND created_at < %(end)s AND finished_at IS NOT NULL
"""


def run_side(cluster: PrivateCluster, name: str, tree: Path, opts: argparse.Namespace) -> list[str]:
    """One whole run for the pgq of `tree` on a new database; prints its samples as it goes and
    returns its summary lines."""
    db = "horizon_" + "".join(c for c in name.lower() if c.isalnum())
    dsn = cluster.migrated_database(db, tree)
    env = dict(os.environ, PYTHONPATH=str(tree))
    total = opts.warm + opts.pin + opts.recover
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, dsn, QUEUE, KIND, str(opts.rate), str(total)],
                                env=env, cwd=tree, stdout=subprocess.PIPE, text=True)
    worker = subprocess.Popen([sys.executable, "-m", "pgq", "worker", "pgq.cli.bench.workers:app", "--queue", QUEUE,
                               "--concurrency", str(opts.concurrency), "--dsn", dsn, "--log-level", "WARNING"],
                              env=env, cwd=tree, stdin=subprocess.DEVNULL)
    samples: list[dict[str, Any]] = []
    bounds: dict[str, Any] = {}
    pin: psycopg.Connection[Any] | None = None
    explainer: psycopg.Connection[Any] | None = None  # --explain's session
    print(f"--- {name}: {opts.rate:g} jobs/s, pinned from {opts.warm:g} s to {opts.warm + opts.pin:g} s, "
          f"{total:g} s in all", flush=True)
    print(f"{'s':>6} {'phase':>9} {'done/s':>8} {'jobs dead':>10} {'jobs live':>10} {'pgq dead':>9} "
          f"{'pgq MB':>8} {'hot dead':>9} {'hist dead':>9} {'hot MB':>7}", flush=True)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            started = time.monotonic()
            explained = -float("inf")  # --explain's first claim at the start, as the worker's first
            bounds["warm"] = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
            phase = "warm"
            while True:
                elapsed = time.monotonic() - started
                if phase == "warm" and elapsed >= opts.warm:
                    pin = psycopg.connect(dsn)
                    pin.execute("SELECT pg_current_xact_id()")  # holds an xid, idle in transaction
                    phase = "pinned"
                    bounds[phase] = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
                elif phase == "pinned" and elapsed >= opts.warm + opts.pin:
                    assert pin is not None
                    pin.rollback()
                    pin.close()
                    pin = None
                    phase = "recovery"
                    bounds[phase] = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
                elif elapsed >= total:
                    break
                row = conn.execute(SAMPLE, {"q": QUEUE}).fetchone()
                assert row is not None
                s = dict(zip(("at", "finished", "jobs_dead", "jobs_live", "live_dead", "hist_dead", "pgq_dead",
                              "live_bytes", "pgq_bytes"), row, strict=True))
                s["phase"], s["t"] = phase, elapsed
                rate = ((s["finished"] - samples[-1]["finished"]) / max(1e-9, (s["at"] - samples[-1]["at"])
                        .total_seconds())) if samples else 0.0
                samples.append(s)
                print(f"{elapsed:6.0f} {phase:>9} {rate:8.0f} {s['jobs_dead']:10,} {s['jobs_live']:10,} "
                      f"{s['pgq_dead']:9,} {s['pgq_bytes'] / 1e6:8.1f} {s['live_dead']:9,} {s['hist_dead']:9,} "
                      f"{s['live_bytes'] / 1e6:7.1f}", flush=True)
                if worker.poll() is not None:
                    raise SystemExit(f"the worker stopped (exit {worker.returncode})")
                if opts.explain and elapsed >= explained + opts.explain:
                    explained = elapsed
                    if explainer is None:
                        explainer = psycopg.connect(dsn)
                    explain_claim(explainer, f"at {elapsed:.0f} s ({phase}, {s['live_dead']:,} dead in the "
                                  "hot table)")
                time.sleep(max(0.0, opts.sample - (time.monotonic() - started - elapsed)))
            bounds["end"] = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
            producer.wait(60)
            # Let the last jobs finish before reading the latencies (at most 30 s).
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and conn.execute(
                    "SELECT count(*) FROM pgq.jobs WHERE queue = %s AND finished_at IS NULL",
                    (QUEUE,)).fetchone() != (0,):
                time.sleep(0.2)
            return summary(conn, name, samples, bounds)
    finally:
        for session in (pin, explainer):
            if session is not None:
                session.close()
        for proc in (producer, worker):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        producer.wait(60)
        worker.wait(60)
        with psycopg.connect(cluster.dsn + "postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {db}")


def explain_claim(conn: psycopg.Connection[Any], label: str) -> None:
    """Print the plans (auto_explain: analyze, buffers, nested statements) of the statements of one
    claim of 16 jobs and of their acknowledgement, in a transaction of `conn` (a session kept for the
    run, as a worker's, so that its plans stay cached) that enqueued them and is rolled back: each
    statement's duration and first line, and the plan of those that read pgq's job tables."""
    plans: list[str] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        plans.append(diag.message_primary or "")

    conn.execute(EXPLAIN_JOBS, (QUEUE, KIND))
    for statement in EXPLAIN_SETUP:
        conn.execute(statement)
    conn.add_notice_handler(keep)
    try:
        claimed = conn.execute(EXPLAIN_CLAIM, (QUEUE, KIND)).fetchall()
        conn.execute(EXPLAIN_COMPLETE, {"ids": [r[0] for r in claimed], "tokens": [r[1] for r in claimed],
                                        "n": len(claimed)})
    finally:
        conn.rollback()
        conn.remove_notice_handler(keep)
    print(f"  | explain {label}: a claim of 16 took {len(claimed)} jobs and acknowledged them, "
          f"{len(plans)} statements; rolled back", flush=True)
    for plan in plans:
        head, _, rest = plan.partition("  plan:\nQuery Text: ")
        lines = rest.splitlines()
        # The statement's first line (its text is in sql/), then its plan, whose root is the first line
        # at the margin with a cost.
        root = next((i for i, line in enumerate(lines) if "  (cost=" in line and not line.startswith(" ")),
                    len(lines))
        print(f"  | {head}: {' '.join(lines[0].split())[:100] if lines else ''}", flush=True)
        if " on jobs " in plan or "live_jobs" in plan or "finished_jobs" in plan:  # before 0033: pgq.jobs
            for line in lines[root:]:
                print("  |   " + line, flush=True)


def summary(conn: psycopg.Connection[Any], name: str, samples: list[dict[str, Any]],
            bounds: dict[str, Any]) -> list[str]:
    """The per-phase lines of one side, and how long the dead row versions took to go after the pin."""
    lines = [f"{name}: phase       jobs  e2e p50/p95/p99 ms   claim p50/p99 ms   jobs/s  peak dead  MB at end"
             f"  hot peak dead  hist peak dead  hot MB at end"]
    edges = [bounds["warm"], bounds["pinned"], bounds["recovery"], bounds["end"]]
    for i, phase in enumerate(PHASES):
        start, end = edges[i], edges[i + 1]
        row = conn.execute(LATENCY, {"q": QUEUE, "start": start, "end": end}).fetchone()
        assert row is not None
        jobs, e2e, claim = row
        e2e = [x * 1000 for x in (e2e or [float("nan")] * 3)]
        claim = [x * 1000 for x in (claim or [float("nan")] * 2)]
        in_phase = [s for s in samples if s["phase"] == phase]
        done = conn.execute("SELECT count(*) FROM pgq.jobs WHERE queue = %s AND finished_at >= %s "
                            "AND finished_at < %s", (QUEUE, start, end)).fetchone()
        assert done is not None
        seconds = max(1e-9, (end - start).total_seconds())
        peak = {key: max((s[key] for s in in_phase), default=0) for key in ("jobs_dead", "live_dead", "hist_dead")}
        size, live_size = ((in_phase[-1]["pgq_bytes"] / 1e6, in_phase[-1]["live_bytes"] / 1e6) if in_phase
                           else (float("nan"), float("nan")))
        lines.append(f"{name}: {phase:>8} {jobs:9,}  {e2e[0]:6.1f} {e2e[1]:6.1f} {e2e[2]:7.1f}   "
                     f"{claim[0]:7.1f} {claim[1]:7.1f}   {done[0] / seconds:6.0f}  {peak['jobs_dead']:9,}  "
                     f"{size:9.1f}  {peak['live_dead']:13,}  {peak['hist_dead']:14,}  {live_size:13.1f}")
    for key, what in (("jobs_dead", "pgq.jobs'"), ("live_dead", "the hot table's")):
        before = max((s[key] for s in samples if s["phase"] == "warm"), default=0)
        floor = max(before, 1000)
        back = next((s for s in samples if s["phase"] == "recovery" and s[key] <= floor), None)
        if back is None:
            lines.append(f"{name}: {what} dead row versions were still above {floor:,} at the end "
                         f"(peak before the pin: {before:,})")
        else:
            after = (back["at"] - bounds["recovery"]).total_seconds()
            lines.append(f"{name}: {what} dead row versions back at or below {floor:,} (peak before the pin: "
                         f"{before:,}) {after:.0f} s after the pin ended")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200, help="jobs enqueued a second (default 200)")
    parser.add_argument("--warm", type=float, default=60, help="seconds before the pin (default 60)")
    parser.add_argument("--pin", type=float, default=300, help="seconds the horizon is held (default 300)")
    parser.add_argument("--recover", type=float, default=120, help="seconds after the pin (default 120)")
    parser.add_argument("--sample", type=float, default=5, help="seconds between samples (default 5)")
    parser.add_argument("--concurrency", type=int, default=16, help="the worker's slots (default 16)")
    parser.add_argument("--explain", type=float, default=0, help="seconds between plans of a claim's "
                        "statements (default 0: none; a diagnosis, its claims disturb the figures)")
    parser.add_argument("--baseline", help="a commit to run the same way after this checkout")
    parser.add_argument("--settings", default="", help="lines to append to the private server's "
                        "postgresql.conf (e.g. 'autovacuum_naptime = 10s')")
    parser.add_argument("--bindir", help="PostgreSQL server binaries (default: pg_config --bindir)")
    opts = parser.parse_args()
    if (min(opts.rate, opts.sample) <= 0 or min(opts.warm, opts.pin, opts.recover, opts.explain) < 0
            or opts.concurrency < 1):
        parser.error("--rate and --sample must be positive, the phases and --explain at least 0 s, "
                     "--concurrency at least 1")

    class Cluster(PrivateCluster):
        def __init__(self, bins: Path, where: Path) -> None:
            super().__init__(bins, where, settings=opts.settings.replace("\\n", "\n") + "\n")

    with throwaway(Cluster, opts.bindir, "pgq-horizon-") as (cluster, tmp):
        with psycopg.connect(cluster.dsn + "postgres", autocommit=True) as conn:
            settings: dict[str, str] = dict(conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('server_version', 'autovacuum', 'autovacuum_naptime')").fetchall())
        print(f"private PostgreSQL {settings['server_version']}: autovacuum {settings['autovacuum']}, "
              f"naptime {settings['autovacuum_naptime']} s; load {os.getloadavg()[0]:.1f}", flush=True)
        sides = {"HEAD": ROOT}
        if opts.baseline:
            sides[opts.baseline] = export_tree(opts.baseline, tmp)
        report: list[str] = []
        for name, tree in sides.items():
            report += run_side(cluster, name, tree, opts)
        print(f"summary (load {os.getloadavg()[0]:.1f}):")
        for line in report:
            print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
