"""The SQL API for other services and DBAs: pgq.enqueue(), the views, NOTIFY, comments."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from pgq import JobSpec, JobStatus, Queue, _ops

from .conftest import SQL, expire_lease


def test_sql_enqueue_with_defaults_and_named_arguments(pgq_queue: Queue, db: SQL) -> None:
    [row] = db("SELECT pgq.enqueue('report') AS a, "
               "pgq.enqueue('mail', '{\"to\": \"x\"}', queue => 'mail', priority => 3, "
               "run_at => now() + interval '1 hour', max_attempts => 2) AS b")
    a, b = pgq_queue.get(row["a"]), pgq_queue.get(row["b"])
    assert a is not None and (a.queue, a.payload, a.priority, a.max_attempts) == ("default", {}, 0, 25)
    assert b is not None and (b.queue, b.payload, b.priority, b.max_attempts) == ("mail", {"to": "x"}, 3, 2)
    assert pgq_queue.claim(worker="w", queues=["mail"]) == []  # scheduled an hour out


def test_sql_enqueue_dedupes_like_python(pgq_queue: Queue, db: SQL) -> None:
    [row] = db("SELECT pgq.enqueue('k', dedupe_key => 'x') AS a, pgq.enqueue('k', dedupe_key => 'x') AS b")
    assert row["a"] == row["b"] == pgq_queue.enqueue("k", dedupe_key="x")


def test_sql_enqueue_bad_input_is_refused_by_constraints(db: SQL) -> None:
    import pytest

    with pytest.raises(psycopg.errors.CheckViolation):
        db("SELECT pgq.enqueue('')")


def test_queue_stats_view(pgq_queue: Queue, db: SQL) -> None:
    pgq_queue.enqueue_many([JobSpec("k", queue="a") for _ in range(3)] + [JobSpec("k", queue="b", delay=3600)])
    claims = pgq_queue.claim(worker="w", queues=["a"], limit=2)
    pgq_queue.complete(claims[0])
    expire_lease(db, claims[1].id)
    stats = {r["queue"]: r for r in pgq_queue.stats()}
    a, b = stats["a"], stats["b"]
    assert (a["ready"], a["running"], a["expired_leases"], a["succeeded"], a["succeeded_last_minute"]) == (
        1, 1, 1, 1, 1)
    assert a["oldest_ready_age"] is not None
    assert (b["ready"], b["scheduled"], b["oldest_ready_age"]) == (0, 1, None)
    running = db("SELECT id, claimed_by, lease_expired FROM pgq.running_jobs")
    assert running == [{"id": claims[1].id, "claimed_by": "w", "lease_expired": True}]
    counts = db("SELECT queue, kind, status::text, jobs FROM pgq.job_counts ORDER BY 1, 3")
    assert {(r["queue"], r["status"], r["jobs"]) for r in counts} == {
        ("a", "queued", 1), ("a", "running", 1), ("a", "succeeded", 1), ("b", "queued", 1)}


def _drain_notifies(conn: psycopg.Connection[tuple[object, ...]], quiet: float = 0.3) -> list[tuple[str, str]]:
    got: list[tuple[str, str]] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        batch = list(conn.notifies(timeout=quiet, stop_after=1000))
        if not batch:
            break
        got.extend((n.channel, n.payload) for n in batch)
    return got


def test_notify_once_per_queue_per_transaction_even_for_100k_jobs(pgq_queue: Queue, pgq_dsn: str) -> None:
    with psycopg.connect(pgq_dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgq")
        pgq_queue.enqueue_many([JobSpec("k", queue="q1" if i % 2 else "q2") for i in range(100_000)])
        assert sorted(_drain_notifies(listener)) == [("pgq", "q1"), ("pgq", "q2")]
        with psycopg.connect(pgq_dsn) as tx:  # several enqueues, one transaction: still once per queue
            for _ in range(5):
                pgq_queue.enqueue("k", queue="q3", conn=tx)
            pgq_queue.enqueue("k", queue="q4", conn=tx)
        assert sorted(_drain_notifies(listener)) == [("pgq", "q3"), ("pgq", "q4")]
        [claim] = pgq_queue.claim(worker="w", queues=["q3"])
        pgq_queue.fail(claim, "x", retry_in=0)
        assert _drain_notifies(listener) == []
        assert pgq_queue.get(claim.id) is not None


def test_notify_payload_for_a_huge_queue_name_wakes_everyone(pgq_queue: Queue, pgq_dsn: str) -> None:
    with psycopg.connect(pgq_dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgq")
        pgq_queue.enqueue("k", queue="q" * 9000)
        assert _drain_notifies(listener) == [("pgq", "*")]


def test_every_table_view_and_column_is_commented(db: SQL) -> None:
    missing = db("""
        SELECT c.relname, a.attname
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'pgq'
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        WHERE c.relkind IN ('r', 'p') AND c.relname <> 'alembic_version' AND NOT c.relispartition
          AND col_description(c.oid, a.attnum) IS NULL
        UNION ALL
        SELECT c.relname, NULL FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'pgq'
        WHERE c.relkind IN ('r', 'p', 'v') AND c.relname <> 'alembic_version' AND obj_description(c.oid) IS NULL
    """)
    assert missing == []


def test_claim_reads_the_claim_index_not_the_table(pgq_queue: Queue, pgq_dsn: str, db: SQL) -> None:
    """pgq.claim's statements, planned with a backlog (and a limit defined on another kind): each
    must stop after `limit` rows of jobs_claim_idx instead of reading (and sorting) every queued job.
    Seen through auto_explain's plans of the function's own statements."""
    pgq_queue.set_concurrency_limit("other", 2)
    pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(5000)])
    pgq_queue.complete_many([(c, None) for c in pgq_queue.claim(worker="w", queues=["q"], limit=1000)])
    db("VACUUM ANALYZE pgq.jobs")
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        plans = _log_plans(conn, jit=False)
        conn.execute("SET auto_explain.log_nested_statements = on")
        claimed = _ops.run_sync(conn, _ops.claim(worker="w", queues=["q"], kinds=None, limit=16, lease=60),
                                own_transaction=True)
    assert len(claimed) == 16
    nested = "\n".join(p for p in plans if "pgq.claim" not in p.split("\n", 2)[1])
    # Revision 0033: on the partition of live jobs, pgq.live_jobs, and its indexes.
    assert "using live_jobs_claim_idx on live_jobs" in nested, plans
    assert "Seq Scan on jobs" not in nested and "Seq Scan on live_jobs" not in nested, plans
    assert JobStatus.QUEUED.value == "queued"


@pytest.mark.parametrize("name", ["job_complete", "job_fail", "job_heartbeat", "job_snooze"])
def test_acknowledgements_probe_the_primary_key_not_the_running_index(
    pgq_queue: Queue, pgq_dsn: str, db: SQL, name: str
) -> None:
    """Statistics taken while nothing ran (as after a routine VACUUM ANALYZE) make jobs_running_idx look
    empty; an acknowledgement that read it would visit every entry left by jobs finished since the
    last vacuum, growing slower with each batch. Each acknowledged row must be a probe of jobs_pkey."""
    from pgq import _sql

    pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(20_000)])
    db("VACUUM ANALYZE pgq.jobs")
    claims = pgq_queue.claim(worker="w", queues=["q"], limit=200)
    ids, tokens = [c.id for c in claims], [c.token for c in claims]
    params: dict[str, dict[str, Any]] = {
        "job_complete": {"ids": ids, "tokens": tokens, "results": [None] * 200, "watermarks": [None] * 200,
                         "progress": None},
        "job_fail": {"ids": ids, "tokens": tokens, "errors": ["e"] * 200, "retry_in": [None] * 200,
                     "finals": [False] * 200, "progress": None},
        "job_heartbeat": {"ids": ids, "tokens": tokens, "lease_s": [60.0] * 200, "progress": None},
        "job_snooze": {"ids": ids, "tokens": tokens, "delays": [1.0] * 200, "progress": None},
    }
    # The statement calls a SECURITY DEFINER function (revision 0011): the plans that matter are
    # those of the statements inside it, which auto_explain shows as nested statements.
    with psycopg.connect(pgq_dsn) as conn:
        plans = _log_plans(conn, jit=False)
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute(_sql.query(name).encode(), {**params[name], "lock_timeout": None})
        conn.rollback()
    plan = "\n".join(p for p in plans if "Query Text: -- " not in p)
    assert "Update on live_jobs" in plan, plans  # the live partition itself (revision 0033)
    assert "live_jobs_pkey" in plan, plan
    assert "jobs_running_idx" not in plan, plan
    assert "Seq Scan on jobs" not in plan and "Seq Scan on live_jobs" not in plan, plan


def _log_plans(conn: psycopg.Connection[Any], *, jit: bool = True) -> list[str]:
    """Make the session compile every statement with JIT (thresholds 0; unless `jit` is False) and
    send each statement's plan to the client (auto_explain at LOG, which the client then receives as
    a notice); return the list the plans arrive in. Skips when the server has no JIT (with `jit`) or
    auto_explain may not be loaded."""
    if jit and conn.execute("SELECT pg_jit_available()").fetchone() != (True,):
        pytest.skip("this server has no JIT (built without LLVM, as the embedded one is)")
    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.Error as exc:
        pytest.skip(f"auto_explain cannot be loaded here: {exc}")
    settings = ["jit = on", "jit_above_cost = 0", "jit_inline_above_cost = 0", "jit_optimize_above_cost = 0"]
    for setting in [*(settings if jit else []), "auto_explain.log_min_duration = 0", "client_min_messages = log"]:
        conn.execute(f"SET {setting}".encode())
    plans: list[str] = []
    conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    return plans


def _plans_of(plans: list[str], name: str) -> list[str]:
    return [p for p in plans if f"Query Text: -- {name}:" in p]


def test_pgqs_own_transactions_compile_nothing_with_jit(pgq_queue: Queue, pgq_dsn: str) -> None:
    """The claim's estimated costs grow with the backlog (transaction_guard.sql says why): with
    300,000 queued jobs they passed the thresholds at which a server with JIT compiles a statement,
    and each claim of a worker for all queues spent about 250 ms compiling a plan that runs in 2 ms.
    Here the session compiles every statement it runs, as such a server compiles such a claim. The
    statements of pgq.claim (for all queues, with a concurrency limit) and those pgq runs in
    transactions of its own (a maintenance run) must show no JIT in their plans; the same statement
    run outside them shows it, so the check sees JIT where there is any."""
    from pgq import _sql

    pgq_queue.set_concurrency_limit("limited", 2)
    pgq_queue.enqueue_many([JobSpec(kind, queue=q) for kind in ("k", "limited") for q in ("a", "b")])
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        plans = _log_plans(conn)
        claim_all = _ops.claim(worker="w", queues=None, kinds=None, limit=16, lease=60)
        claimed = _ops.run_sync(conn, claim_all, own_transaction=True)
        assert sorted(c.job.kind for c in claimed) == ["k", "k", "limited", "limited"]
        _ops.run_sync(conn, _ops.rescue_as_leader("rescue"), own_transaction=True)
        # The rescue after the first statement, which applies the setting (it is planned before it
        # runs). The claim is one statement calling pgq.claim, whose estimate does not grow with the
        # backlog; its own statements run with SET jit = off (below).
        own = _plans_of(plans, "job_rescue")
        assert len(own) == 1 and not [p for p in own if "JIT:" in p], own
        plans.clear()
        conn.execute("SET auto_explain.log_nested_statements = on")
        _ops.run_sync(conn, _ops.claim(worker="w", queues=None, kinds=None, limit=16, lease=60),
                      own_transaction=True)
        nested = [p for p in plans if "Query Text: -- job_claim:" not in p]
        assert nested and not [p for p in nested if "JIT:" in p], nested
        plans.clear()
        with conn.transaction():  # the caller's transaction: its settings, not pgq's
            conn.execute(_sql.query("job_rescue"), {"limit": 10})
        [outside] = _plans_of(plans, "job_rescue")
        assert "JIT:" in outside, outside


def test_released_jobs_wake_workers_but_snoozed_ones_do_not(pgq_queue: Queue, pgq_dsn: str) -> None:
    pgq_queue.enqueue_many([JobSpec("k", queue="r"), JobSpec("k", queue="s")])
    released, snoozed = sorted(pgq_queue.claim(worker="w", limit=2), key=lambda c: c.job.queue)
    with psycopg.connect(pgq_dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgq")
        pgq_queue.snooze(snoozed, 60)
        pgq_queue.release([released])
        assert _drain_notifies(listener) == [("pgq", "r")]
