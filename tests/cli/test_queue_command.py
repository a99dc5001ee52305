"""`pgq queue list|pause|resume|group-limits`, paused queues in `pgq status`, and group keys in
`pgq enqueue` and `pgq jobs show`."""

from __future__ import annotations

import json

from pgq import Queue

from ..conftest import SQL
from .conftest import CLI


def test_pause_list_and_resume(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    assert cli("queue", "list", "--dsn", pgq_dsn).out == "no queues (no jobs, none paused)\n"
    pgq_queue.enqueue("k", queue="mail")
    pgq_queue.enqueue("k", queue="reports")

    paused = cli("queue", "pause", "mail", "--dsn", pgq_dsn)
    assert paused.code == 0 and paused.out == "queue mail is paused\n"
    assert cli("queue", "pause", "mail", "--dsn", pgq_dsn).out == "queue mail is paused (it was already)\n"

    lines = cli("queue", "list", "--dsn", pgq_dsn).out.splitlines()
    assert lines[0].split()[:3] == ["QUEUE", "STATE", "READY"]
    mail = next(line.split() for line in lines if line.startswith("mail"))
    reports = next(line.split() for line in lines if line.startswith("reports"))
    assert mail[1:3] == ["paused", "1"] and reports[1:3] == ["running", "1"] and reports[-1] == "-"
    status = cli("status", "--dsn", pgq_dsn).out
    assert "mail (paused)" in status and "reports (paused)" not in status

    resumed = cli("queue", "resume", "mail", "--dsn", pgq_dsn)
    assert resumed.code == 0 and resumed.out == "queue mail is running\n"
    assert cli("queue", "resume", "mail", "--dsn", pgq_dsn).out == "queue mail is running (it was not paused)\n"
    assert '"paused": false' in cli("queue", "list", "--json", "--dsn", pgq_dsn).out


def test_pause_with_an_empty_name_is_an_error(cli: CLI, pgq_dsn: str) -> None:
    result = cli("queue", "pause", "", "--dsn", pgq_dsn)
    assert result.code != 0 and "queue must be a non-empty str" in result.err


def test_pausing_a_queue_without_jobs_warns_and_still_pauses_it(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    pgq_queue.enqueue("k", queue="mail")
    mistyped = cli("queue", "pause", "mial", "--dsn", pgq_dsn)
    assert mistyped.code == 0 and mistyped.out == "queue mial is paused\n"
    assert mistyped.err.startswith("pgq: warning: queue 'mial' holds no jobs: paused anyway")
    assert len(mistyped.err.splitlines()) == 1
    assert '"queue": "mial"' in cli("queue", "list", "--json", "--dsn", pgq_dsn).out  # paused ahead of its jobs
    known = cli("queue", "pause", "mail", "--dsn", pgq_dsn)
    assert known.code == 0 and known.err == ""
    assert "holds no job yet is paused too" in " ".join(cli("queue", "pause", "--help").out.split())


def test_group_limits_are_set_and_removed_and_bad_input_writes_nothing(cli: CLI, pgq_dsn: str, db: SQL) -> None:
    done = cli("queue", "group-limits", "sync", "--concurrency", "2", "--rate", "10/2s", "--dsn", pgq_dsn)
    assert done.code == 0, done.err
    assert done.out == "kind sync: at most 2 running and at most 10 starts per 2 s per group key\n"
    assert db("SELECT kind, max_running, max_starts, per_s FROM pgq.group_limits") == [
        {"kind": "sync", "max_running": 2, "max_starts": 10, "per_s": 2.0}]
    for args, message in ((["--concurrency", "0"], "--concurrency must be >= 1"),
                          (["--rate", "often"], "rate limit must look like"),
                          ([], "give --concurrency and/or --rate, or --remove"),
                          (["--remove", "--concurrency", "1"], "give --concurrency and/or --rate, or --remove")):
        bad = cli("queue", "group-limits", "sync", *args, "--dsn", pgq_dsn)
        assert bad.code == 2 and message in bad.err and "Traceback" not in bad.err
    assert db("SELECT max_running FROM pgq.group_limits") == [{"max_running": 2}]
    removed = cli("queue", "group-limits", "sync", "--remove", "--actor", "alice", "--dsn", pgq_dsn)
    assert removed.out == "kind sync: no group limits\n"
    assert db("SELECT count(*) AS n FROM pgq.group_limits") == [{"n": 0}]
    audit = db("SELECT action, target, actor, details->'now' AS now FROM pgq.control_audit ORDER BY id")
    assert [(r["action"], r["target"], r["now"]) for r in audit] == [
        ("group_limits", "sync", {"max_running": 2, "max_starts": 10, "per_s": 2.0}), ("group_limits", "sync", None)]
    assert audit[0]["actor"].startswith("os:") and audit[1]["actor"] == "alice"


def test_group_limits_without_a_kind_lists_the_kinds_that_have_them(cli: CLI, pgq_dsn: str, pgq_queue: Queue,
                                                                      db: SQL) -> None:
    empty = cli("queue", "group-limits", "--dsn", pgq_dsn)
    assert empty.code == 0 and empty.out.startswith("no group limits")
    pgq_queue.set_group_limits("sync", concurrency=2, rate="5/min")
    pgq_queue.set_group_limits("mail", rate="10/90s")
    for group in ("a", "b", "b"):
        pgq_queue.enqueue("sync", group_key=group)
    pgq_queue.enqueue("free", group_key="x")  # a grouped kind without limits: the claim adds a turn-only row
    assert len(pgq_queue.claim(worker="w", limit=10)) == 4  # all: within 2 running and 5 starts per group
    assert db("SELECT count(*) AS n FROM pgq.group_limits") == [{"n": 3}]
    listed = cli("queue", "group-limits", "--dsn", pgq_dsn)
    assert listed.code == 0, listed.err
    assert [line.split()[:5] for line in listed.out.splitlines()] == [
        ["KIND", "CONCURRENCY", "RATE", "RUNNING", "IN"],
        ["mail", "-", "10/90s", "0", "0"],
        ["sync", "2", "5/min", "3", "2"],
    ]
    as_json = json.loads(cli("queue", "group-limits", "--json", "--dsn", pgq_dsn).out)
    assert [(r["kind"], r["max_running"], r["max_starts"], r["per_s"], r["running"], r["running_groups"])
            for r in as_json] == [("mail", None, 10, 90.0, 0, 0), ("sync", 2, 5, 60.0, 3, 2)]
    for args, message in ((["--remove"], "need a KIND"), (["--concurrency", "1"], "need a KIND"),
                          (["sync", "--json", "--concurrency", "1"], "--json lists the group limits")):
        bad = cli("queue", "group-limits", *args, "--dsn", pgq_dsn)
        assert bad.code == 2 and message in bad.err and "Traceback" not in bad.err
    assert db("SELECT kind, max_running FROM pgq.group_limits ORDER BY kind") == [
        {"kind": "free", "max_running": None}, {"kind": "mail", "max_running": None},
        {"kind": "sync", "max_running": 2}]


def test_enqueue_with_a_group_key_shows_it_in_jobs_show(cli: CLI, pgq_dsn: str) -> None:
    job_id = cli("enqueue", "sync", "--group-key", "acct:42", "--dsn", pgq_dsn).out.strip()
    shown = cli("jobs", "show", job_id, "--dsn", pgq_dsn)
    assert "group_key:        acct:42" in shown.out
    assert '"group_key": "acct:42"' in cli("jobs", "show", job_id, "--json", "--dsn", pgq_dsn).out
    assert cli("enqueue", "sync", "--group-key", "", "--dsn", pgq_dsn).code == 2
