"""`pgq queue list|pause|resume`, and paused queues in `pgq status`."""

from __future__ import annotations

from pgq import Queue

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
