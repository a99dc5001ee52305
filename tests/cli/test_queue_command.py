"""`pgq queue list|pause|resume|group-limits`, paused queues in `pgq status`, and group keys in
`pgq enqueue` and `pgq jobs show`."""

from __future__ import annotations

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
    removed = cli("queue", "group-limits", "sync", "--remove", "--dsn", pgq_dsn)
    assert removed.out == "kind sync: no group limits\n"
    assert db("SELECT count(*) AS n FROM pgq.group_limits") == [{"n": 0}]


def test_enqueue_with_a_group_key_shows_it_in_jobs_show(cli: CLI, pgq_dsn: str) -> None:
    job_id = cli("enqueue", "sync", "--group-key", "acct:42", "--dsn", pgq_dsn).out.strip()
    shown = cli("jobs", "show", job_id, "--dsn", pgq_dsn)
    assert "group_key:        acct:42" in shown.out
    assert '"group_key": "acct:42"' in cli("jobs", "show", job_id, "--json", "--dsn", pgq_dsn).out
    assert cli("enqueue", "sync", "--group-key", "", "--dsn", pgq_dsn).code == 2
