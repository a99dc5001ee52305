"""`pgq workers` and `pgq jobs explain` against a real PostgreSQL (issue 33)."""

from __future__ import annotations

import json

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
