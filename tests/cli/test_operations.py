"""`pgq workers` and `pgq jobs explain` against a real PostgreSQL (issue 33)."""

from __future__ import annotations

import json

import pytest

from pgq import Queue

from .conftest import CLI, SQL

REGISTER = ("SELECT * FROM pgq.worker_register(%s, 'host-1', 4242, %s, '{a,b}', 4, 10, 5, '9.9')")


def test_workers_lists_the_registry_as_a_table_and_as_json(cli: CLI, pgq_dsn: str, pgq_queue: Queue,
                                                           db: SQL) -> None:
    assert cli("workers", "--dsn", pgq_dsn).out.strip() == "no worker is registered"
    db(REGISTER, ["w-live", ["q1", "q2"]])
    db(REGISTER, ["w-gone", None])
    db("UPDATE pgq.workers SET last_seen = now() - interval '1 hour' WHERE claimed_by = 'w-gone'")
    job_id = pgq_queue.enqueue("a", queue="q1")
    db("UPDATE pgq.jobs SET status = 'running', claimed_by = 'w-live', lease_token = gen_random_uuid(), "
       "lease_expires_at = now() + interval '1 min', started_at = now(), attempts = 1 WHERE id = %s", [job_id])

    table = cli("workers", "--dsn", pgq_dsn)
    assert table.code == 0, table.err
    header, live, stale = table.out.splitlines()
    assert header.split()[:4] == ["WORKER", "STATE", "HOST:PID", "QUEUES"]
    assert live.split()[:8] == ["w-live", "running", "host-1:4242", "q1,q2", "2", "4", "1", str(job_id)]
    assert stale.split()[:4] == ["w-gone", "stale", "host-1:4242", "*"]

    listed = json.loads(cli("workers", "--json", "--dsn", pgq_dsn).out)
    assert [(w["claimed_by"], w["live"], w["queues"], w["running"], w["version"]) for w in listed] == [
        ("w-live", True, ["q1", "q2"], [job_id], "9.9"), ("w-gone", False, None, [], "9.9")]


def test_jobs_explain_prints_reasons_and_json_and_fails_for_an_unknown_job(cli: CLI, pgq_dsn: str,
                                                                          pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("a", queue="q1")
    db("SELECT pgq.pause('q1')")
    text = cli("jobs", "explain", str(job_id), "--dsn", pgq_dsn)
    assert text.code == 0, text.err
    lines = text.out.splitlines()
    assert lines[0] == f"job {job_id} is queued:"
    assert lines[1].startswith("  queue_paused: queue q1 is paused (by postgres since ")
    assert lines[2] == "  no_live_worker: no live worker claims from queue q1"
    shown = json.loads(cli("jobs", "explain", str(job_id), "--json", "--dsn", pgq_dsn).out)
    assert [r["code"] for r in shown["reasons"]] == ["queue_paused", "no_live_worker"]
    assert shown["reasons"][0]["facts"]["paused_by"] == "postgres"

    missing = cli("jobs", "explain", "999999", "--dsn", pgq_dsn)
    assert (missing.code, missing.err.strip()) == (1, "pgq: error: job 999999 not found")
    assert cli("jobs", "explain", "abc", "--dsn", pgq_dsn).code == 2


def _failed(pgq_queue: Queue, kind: str, payload: dict[str, int], error: str) -> int:
    job_id = pgq_queue.enqueue(kind, payload, queue="q", max_attempts=1)
    [claim] = pgq_queue.claim(worker="w", queues=["q"])
    pgq_queue.fail(claim, error)
    return job_id


def test_jobs_retry_cancel_delete_by_filters_with_dry_run_and_progress(cli: CLI, pgq_dsn: str, pgq_queue: Queue,
                                                                      db: SQL) -> None:
    hits = [_failed(pgq_queue, "mail", {"tenant": 7}, "SMTP timeout") for _ in range(3)]
    miss = _failed(pgq_queue, "mail", {"tenant": 8}, "SMTP timeout")
    dsn = ("--dsn", pgq_dsn)

    dry = cli("jobs", "retry", "--payload", '{"tenant": 7}', "--error", "smtp", "--dry-run", *dsn)
    assert (dry.code, dry.out.strip()) == (0, "3 jobs match; nothing changed (--dry-run)")
    done = cli("jobs", "retry", "--payload", '{"tenant": 7}', "--kind", "mail", "--batch", "2", *dsn)
    assert done.code == 0, done.err
    assert done.out.strip() == "3 jobs retried, in 2 batches; recorded in pgq.job_audit"
    assert done.err_lines == ["... 2 retried of 2 matched so far (1 batch)",
                              "... 3 retried of 3 matched so far (2 batches)"]
    assert {r["status"] for r in db("SELECT status::text FROM pgq.jobs WHERE id = ANY(%s)", [hits])} == {"queued"}

    cancelled = cli("jobs", "cancel", "--queue", "q", "--status", "queued", *dsn)
    assert cancelled.out.strip() == "3 jobs cancelled, in 1 batch; recorded in pgq.job_audit"
    deleted = cli("jobs", "delete", "--status", "cancelled", "--after", "2000-01-01", *dsn)
    assert deleted.out.strip() == "3 jobs deleted, in 1 batch; recorded in pgq.job_audit"
    assert [r["id"] for r in db("SELECT id FROM pgq.jobs")] == [miss]
    assert [r["action"] for r in db("SELECT action FROM pgq.job_audit ORDER BY id")] == [
        "retry", "retry", "cancel", "delete"]
    # Safe to re-run: nothing is left, and nothing is recorded.
    again = cli("jobs", "delete", "--status", "cancelled", "--after", "2000-01-01", *dsn)
    assert (again.code, again.out.strip()) == (0, "0 jobs deleted: none matched; nothing recorded")
    assert db("SELECT count(*) AS n FROM pgq.job_audit") == [{"n": 4}]


def test_bulk_commands_refuse_bad_input_and_write_nothing(cli: CLI, pgq_dsn: str, pgq_queue: Queue,
                                                         db: SQL) -> None:
    job_id = _failed(pgq_queue, "mail", {"tenant": 7}, "x")
    dsn = ("--dsn", pgq_dsn)
    for args, message in [
        (("jobs", "delete"), "give at least one filter (--queue"),
        (("jobs", "retry"), "give a job ID or at least one filter"),
        (("jobs", "retry", str(job_id), "--kind", "mail"), "give either a job ID or filters, not both"),
        (("jobs", "retry", "--status", "running"), "retry applies to jobs in status failed, cancelled; got running"),
        (("jobs", "cancel", "--payload", "{nope"), "not valid JSON"),
        (("jobs", "delete", "--before", "yesterday"), "not an ISO 8601 date or time"),
        (("jobs", "retry", "--kind", "mail", "--batch", "0"), "batch"),
    ]:
        result = cli(*args, *dsn)
        assert result.code == 2 and message in result.err, (args, result.err)
    assert db("SELECT status::text FROM pgq.jobs") == [{"status": "failed"}]
    assert db("SELECT count(*) AS n FROM pgq.job_audit") == [{"n": 0}]


def test_actions_record_the_actor_and_explain_names_it(cli: CLI, pgq_dsn: str, pgq_queue: Queue, db: SQL,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = ("--dsn", pgq_dsn)
    monkeypatch.setenv("LOGNAME", "zed")  # getpass.getuser() reads $LOGNAME first
    job_id = pgq_queue.enqueue("k", queue="q")
    assert cli("queue", "pause", "q", "--actor", "alice", *dsn).code == 0
    text = cli("jobs", "explain", str(job_id), *dsn).out
    assert f"job {job_id} is queued:\n  queue_paused: queue q is paused (by alice via role postgres since " in text
    assert cli("queue", "resume", "q", *dsn).code == 0
    assert cli("jobs", "cancel", str(job_id), "--actor", "alice", *dsn).code == 0
    assert " by alice (via role postgres) after " in cli("jobs", "explain", str(job_id), *dsn).out
    assert cli("jobs", "retry", str(job_id), *dsn).code == 0
    assert cli("jobs", "cancel", "--queue", "q", "--actor", "ops", *dsn).code == 0
    assert cli("jobs", "delete", "--queue", "q", *dsn).code == 0
    assert db("SELECT action, actor, db_role FROM pgq.job_audit ORDER BY id") == [
        {"action": "cancel", "actor": "alice", "db_role": "postgres"},
        {"action": "retry", "actor": "os:zed", "db_role": "postgres"},
        {"action": "cancel", "actor": "ops", "db_role": "postgres"},
        {"action": "delete", "actor": "os:zed", "db_role": "postgres"}]
    assert db("SELECT action, actor FROM pgq.control_audit ORDER BY id") == [
        {"action": "pause", "actor": "alice"}, {"action": "resume", "actor": "os:zed"}]


def test_a_bad_actor_is_a_usage_error_and_changes_nothing(cli: CLI, pgq_dsn: str, pgq_queue: Queue,
                                                          db: SQL) -> None:
    job_id = pgq_queue.enqueue("k", queue="q")
    for args in (("jobs", "cancel", str(job_id), "--actor", ""), ("queue", "pause", "q", "--actor", "x" * 201),
                 ("jobs", "cancel", "--queue", "q", "--actor", "")):
        result = cli(*args, "--dsn", pgq_dsn)
        assert result.code == 2 and "--actor" in result.err, (args, result.err)
    assert db("SELECT status::text FROM pgq.jobs") == [{"status": "queued"}]
    assert db("SELECT count(*) AS n FROM pgq.paused_queues") == [{"n": 0}]
