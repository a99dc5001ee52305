"""The `pgq` command line against a real PostgreSQL: each command's output, exit status and errors."""

from __future__ import annotations

import datetime as dt
import json
import re
import time

import psycopg
import pytest

import pgq.cli
from pgq import JobSpec, JobStatus, Queue, migrate
from pgq.cli import build_parser
from pgq.models import MAX_PAYLOAD_BYTES

from ..conftest import enqueue_after
from .conftest import CLI, SQL, run_subprocess, table

# ---------------------------------------------------------------------------------------------
# migrate


def test_migrate_upgrades_empty_database_then_does_nothing(cli: CLI, pgq_empty_dsn: str) -> None:
    head = migrate.head_revision()
    first = cli("migrate", "--dsn", pgq_empty_dsn)
    assert first.code == 0, first.err
    assert f"from revision base (no pgq schema) to {head}" in first.out
    assert f"is at revision {head} (head)" in first.out
    assert migrate.current_revision(pgq_empty_dsn) == head

    second = cli("migrate", "--dsn", pgq_empty_dsn)
    assert second.code == 0, second.err
    assert f"already at revision {head} (head): nothing to do" in second.out


def test_migrate_reads_dsn_from_environment(cli: CLI, pgq_empty_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGQ_DSN", pgq_empty_dsn)
    assert cli("migrate").code == 0
    assert migrate.current_revision(pgq_empty_dsn) == migrate.head_revision()


def test_migrate_sql_on_empty_database_prints_schema_and_runs_nothing(cli: CLI, pgq_empty_dsn: str) -> None:
    result = cli("migrate", "--sql", "--dsn", pgq_empty_dsn)
    assert result.code == 0, result.err
    assert "CREATE TABLE pgq.jobs" in result.out
    with psycopg.connect(pgq_empty_dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'pgq'").fetchone()
    assert row == (0,)


def test_migrate_sql_without_dsn_prints_whole_schema(cli: CLI) -> None:
    result = cli("migrate", "--sql")
    assert result.code == 0, result.err
    assert "CREATE TABLE pgq.jobs" in result.out


def test_migrate_sql_on_migrated_database_says_nothing_to_do(cli: CLI, pgq_dsn: str) -> None:
    result = cli("migrate", "--sql", "--dsn", pgq_dsn)
    assert result.code == 0
    assert "nothing to do" in result.out and "CREATE TABLE" not in result.out


# ---------------------------------------------------------------------------------------------
# enqueue, jobs show / list


def test_enqueue_prints_id_and_jobs_show_prints_every_field(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    result = cli("enqueue", "email.send", "--dsn", pgq_dsn, "--payload", '{"to": "a@example.com", "n": [1, 2]}',
                 "--queue", "mail", "--priority", "-3", "--max-attempts", "4")
    assert result.code == 0, result.err
    job_id = int(result.out)
    job = pgq_queue.get(job_id)
    assert job is not None
    assert (job.kind, job.queue, job.payload, job.priority, job.max_attempts) == (
        "email.send", "mail", {"to": "a@example.com", "n": [1, 2]}, -3, 4)

    shown = cli("jobs", "show", str(job_id), "--dsn", pgq_dsn)
    assert shown.code == 0, shown.err
    fields = {line.split(":", 1)[0] for line in shown.out.splitlines() if not line.startswith(" ")}
    assert fields >= {"id", "queue", "kind", "payload", "priority", "status", "run_at", "attempts",
                      "max_attempts", "dedupe_key", "lease_token", "last_error", "result", "created_at",
                      "finished_at"}
    assert '    "to": "a@example.com"' in shown.out  # pretty JSON, indented under "payload:"
    assert "attempts:         0 of 4" in shown.out

    as_json = cli("jobs", "show", str(job_id), "--dsn", pgq_dsn, "--json")
    loaded = json.loads(as_json.out)
    assert loaded["payload"] == {"to": "a@example.com", "n": [1, 2]} and loaded["status"] == "queued"


def test_jobs_show_labels_an_earlier_attempts_error_as_previous_once_the_job_succeeded(
        cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("charge")
    (first,) = pgq_queue.claim(worker="w1")
    pgq_queue.fail(first, "TimeoutError: gateway slow", retry_in=0)
    (second,) = pgq_queue.claim(worker="w2")
    pgq_queue.complete(second)

    shown = cli("jobs", "show", str(job_id), "--dsn", pgq_dsn)
    assert shown.code == 0, shown.err
    labels = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in shown.out.splitlines()
              if ":" in line and not line.startswith(" ")}
    assert "last_error" not in labels and labels["previous_attempt_error"] == "TimeoutError: gateway slow"
    assert "claimed_by" not in labels and labels["last_claimed_by"] == "w2"
    loaded = json.loads(cli("jobs", "show", str(job_id), "--dsn", pgq_dsn, "--json").out)
    assert loaded["last_error"] is None and loaded["previous_attempt_error"] == "TimeoutError: gateway slow"
    listed = cli("jobs", "list", "--dsn", pgq_dsn)
    assert "(previous) TimeoutError: gateway slow" in listed.out


def test_enqueue_without_payload_stores_empty_object(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    job = pgq_queue.get(int(cli("enqueue", "noop", "--dsn", pgq_dsn).out))
    assert job is not None and job.payload == {} and job.queue == "default"


def test_enqueue_with_delay_schedules_the_job(cli: CLI, pgq_dsn: str, db: SQL) -> None:
    job_id = int(cli("enqueue", "later", "--dsn", pgq_dsn, "--delay", "3600").out)
    [row] = db("SELECT run_at > now() + interval '59 minutes' AS later FROM pgq.jobs WHERE id = %s", [job_id])
    assert row["later"]


def test_enqueue_same_dedupe_key_twice_prints_same_id(cli: CLI, pgq_dsn: str, db: SQL) -> None:
    first = cli("enqueue", "sync", "--dsn", pgq_dsn, "--dedupe-key", "user-1", "--watermark", "5")
    second = cli("enqueue", "sync", "--dsn", pgq_dsn, "--dedupe-key", "user-1", "--watermark", "7")
    assert first.code == second.code == 0
    assert first.out == second.out
    # The raised watermark is a row of pgq.key_raises until a claim, completion or settle folds it in
    # (revision 0016): the job's effective input watermark counts it.
    assert db("SELECT count(*) AS n, max(greatest(input_watermark, pgq.key_raised(queue, dedupe_key))) AS w "
              "FROM pgq.jobs") == [{"n": 1, "w": 7}]


@pytest.mark.parametrize(
    "payload",
    ["{not json", "", "{'single': 'quotes'}", "NaN", '{"x": Infinity}', '{"a": 1} trailing'],
)
def test_enqueue_bad_json_exits_2_with_one_line_and_writes_nothing(cli: CLI, pgq_dsn: str, db: SQL,
                                                                  payload: str) -> None:
    result = cli("enqueue", "k", "--dsn", pgq_dsn, "--payload", payload)
    assert result.code == 2
    assert len(result.err_lines) == 1 and result.err.startswith("pgq: error: --payload is not valid JSON")
    assert result.out == ""
    assert db("SELECT count(*) AS n FROM pgq.jobs") == [{"n": 0}]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--priority", "40000"], "priority must be in"),
        (["--priority", "x"], "priority must be an integer"),
        (["--delay", "-1"], "delay must be a finite number of seconds >= 0"),
        (["--max-attempts", "0"], "max attempts must be in"),
        (["--watermark", "3"], "--watermark needs --dedupe-key"),
        (["--sequence-on-failure", "continue"], "--sequence-on-failure needs --sequence-key"),
        (["--sequence-key", "s", "--dedupe-key", "d"], "sequence_key cannot be combined"),
        (["--sequence-key", "s", "--sequence-on-failure", "skip"], "invalid choice"),
        (["--payload", '{"a": "\\u0000"}'], "NUL"),
        (["--payload", "[1, 2]"], "--payload must be a JSON object (the task's keyword arguments), got an array"),
        (["--payload", '"x"'], "got a string"),
        (["--payload", "null"], "got null"),
        (["--payload", "7"], "got a number"),
        (["--unique-for", "1h"], "need a dedupe_key"),
        (["--dedupe-key", "d", "--unique-for", "32d"], "at most 31 days, got 32 days"),
        (["--dedupe-key", "d", "--unique-for", "0"], "unique_for must be a positive duration, got 0 s"),
        (["--dedupe-key", "d", "--on-conflict", "overwrite"], "invalid choice"),
        (["--dedupe-key", "d", "--debounce", "5s", "--delay", "1"], "not with run_at or delay"),
    ],
)
def test_enqueue_rejects_bad_arguments_with_exit_2(cli: CLI, pgq_dsn: str, db: SQL, args: list[str],
                                                   message: str) -> None:
    result = cli("enqueue", "k", "--dsn", pgq_dsn, *args)
    assert result.code == 2
    assert message in result.err and "Traceback" not in result.err
    assert db("SELECT count(*) AS n FROM pgq.jobs") == [{"n": 0}]


def test_enqueue_with_a_sequence_key_chains_the_jobs_of_the_key(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    first = cli("enqueue", "post", "--dsn", pgq_dsn, "--sequence-key", "acct-7", "--sequence-on-failure", "continue")
    second = cli("enqueue", "post", "--dsn", pgq_dsn, "--sequence-key", "acct-7")
    assert first.code == second.code == 0, first.err + second.err
    a, b = int(first.out), int(second.out)
    assert [pgq_queue.get(i).sequence_key for i in (a, b)] == ["acct-7", "acct-7"]
    assert pgq_queue.get(b).status is JobStatus.WAITING
    [parent] = pgq_queue.dependencies(b).parents
    assert (parent.id, parent.sequence_hold) == (a, False)  # a's failure would let b run


def test_enqueue_takes_the_uniqueness_variants(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    def enqueue(*args: str) -> int:
        result = cli("enqueue", "k", "--dsn", pgq_dsn, *args)
        assert result.code == 0, result.err
        return int(result.out)

    u = enqueue("--dedupe-key", "u", "--unique-for", "1h")
    assert enqueue("--dedupe-key", "u", "--unique-for", "1h") == u
    r = enqueue("--dedupe-key", "r", "--on-conflict", "replace", "--payload", '{"v": 1}')
    assert enqueue("--dedupe-key", "r", "--on-conflict", "replace", "--payload", '{"v": 2}') == r
    assert pgq_queue.get(r).payload == {"v": 2}
    d = enqueue("--dedupe-key", "d", "--debounce", "30s")
    assert enqueue("--dedupe-key", "d", "--debounce", "30s", "--payload", '{"v": 3}') == d
    job = pgq_queue.get(d)
    assert job.payload == {"v": 3} and job.run_at > dt.datetime.now(dt.UTC) + dt.timedelta(seconds=20)


def test_enqueue_payload_over_the_size_limit_writes_nothing(cli: CLI, pgq_dsn: str, db: SQL) -> None:
    payload = json.dumps({"blob": "x" * (MAX_PAYLOAD_BYTES + 1)})
    result = cli("enqueue", "k", "--dsn", pgq_dsn, "--payload", payload)
    assert result.code == 2 and len(result.err_lines) == 1 and f"the limit is {MAX_PAYLOAD_BYTES}" in result.err
    assert db("SELECT count(*) AS n FROM pgq.jobs") == [{"n": 0}]


def test_enqueue_empty_kind_is_rejected(cli: CLI, pgq_dsn: str) -> None:
    result = cli("enqueue", "", "--dsn", pgq_dsn)
    assert result.code == 2 and result.err_lines == ["pgq: error: kind must not be empty"]


def test_jobs_list_filters_by_status_queue_kind_and_limit(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    a = pgq_queue.enqueue("alpha", queue="q1")
    b = pgq_queue.enqueue("beta", queue="q1")
    c = pgq_queue.enqueue("alpha", queue="q2")
    pgq_queue.cancel(b)

    def ids(*args: str) -> list[int]:
        result = cli("jobs", "list", "--dsn", pgq_dsn, *args)
        assert result.code == 0, result.err
        return [int(k) for k in table(result.out)] if result.out != "no jobs match\n" else []

    assert ids() == [c, b, a]  # newest first
    assert ids("--queue", "q1") == [b, a]
    assert ids("--kind", "alpha") == [c, a]
    assert ids("--status", "cancelled") == [b]
    assert ids("--status", "QUEUED", "--queue", "q1") == [a]
    assert ids("--limit", "1") == [c]
    assert ids("--queue", "q2", "--kind", "beta") == []  # the queue exists: no error, just nothing

    listed = table(cli("jobs", "list", "--dsn", pgq_dsn).out)
    assert listed[str(b)]["STATUS"] == "cancelled" and listed[str(a)]["KIND"] == "alpha"
    assert listed[str(a)]["ATTEMPTS"] == "0/25"

    as_json = json.loads(cli("jobs", "list", "--dsn", pgq_dsn, "--json", "--queue", "q2").out)
    assert [j["id"] for j in as_json] == [c] and as_json[0]["status"] == "queued"
    assert "GROUP" not in cli("jobs", "list", "--dsn", pgq_dsn).out.splitlines()[0]  # no groups: no column

    [grouped] = pgq_queue.enqueue_many([JobSpec("alpha", queue="q2", group_key="acct:7")])
    listed = table(cli("jobs", "list", "--dsn", pgq_dsn).out)
    assert listed[str(grouped)]["GROUP"] == "acct:7" and listed[str(grouped)]["STATUS"] == "queued"
    assert listed[str(a)]["GROUP"] == "-" and listed[str(a)]["ATTEMPTS"] == "0/25"


def test_jobs_list_unknown_queue_says_no_such_queue(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    pgq_queue.enqueue("alpha", queue="real")
    result = cli("jobs", "list", "--dsn", pgq_dsn, "--queue", "typo")
    assert result.code == 1
    assert result.err_lines == ["pgq: error: no such queue: 'typo' holds no jobs"]


def test_jobs_list_unknown_status_lists_valid_ones(cli: CLI, pgq_dsn: str) -> None:
    result = cli("jobs", "list", "--dsn", pgq_dsn, "--status", "done")
    assert result.code == 2
    valid = ", ".join(s.value for s in JobStatus)
    assert f"unknown status 'done' (expected one of: {valid})" in result.err


def test_jobs_list_shows_odd_names_on_one_line(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    pgq_queue.enqueue("kind\nwith newline", queue="q'%;")
    result = cli("jobs", "list", "--dsn", pgq_dsn, "--queue", "q'%;")
    assert result.code == 0
    lines = result.out.splitlines()
    assert len(lines) == 2 and "kind\\nwith newline" in lines[1]


def test_jobs_show_lists_parents_and_children_and_what_a_waiting_job_waits_for(
        cli: CLI, pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    fetch_a, fetch_b = pgq_queue.enqueue("fetch"), pgq_queue.enqueue("fetch")
    merge = enqueue_after(db, "merge", [fetch_a, fetch_b])
    report = enqueue_after(db, "report", [merge], run=True)
    [claim] = pgq_queue.claim(worker="w")
    pgq_queue.complete(claim)  # fetch_a

    shown = cli("jobs", "show", str(merge), "--dsn", pgq_dsn)
    assert shown.code == 0, shown.err
    fields, _, deps = shown.out.partition("\n\n")
    assert "status:           waiting" in fields
    lines = deps.splitlines()
    assert lines[0] == f"waiting for 1 of 2 parent(s): {fetch_b}"
    assert lines[2] == "parents (2):"
    parents = table("\n".join(lines[3:6]))
    assert parents[str(fetch_a)] == {"ID": str(fetch_a), "KIND": "fetch", "STATUS": "succeeded",
                                     "NEEDS SUCCESS": "yes", "PARENT OUTCOME": "succeeded"}
    assert parents[str(fetch_b)] == {"ID": str(fetch_b), "KIND": "fetch", "STATUS": "queued",
                                     "NEEDS SUCCESS": "yes", "PARENT OUTCOME": "-"}
    assert lines[6:8] == ["", "children (1):"]
    children = table("\n".join(lines[8:]))
    assert children[str(report)] == {"ID": str(report), "KIND": "report", "STATUS": "waiting",
                                     "NEEDS SUCCESS": "no", "PARENT OUTCOME": "-"}

    of_parent = cli("jobs", "show", str(fetch_a), "--dsn", pgq_dsn).out
    assert "waiting for" not in of_parent and "parents (" not in of_parent
    assert of_parent.split("\n\n")[1].splitlines()[0] == "children (1):"

    as_json = json.loads(cli("jobs", "show", str(merge), "--dsn", pgq_dsn, "--json").out)
    assert as_json["status"] == "waiting"
    assert as_json["dependencies"] == {
        "pending_parents": 1, "parent_count": 2, "child_count": 1,
        "parents": [{"id": fetch_a, "kind": "fetch", "status": "succeeded", "needs_success": True,
                     "parent_outcome": "succeeded", "sequence_hold": None},
                    {"id": fetch_b, "kind": "fetch", "status": "queued", "needs_success": True,
                     "parent_outcome": None, "sequence_hold": None}],
        "children": [{"id": report, "kind": "report", "status": "waiting", "needs_success": False,
                      "parent_outcome": None, "sequence_hold": None}]}


def test_jobs_show_says_which_job_holds_a_sequenced_job(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    first = pgq_queue.enqueue("post", sequence_key="acct-7", max_attempts=1)
    second = pgq_queue.enqueue("post", sequence_key="acct-7")
    [claim] = pgq_queue.claim(worker="w")
    pgq_queue.fail(claim, "boom")  # failed for good: it holds the sequence

    shown = cli("jobs", "show", str(second), "--dsn", pgq_dsn)
    assert shown.code == 0, shown.err
    fields, _, deps = shown.out.partition("\n\n")
    assert "sequence_key:     acct-7" in fields.splitlines()
    assert deps.splitlines()[:2] == [f"waiting for 1 of 1 parent(s): {first}",
                                     f"held by job {first} (the job before it in its sequence)"]
    as_json = json.loads(cli("jobs", "show", str(second), "--dsn", pgq_dsn, "--json").out)
    assert as_json["sequence_key"] == "acct-7"
    assert as_json["dependencies"]["parents"][0]["sequence_hold"] is True
    # The held job itself holds nothing: no "held by" line.
    assert "held by" not in cli("jobs", "show", str(first), "--dsn", pgq_dsn).out


def test_jobs_show_of_a_plain_job_prints_no_dependencies(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("plain")
    shown = cli("jobs", "show", str(job_id), "--dsn", pgq_dsn)
    assert shown.code == 0 and "\n\n" not in shown.out and "parents" not in shown.out
    loaded = json.loads(cli("jobs", "show", str(job_id), "--dsn", pgq_dsn, "--json").out)
    assert loaded["dependencies"] == {"pending_parents": None, "parent_count": 0, "child_count": 0,
                                      "parents": [], "children": []}


def test_jobs_show_says_how_many_dependencies_it_left_out(cli: CLI, pgq_dsn: str, pgq_queue: Queue, db: SQL,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pgq.cli.jobs, "DEPENDENCIES_SHOWN", 2)
    parents = pgq_queue.enqueue_many([{"kind": "part"}] * 5)
    callback = enqueue_after(db, "callback", parents, run=True)
    for claim in pgq_queue.claim(worker="w", limit=3):  # the three lowest ids
        pgq_queue.complete(claim)

    out = cli("jobs", "show", str(callback), "--dsn", pgq_dsn).out.split("\n\n", 1)[1]
    assert out.splitlines()[0] == "waiting for 2 of 5 parent(s): 2 not among those listed below"
    assert "parents (5):" in out
    assert f"  ... and 3 more: SELECT * FROM pgq.job_dependencies WHERE job_id = {callback}" in out
    assert out.count("succeeded") == 4  # two parents listed, each with status and outcome

    out = cli("jobs", "show", str(parents[0]), "--dsn", pgq_dsn).out
    assert "children (1):" in out and "... and" not in out


def test_jobs_show_escapes_odd_kinds_of_parents_and_children(cli: CLI, pgq_dsn: str, pgq_queue: Queue,
                                                             db: SQL) -> None:
    parent = pgq_queue.enqueue("evil\nkind\x1b[31m")
    child = enqueue_after(db, "child\tkind", [parent])
    out = cli("jobs", "show", str(child), "--dsn", pgq_dsn).out
    deps = out.split("\n\n", 1)[1]
    assert "evil\\nkind\\x1b[31m" in deps and "\x1b" not in out
    assert "child\\tkind" in cli("jobs", "show", str(parent), "--dsn", pgq_dsn).out


def test_jobs_list_filters_waiting_jobs(cli: CLI, pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    parent = pgq_queue.enqueue("fetch")
    first = enqueue_after(db, "merge", [parent])
    second = enqueue_after(db, "merge", [parent])
    result = cli("jobs", "list", "--dsn", pgq_dsn, "--status", "waiting")
    assert result.code == 0, result.err
    listed = table(result.out)
    assert list(listed) == [str(second), str(first)]
    assert listed[str(first)]["STATUS"] == "waiting" and listed[str(first)]["RUN AT"] == "-"


def test_cancel_a_waiting_job_cancels_the_children_that_need_it(cli: CLI, pgq_dsn: str, pgq_queue: Queue,
                                                                db: SQL) -> None:
    parent = pgq_queue.enqueue("fetch")
    middle = enqueue_after(db, "merge", [parent])
    needs = enqueue_after(db, "report", [middle])
    runs = enqueue_after(db, "cleanup", [middle], run=True)

    result = cli("jobs", "cancel", str(middle), "--dsn", pgq_dsn)
    assert result.code == 0 and result.out == f"job {middle} (merge) is cancelled\n"
    status = {r["id"]: (r["status"], r["last_error"]) for r in db(
        "SELECT id, status::text, last_error FROM pgq.jobs WHERE id = ANY(%s)", [[parent, middle, needs, runs]])}
    assert status == {parent: ("queued", None), middle: ("cancelled", None),
                      needs: ("cancelled", f"parent job {middle} cancelled"), runs: ("queued", None)}


def test_jobs_show_unknown_id_is_one_line_error(cli: CLI, pgq_dsn: str) -> None:
    result = cli("jobs", "show", "424242", "--dsn", pgq_dsn)
    assert result.code == 1 and result.err_lines == ["pgq: error: job 424242 not found"]


@pytest.mark.parametrize("bad_id", ["abc", "0", "-4", str(2**63)])
def test_jobs_show_rejects_bad_ids(cli: CLI, pgq_dsn: str, bad_id: str) -> None:
    result = cli("jobs", "show", "--dsn", pgq_dsn, "--", bad_id)
    assert result.code == 2 and "a job id is a positive integer" in result.err


# ---------------------------------------------------------------------------------------------
# cancel / retry


def test_cancel_then_retry_then_cancel_again(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("k")
    cancelled = cli("jobs", "cancel", str(job_id), "--dsn", pgq_dsn)
    assert cancelled.code == 0 and cancelled.out == f"job {job_id} (k) is cancelled\n"
    assert pgq_queue.get(job_id).status is JobStatus.CANCELLED  # type: ignore[union-attr]

    again = cli("jobs", "cancel", str(job_id), "--dsn", pgq_dsn)
    assert again.code == 1 and again.err_lines == [f"pgq: error: cannot cancel job {job_id}: it is cancelled"]

    retried = cli("jobs", "retry", str(job_id), "--dsn", pgq_dsn)
    assert retried.code == 0 and f"job {job_id} (k) is queued again" in retried.out
    assert pgq_queue.get(job_id).status is JobStatus.QUEUED  # type: ignore[union-attr]


def test_retry_of_queued_job_is_invalid_state(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("k")
    result = cli("jobs", "retry", str(job_id), "--dsn", pgq_dsn)
    assert result.code == 1 and result.err_lines == [f"pgq: error: cannot retry job {job_id}: it is queued"]


def test_retry_of_failed_job_requeues_it(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("k", max_attempts=1)
    [claim] = pgq_queue.claim(worker="test")
    pgq_queue.fail(claim, "boom")
    result = cli("jobs", "retry", str(job_id), "--dsn", pgq_dsn)
    assert result.code == 0, result.err
    job = pgq_queue.get(job_id)
    assert job is not None and job.status is JobStatus.QUEUED and job.attempts == 0


@pytest.mark.parametrize("action", ["retry", "cancel"])
def test_retry_and_cancel_of_unknown_job_are_not_found(cli: CLI, pgq_dsn: str, action: str) -> None:
    result = cli("jobs", action, "999999", "--dsn", pgq_dsn)
    assert result.code == 1 and result.err_lines == ["pgq: error: job 999999 not found"]


# ---------------------------------------------------------------------------------------------
# status


def test_status_table_counts_each_queue(cli: CLI, pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    assert cli("status", "--dsn", pgq_dsn).out == "no jobs in any queue\n"

    for _ in range(3):
        pgq_queue.enqueue("k", queue="mail")
    pgq_queue.enqueue("k", queue="mail", delay=3600)
    pgq_queue.enqueue("k", queue="reports", max_attempts=1)
    pgq_queue.enqueue("k", queue="reports")
    [running] = pgq_queue.claim(worker="w", queues=["mail"])
    [failing] = pgq_queue.claim(worker="w", queues=["reports"])
    pgq_queue.fail(failing, "boom")
    [done] = pgq_queue.claim(worker="w", queues=["reports"])
    pgq_queue.complete(done)
    db("UPDATE pgq.jobs SET run_at = now() - interval '2 hours' WHERE queue = 'mail' AND status = 'queued' "
       "AND run_at <= now()")

    result = cli("status", "--dsn", pgq_dsn)
    assert result.code == 0, result.err
    rows = table(result.out)
    assert rows["mail"] == {"QUEUE": "mail", "WAITING": "0", "READY": "2", "SCHEDULED": "1", "RUNNING": "1",
                            "EXPIRED": "0", "FAILED": "0", "DONE/MIN": "0", "OLDEST": "2h00m"}
    assert rows["reports"] == {"QUEUE": "reports", "WAITING": "0", "READY": "0", "SCHEDULED": "0", "RUNNING": "0",
                               "EXPIRED": "0", "FAILED": "1", "DONE/MIN": "1", "OLDEST": "-"}
    assert rows["TOTAL"]["READY"] == "2" and rows["TOTAL"]["FAILED"] == "1"
    # Aligned: in every line, each number column ends where its header ends (right-aligned numbers).
    lines = result.out.splitlines()
    for header in ("WAITING", "READY", "SCHEDULED", "RUNNING", "FAILED", "DONE/MIN"):
        end = lines[0].index(header) + len(header)
        assert all(line[end - 1] != " " and line[end:end + 2] == "  " for line in lines), header

    as_json = {r["queue"]: r for r in json.loads(cli("status", "--dsn", pgq_dsn, "--json").out)}
    assert as_json["mail"]["ready"] == 2 and as_json["mail"]["oldest_ready_age"] >= 7200
    assert as_json["reports"]["succeeded_last_minute"] == 1 and as_json["reports"]["oldest_ready_age"] is None
    assert running.job.queue == "mail"


def test_status_counts_jobs_waiting_for_parents(cli: CLI, pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    parent = pgq_queue.enqueue("fetch", queue="mail")
    enqueue_after(db, "send", [parent], queue="mail")
    enqueue_after(db, "send", [parent], queue="mail")
    enqueue_after(db, "report", [parent], queue="reports")  # a queue holding only waiting jobs

    rows = table(cli("status", "--dsn", pgq_dsn).out)
    assert (rows["mail"]["WAITING"], rows["mail"]["READY"]) == ("2", "1")
    assert (rows["reports"]["WAITING"], rows["reports"]["READY"]) == ("1", "0")
    assert rows["TOTAL"]["WAITING"] == "3"
    as_json = {r["queue"]: r for r in json.loads(cli("status", "--dsn", pgq_dsn, "--json").out)}
    assert as_json["mail"]["waiting"] == 2 and as_json["reports"]["waiting"] == 1


# ---------------------------------------------------------------------------------------------
# purge


def _finished_jobs(pgq_queue: Queue, db: SQL, ages: dict[str, str]) -> dict[str, int]:
    """One succeeded job per entry, its finished_at moved `age` (an SQL interval) into the past."""
    ids: dict[str, int] = {}
    for name, age in ages.items():
        ids[name] = pgq_queue.enqueue("k", {"name": name})
        [claim] = pgq_queue.claim(worker="w")
        pgq_queue.complete(claim)
        db("UPDATE pgq.jobs SET finished_at = now() - %s::interval WHERE id = %s", [age, ids[name]])
    return ids


def test_purge_deletes_only_jobs_finished_before_the_duration(cli: CLI, pgq_dsn: str, pgq_queue: Queue,
                                                              db: SQL) -> None:
    ids = _finished_jobs(pgq_queue, db, {"old": "8 days", "hours": "13 hours", "recent": "10 minutes"})
    active = pgq_queue.enqueue("still-queued")

    result = cli("purge", "--older-than", "7d", "--dsn", pgq_dsn)
    assert result.code == 0 and result.out == (
        "deleted 1 job(s) that finished more than 7d ago: 0 in 0 day partition(s) dropped whole, 1 row by row\n")
    assert pgq_queue.get(ids["old"]) is None and pgq_queue.get(ids["hours"]) is not None

    assert cli("purge", "--older-than", "12h", "--dsn", pgq_dsn).out.startswith("deleted 1 job(s)")
    assert cli("purge", "--older-than", "30m", "--dsn", pgq_dsn).out.startswith("deleted 0 job(s)")
    assert cli("purge", "--older-than", "300", "--dsn", pgq_dsn).out.startswith("deleted 1 job(s)")
    assert pgq_queue.get(active) is not None


def test_purge_zero_deletes_every_finished_job(cli: CLI, pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    _finished_jobs(pgq_queue, db, {"a": "1 second", "b": "2 seconds"})
    result = cli("purge", "--older-than", "0", "--dsn", pgq_dsn)
    assert result.code == 0 and result.out.startswith("deleted 2 job(s)")


def test_purge_reports_progress_on_stderr_for_long_runs(cli: CLI, pgq_dsn: str, pgq_queue: Queue, db: SQL,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _finished_jobs(pgq_queue, db, {"a": "1 day"})
    monkeypatch.setattr(pgq.cli.purge, "PROGRESS_AFTER_S", 0.0)  # every run counts as long
    result = cli("purge", "--older-than", "1h", "--dsn", pgq_dsn)
    assert result.code == 0 and result.out == (
        "deleted 1 job(s) that finished more than 1h ago: 0 in 0 day partition(s) dropped whole, 1 row by row\n")
    assert result.err_lines and result.err_lines[0].startswith("pgq: purge: 1 jobs deleted so far")


@pytest.mark.parametrize("duration", ["7x", "d", "-5", "1.5.2h", "", "nan", "7d garbage"])
def test_purge_rejects_bad_durations(cli: CLI, pgq_dsn: str, duration: str) -> None:
    result = cli("purge", "--older-than", duration, "--dsn", pgq_dsn)
    assert result.code == 2 and "invalid duration" in result.err


def test_purge_requires_older_than(cli: CLI, pgq_dsn: str) -> None:
    result = cli("purge", "--dsn", pgq_dsn)
    assert result.code == 2 and "--older-than" in result.err


# ---------------------------------------------------------------------------------------------
# Errors every command shares


DATABASE_COMMANDS = [
    ["status"],
    ["enqueue", "k"],
    ["jobs", "list"],
    ["jobs", "show", "1"],
    ["jobs", "retry", "1"],
    ["jobs", "cancel", "1"],
    ["purge", "--older-than", "1d"],
    ["roles", "--apply"],
]


@pytest.mark.parametrize("command", [*DATABASE_COMMANDS, ["migrate"]], ids=" ".join)
def test_missing_dsn_is_a_clear_one_line_error(cli: CLI, command: list[str]) -> None:
    result = cli(*command)
    assert result.code == 2
    assert result.err_lines == ["pgq: error: no database given: pass --dsn DSN or set PGQ_DSN"]


@pytest.mark.parametrize("command", DATABASE_COMMANDS, ids=" ".join)
def test_unmigrated_database_says_run_pgq_migrate(cli: CLI, pgq_empty_dsn: str, command: list[str]) -> None:
    result = cli(*command, "--dsn", pgq_empty_dsn)
    assert result.code == 1
    assert len(result.err_lines) == 1 and "run `pgq migrate`" in result.err


@pytest.mark.parametrize(
    ("dsn", "message"),
    [
        ("host=127.0.0.1 port=1 dbname=x user=postgres", "cannot connect to the database"),
        ("not a dsn", "invalid DSN"),
        ("postgresql://postgres@127.0.0.1:5432/pgq_no_such_database_xyz", "does not exist"),
    ],
    ids=["refused", "garbage", "no-such-database"],
)
@pytest.mark.parametrize("command", [["status"], ["migrate"], ["enqueue", "k"]], ids=" ".join)
def test_bad_dsn_fails_fast_with_one_line(dsn: str, message: str, command: list[str]) -> None:
    started = time.monotonic()
    result = run_subprocess(*command, "--dsn", dsn, timeout=30)
    assert time.monotonic() - started < 10
    assert result.code != 0
    assert len(result.err_lines) == 1 and result.err.startswith("pgq: error: ")
    assert message in result.err and "Traceback" not in result.err


def test_bad_dsn_from_environment_is_reported_too() -> None:
    result = run_subprocess("jobs", "list", env={"PGQ_DSN": "host=127.0.0.1 port=1"})
    assert result.code == 1 and result.err.startswith("pgq: error: cannot connect to the database")


def test_end_to_end_through_python_dash_m(pgq_dsn: str) -> None:
    enqueued = run_subprocess("enqueue", "e2e", "--payload", '{"a": 1}', env={"PGQ_DSN": pgq_dsn})
    assert enqueued.code == 0, enqueued.err
    job_id = enqueued.out.strip()
    shown = run_subprocess("jobs", "show", job_id, "--json", "--dsn", pgq_dsn)
    assert json.loads(shown.out)["payload"] == {"a": 1}
    status = run_subprocess("status", "--dsn", pgq_dsn)
    assert table(status.out)["default"]["READY"] == "1"


# ---------------------------------------------------------------------------------------------
# Help


def _all_commands() -> list[list[str]]:
    """Every command and sub-command path of the parser, e.g. ["jobs", "list"]."""
    import argparse

    found: list[list[str]] = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        found.append(path)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])

    walk(build_parser(), [])
    return found


def test_every_command_is_covered_by_the_help_test() -> None:
    names = {" ".join(path) for path in _all_commands()}
    assert names == {"", "migrate", "worker", "enqueue", "status", "workers", "jobs", "jobs list", "jobs show",
                     "jobs explain", "jobs retry", "jobs delete",
                     "jobs cancel", "purge", "demo", "bench", "roles", "queue", "queue list", "queue pause",
                     "queue resume", "queue group-limits", "dashboard", "init"}


@pytest.mark.parametrize("path", _all_commands(), ids=lambda p: " ".join(p) or "pgq")
def test_help_of_every_command_exits_0(cli: CLI, path: list[str]) -> None:
    result = cli(*path, "--help")
    assert result.code == 0 and result.out.startswith("usage: pgq")
    if path and path not in (["jobs"], ["queue"], ["init"]):  # init connects to no database
        assert "--dsn" in result.out


def test_help_through_python_dash_m() -> None:
    result = run_subprocess("--help")
    assert result.code == 0 and "migrate" in result.out and "worker" in result.out


def test_no_command_is_a_usage_error(cli: CLI) -> None:
    result = cli()
    assert result.code == 2 and "required: COMMAND" in result.err


@pytest.mark.parametrize(("args", "said"), [
    (["worker", "--concurency", "4", "app:app"], "pgq worker: error: unrecognized option: --concurency "
                                                 "(did you mean --concurrency?)"),
    (["enqueue", "k", "--payloud", "{}"], "unrecognized option: --payloud (did you mean --payload?)"),
    (["wroker", "app:app"], "(did you mean 'worker'?)"),
    (["jobs", "lst"], "(did you mean 'list'?)"),
    (["status", "--bogus"], "pgq status: error: unrecognized option: --bogus"),
])
def test_typos_get_the_command_s_own_usage_and_a_did_you_mean(cli: CLI, args: list[str], said: str) -> None:
    result = cli(*args)
    assert result.code == 2 and result.out == ""
    assert said in result.err_lines[-1], result.err
    assert result.err_lines[0].startswith(f"usage: pgq {args[0]}" if args[0] != "wroker" else "usage: pgq ")


def test_status_watch_refreshes_until_count(cli: CLI, pgq_dsn: str, pgq_queue: Queue) -> None:
    pgq_queue.enqueue("k", {}, queue="watched")
    result = cli("status", "--dsn", pgq_dsn, "--watch", "0.05", "--count", "3")
    assert result.code == 0, result.err
    assert len(re.findall(r"every 0\.05 s, Ctrl-C to stop", result.out)) == 3
    assert result.out.count("watched") == 3 and "\x1b[2J" not in result.out  # no screen codes off a terminal
    assert cli("status", "--dsn", pgq_dsn, "--count", "2").code == 2  # --count needs --watch
