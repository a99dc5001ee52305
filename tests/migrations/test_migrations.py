"""Migrations against a real PostgreSQL: what `pgq.migrate` creates, records, prints and reverts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pgq
from pgq import migrate
from pgq._schema import schema_file
from pgq.errors import NotMigrated
from pgq.models import JobStatus

# Everything that makes up pgq's schema, by name (never by OID), in a stable order: two databases
# with equal snapshots have equal schemas.
SNAPSHOT_QUERIES: dict[str, str] = {
    "schema": """
        SELECT n.nspname, obj_description(n.oid, 'pg_namespace')
        FROM pg_namespace n WHERE n.nspname = 'pgq'
    """,
    "relations": """
        SELECT c.relname, c.relkind, c.relpersistence, obj_description(c.oid, 'pg_class')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'pgq' ORDER BY c.relname
    """,
    "columns": """
        SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               a.attidentity, a.attgenerated, pg_get_expr(d.adbin, d.adrelid),
               col_description(c.oid, a.attnum)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = 'pgq' AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY c.relname, a.attnum
    """,
    "indexes": """
        SELECT i.tablename, i.indexname, i.indexdef
        FROM pg_indexes i WHERE i.schemaname = 'pgq' ORDER BY i.indexname
    """,
    "constraints": """
        SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)
        FROM pg_constraint k
        JOIN pg_class c ON c.oid = k.conrelid
        JOIN pg_namespace n ON n.oid = k.connamespace
        WHERE n.nspname = 'pgq' ORDER BY c.relname, k.conname
    """,
    "sequences": """
        SELECT s.sequencename, s.data_type::text, s.start_value, s.increment_by, s.cycle
        FROM pg_sequences s WHERE s.schemaname = 'pgq' ORDER BY s.sequencename
    """,
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid),
               obj_description(p.oid, 'pg_proc')
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'pgq' ORDER BY 1, 2
    """,
    "views": """
        SELECT v.viewname, pg_get_viewdef(format('%I.%I', v.schemaname, v.viewname)::regclass)
        FROM pg_views v WHERE v.schemaname = 'pgq' ORDER BY v.viewname
    """,
    "types": """
        SELECT t.typname, t.typtype, obj_description(t.oid, 'pg_type'),
               array(SELECT e.enumlabel FROM pg_enum e WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder)
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = 'pgq' ORDER BY t.typname
    """,
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'pgq' AND NOT t.tgisinternal ORDER BY 1, 2
    """,
}

# Objects of every kind in `public`: pgq must create none of them.
PUBLIC_OBJECTS = """
    SELECT 'relation ' || c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace
    UNION ALL SELECT 'function ' || p.proname FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace
    UNION ALL SELECT 'type ' || t.typname FROM pg_type t WHERE t.typnamespace = 'public'::regnamespace
"""


def schema_snapshot(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    """Catalog dump of schema `pgq` in the database at `dsn` (comments included)."""
    with psycopg.connect(dsn) as conn:
        return {name: conn.execute(query).fetchall() for name, query in SNAPSHOT_QUERIES.items()}


def query(dsn: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of one statement (none for a command), over a connection of its own."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params or None)
        return cur.fetchall() if cur.description else []


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll `condition` until it holds; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout} s")
        time.sleep(0.01)


def test_upgrade_on_empty_db_creates_everything_in_schema_pgq_and_nothing_in_public(pgq_empty_dsn: str) -> None:
    assert migrate.current_revision(pgq_empty_dsn) is None

    migrate.upgrade(pgq_empty_dsn)

    snapshot = schema_snapshot(pgq_empty_dsn)
    relations = {row[0]: row[1] for row in snapshot["relations"]}
    for table in ("key_watermarks", "concurrency_limits", "alembic_version"):
        assert relations[table] == "r"
    # Revision 0033: pgq.jobs is partitioned, live jobs apart from finished ones by day.
    assert (relations["jobs"], relations["live_jobs"], relations["finished_jobs"]) == ("p", "r", "p")
    for view in ("queue_stats", "job_counts", "running_jobs"):
        assert relations[view] == "v"
    assert {row[0] for row in snapshot["functions"]} >= {"enqueue", "enqueue_many", "jobs_guard_admin_transition"}
    assert ("job_status", "e") in {row[:2] for row in snapshot["types"]}
    assert query(pgq_empty_dsn, PUBLIC_OBJECTS) == []
    assert migrate.current_revision(pgq_empty_dsn) == migrate.head_revision()


def test_upgrade_records_revision_in_pgq_alembic_version_and_leaves_host_app_history_alone(
    pgq_empty_dsn: str,
) -> None:
    with psycopg.connect(pgq_empty_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.alembic_version (version_num varchar(32) PRIMARY KEY)")
        conn.execute("INSERT INTO public.alembic_version VALUES ('hostapp_42')")

    migrate.upgrade(pgq_empty_dsn)

    assert query(pgq_empty_dsn, "SELECT version_num FROM public.alembic_version") == [("hostapp_42",)]
    assert query(pgq_empty_dsn, "SELECT version_num FROM pgq.alembic_version") == [(migrate.head_revision(),)]
    assert migrate.current_revision(pgq_empty_dsn) == migrate.head_revision()


def test_upgrade_at_head_changes_nothing(pgq_dsn: str) -> None:
    before = schema_snapshot(pgq_dsn)

    migrate.upgrade(pgq_dsn)

    assert schema_snapshot(pgq_dsn) == before
    assert query(pgq_dsn, "SELECT version_num FROM pgq.alembic_version") == [(migrate.head_revision(),)]


def test_downgrade_to_base_then_upgrade_rebuilds_identical_schema(pgq_empty_dsn: str) -> None:
    migrate.upgrade(pgq_empty_dsn)
    first = schema_snapshot(pgq_empty_dsn)

    migrate.downgrade(pgq_empty_dsn, "base")

    assert migrate.current_revision(pgq_empty_dsn) is None
    # Only the schema and the (empty) version table stay behind.
    remaining = schema_snapshot(pgq_empty_dsn)
    assert [row[0] for row in remaining["relations"]] == ["alembic_version", "alembic_version_pkc"]
    assert remaining["functions"] == remaining["views"] == []
    assert {row[0] for row in remaining["types"]} == {"alembic_version", "_alembic_version"}

    migrate.upgrade(pgq_empty_dsn)

    assert schema_snapshot(pgq_empty_dsn) == first
    assert migrate.current_revision(pgq_empty_dsn) == migrate.head_revision()


def test_upgrade_executes_ddl_verbatim(pgq_empty_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Placeholder look-alikes must reach Postgres untouched, online and in the --sql script.
    tricky = "SELECT '%s %(name)s :name 100% a::b $1'::text"
    function = f"CREATE FUNCTION pgq.tricky() RETURNS text LANGUAGE sql AS $fn$ {tricky} $fn$;"
    real_schema_file = schema_file

    def with_tricky_function(name: str) -> str:
        if not name.startswith("0001_"):  # one revision creates it, the same one drops it
            return real_schema_file(name)
        extra = function if name.endswith(".up.sql") else "DROP FUNCTION pgq.tricky();"
        return real_schema_file(name) + "\n" + extra + "\n"

    monkeypatch.setattr(migrate, "schema_file", with_tricky_function)

    assert function in migrate.upgrade_sql()
    migrate.upgrade(pgq_empty_dsn)
    assert query(pgq_empty_dsn, "SELECT pgq.tricky()") == [("%s %(name)s :name 100% a::b $1",)]
    migrate.downgrade(pgq_empty_dsn, "base")
    assert query(pgq_empty_dsn, "SELECT to_regprocedure('pgq.tricky()')") == [(None,)]


def test_upgrade_to_0001_creates_its_function_bodies_verbatim(pgq_empty_dsn: str) -> None:
    migrate.upgrade(pgq_empty_dsn, "0001")

    up_sql = schema_file("0001_initial.up.sql")
    bodies = query(pgq_empty_dsn, "SELECT p.prosrc FROM pg_proc p WHERE p.pronamespace = 'pgq'::regnamespace")
    assert len(bodies) == 2
    for (body,) in bodies:
        assert f"$fn${body}$fn$" in up_sql


def test_upgrade_sql_runs_nothing(pgq_empty_dsn: str) -> None:
    script = migrate.upgrade_sql(pgq_empty_dsn)

    assert "CREATE TABLE pgq.jobs (" in script
    assert "CREATE TABLE pgq.alembic_version" in script
    assert script.index("pg_advisory_xact_lock") < script.index("CREATE SCHEMA IF NOT EXISTS pgq")
    assert query(pgq_empty_dsn, "SELECT to_regnamespace('pgq')") == [(None,)]
    assert script == migrate.upgrade_sql(None)


def test_upgrade_sql_at_head_is_only_a_comment(pgq_dsn: str) -> None:
    script = migrate.upgrade_sql(pgq_dsn)

    assert all(line.startswith("--") for line in script.splitlines())
    assert migrate.head_revision() in script


def test_upgrade_sql_script_builds_the_same_schema_as_upgrade(pgq_empty_dsn: str, pgq_dsn: str) -> None:
    # pgq_dsn was migrated with upgrade(); pgq_empty_dsn gets the script, as a DBA would run it.
    with psycopg.connect(pgq_empty_dsn, autocommit=True) as conn:
        conn.execute(migrate.upgrade_sql(pgq_empty_dsn))

    assert schema_snapshot(pgq_empty_dsn) == schema_snapshot(pgq_dsn)
    assert migrate.current_revision(pgq_empty_dsn) == migrate.head_revision()


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not on PATH")
def test_upgrade_sql_script_runs_in_psql(pgq_empty_dsn: str, pgq_dsn: str) -> None:
    subprocess.run(
        ["psql", "--no-psqlrc", "-q", "-v", "ON_ERROR_STOP=1", "-d", pgq_empty_dsn, "-f", "-"],
        input=migrate.upgrade_sql(),
        text=True,
        check=True,
        capture_output=True,
        timeout=60,
    )

    assert schema_snapshot(pgq_empty_dsn) == schema_snapshot(pgq_dsn)


def test_every_table_column_view_function_and_type_has_a_comment(pgq_dsn: str) -> None:
    snapshot = schema_snapshot(pgq_dsn)
    # alembic creates its version table; pgq owns the rest.
    owned = [row for row in snapshot["relations"] if row[0] != "alembic_version"]
    # The partitions of pgq.jobs (revision 0033) each say what they hold; their columns are pgq.jobs's.
    partitions = {row[0] for row in query(pgq_dsn, "SELECT relname FROM pg_class "
                                                   "WHERE relispartition AND relnamespace = 'pgq'::regnamespace")}
    assert {"live_jobs", "finished_jobs", "finished_jobs_before_0033", "finished_jobs_default"} <= partitions
    tables = {row[0] for row in owned if row[1] in ("r", "p")} - partitions
    uncommented = [("relation", row[0]) for row in owned if row[1] in ("r", "p", "v", "m") and not row[3]]
    uncommented += [("column", f"{row[0]}.{row[2]}") for row in snapshot["columns"] if row[0] in tables and not row[8]]
    uncommented += [("function", row[0]) for row in snapshot["functions"] if not row[3]]
    uncommented += [("type", row[0]) for row in snapshot["types"] if row[1] == "e" and not row[2]]
    assert tables == {"jobs", "key_watermarks", "concurrency_limits", "paused_queues", "rate_limits",
                      "rate_limit_starts", "job_dependencies", "awaited_jobs", "workers", "job_audit",
                      "group_limits", "group_rate_starts", "key_raises", "sequence_tails", "key_finishes",
                      "leaders", "claim_secret", "unique_locks", "role_scopes", "control_audit", "finished_counts",
                      "finished_counts_deleted", "finished_counts_state", "finished_counts_hourly"}
    assert uncommented == []
    assert snapshot["schema"][0][1]


def test_concurrent_upgrades_in_threads_both_succeed(pgq_empty_dsn: str) -> None:
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            migrate.upgrade(pgq_empty_dsn)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert query(pgq_empty_dsn, "SELECT version_num FROM pgq.alembic_version") == [(migrate.head_revision(),)]
    assert query(pgq_empty_dsn, "SELECT count(*) FROM pg_class WHERE relname = 'jobs'") == [(1,)]


def test_concurrent_upgrades_in_processes_both_succeed(pgq_empty_dsn: str, pgq_dsn: str) -> None:
    # Separate processes share no Python lock: only the advisory lock keeps them apart.
    code = "import sys, pgq.migrate; pgq.migrate.upgrade(sys.argv[1])"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code, pgq_empty_dsn],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=120) for process in processes]

    assert [process.returncode for process in processes] == [0, 0], outputs
    assert [out for out, _ in outputs] == ["", ""]  # nothing on stdout
    assert schema_snapshot(pgq_empty_dsn) == schema_snapshot(pgq_dsn)
    assert query(pgq_empty_dsn, "SELECT version_num FROM pgq.alembic_version") == [(migrate.head_revision(),)]


def test_upgrade_waits_for_the_migration_lock(pgq_empty_dsn: str) -> None:
    done = threading.Event()

    def run() -> None:
        migrate.upgrade(pgq_empty_dsn)
        done.set()

    with psycopg.connect(pgq_empty_dsn) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (migrate.MIGRATION_LOCK_KEY,))
        thread = threading.Thread(target=run)
        thread.start()

        # The upgrade's backend queues behind our lock and creates nothing meanwhile.
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        wait_until(lambda: query(pgq_empty_dsn, waiting) == [(1,)])
        assert not done.is_set()
        assert query(pgq_empty_dsn, "SELECT to_regnamespace('pgq')") == [(None,)]

        holder.rollback()  # releases the lock
        thread.join(timeout=60)

    assert done.is_set()
    assert migrate.current_revision(pgq_empty_dsn) == migrate.head_revision()


def test_failed_upgrade_rolls_back_everything(pgq_empty_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real_schema_file = schema_file
    monkeypatch.setattr(migrate, "schema_file", lambda name: real_schema_file(name) + "\nSELECT 1/0;\n")

    with pytest.raises(psycopg.errors.DivisionByZero):
        migrate.upgrade(pgq_empty_dsn)

    assert query(pgq_empty_dsn, "SELECT to_regnamespace('pgq')") == [(None,)]


def test_ensure_migrated_raises_not_migrated_on_empty_db(pgq_empty_dsn: str) -> None:
    with psycopg.connect(pgq_empty_dsn) as conn:
        with pytest.raises(NotMigrated, match="missing"):
            migrate.ensure_migrated(conn)
        # The caller's connection is left as it was found: usable, no transaction open.
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_ensure_migrated_raises_not_migrated_after_downgrade(pgq_dsn: str) -> None:
    migrate.downgrade(pgq_dsn, "base")

    with psycopg.connect(pgq_dsn) as conn, pytest.raises(NotMigrated):
        migrate.ensure_migrated(conn)


def test_ensure_migrated_raises_not_migrated_on_unknown_revision(pgq_dsn: str) -> None:
    with psycopg.connect(pgq_dsn) as conn:
        conn.execute("UPDATE pgq.alembic_version SET version_num = '9999'")
        conn.commit()
        with pytest.raises(NotMigrated, match="9999"):
            migrate.ensure_migrated(conn)


def test_ensure_migrated_passes_at_head_inside_an_open_transaction(pgq_dsn: str) -> None:
    with psycopg.connect(pgq_dsn) as conn:
        conn.execute("SELECT 1")
        migrate.ensure_migrated(conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        migrate.ensure_migrated(conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_head_revision_read_without_alembic_equals_alembics_own_head() -> None:
    """`head_revision` parses the revision files itself (workers start without importing alembic);
    it must agree with alembic's reading of the same files."""
    from alembic.script import ScriptDirectory

    alembic_head = ScriptDirectory.from_config(migrate._config(None)).get_current_head()
    assert migrate.head_revision() == alembic_head


def test_checking_the_schema_does_not_import_alembic(pgq_dsn: str) -> None:
    """A worker or CLI command that only checks the schema must not pay for importing alembic."""
    code = (
        "import sys, psycopg; from pgq import migrate; "
        f"conn = psycopg.connect({pgq_dsn!r}, autocommit=True); migrate.ensure_migrated(conn); "
        "print('alembic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_0003_sets_churn_storage_parameters_and_its_downgrade_removes_everything_it_added(pgq_dsn: str) -> None:
    # Since revision 0033 the jobs that churn are in pgq.live_jobs, which carries 0003's settings.
    reloptions = "SELECT reloptions FROM pg_class WHERE oid = coalesce(to_regclass('pgq.live_jobs'), 'pgq.jobs')"
    added = """
        SELECT c.relname FROM pg_class c
        WHERE c.relnamespace = 'pgq'::regnamespace
          AND c.relname IN ('queue_backlog', 'stuck_jobs', 'failing_jobs', 'workers',
                            'jobs_failed_idx', 'jobs_retrying_idx')
        ORDER BY 1
    """
    [(options,)] = query(pgq_dsn, reloptions)
    assert {"fillfactor=50", "autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=10000",
            "autovacuum_analyze_threshold=5000", "autovacuum_vacuum_cost_delay=1"} <= set(options)
    assert len(query(pgq_dsn, added)) == 6

    migrate.downgrade(pgq_dsn, "0002")

    assert query(pgq_dsn, reloptions) == [(None,)]
    assert query(pgq_dsn, added) == []
    migrate.upgrade(pgq_dsn)
    assert query(pgq_dsn, reloptions) == [(options,)]


def test_0004_adds_run_control_and_its_downgrade_removes_it(pgq_dsn: str) -> None:
    added = """
        SELECT 'column' FROM pg_attribute WHERE attrelid = 'pgq.jobs'::regclass AND attname = 'progress'
        UNION ALL SELECT 'trigger' FROM pg_trigger WHERE tgname = 'jobs_notify_cancel'
        UNION ALL SELECT 'function ' || proname FROM pg_proc
                  WHERE pronamespace = 'pgq'::regnamespace AND proname IN ('cancel', 'jobs_notify_cancel')
        UNION ALL SELECT 'view column' FROM pg_attribute
                  WHERE attrelid = 'pgq.running_jobs'::regclass AND attname = 'progress'
        ORDER BY 1
    """
    everything = [("column",), ("function cancel",), ("function jobs_notify_cancel",), ("trigger",),
                  ("view column",)]
    # Since revision 0033 the functions that cancel a running job notify its worker themselves, and
    # since 0034 a trigger of the same name (per statement) tells the worker of a job cancelled by an
    # UPDATE of pgq.jobs.
    assert query(pgq_dsn, added) == everything

    migrate.downgrade(pgq_dsn, "0003")

    assert query(pgq_dsn, added) == []
    assert query(pgq_dsn, "SELECT count(*) FROM pgq.running_jobs") == [(0,)]  # the view still works
    migrate.upgrade(pgq_dsn)
    assert query(pgq_dsn, added) == everything


def test_0005_adds_queue_pausing_and_its_downgrade_removes_it(pgq_dsn: str) -> None:
    added = """
        SELECT 'table' FROM pg_class WHERE oid = to_regclass('pgq.paused_queues')
        UNION ALL SELECT 'function ' || proname FROM pg_proc
                  WHERE pronamespace = 'pgq'::regnamespace AND proname IN ('pause', 'resume')
        UNION ALL SELECT 'view column' FROM pg_attribute
                  WHERE attrelid = 'pgq.queue_stats'::regclass AND attname = 'paused'
        ORDER BY 1
    """
    everything = [("function pause",), ("function resume",), ("table",), ("view column",)]
    assert query(pgq_dsn, added) == everything
    query(pgq_dsn, "SELECT pgq.pause('q')")

    migrate.downgrade(pgq_dsn, "0004")

    assert query(pgq_dsn, added) == []
    assert query(pgq_dsn, "SELECT count(*) FROM pgq.queue_stats") == [(0,)]
    migrate.upgrade(pgq_dsn)
    assert query(pgq_dsn, added) == everything


def test_0006_adds_rate_limits_and_its_downgrade_removes_them(pgq_dsn: str) -> None:
    added = ("SELECT relname FROM pg_class WHERE relnamespace = 'pgq'::regnamespace "
             "AND relname LIKE 'rate_limit%%' ORDER BY 1")
    everything = [("rate_limit_starts",), ("rate_limit_starts_kind_at_idx",), ("rate_limits",),
                  ("rate_limits_pkey",)]
    assert query(pgq_dsn, added) == everything

    migrate.downgrade(pgq_dsn, "0005")

    assert query(pgq_dsn, added) == []
    migrate.upgrade(pgq_dsn)
    assert query(pgq_dsn, added) == everything


def test_0007_adds_dependencies_and_its_downgrade_refuses_while_jobs_wait(pgq_dsn: str) -> None:
    added = ("SELECT relname FROM pg_class WHERE relnamespace = 'pgq'::regnamespace "
             "AND relname IN ('job_dependencies', 'jobs_waiting_idx', 'waiting_jobs') ORDER BY 1")
    enqueue_signature = ("SELECT pg_get_function_identity_arguments(p.oid) FROM pg_proc p "
                         "WHERE p.pronamespace = 'pgq'::regnamespace AND p.proname = 'enqueue'")
    assert query(pgq_dsn, added) == [("job_dependencies",), ("jobs_waiting_idx",), ("waiting_jobs",)]
    parent = query(pgq_dsn, "SELECT pgq.enqueue('parent')")[0][0]
    child = query(pgq_dsn, "SELECT pgq.enqueue('child', depends_on => ARRAY[%s]::bigint[])", parent)[0][0]
    assert query(pgq_dsn, "SELECT status::text FROM pgq.jobs WHERE id = %s", child) == [("waiting",)]
    query(pgq_dsn, "CREATE ROLE pgq_test_grantee NOLOGIN")
    try:
        query(pgq_dsn, "GRANT EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, "
                       "bigint, integer, bigint[], text, text, text, text, interval, text, interval) "
                       "TO pgq_test_grantee")  # 0018's signature

        with pytest.raises(psycopg.errors.RaiseException, match="1 jobs wait for parents"):
            migrate.downgrade(pgq_dsn, "0006")
        # Nothing changed.
        assert query(pgq_dsn, added) == [("job_dependencies",), ("jobs_waiting_idx",), ("waiting_jobs",)]

        query(pgq_dsn, "SELECT pgq.cancel(%s)", child)
        migrate.downgrade(pgq_dsn, "0006")
        assert query(pgq_dsn, added) == []
        assert query(pgq_dsn, enqueue_signature) == [
            ("kind text, payload jsonb, queue text, priority integer, run_at timestamp with time zone, "
             "dedupe_key text, watermark bigint, max_attempts integer",)]
        assert query(pgq_dsn, "SELECT has_function_privilege('pgq_test_grantee', 'pgq.enqueue(text, jsonb, "
                              "text, integer, timestamptz, text, bigint, integer)', 'EXECUTE')") == [(True,)]
        migrate.upgrade(pgq_dsn)  # again: the enum value 'waiting' stayed, and is not added twice
        assert query(pgq_dsn, added) == [("job_dependencies",), ("jobs_waiting_idx",), ("waiting_jobs",)]
        assert query(pgq_dsn, "SELECT has_function_privilege('pgq_test_grantee', 'pgq.enqueue(text, jsonb, "
                              "text, integer, timestamptz, text, bigint, integer, bigint[], text, text, text, text, "
                              "interval, text, interval)', 'EXECUTE')"
                     ) == [(True,)]
    finally:
        query(pgq_dsn, "DROP OWNED BY pgq_test_grantee")
        query(pgq_dsn, "DROP ROLE pgq_test_grantee")


def test_0009_locks_cascades_up_front_and_its_downgrade_restores_0008s_trigger(pgq_dsn: str) -> None:
    # The release's body: the trigger's until revision 0012, which moved it to pgq.release_children.
    body = ("SELECT bool_or(prosrc LIKE '%%pgq.cascade_locked%%'), bool_or(prosrc LIKE '%%WITH RECURSIVE%%') "
            "FROM pg_proc WHERE pronamespace = 'pgq'::regnamespace "
            "AND proname IN ('jobs_release_dependents', 'release_children')")
    assert query(pgq_dsn, body) == [(True, True)]

    def cascade() -> list[tuple[Any, ...]]:
        parent = query(pgq_dsn, "SELECT pgq.enqueue('parent')")[0][0]
        child = query(pgq_dsn, "SELECT pgq.enqueue('child', depends_on => ARRAY[%s]::bigint[])", parent)[0][0]
        grandchild = query(pgq_dsn, "SELECT pgq.enqueue('child', depends_on => ARRAY[%s]::bigint[])", child)[0][0]
        query(pgq_dsn, "SELECT pgq.cancel(%s)", parent)
        return query(pgq_dsn, "SELECT status::text, last_error FROM pgq.jobs WHERE id IN (%s, %s) ORDER BY id",
                     child, grandchild)

    assert [s for s, _ in cascade()] == ["cancelled", "cancelled"]

    migrate.downgrade(pgq_dsn, "0008")

    assert query(pgq_dsn, body) == [(False, False)]
    assert query(pgq_dsn, "SELECT prosrc FROM pg_proc WHERE pronamespace = 'pgq'::regnamespace "
                          "AND proname = 'jobs_release_dependents'")[0][0] in schema_file("0008_workflow_locks.up.sql")
    assert [s for s, _ in cascade()] == ["cancelled", "cancelled"]
    migrate.upgrade(pgq_dsn)
    assert query(pgq_dsn, body) == [(True, True)]


def test_0010_adds_the_reserving_claim_and_its_downgrade_restores_0009s_schema(pgq_dsn: str) -> None:
    """Revision 0010 adds pgq.claim, pgq.limits_changed, the `limited` mark and its index, and counts
    enqueue times from the statement; its downgrade removes them and puts 0009's enqueue bodies and
    jobs_claim_idx back, with jobs queued before and after it still claimable."""
    objects = ("SELECT (SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgq'::regnamespace "
               "        AND proname IN ('claim', 'limits_changed')),"
               "       (SELECT count(*) FROM pg_attribute WHERE attrelid = 'pgq.jobs'::regclass "
               "        AND attname = 'limited' AND NOT attisdropped),"
               "       (SELECT count(*) FROM pg_class WHERE relname = 'jobs_claim_limited_idx'),"
               "       (SELECT pg_get_indexdef('pgq.jobs_claim_idx'::regclass) LIKE '%%(queue, limited, priority%%'),"
               "       (SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'pgq.jobs'::regclass "
               "        AND adnum = (SELECT attnum FROM pg_attribute WHERE attrelid = 'pgq.jobs'::regclass "
               "                     AND attname = 'run_at'))")
    assert query(pgq_dsn, objects) == [(2, 1, 1, True, "statement_timestamp()")]
    query(pgq_dsn, "SELECT pgq.enqueue('k')")
    query(pgq_dsn, "INSERT INTO pgq.concurrency_limits (kind, max_running) VALUES ('lim', 1)")
    query(pgq_dsn, "SELECT pgq.enqueue('lim')")

    migrate.downgrade(pgq_dsn, "0009")

    assert query(pgq_dsn, objects) == [(0, 0, 0, False, "now()")]
    em = query(pgq_dsn, "SELECT prosrc FROM pg_proc WHERE pronamespace = 'pgq'::regnamespace "
                        "AND proname = 'enqueue_many'")[0][0]
    assert em in schema_file("0005_queue_control.up.sql") and "statement_timestamp" not in em
    query(pgq_dsn, "SELECT pgq.enqueue('k')")
    migrate.upgrade(pgq_dsn)
    assert query(pgq_dsn, objects) == [(2, 1, 1, True, "statement_timestamp()")]
    # The limited kind's job was marked again by the upgrade; all three are claimable.
    assert query(pgq_dsn, "SELECT kind, limited FROM pgq.jobs ORDER BY id") == [
        ("k", False), ("lim", True), ("k", False)]
    claimed = query(pgq_dsn, "SELECT kind FROM pgq.claim(NULL, NULL, 10, 60, 'w') ORDER BY id")
    assert claimed == [("k",), ("lim",), ("k",)]


WORKER_FUNCTIONS = ["complete", "complete_skip", "error_set", "fail", "fail_skip", "heartbeat", "heartbeat_skip",
                    "rescue", "snooze", "snooze_skip"]


def test_0011_adds_the_worker_functions_as_definers_and_its_downgrade_removes_them(pgq_dsn: str) -> None:
    functions = ("SELECT proname, prosecdef, proconfig, has_function_privilege('public', oid, 'EXECUTE') "
                 "FROM pg_proc WHERE pronamespace = 'pgq'::regnamespace AND proname = ANY(%s) ORDER BY 1")
    found = query(pgq_dsn, functions, WORKER_FUNCTIONS)
    assert found == [(name, True, ["search_path=pg_catalog, pg_temp"], False) for name in WORKER_FUNCTIONS]

    migrate.downgrade(pgq_dsn, "0010")

    assert query(pgq_dsn, functions, WORKER_FUNCTIONS) == []
    migrate.upgrade(pgq_dsn)
    assert query(pgq_dsn, functions, WORKER_FUNCTIONS) == found


def test_servers_older_than_postgresql_14_are_refused_naming_their_version() -> None:
    from pgq.errors import PgqError

    with pytest.raises(PgqError, match=r"needs PostgreSQL 14 or newer; this server is 13\.16"):
        migrate.check_server_version(130016)
    migrate.check_server_version(140000)
    migrate.check_server_version(180006)


def test_0014_adds_group_keys_and_limits_and_its_downgrade_restores_0013s_schema(pgq_dsn: str) -> None:
    """Revision 0014 adds jobs.group_key, pgq.group_limits and the walking claim, with new signatures
    of the enqueue functions; its downgrade removes them and puts the former functions back, their
    grants carried both ways, with jobs enqueued on either side still claimable."""
    objects = ("SELECT (SELECT count(*) FROM pg_attribute WHERE attrelid = 'pgq.jobs'::regclass "
               "        AND attname = 'group_key' AND NOT attisdropped),"
               "       to_regclass('pgq.group_limits') IS NOT NULL,"
               "       to_regclass('pgq.jobs_claim_group_idx') IS NOT NULL,"
               "       (SELECT array_agg(pronargs ORDER BY proname) FROM pg_proc "
               "        WHERE pronamespace = 'pgq'::regnamespace "
               "          AND proname IN ('enqueue', 'enqueue_after', 'enqueue_many', 'claim_group_heads'))")
    assert query(pgq_dsn, objects) == [(1, True, True, [7, 16, 13, 10])]  # 0021's signatures
    query(pgq_dsn, "CREATE ROLE pgq_t_0014_granted")
    query(pgq_dsn, "GRANT EXECUTE ON FUNCTION pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], "
                   "double precision[], text[], bigint[], integer[], text[]) TO pgq_t_0014_granted")
    granted = ("SELECT has_function_privilege('pgq_t_0014_granted', p.oid, 'EXECUTE') FROM pg_proc p "
               "WHERE p.pronamespace = 'pgq'::regnamespace AND p.proname = 'enqueue_many'")
    query(pgq_dsn, "SELECT pgq.enqueue('k', group_key => 'g')")
    query(pgq_dsn, "SELECT pgq.enqueue('k')")
    try:
        migrate.downgrade(pgq_dsn, "0013")

        assert query(pgq_dsn, objects) == [(0, False, False, [10, 10, 9])]
        assert query(pgq_dsn, granted) == [(True,)]
        em = query(pgq_dsn, "SELECT prosrc FROM pg_proc WHERE pronamespace = 'pgq'::regnamespace "
                            "AND proname = 'enqueue_many'")[0][0]
        assert em in schema_file("0010_scaling_claim.up.sql")
        query(pgq_dsn, "SELECT pgq.enqueue('k')")
        migrate.upgrade(pgq_dsn)
        assert query(pgq_dsn, objects) == [(1, True, True, [7, 16, 13, 10])]  # 0021's signatures
        assert query(pgq_dsn, granted) == [(True,)]
        claimed = query(pgq_dsn, "SELECT kind, group_key FROM pgq.claim(NULL, NULL, 10, 60, 'w') ORDER BY id")
        assert claimed == [("k", None)] * 3  # the grouped job's key went with the downgrade
    finally:
        query(pgq_dsn, "DROP OWNED BY pgq_t_0014_granted")
        query(pgq_dsn, "DROP ROLE pgq_t_0014_granted")


def test_0015_adds_the_trace_context_and_its_downgrade_removes_it(pgq_dsn: str) -> None:
    column = ("SELECT format_type(atttypid, atttypmod), attnotnull FROM pg_attribute "
              "WHERE attrelid = 'pgq.jobs'::regclass AND attname = 'trace_context' AND NOT attisdropped")
    setter = ("SELECT prosecdef, proconfig, has_function_privilege('public', oid, 'EXECUTE') FROM pg_proc "
              "WHERE pronamespace = 'pgq'::regnamespace AND proname = 'trace_context_set'")
    assert query(pgq_dsn, column) == [("jsonb", False)]
    assert query(pgq_dsn, setter) == [(True, ["search_path=pg_catalog, pg_temp"], False)]
    with pgq.Queue(pgq_dsn) as queue:
        queue.enqueue("k")

    migrate.downgrade(pgq_dsn, "0014")

    assert query(pgq_dsn, column) == [] and query(pgq_dsn, setter) == []
    assert query(pgq_dsn, "SELECT count(*) FROM pgq.jobs") == [(1,)]  # the jobs stay
    migrate.upgrade(pgq_dsn)
    assert query(pgq_dsn, column) == [("jsonb", False)] and len(query(pgq_dsn, setter)) == 1


def test_0016_adds_key_raises_and_its_downgrade_folds_them_and_restores_the_former_functions(pgq_dsn: str) -> None:
    """Revision 0016 adds pgq.key_raises and the enqueue, claim, completions and settle that use it;
    its downgrade folds the pending raises into the jobs (none lost) and puts back revision 0014's
    enqueue and claim, 0011's completions and 0012's settle, verbatim."""
    objects = ("SELECT to_regclass('pgq.key_raises') IS NOT NULL, "
               "       (SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgq'::regnamespace "
               "        AND proname IN ('settle_raises', 'key_raised'))")
    assert query(pgq_dsn, objects) == [(True, 2)]
    with pgq.Queue(pgq_dsn) as queue:
        done = queue.enqueue("k", dedupe_key="done", watermark=1)
        (claim,) = queue.claim(worker="w")
        assert queue.complete(claim) is JobStatus.SUCCEEDED
        running = queue.enqueue("k", dedupe_key="running", watermark=1)
        (claim,) = queue.claim(worker="w")
        queued = queue.enqueue("k", dedupe_key="queued", watermark=1)
        assert queue.enqueue("k", dedupe_key="running", watermark=5) == running
        assert queue.enqueue("k", dedupe_key="queued", watermark=4) == queued
    # A raise the completion of `done` did not see (as if committed after it).
    query(pgq_dsn, "INSERT INTO pgq.key_raises (queue, dedupe_key, watermark, job_id, kind, payload, priority, "
                   "run_at, max_attempts) VALUES ('default', 'done', 7, %s, 'k', '{}', 0, now(), 25)", done)
    assert query(pgq_dsn, "SELECT count(*) FROM pgq.key_raises") == [(3,)]

    migrate.downgrade(pgq_dsn, "0015")

    assert query(pgq_dsn, "SELECT to_regclass('pgq.key_raises') IS NULL") == [(True,)]
    sources = {name: query(pgq_dsn, "SELECT prosrc FROM pg_proc WHERE pronamespace = 'pgq'::regnamespace "
                                    "AND proname = %s", name)[0][0]
               for name in ("enqueue_many", "claim", "complete_core", "complete_skip_core", "settle")}
    assert sources["enqueue_many"] in schema_file("0014_fairness.up.sql")
    assert sources["claim"] in schema_file("0014_fairness.up.sql")
    assert sources["complete_core"] in schema_file("0011_worker_functions.up.sql")
    assert sources["complete_skip_core"] in schema_file("0011_worker_functions.up.sql")
    assert sources["settle"] in schema_file("0012_producer_locks.up.sql")
    # No raise lost: folded into the active jobs, the one after a finish enqueued as a new run.
    active = query(pgq_dsn, "SELECT dedupe_key, status::text, input_watermark FROM pgq.jobs "
                            "WHERE status IN ('queued', 'running') ORDER BY 1")
    assert active == [("done", "queued", 7), ("queued", "queued", 4), ("running", "running", 5)]
    with pgq.Queue(pgq_dsn) as queue:
        assert queue.complete(claim) is JobStatus.QUEUED  # processed 1 of 5: runs again
    migrate.upgrade(pgq_dsn)
    assert query(pgq_dsn, objects) == [(True, 2)]


def test_0017_adds_sequences_and_its_downgrade_refuses_while_jobs_wait_on_one(pgq_dsn: str) -> None:
    """Revision 0017 adds jobs.sequence_key, the sequence edges and pgq.sequence_tails, with new
    signatures of pgq.enqueue and pgq.enqueue_after and the key in pgq.claim's result; its downgrade
    refuses while a job waits on its sequence, and otherwise puts back the replaced functions verbatim,
    their grants carried both ways."""
    objects = ("SELECT (SELECT count(*) FROM pg_attribute WHERE attrelid = 'pgq.jobs'::regclass "
               "        AND attname = 'sequence_key' AND NOT attisdropped),"
               "       (SELECT count(*) FROM pg_attribute WHERE attrelid = 'pgq.job_dependencies'::regclass "
               "        AND attname = 'sequence_hold' AND NOT attisdropped),"
               "       to_regclass('pgq.sequence_tails') IS NOT NULL,"
               "       (SELECT array_agg(pronargs ORDER BY proname) FROM pg_proc "
               "        WHERE pronamespace = 'pgq'::regnamespace AND proname IN ('enqueue', 'enqueue_after')),"
               "       (SELECT 'sequence_key' = ANY(proargnames) FROM pg_proc "
               "        WHERE pronamespace = 'pgq'::regnamespace AND proname = 'claim')")
    migrate.downgrade(pgq_dsn, "0017")  # revision 0018 changed pgq.enqueue's signature again
    assert query(pgq_dsn, objects) == [(1, 1, True, [13, 13], True)]
    # 0017's claim is 0016's with the key in its result, and no other change (0016's body is edited
    # in place while unreleased: 0017's copy must follow).
    claim = query(pgq_dsn, "SELECT prosrc FROM pg_proc WHERE pronamespace = 'pgq'::regnamespace "
                           "AND proname = 'claim'")[0][0]
    assert claim.count(", j.sequence_key\n") == 1 and claim.count(", c.sequence_key\n") == 1
    assert (claim.replace(", j.sequence_key\n", "\n").replace(", c.sequence_key\n", "\n")
            in schema_file("0016_keyed_raises.up.sql"))
    query(pgq_dsn, "CREATE ROLE pgq_t_0017_granted")
    granted = ("SELECT has_function_privilege('pgq_t_0017_granted', p.oid, 'EXECUTE') FROM pg_proc p "
               "WHERE p.pronamespace = 'pgq'::regnamespace AND p.proname IN ('enqueue', 'claim') ORDER BY p.proname")
    try:
        query(pgq_dsn, "GRANT EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, "
                       "bigint, integer, bigint[], text, text, text, text) TO pgq_t_0017_granted")
        query(pgq_dsn, "GRANT EXECUTE ON FUNCTION pgq.claim(text[], text[], integer, double precision, text) "
                       "TO pgq_t_0017_granted")
        first = query(pgq_dsn, "SELECT pgq.enqueue('k', sequence_key => 's')")[0][0]
        second = query(pgq_dsn, "SELECT pgq.enqueue('k', sequence_key => 's')")[0][0]
        assert query(pgq_dsn, "SELECT status::text FROM pgq.jobs WHERE id IN (%s, %s) ORDER BY id", first, second
                     ) == [("queued",), ("waiting",)]

        with pytest.raises(psycopg.errors.ObjectInUse, match="1 jobs wait on their sequence"):
            migrate.downgrade(pgq_dsn, "0016")
        assert query(pgq_dsn, objects) == [(1, 1, True, [13, 13], True)]  # nothing changed

        query(pgq_dsn, "SELECT pgq.cancel(%s)", second)
        migrate.downgrade(pgq_dsn, "0016")

        assert query(pgq_dsn, objects) == [(0, 0, False, [11, 11], False)]
        assert query(pgq_dsn, granted) == [(True,), (True,)]
        sources = {name: query(pgq_dsn, "SELECT prosrc FROM pg_proc WHERE pronamespace = 'pgq'::regnamespace "
                                        "AND proname = %s", name)[0][0]
                   for name in ("enqueue", "enqueue_after", "release_children", "settle", "cancel", "explain",
                                "claim")}
        assert sources["enqueue"] in schema_file("0014_fairness.up.sql")
        assert sources["enqueue_after"] in schema_file("0014_fairness.up.sql")
        assert sources["release_children"] in schema_file("0012_producer_locks.up.sql")
        assert sources["cancel"] in schema_file("0012_producer_locks.up.sql")
        assert sources["settle"] in schema_file("0016_keyed_raises.up.sql")
        assert sources["explain"] in schema_file("0013_operations.up.sql")
        assert sources["claim"] in schema_file("0016_keyed_raises.up.sql")
        migrate.upgrade(pgq_dsn, "0017")
        assert query(pgq_dsn, objects) == [(1, 1, True, [13, 13], True)]
        assert query(pgq_dsn, granted) == [(True,), (True,)]
    finally:
        query(pgq_dsn, "DROP OWNED BY pgq_t_0017_granted")
        query(pgq_dsn, "DROP ROLE pgq_t_0017_granted")


def test_0018_adds_the_uniqueness_variants_and_its_downgrade_restores_0017s_sql_api(pgq_dsn: str) -> None:
    """Revision 0018 adds the finished-key index, pgq.key_finishes with its purge trigger,
    pgq.enqueue_unique and the SQL API's variants; its downgrade drops them and restores 0017's
    pgq.enqueue with its grants, and upgrading again works."""
    objects = ("SELECT to_regclass('pgq.key_finishes') IS NOT NULL,"
               "       to_regclass('pgq.jobs_dedupe_finished_idx') IS NOT NULL,"
               "       to_regprocedure('pgq.key_finish_keep()') IS NOT NULL,"
               "       (SELECT array_agg(pronargs ORDER BY proname) FROM pg_proc "
               "        WHERE pronamespace = 'pgq'::regnamespace AND proname IN ('enqueue', 'enqueue_unique'))")
    assert query(pgq_dsn, objects) == [(True, True, True, [16, 12])]
    query(pgq_dsn, "SELECT pgq.enqueue('k', dedupe_key => 'a', on_conflict => 'replace')")
    query(pgq_dsn, "CREATE ROLE pgq_t_0018_granted")
    try:
        query(pgq_dsn, "GRANT EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, "
                       "bigint, integer, bigint[], text, text, text, text, interval, text, interval) "
                       "TO pgq_t_0018_granted")
        migrate.downgrade(pgq_dsn, "0017")
        assert query(pgq_dsn, objects) == [(False, False, False, [13])]
        granted = ("SELECT has_function_privilege('pgq_t_0018_granted', 'pgq.enqueue(text, jsonb, text, integer, "
                   "timestamptz, text, bigint, integer, bigint[], text, text, text, text)', 'EXECUTE')")
        assert query(pgq_dsn, granted) == [(True,)]
        assert query(pgq_dsn, "SELECT count(*) FROM pgq.jobs WHERE dedupe_key = 'a'") == [(1,)]
        migrate.upgrade(pgq_dsn)
        assert query(pgq_dsn, objects) == [(True, True, True, [16, 12])]
    finally:
        query(pgq_dsn, "DROP OWNED BY pgq_t_0018_granted")
        query(pgq_dsn, "DROP ROLE pgq_t_0018_granted")
