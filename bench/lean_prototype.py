#!/usr/bin/env python3
"""Issue #43's prototype: candidate layouts of pgq.jobs, each measured against today's schema on a
private cluster, in the measures that the load of a shared machine does not move (WAL bytes,
callgrind's instructions, buffers read) plus the single-statement times of retention and migration.

    python3 bench/lean_prototype.py check          # each layout's statements do what pgq's do
    python3 bench/lean_prototype.py wal            # WAL bytes per job: enqueue, claim, ack, vacuum
    python3 bench/lean_prototype.py instructions   # server instructions per job (callgrind)
    python3 bench/lean_prototype.py history        # reads of finished jobs and retention, 1M finished
    python3 bench/lean_prototype.py migration      # the online migration's steps and locks, 1M rows
    python3 bench/lean_prototype.py lock-records   # the row lock a BEFORE UPDATE trigger adds to an update

The layouts (bench/lean/*.sql; docs/design/lean-table.md says what each is and what was found):
  today   pgq.jobs as migrated, driven by pgq's own statements (sql/job_insert.sql, job_claim.sql,
          job_complete.sql);
  C       today's one table (its CHECKs and triggers) with only the indexes the hot path and the
          readers of finished jobs need, the prototype's claim and today's acknowledgement;
  A       a live table of the jobs that can still run, finished ones moved to a history partitioned
          by day (the acknowledgement deletes and inserts in one statement); A-ff50: its live table at
          fillfactor 50; A-brin: its history indexes ids by BRIN instead of a B-tree; R: A-ff50 with
          a lone claim that takes no row lock (the one recommended); A+: R with BRIN ids;
  H       A+ whose claim is a HOT update: no index names a column the claim changes (no lease
          index, claimed rows stay in the claim index), fillfactor 40; H-ff50: at 50;
  B       A's history, but the job's row is written once, a narrow ready row is what the claim takes
          (deletes) and a narrow running row what it gives (Solid Queue's, Hatchet's shape).
Every layout gets a database of its own, migrated by this checkout's `pgq migrate` (the prototypes
use pgq's auxiliary tables: pauses, limits, key watermarks, dependencies, waits). The claim is the
lone claim of one queue and one kind (a worker of one process: W3's path), the enqueue a batch
INSERT (W2's), the acknowledgement a fenced batch, all as pgq's client sends them, each statement
its own transaction. Needs the PostgreSQL server binaries (`pg_config --bindir` or --bindir) and,
for `instructions`, valgrind.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from private_cluster import ROOT, CallgrindCluster, PrivateCluster, throwaway

HERE = Path(__file__).resolve().parent / "lean"
# The pieces of functions that several layouts' files share (lean/parts.sql): name -> text.
PARTS = {name: body.strip("\n") + "\n" for name, body in
         re.findall(r"^-- part: (\w+)\n(.*?)(?=^-- part: |\Z)", (HERE / "parts.sql").read_text(), re.M | re.S)}
QUEUE, KIND = "bench", "bench"
WAL_SETTINGS = ("autovacuum = off\nmax_wal_size = 16GB\ncheckpoint_timeout = 1h\nwal_keep_size = 4GB\n"
                "timezone = 'UTC'\nmaintenance_work_mem = 256MB\n")


def sql_file(name: str) -> str:
    """A statement of pgq (sql/NAME.sql)."""
    return (ROOT / "sql" / f"{name}.sql").read_text()


@dataclass(frozen=True)
class Layout:
    """A candidate layout: its schema, the prototype files that install it, their settings, and the
    statements the client sends (built from pgq's own, so that they differ only where the layout
    does)."""

    name: str
    schema: str
    files: tuple[str, ...] = ()
    id_index: str = "btree"     # the history's index of ids
    fillfactor: int = 90        # the live table's
    row_lock: bool = True       # the lone claim locks its rows FOR NO KEY UPDATE SKIP LOCKED first
    tables: tuple[str, ...] = ("jobs",)
    history: bool = False
    copies_triggers: bool = False  # C: today's triggers and today's acknowledgement, on the copy

    def install(self, conn: psycopg.Connection[Any], partitions: bool = True) -> None:
        """Create the layout in the database of `conn` (migrated by pgq already), with its history's
        partitions of the last 9 days and the next 3 unless `partitions` is false."""
        for f in self.files:
            text = (HERE / f).read_text()
            for name, part in PARTS.items():
                text = text.replace(f"@{name}@\n", part)
            text = text.replace("@schema@", self.schema).replace("@fillfactor@", str(self.fillfactor))
            brin = "brin (id) WITH (pages_per_range = 16, autosummarize = on)"
            text = text.replace("@id_index@", brin if self.id_index == "brin" else "btree (id)")
            text = text.replace("@row_lock@", "FOR NO KEY UPDATE SKIP LOCKED" if self.row_lock else "")
            conn.execute(text)
        if self.copies_triggers:  # today's triggers of pgq.jobs, and pgq.complete_core, on the copy
            for (ddl,) in conn.execute("SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t "
                                       "WHERE t.tgrelid = 'pgq.jobs'::regclass AND NOT t.tgisinternal").fetchall():
                conn.execute(ddl.replace(" ON pgq.jobs ", f" ON {self.schema}.jobs "))
            core = (ROOT / "sql" / "functions" / "complete_core.sql").read_text()
            end = "    FROM finished f;\nEND;\n"
            assert end in core, "sql/functions/complete_core.sql changed: adapt layout C's acknowledgement"
            core = core.replace(end, end.replace("END;", "    PERFORM pgq.after_finish(p_ids);\nEND;"))
            conn.execute(core.replace("pgq.complete_core(", f"{self.schema}.complete(")
                         .replace("pgq.jobs", f"{self.schema}.jobs"))
        if self.history and partitions:
            conn.execute(f"SELECT {self.schema}.history_ensure((now() AT TIME ZONE 'UTC')::date - 9, 12)")

    @property
    def enqueue_sql(self) -> str:
        """The batch enqueue: sql/job_insert.sql on this layout's table(s)."""
        text = sql_file("job_insert").replace("pgq.jobs", f"{self.schema}.jobs")
        if self.name == "B":  # the job's row, and its ready row
            returning = "    RETURNING id, queue\n),\n"
            assert returning in text, "sql/job_insert.sql changed: adapt the B layout's enqueue"
            text = text.replace(returning, (
                "    RETURNING id, queue, kind, priority, run_at, limited, group_key\n),\n"
                "ready AS (\n"
                f"    INSERT INTO {self.schema}.ready\n"
                "        (id, queue, kind, priority, run_at, attempts, limited, group_key)\n"
                "    SELECT ins.id, ins.queue, ins.kind, ins.priority, ins.run_at, 0, ins.limited, ins.group_key\n"
                "    FROM ins\n),\n"))
        return text

    @property
    def claim_sql(self) -> str:
        """sql/job_claim.sql, calling this layout's claim."""
        return sql_file("job_claim").replace("pgq.claim(", f"{self.schema}.claim(")

    @property
    def complete_sql(self) -> str:
        """sql/job_complete.sql, calling this layout's acknowledgement (no lock_timeout argument but
        in C, whose acknowledgement is pgq.complete_core's)."""
        text = sql_file("job_complete").replace("pgq.complete(", f"{self.schema}.complete(")
        return text if self.schema == "pgq" or self.copies_triggers else text.replace(", %(lock_timeout)s::text", "")

    def vacuum_targets(self) -> list[str]:
        """The tables a VACUUM after a drain visits."""
        names = [f"{self.schema}.{t}" for t in self.tables]
        return names + ([f"{self.schema}.job_history"] if self.history else [])


A_FILES = ("common.sql", "history.sql", "a.sql", "a_indexes.sql", "live_claim.sql")
H_FILES = ("common.sql", "history.sql", "a.sql", "h_indexes.sql", "live_claim.sql")
LAYOUTS = {
    "today": Layout("today", "pgq"),
    "C": Layout("C", "lean_c", ("common.sql", "c.sql", "live_claim.sql"), copies_triggers=True),
    "A": Layout("A", "lean_a", A_FILES, history=True),
    "A-ff50": Layout("A-ff50", "lean_a", A_FILES, fillfactor=50, history=True),
    "A-brin": Layout("A-brin", "lean_a", A_FILES, id_index="brin", history=True),
    "R": Layout("R", "lean_a", A_FILES, fillfactor=50, row_lock=False, history=True),
    "A+": Layout("A+", "lean_a", A_FILES, id_index="brin", fillfactor=50, row_lock=False, history=True),
    "H-ff50": Layout("H-ff50", "lean_a", H_FILES, id_index="brin", fillfactor=50, row_lock=False, history=True),
    "H": Layout("H", "lean_a", H_FILES, id_index="brin", fillfactor=40, row_lock=False, history=True),
    "B": Layout("B", "lean_b", ("common.sql", "history.sql", "b.sql"), tables=("jobs", "ready", "running"),
                history=True),
}


# --- the client's side: enqueue, claim, acknowledge -------------------------------------------------

def enqueue(conn: psycopg.Connection[Any], layout: Layout, n: int, queue: str = QUEUE,
            watermarks: list[int | None] | None = None, max_attempts: int | None = None) -> list[int]:
    """Enqueue `n` jobs in one statement, as Queue.enqueue_many sends a batch; their ids."""
    params = {"kind": KIND, "kinds": None, "queue": queue, "queues": None, "priority": 0, "priorities": None,
              "run_ats": None, "delays": None, "watermarks": watermarks,
              "max_attempts": None if max_attempts is None else [max_attempts] * n, "group_keys": None,
              "payloads": [f'{{"i": {i}}}' for i in range(n)]}
    return sorted(r[0] for r in conn.execute(layout.enqueue_sql, params, binary=True).fetchall())


@dataclass
class Held:
    """A claimed attempt: what its acknowledgement sends back."""

    id: int
    token: uuid.UUID
    watermark: int | None


def claim(conn: psycopg.Connection[Any], layout: Layout, n: int, queue: str = QUEUE) -> list[Held]:
    """One claim of up to `n` jobs (the worker's claim of one queue and one kind)."""
    rows = conn.execute(layout.claim_sql, {"queues": [queue], "kinds": [KIND], "limit": n, "lease_s": 3600.0,
                                           "worker": "w"}, binary=True).fetchall()
    return [Held(r[0], uuid.UUID(r[10]), r[15]) for r in rows]


def complete(conn: psycopg.Connection[Any], layout: Layout, held: Sequence[Held],
             watermarks: Sequence[int | None] | None = None) -> dict[int, str]:
    """One acknowledgement of `held` (watermarks: what each run processed; default the claimed one)."""
    rows = conn.execute(layout.complete_sql, {
        "ids": [h.id for h in held], "tokens": [h.token for h in held], "results": [None] * len(held),
        "watermarks": list(watermarks) if watermarks is not None else [h.watermark for h in held],
        "progress": None, "lock_timeout": None}, binary=True).fetchall()
    return {r[0]: r[1] for r in rows}


def chunks(items: Sequence[Held], size: int) -> Iterator[Sequence[Held]]:
    """`items` in slices of `size`."""
    for i in range(0, len(items), size):
        yield items[i:i + size]


def drain(claimer: psycopg.Connection[Any], acker: psycopg.Connection[Any], layout: Layout, b: int, c: int,
          claims: int | None = None, on_claim: Callable[[int], None] | None = None,
          on_ack: Callable[[int], None] | None = None, overlap: bool = True) -> int:
    """Drain the queue as a busy worker does: claims of `b` on `claimer`, acknowledgements of `c` on
    `acker`, the next claim sent while the jobs of the last one are still held (so a claim finds
    about `b` running jobs ahead of it; not `overlap`: only once they were acknowledged). Stops
    after `claims` claims if given; returns the jobs acknowledged. `on_claim`, `on_ack`: given, they
    get the WAL each statement wrote (read around it)."""
    done = made = 0
    held: list[Held] = []
    while claims is None or made < claims:
        if not overlap:
            for part in chunks(held, c):
                complete(acker, layout, part)
            done, held = done + len(held), []
        before = lsn(claimer) if on_claim else 0
        nxt = claim(claimer, layout, b)
        made += 1
        if on_claim:
            on_claim(lsn(claimer) - before)
        for part in chunks(held, c):
            before = lsn(acker) if on_ack else 0
            complete(acker, layout, part)
            if on_ack:
                on_ack(lsn(acker) - before)
        done += len(held)
        held = nxt
        if not nxt:
            break
    for part in chunks(held, c):
        before = lsn(acker) if on_ack else 0
        complete(acker, layout, part)
        if on_ack:
            on_ack(lsn(acker) - before)
    return done + len(held)


def prepared_database(cluster: PrivateCluster, layout: Layout, db: str) -> str:
    """A new database migrated by this checkout's pgq, with `layout` installed; its DSN."""
    dsn = cluster.migrated_database(db, ROOT)
    with psycopg.connect(dsn, autocommit=True) as conn:
        layout.install(conn)
    return dsn


# --- check ---------------------------------------------------------------------------------------------

def check(cluster: PrivateCluster) -> None:
    """Each layout's statements against what pgq's do: fencing, dirty re-runs, heartbeats, rescue,
    a job found by id in live or history, ids unique across both."""
    for i, layout in enumerate(LAYOUTS.values()):
        dsn = prepared_database(cluster, layout, f"check_{i}")
        with psycopg.connect(dsn, autocommit=True) as conn:
            ids = enqueue(conn, layout, 10)
            got = claim(conn, layout, 4)
            assert [h.id for h in got] == ids[:4], (layout.name, got)
            stale = Held(got[0].id, uuid.uuid4(), None)
            assert complete(conn, layout, [stale]) == {}, "a wrong token finishes nothing"
            assert complete(conn, layout, got[:2]) == {got[0].id: "succeeded", got[1].id: "succeeded"}
            assert complete(conn, layout, got[:1]) == {}, "a finished attempt is not finished twice"
            hb = conn.execute(f"SELECT * FROM {layout.schema}.heartbeat(%s, %s, %s, NULL)" if layout.schema != "pgq"
                              else "SELECT * FROM pgq.heartbeat(%s, %s, %s, NULL, NULL)",
                              ([h.id for h in got], [h.token for h in got], [60.0] * 4)).fetchall()
            assert sorted(r[0] for r in hb) == [got[2].id, got[3].id], hb
            # A job whose input watermark moved past what its run processed runs again.
            (wm,) = enqueue(conn, layout, 1, queue="wm", watermarks=[5])
            (h,) = claim(conn, layout, 1, queue="wm")
            assert complete(conn, layout, [h], [3]) == {wm: "queued"}
            (h,) = claim(conn, layout, 1, queue="wm")
            assert complete(conn, layout, [h], [5]) == {wm: "succeeded"}
            # Rescue: an expired lease goes back to queued, or to failed on its last attempt (B has none).
            (last,) = enqueue(conn, layout, 1, queue="rescue", max_attempts=1)
            (again,) = enqueue(conn, layout, 1, queue="rescue")
            taken = claim(conn, layout, 2, queue="rescue")
            run_table = "running" if layout.name == "B" else "jobs"
            conn.execute(f"UPDATE {layout.schema}.{run_table} SET lease_expires_at = now() - interval '1 s' "
                         "WHERE id = ANY(%s)", ([last, again],))
            if layout.name != "B":
                rescued = conn.execute(f"SELECT id, status FROM {layout.schema}.rescue(10)").fetchall()
                assert sorted(rescued) == sorted([(last, "failed"), (again, "queued")]), rescued
            assert len(taken) == 2
            if layout.schema != "pgq":
                get = f"SELECT id, status FROM {layout.schema}.get(%s)"
                assert conn.execute(get, (got[0].id,)).fetchone() == (got[0].id, "succeeded")
                assert conn.execute(get, (got[2].id,)).fetchone() == (got[2].id, "running")
                assert conn.execute(get, (ids[9],)).fetchone() == (ids[9], "queued")
                if layout.name != "B":
                    assert conn.execute(get, (last,)).fetchone() == (last, "failed")
            if layout.history:  # a waiter is told when its job finishes (the acknowledgement's probes)
                (waited,) = enqueue(conn, layout, 1, queue="wait")
                conn.execute("INSERT INTO pgq.awaited_jobs (job_id) VALUES (%s)", (waited,))
                conn.execute("LISTEN pgq_finished")
                complete(conn, layout, claim(conn, layout, 1, queue="wait"))
                told = [n.payload for n in conn.notifies(timeout=1, stop_after=1)]
                assert told == [str(waited)], told
                left = conn.execute("SELECT count(*) FROM pgq.awaited_jobs").fetchone()
                assert left == (0,), left
                both = conn.execute(f"SELECT count(*) FROM {layout.schema}.jobs j "
                                    f"JOIN {layout.schema}.job_history h ON h.id = j.id").fetchone()
                assert both == (0,), both
        print(f"  {layout.name:>7}: enqueue, claim, fenced acknowledgement, heartbeat, dirty re-run, rescue, "
              f"read by id{', waiter told' if layout.history else ''}: as pgq"
              + (" (no rescue)" if layout.name == "B" else ""), flush=True)


# --- WAL -------------------------------------------------------------------------------------------------

def lsn(conn: psycopg.Connection[Any]) -> int:
    """The WAL insert position, in bytes."""
    row = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
    assert row is not None
    return int(row[0])


def lsn_text(v: int) -> str:
    """A WAL position as PostgreSQL writes it."""
    return f"{v >> 32:X}/{v & 0xFFFFFFFF:X}"


@dataclass
class WalPhase:
    """WAL of one phase: its range, and pg_waldump's totals over it."""

    start: int
    end: int
    bytes: int = 0
    fpi: int = 0
    by_rmgr: dict[str, int] = field(default_factory=dict)
    note: str = ""


def waldump(cluster: PrivateCluster, phase: WalPhase, raw: list[str], label: str) -> None:
    """Fill `phase` from pg_waldump --stats over its range (full-page images apart); keep the
    per-record listing in `raw`. Run before the next phase (later checkpoints may recycle its
    segments) and after a flush (a CHECKPOINT)."""
    phase.bytes = phase.end - phase.start
    # The phase's first segment is named: pg_waldump would take the segment size from the first file
    # it lists otherwise, which can be one the server made ahead (empty). initdb's 16 MB segments.
    def segment(at: int) -> str:
        n = at // (16 << 20)
        return f"{1:08X}{n >> 8:08X}{n & 0xFF:08X}"

    base = [str(cluster.bins / "pg_waldump"), "-p", str(cluster.data / "pg_wal"), "-s", lsn_text(phase.start),
            "-e", lsn_text(phase.end), segment(phase.start), segment(phase.end)]
    done = subprocess.run([*base, "--stats"], capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"pg_waldump failed: {done.stderr}")
    out = done.stdout
    for line in out.splitlines():
        name = line.split()[0] if line.strip() else ""
        numbers = [int(c) for c in line.split() if c.isdigit()]
        if len(numbers) == 4:  # N, record size, FPI size, combined
            if name == "Total":
                phase.fpi = numbers[2]
            else:
                phase.by_rmgr[name] = numbers[3]
    detail = subprocess.run([*base, "--stats=record"], capture_output=True, text=True, check=True).stdout
    raw.append(f"--- {label}: {lsn_text(phase.start)} .. {lsn_text(phase.end)}\n{detail}")


def wal_side(cluster: PrivateCluster, layout: Layout, db: str, jobs: int, batch: int, claim_batch: int,
             complete_batch: int, raw: list[str]) -> dict[str, WalPhase]:
    """WAL of enqueue, claims, acknowledgements and the VACUUM after, for `jobs` jobs of `layout`."""
    dsn = prepared_database(cluster, layout, db)
    phases: dict[str, WalPhase] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        # A warm-up job (plans, first pages), claimed and acknowledged before the measure.
        enqueue(conn, layout, 10, queue="warm")
        complete(conn, layout, claim(conn, layout, 10, queue="warm"))
        conn.execute("CHECKPOINT")
        start = lsn(conn)
        for i in range(0, jobs, batch):
            enqueue(conn, layout, min(batch, jobs - i))
        phases["enqueue"] = WalPhase(start, lsn(conn))
        conn.execute("CHECKPOINT")  # (which also flushes what the phase wrote, for pg_waldump)
        waldump(cluster, phases["enqueue"], raw, f"{layout.name} enqueue")
        first = lsn(conn)
        spent = {"claim": 0, "ack": 0}

        def add(what: str) -> Callable[[int], None]:
            def note(n: int) -> None:
                spent[what] += n
            return note

        with psycopg.connect(dsn, autocommit=True) as acker:
            done = drain(conn, acker, layout, claim_batch, complete_batch, on_claim=add("claim"), on_ack=add("ack"))
        assert done == jobs, (layout.name, done)
        drained = WalPhase(first, lsn(conn))
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                           "WHERE relid = %s::regclass", (f"{layout.schema}.jobs",)).fetchone()
        hot = f"{row[1]:,} of {row[0]:,}" if row else "?"
        phases["claim"] = WalPhase(0, spent["claim"], spent["claim"])
        phases["ack"] = WalPhase(0, spent["ack"], spent["ack"])
        phases["drain"] = drained
        conn.execute("CHECKPOINT")
        waldump(cluster, drained, raw, f"{layout.name} drain")
        start = lsn(conn)
        for table in layout.vacuum_targets():
            conn.execute(f"VACUUM {table}")
        phases["vacuum"] = WalPhase(start, lsn(conn))
        conn.execute("CHECKPOINT")
        waldump(cluster, phases["vacuum"], raw, f"{layout.name} vacuum")
    with psycopg.connect(cluster.dsn + "postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {db}")
    phases["drain"].note = hot
    return phases


def wal(opts: argparse.Namespace) -> None:
    """WAL bytes per job of each layout, per phase, with full-page images apart."""
    raw: list[str] = []
    with throwaway(PrivateCluster, opts.bindir, "pgq-lean-wal-") as (cluster, _tmp):
        cluster.stop()
        with (cluster.data / "postgresql.conf").open("a") as conf:
            conf.write(WAL_SETTINGS + opts.settings.replace(";", "\n") + "\n")
        restart(cluster)
        print(f"WAL bytes per job{' with ' + opts.settings if opts.settings else ''}: {opts.jobs} jobs enqueued in "
              f"batches of {opts.batch}, claimed {opts.claim_batch} "
              f"and acknowledged {opts.complete_batch} at a time, one connection, autovacuum off, a CHECKPOINT "
              "before each phase (full-page images: fpi)")
        print(f"  {'layout':>7} {'enqueue':>8} {'(fpi)':>6} {'claim':>7} {'ack':>6} {'drain':>7} {'(fpi)':>6} "
              f"{'total':>6} {'vacuum':>7} {'(fpi)':>6}  drain by resource manager")
        for i, name in enumerate(opts.layouts):
            layout = LAYOUTS[name]
            p = wal_side(cluster, layout, f"wal_{i}", opts.jobs, opts.batch, opts.claim_batch, opts.complete_batch,
                         raw)
            j = opts.jobs
            rm = ", ".join(f"{k} {v / j:.0f}" for k, v in sorted(p["drain"].by_rmgr.items(), key=lambda kv: -kv[1])
                           if v / j >= 1)
            print(f"  {name:>7} {p['enqueue'].bytes / j:8.0f} {p['enqueue'].fpi / j:6.0f} {p['claim'].bytes / j:7.0f} "
                  f"{p['ack'].bytes / j:6.0f} {p['drain'].bytes / j:7.0f} {p['drain'].fpi / j:6.0f} "
                  f"{(p['enqueue'].bytes + p['drain'].bytes) / j:6.0f} {p['vacuum'].bytes / j:7.0f} "
                  f"{p['vacuum'].fpi / j:6.0f}  {rm}", flush=True)
            print(f"  {'':>7} updates of {layout.schema}.jobs, HOT of all (enqueue to drain): {p['drain'].note}")
            erm = ", ".join(f"{k} {v / j:.0f}" for k, v in sorted(p["enqueue"].by_rmgr.items(), key=lambda kv: -kv[1])
                            if v / j >= 1)
            print(f"  {'':>7} enqueue by resource manager: {erm}", flush=True)
    if opts.raw:
        opts.raw.write_text("".join(raw))


def restart(cluster: PrivateCluster) -> None:
    """Start a stopped private cluster again (its settings re-read)."""
    log = (cluster.where / "server.log").open("a")
    cluster.proc = subprocess.Popen(cluster.user_cmd([str(cluster.bins / "postgres"), "-D", str(cluster.data)]),
                                    stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if subprocess.run([str(cluster.bins / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(cluster.port)],
                          check=False).returncode == 0:
            return
        time.sleep(0.2)
    raise SystemExit("the private server did not restart")


# --- instructions ----------------------------------------------------------------------------------------

def backend(dsn: str) -> tuple[psycopg.Connection[Any], int]:
    """A new autocommit connection and its backend's pid."""
    conn = psycopg.connect(dsn, autocommit=True)
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return conn, int(row[0])


def counted(cluster: CallgrindCluster, dsn: str, sessions: int, work: Callable[[list[psycopg.Connection[Any]]], Any],
            keep: Path | None = None) -> tuple[list[int], Any]:
    """The instructions of each of `sessions` backends that ran `work` together (and what it
    returned); with `keep`, their callgrind files are copied there (DATABASE-N-SESSION.cg)."""
    opened = [backend(dsn) for _ in range(sessions)]
    try:
        got = work([conn for conn, _ in opened])
    finally:
        for conn, _ in opened:
            conn.close()
    counts = [cluster.instructions(pid) for _, pid in opened]
    if keep is not None:
        n = len(list(keep.iterdir()))
        for i, (_, pid) in enumerate(opened):
            shutil.copyfile(cluster.out / f"cg.{pid}", keep / f"{dsn.rsplit('/', 1)[1]}-{n}-{i}.cg")
    return counts, got


def instructions_side(cluster: CallgrindCluster, layout: Layout, db: str, jobs: int, b: int, c: int,
                      e: int, keep: Path | None = None, overlap: bool = True) -> tuple[float, float, float]:
    """Instructions per job of claims of `b`, acknowledgements of `c` (drain(): a claimer and an
    acknowledger backend) and enqueues of `e`, as bench/instructions.py counts them: backends that
    ran a phase whole, minus backends that ran its warm-up only (two claims and their
    acknowledgements; two enqueues)."""
    dsn = prepared_database(cluster, layout, db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(0, jobs + 4 * b, 1000):
            enqueue(conn, layout, min(1000, jobs + 4 * b - i))
        for table in layout.vacuum_targets():
            conn.execute(f"VACUUM ANALYZE {table}")

    def drains(whole: bool) -> Callable[[list[psycopg.Connection[Any]]], int]:
        def work(cs: list[psycopg.Connection[Any]]) -> int:
            drain(cs[0], cs[1], layout, b, c, claims=2, overlap=overlap)
            return drain(cs[0], cs[1], layout, b, c, overlap=overlap) if whole else 0
        return work

    (warm_c, warm_a), _ = counted(cluster, dsn, 2, drains(False))
    (all_c, all_a), done = counted(cluster, dsn, 2, drains(True), keep)

    def enqueues(whole: bool) -> Callable[[list[psycopg.Connection[Any]]], None]:
        def work(cs: list[psycopg.Connection[Any]]) -> None:
            enqueue(cs[0], layout, e, queue="enq")
            enqueue(cs[0], layout, e, queue="enq")
            for i in range(0, jobs if whole else 0, e):
                enqueue(cs[0], layout, min(e, jobs - i), queue="enq")
        return work

    (warm_e,), _ = counted(cluster, dsn, 1, enqueues(False))
    (all_e,), _ = counted(cluster, dsn, 1, enqueues(True), keep)
    return (all_c - warm_c) / done, (all_a - warm_a) / done, (all_e - warm_e) / jobs


def one_by_one(cluster: CallgrindCluster, layout: Layout, db: str, jobs: int) -> tuple[float, float, float]:
    """Instructions per job when each statement carries one job (an idle worker's wake-up, W4): a
    producer's enqueue of one job, the claim that takes it (asking for up to 16), its
    acknowledgement, each on its own backend; `jobs` of them after 20 for the warm-up."""
    dsn = prepared_database(cluster, layout, db)

    def rounds(n: int) -> Callable[[list[psycopg.Connection[Any]]], None]:
        def work(cs: list[psycopg.Connection[Any]]) -> None:
            for _ in range(n):
                enqueue(cs[0], layout, 1)
                got = claim(cs[1], layout, 16)
                assert len(got) == 1, got
                complete(cs[2], layout, got)
        return work

    (we, wc, wa), _ = counted(cluster, dsn, 3, rounds(20))
    (ae, ac, aa), _ = counted(cluster, dsn, 3, rounds(20 + jobs))
    return (ac - wc) / jobs, (aa - wa) / jobs, (ae - we) / jobs


def instructions(opts: argparse.Namespace) -> None:
    """Server instructions per job of each layout (callgrind)."""
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    with throwaway(CallgrindCluster, opts.bindir, "pgq-lean-instr-") as (cluster, _tmp):
        for label, jobs in (("batches", opts.jobs), ("one job per statement", opts.single)):
            if not jobs:
                continue
            print(f"server instructions per job, {label}: " + (
                f"{jobs} jobs, claims of {opts.claim_batch} "
                f"({'each after the last was acknowledged' if opts.no_overlap else 'one in flight'}), "
                "acknowledgements of "
                f"{opts.complete_batch}, enqueues of {opts.batch}" if label == "batches" else
                f"{jobs} jobs, each enqueued, claimed (a claim of up to 16) and acknowledged alone"), flush=True)
            base = None
            for i, name in enumerate(opts.layouts):
                db = f"instr_{label[0]}_{i}"
                if label == "batches":
                    claim_i, ack_i, enq_i = instructions_side(cluster, LAYOUTS[name], db, jobs, opts.claim_batch,
                                                              opts.complete_batch, opts.batch, opts.keep,
                                                              not opts.no_overlap)
                else:
                    claim_i, ack_i, enq_i = one_by_one(cluster, LAYOUTS[name], db, jobs)
                total = claim_i + ack_i + enq_i
                base = total if base is None else base
                print(f"  {name:>7}: enqueue {enq_i:10,.0f}  claim {claim_i:10,.0f}  ack {ack_i:10,.0f}  "
                      f"life {total:10,.0f}  ({total / base:.2f} of {opts.layouts[0]}'s)", flush=True)


# --- history: reads of finished jobs and retention -------------------------------------------------

# Finished rows as an acknowledgement leaves them, in finished order (the order both tables get them
# in): `n` jobs over the `days` days before midnight (UTC) and `recent` more in the last hour.
FILL = """
INSERT INTO {table} (id, queue, kind, payload, priority, status, run_at, attempts, max_attempts, claimed_by,
                     last_error, created_at, started_at, finished_at, limited)
SELECT g.i, 'q' || (g.i %% 4), 'k' || (g.i %% 10), jsonb_build_object('i', g.i), 0,
       CASE WHEN g.i %% 100 = 0 THEN 'failed' ELSE 'succeeded' END::pgq.job_status, t.at - interval '2 s', 1, 25,
       'w', CASE WHEN g.i %% 100 = 0 THEN 'boom' END, t.at - interval '2 s', t.at - interval '1 s', t.at, false
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g(i),
     LATERAL (SELECT %(t0)s::timestamptz + (%(t1)s::timestamptz - %(t0)s::timestamptz)
                     * ((g.i - %(first)s) / greatest(%(last)s - %(first)s, 1)::float8) AS at) t
"""

READS = {
    "last hour's finished jobs per queue and status": (
        "SELECT queue, status, count(*) FROM {table} WHERE status IN ('succeeded', 'failed', 'cancelled') "
        "AND finished_at > now() - interval '1 hour' GROUP BY queue, status"),
    "a finished job by id (the oldest day's)": "SELECT * FROM {table} WHERE id = {old_id}",
    "a finished job by id (the last hour's)": "SELECT * FROM {table} WHERE id = {new_id}",
    "the newest 50 failed jobs of a queue": (
        "SELECT id, finished_at FROM {table} WHERE status = 'failed' AND queue = 'q0' "
        "ORDER BY finished_at DESC LIMIT 50"),
    "the newest 5 jobs by id (README's example, pgq jobs list)": (
        "SELECT id, status FROM {table} ORDER BY id DESC LIMIT 5"),
    "finished jobs in an id window of 1,000 (the dashboard's search)": (
        "SELECT count(*) FROM {table} WHERE id >= {mid_id} AND id < {mid_id} + 1000"),
}


def explain(conn: psycopg.Connection[Any], statement: str) -> tuple[int, float, str]:
    """Buffers touched (hit + read), the execution time in ms and the plan's first line."""
    conn.execute("SELECT 1")  # plans below are built in a warm session
    for _ in range(2):  # warm the cache and the plan
        conn.execute(statement).fetchall()
    plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}").fetchone()
    assert plan is not None
    top = plan[0][0]
    hit, read = top["Plan"].get("Shared Hit Blocks", 0), top["Plan"].get("Shared Read Blocks", 0)
    text = "\n".join(r[0] for r in conn.execute(f"EXPLAIN {statement}").fetchall())
    return hit + read, float(top["Execution Time"]), text


def timed(conn: psycopg.Connection[Any], statement: str, params: Any = None) -> tuple[float, int]:
    """Seconds one statement took, and the WAL it wrote."""
    before = lsn(conn)
    t = time.perf_counter()
    conn.execute(statement, params)
    took = time.perf_counter() - t
    return took, lsn(conn) - before


def purge_rows(conn: psycopg.Connection[Any], horizon: dt.datetime) -> list[str]:
    """Today's retention of the jobs finished before `horizon`: sql/job_purge.sql in batches of
    5,000 until none is left, then a VACUUM; what each took."""
    older = conn.execute("SELECT extract(epoch FROM now() - %s::timestamptz)", (horizon,)).fetchone()
    assert older is not None
    took = wal_bytes = deleted = 0.0
    while True:
        before, t = lsn(conn), time.perf_counter()
        cur = conn.execute(sql_file("job_purge"), {"older_than_s": float(older[0]), "batch": 5000})
        took += time.perf_counter() - t
        wal_bytes += lsn(conn) - before
        deleted += cur.rowcount
        if cur.rowcount == 0:
            break
    conn.execute("CHECKPOINT")
    vac_s, vac_wal = timed(conn, "VACUUM pgq.jobs")
    return [f"job_purge.sql in batches of 5,000 deleted {deleted:,.0f} rows in {took:.1f} s, "
            f"WAL {wal_bytes / 1e6:.1f} MB ({wal_bytes / deleted:.0f} B per row)",
            f"the VACUUM after it {vac_s:.1f} s, WAL {vac_wal / 1e6:.1f} MB ({vac_wal / deleted:.0f} B per row)"]


def drop_days(conn: psycopg.Connection[Any], horizon: dt.datetime) -> list[str]:
    """The history's retention of the jobs finished before `horizon`: its partitions that end
    before it, half detached CONCURRENTLY and dropped, half dropped; what that took."""
    expired = [r[0] for r in conn.execute("SELECT lean_a.history_expired(%s)::text", (horizon,))]
    rows = conn.execute("SELECT count(*) FROM lean_a.job_history WHERE finished_at < %s", (horizon,)).fetchone()
    assert rows is not None
    took = wal_bytes = 0.0
    for k, part in enumerate(expired):
        steps = [f"DROP TABLE {part}"]
        if k % 2 == 0:
            steps.insert(0, f"ALTER TABLE lean_a.job_history DETACH PARTITION {part} CONCURRENTLY")
        for step in steps:
            s, w = timed(conn, step)
            took, wal_bytes = took + s, wal_bytes + w
    return [f"{len(expired)} partitions ({rows[0]:,} rows) detached concurrently and dropped, or dropped, in "
            f"{took:.2f} s, WAL {wal_bytes / 1e3:.1f} kB ({wal_bytes / max(rows[0], 1):.2f} B per row)"]


def history(opts: argparse.Namespace) -> None:
    """Reads of finished jobs and retention, today's table against A's history (B-tree and BRIN ids)."""
    n, days, recent = opts.finished, 8, opts.finished // 100
    with throwaway(PrivateCluster, opts.bindir, "pgq-lean-history-") as (cluster, _tmp):
        cluster.stop()
        with (cluster.data / "postgresql.conf").open("a") as conf:
            conf.write(WAL_SETTINGS)
        restart(cluster)
        sides = [("today", LAYOUTS["today"], "pgq.jobs"), ("A", LAYOUTS["A"], "lean_a.job_history"),
                 ("A-brin", LAYOUTS["A-brin"], "lean_a.job_history")]
        print(f"{n:,} finished jobs over {days} days before midnight (UTC), {recent:,} in the last hour; "
              "1 % failed; 4 queues")
        results: dict[str, dict[str, tuple[int, float, str]]] = {}
        for i, (name, layout, table) in enumerate(sides):
            dsn = prepared_database(cluster, layout, f"history_{i}")
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute("SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', now()"
                                   ).fetchone()
                assert row is not None
                midnight, now = row
                t0 = midnight - dt.timedelta(days=days)
                t = time.perf_counter()
                for first in range(1, n + 1, 250_000):
                    conn.execute(FILL.format(table=table), {"first": first, "last": min(n, first + 249_999),
                                                            "t0": t0 + (midnight - t0) * ((first - 1) / n),
                                                            "t1": t0 + (midnight - t0) * (min(n, first + 249_999) / n)})
                conn.execute(FILL.format(table=table), {"first": n + 1, "last": n + recent,
                                                        "t0": now - dt.timedelta(minutes=59),
                                                        "t1": now})
                if layout.schema == "pgq":
                    conn.execute("SELECT setval(pg_get_serial_sequence('pgq.jobs', 'id'), %s)", (n + recent,))
                else:
                    conn.execute("SELECT setval('lean_a.jobs_id_seq', %s)", (n + recent,))
                conn.execute(f"VACUUM ANALYZE {table}")
                size = conn.execute("SELECT pg_size_pretty(sum(pg_total_relation_size(c.oid))) FROM pg_class c "
                                    "WHERE c.oid = %s::regclass OR c.oid IN (SELECT inhrelid FROM pg_inherits "
                                    "WHERE inhparent = %s::regclass)", (table, table)).fetchone()
                print(f"  {name}: filled in {time.perf_counter() - t:.0f} s, {size[0] if size else '?'} with indexes",
                      flush=True)
                ids = {"old_id": n // (2 * days), "new_id": n + recent // 2, "mid_id": n // 2}
                results[name] = {}
                for label, statement in READS.items():
                    results[name][label] = explain(conn, statement.format(table=table, **ids))
                if layout.schema != "pgq":
                    results[name]["a job by id through get() (live table first)"] = explain(
                        conn, f"SELECT * FROM lean_a.get({ids['old_id']})")
                # Retention: every job finished before midnight.
                conn.execute("CHECKPOINT")
                for line in (purge_rows(conn, midnight) if layout.schema == "pgq" else drop_days(conn, midnight)):
                    print(f"  {name} retention: {line}", flush=True)
            with psycopg.connect(cluster.dsn + "postgres", autocommit=True) as conn:
                conn.execute(f"DROP DATABASE history_{i}")
        for label in [*READS, "a job by id through get() (live table first)"]:
            print(f"  {label}:")
            for name in results:
                if label in results[name]:
                    buffers, ms, plan = results[name][label]
                    print(f"    {name:>7}: {buffers:7,} buffers, {ms:8.3f} ms   {plan.splitlines()[0].strip()[:90]}")
        if opts.plans:
            with opts.plans.open("w") as f:
                for name, per in results.items():
                    for label, (_, _, plan) in per.items():
                        f.write(f"--- {name}: {label}\n{plan}\n")


# --- lock records of updates ---------------------------------------------------------------------------

def lock_records(cluster: PrivateCluster) -> None:
    """The WAL of 1,000 updates of a bare table with and without a BEFORE UPDATE row trigger that
    never fires (WHEN false): PostgreSQL locks each row before it tests the trigger's WHEN."""
    with psycopg.connect(cluster.dsn + "postgres", autocommit=True) as conn:
        conn.execute("CREATE FUNCTION keep() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$")
        for i, trigger in enumerate(("", "CREATE TRIGGER never BEFORE UPDATE ON t1 FOR EACH ROW WHEN (false) "
                                         "EXECUTE FUNCTION keep()")):
            conn.execute(f"CREATE TABLE t{i} (id int PRIMARY KEY, v int) WITH (fillfactor = 50)")
            if trigger:
                conn.execute(trigger)
            conn.execute(f"INSERT INTO t{i} SELECT g, 0 FROM generate_series(1, 1000) g")
            conn.execute("CHECKPOINT")
            conn.execute(f"UPDATE t{i} SET v = 1")  # the full-page images, first
            phase = WalPhase(lsn(conn), 0)
            conn.execute(f"UPDATE t{i} SET v = 2")
            phase.end = lsn(conn)
            conn.execute("CHECKPOINT")
            raw: list[str] = []
            waldump(cluster, phase, raw, "")
            locks = re.search(r"^Heap/LOCK\s+(\d+)", raw[0], re.M)
            print(f"  1,000 updates {'with' if trigger else 'without'} a BEFORE UPDATE trigger (WHEN false): "
                  f"{phase.bytes:,} bytes of WAL, {locks.group(1) if locks else 0} Heap/LOCK records", flush=True)


# --- migration ---------------------------------------------------------------------------------------

def locks_held(conn: psycopg.Connection[Any]) -> str:
    """The relation locks this session holds, on pgq's and the prototype's tables."""
    rows = conn.execute("SELECT l.relation::regclass::text, l.mode FROM pg_locks l "
                        "JOIN pg_class c ON c.oid = l.relation AND c.relkind IN ('r', 'p', 'v') "
                        "WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND l.granted "
                        "AND l.relation::regclass::text ~ '^(pgq\\.jobs|lean_m\\.)' ORDER BY 1, 2").fetchall()
    return ", ".join(f"{r} {m}" for r, m in rows) or "none"


def migration(opts: argparse.Namespace) -> None:
    """The online migration of docs/design/lean-table.md on today's table: its steps, their time,
    the locks each holds, and what copying the finished rows would cost instead."""
    n, live = opts.finished, opts.live
    steps = re.split(r"^-- step: ", (HERE / "migration.sql").read_text(), flags=re.M)[1:]
    with throwaway(PrivateCluster, opts.bindir, "pgq-lean-migration-") as (cluster, _tmp):
        cluster.stop()
        with (cluster.data / "postgresql.conf").open("a") as conf:
            conf.write(WAL_SETTINGS)
        restart(cluster)
        dsn = cluster.migrated_database("migration", ROOT)
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'").fetchone()
            assert row is not None
            midnight = row[0]
            for first in range(1, n + 1, 250_000):
                last = min(n, first + 249_999)
                conn.execute(FILL.format(table="pgq.jobs"), {
                    "first": first, "last": last, "t0": midnight - dt.timedelta(days=8) + dt.timedelta(days=8) * (
                        (first - 1) / n),
                    "t1": midnight - dt.timedelta(seconds=1) - dt.timedelta(days=8) * (1 - last / n)})
            conn.execute("SELECT setval(pg_get_serial_sequence('pgq.jobs', 'id'), %s)", (n,))
            for i in range(0, live, 1000):
                enqueue(conn, LAYOUTS["today"], min(1000, live - i))
            claim(conn, LAYOUTS["today"], min(live // 10, 1024))
            conn.execute("VACUUM ANALYZE pgq.jobs")
            counts = conn.execute("SELECT status, count(*) FROM pgq.jobs GROUP BY 1 ORDER BY 1").fetchall()
            Layout("M", "lean_m", LAYOUTS["A"].files, history=True).install(conn, partitions=False)
            conn.execute("SELECT lean_m.history_ensure(%s::date, 3)", (midnight,))
            print(f"today's pgq.jobs: {', '.join(f'{s} {c:,}' for s, c in counts)}; cutover at "
                  f"{midnight:%Y-%m-%d} 00:00 UTC (every finished row is older)")
            for step in steps:
                title, _, body = step.partition("\n")
                body = body.replace("@cutover@", f"{midnight:%Y-%m-%d} 00:00+00")
                online = "CONCURRENTLY" in body and "DETACH" not in body
                conn.execute("CHECKPOINT")
                before, t = lsn(conn), time.perf_counter()
                if online:  # statements that cannot run in a transaction block, one at a time
                    for statement in body.split(";\n"):
                        code = "\n".join(x for x in statement.splitlines() if not x.lstrip().startswith("--"))
                        if code.strip():
                            conn.execute(code)
                    held = "(each statement on its own: no transaction block)"
                else:
                    with conn.transaction():
                        conn.execute(body)
                        held = locks_held(conn)
                took = time.perf_counter() - t
                print(f"  {title.strip()}: {took:.3f} s, WAL {(lsn(conn) - before) / 1e6:.2f} MB; locks held to its "
                      f"end: {held}", flush=True)
            counts = conn.execute("SELECT 'live ' || status, count(*) FROM lean_m.jobs GROUP BY 1 UNION ALL "
                                  "SELECT 'history ' || tableoid::regclass::text, count(*) FROM lean_m.job_history "
                                  "GROUP BY 1 ORDER BY 1").fetchall()
            print("  after: " + ", ".join(f"{s} {c:,}" for s, c in counts))
            built = conn.execute("SELECT string_agg(indexrelid::regclass::text, ', ' ORDER BY 1) FROM pg_index "
                                 "WHERE indrelid = 'pgq.jobs_legacy'::regclass").fetchone()
            print(f"  the legacy partition's indexes: {built[0] if built else '?'}")
            # The alternative: copy the finished rows into a history of the same shape.
            conn.execute("CREATE TABLE lean_m.copy_target (LIKE lean_m.job_history) PARTITION BY RANGE (finished_at)")
            conn.execute("CREATE TABLE lean_m.copy_all PARTITION OF lean_m.copy_target FOR VALUES FROM (MINVALUE) "
                         "TO (MAXVALUE)")
            conn.execute("CREATE INDEX ON lean_m.copy_target (id)")
            conn.execute("CREATE INDEX ON lean_m.copy_target USING brin (finished_at)")
            conn.execute("CHECKPOINT")
            took = wal_bytes = 0.0
            for first in range(0, n + 1, 100_000):
                s, w = timed(conn, "INSERT INTO lean_m.copy_target SELECT * FROM lean_m.job_history "
                             "WHERE id >= %s AND id < %s", (first, first + 100_000))
                took, wal_bytes = took + s, wal_bytes + w
            print(f"  instead, copying the {n:,} finished rows in batches of 100,000: {took:.1f} s, "
                  f"WAL {wal_bytes / 1e6:.0f} MB ({wal_bytes / n:.0f} B per row)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["check", "wal", "instructions", "history", "migration", "lock-records"])
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="layouts to measure, the first the "
                        "reference (default: all)")
    parser.add_argument("--jobs", type=int, help="jobs enqueued and drained (wal: 20,000; instructions: 4,000)")
    parser.add_argument("--batch", type=int, default=1000, help="jobs per enqueue (default 1,000)")
    parser.add_argument("--claim-batch", type=int, default=512, help="jobs per claim (default 512)")
    parser.add_argument("--complete-batch", type=int, default=150, help="jobs per acknowledgement (default 150)")
    parser.add_argument("--no-overlap", action="store_true", help="instructions: claim only once the jobs of "
                        "the last claim were acknowledged (default: one claim's jobs in flight)")
    parser.add_argument("--single", type=int, default=300, help="instructions: jobs enqueued, claimed and "
                        "acknowledged one per statement too (default 300; 0: not)")
    parser.add_argument("--finished", type=int, default=1_000_000, help="history, migration: finished jobs "
                        "(default 1,000,000)")
    parser.add_argument("--live", type=int, default=10_000, help="migration: queued jobs (a tenth of them "
                        "running; default 10,000)")
    parser.add_argument("--settings", default="", help="wal: server settings to add, e.g. 'wal_compression = lz4'")
    parser.add_argument("--raw", type=Path, help="wal: write pg_waldump's per-record statistics of each phase here")
    parser.add_argument("--plans", type=Path, help="history: write the plans of the reads here")
    parser.add_argument("--keep", type=Path, help="instructions: copy each counted backend's callgrind file here "
                        "(DATABASE-N-SESSION.cg, for callgrind_annotate)")
    parser.add_argument("--bindir", help="PostgreSQL server binaries (default: pg_config --bindir)")
    opts = parser.parse_args()
    opts.layouts = opts.layouts.split(",")
    if unknown := [x for x in opts.layouts if x not in LAYOUTS]:
        parser.error(f"unknown layouts: {unknown}; known: {list(LAYOUTS)}")
    if opts.what == "check":
        with throwaway(PrivateCluster, opts.bindir, "pgq-lean-check-") as (cluster, _tmp):
            check(cluster)
    elif opts.what == "wal":
        opts.jobs = opts.jobs or 20_000
        wal(opts)
    elif opts.what == "instructions":
        opts.jobs = opts.jobs or 4000
        if opts.keep:
            opts.keep.mkdir(parents=True, exist_ok=True)
        instructions(opts)
    elif opts.what == "history":
        history(opts)
    elif opts.what == "lock-records":
        with throwaway(PrivateCluster, opts.bindir, "pgq-lean-locks-") as (cluster, _tmp):
            lock_records(cluster)
    else:
        migration(opts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
