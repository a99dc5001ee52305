"""Untrusted text and bad input, through the Python API, the command line and the SQL API.

Every value reaches Postgres as a bound parameter, so text that looks like SQL, psycopg placeholders,
JSON or escapes is stored and read back byte for byte. Input pgq rejects is rejected with one clear
line before anything is written: the tables are compared row for row before and after.
"""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import psycopg
import pytest

import pgq
from pgq import JobSpec, Queue
from pgq.cli import main
from pgq.errors import InvalidJob
from pgq.models import MAX_PAYLOAD_BYTES, JobStatus

from .conftest import SQL

TRICKY = {
    "quotes": "it's \"double\" and `back` quoted",
    "percent": "100% %s %% %(x)s %(kind)s %b {0} {x}",
    "semicolon": "x'); DROP TABLE pgq.jobs; -- ; SELECT 1",
    "backslash": "C:\\dir\\ \\x00 \\u0000 \\n \\\\",  # backslashes, not control characters
    "newlines": "line 1\nline 2\r\nline 3\ttabbed\x0b\x1b[31m",
    "dollar": "$1 $$ $fn$ :name ? ?? E'\\''",
    "json": '{"a": [1, 2], "b": null}',
    "unicode": "žluťoučký kůň 🐘 日本語 \u202eevil\u202c \u00a0 \ufeff",
}
# 10 KB of text made of all of the above: repeated, so it compresses and fits pgq's indexes.
TRICKY["10kb"] = ("".join(TRICKY.values()) * 100)[:10_240]
TEXTS = pytest.mark.parametrize("text", list(TRICKY.values()), ids=list(TRICKY))

# 10 KB that does not compress: fine where a value is not indexed (kind, payload, errors, results).
# Random but the same in every process (a fixed seed): the test ids that show it must not differ
# between the processes of a parallel run (pytest-xdist refuses to start when they do).
RANDOM_10KB = "x" + base64.urlsafe_b64encode(random.Random(10_240).randbytes(7_680)).decode()  # never "-..."


def all_rows(db: SQL) -> list[list[dict[str, Any]]]:
    """Every row of pgq's tables, to show that rejected input wrote nothing."""
    return [db(f"SELECT * FROM pgq.{t} ORDER BY 1") for t in ("jobs", "key_watermarks", "concurrency_limits")]


@TEXTS
def test_python_api_stores_and_reads_back_text_unchanged(pgq_queue: Queue, db: SQL, text: str) -> None:
    payload = {text: text, "list": [text, {"nested": text}]}
    job_id = pgq_queue.enqueue(text, payload, queue=text, dedupe_key=text)
    assert pgq_queue.enqueue(text, {}, queue=text, dedupe_key=text) == job_id  # the exact key matches

    job = pgq_queue.get(job_id)
    assert job is not None
    assert (job.kind, job.queue, job.dedupe_key, job.payload) == (text, text, text, payload)
    assert [j.id for j in pgq_queue.list(queue=text, kind=text)] == [job_id]
    assert pgq_queue.is_dirty(text, text)
    assert [row["queue"] for row in pgq_queue.stats()] == [text]

    [claim] = pgq_queue.claim(worker=text, queues=[text], kinds=[text])
    assert claim.job.claimed_by == text
    assert pgq_queue.fail(claim, text, retry_in=0).last_error == text
    [claim] = pgq_queue.claim(worker=text, queues=[text])
    assert pgq_queue.complete(claim, {text: text}) is JobStatus.SUCCEEDED
    done = pgq_queue.get(job_id)
    assert done is not None and done.result == {text: text} and done.last_error == text
    # Read back by Postgres itself, not only by pgq's own decoding.
    assert db("SELECT kind = %(t)s AND queue = %(t)s AND dedupe_key = %(t)s AND payload -> %(t)s = to_jsonb(%(t)s)"
              " AND claimed_by = %(t)s AS same FROM pgq.jobs", {"t": text}) == [{"same": True}]


JSON_SHAPES: list[Any] = [
    {}, [], "", 0, -1, 2**63 + 5, -(10**40), 1.5, -0.0, 1e-300, 6.5e-7, 0.1 + 0.2, True, False,
    {"nested": {"deeper": [[[{"x": [1, {"y": None}]}]]]}},
    {"escapes": "\"\\/\b\f\n\r\t\u0001 \u2028 😀", "ключ": "значение", "🐘": ["日本語"]},
    [TRICKY["10kb"], RANDOM_10KB],
]


def test_payloads_of_every_json_shape_come_back_equal_from_a_claim(pgq_queue: Queue, db: SQL) -> None:
    # Claims decode payloads from binary jsonb with pgq's own loader (pgq._ops): the values must be
    # exactly what json.loads makes of Postgres's text for them, and what was enqueued.
    ids = pgq_queue.enqueue_many([JobSpec("shape", payload, queue="shapes") for payload in JSON_SHAPES])
    claims = pgq_queue.claim(worker="w", queues=["shapes"], limit=len(JSON_SHAPES))
    by_id = {c.id: c.job.payload for c in claims}
    texts = {r["id"]: json.loads(r["t"]) for r in db("SELECT id, payload::text AS t FROM pgq.jobs")}
    for job_id, payload in zip(ids, JSON_SHAPES, strict=True):
        assert by_id[job_id] == texts[job_id] == payload, payload
        assert type(by_id[job_id]) is type(payload)
    # Results come back through the same loader when a claim reads a re-run's earlier result.
    for claim in claims:
        pgq_queue.complete(claim, claim.job.payload)
    assert [pgq_queue.get(i).result for i in ids] == JSON_SHAPES  # type: ignore[union-attr]


def test_jsonb_loader_refuses_an_unknown_binary_format_and_matches_json_loads_errors() -> None:
    from pgq._ops.driver import _JsonbBinaryLoader

    loader = _JsonbBinaryLoader(0)
    assert loader.load(b"\x01" + b'{"a": [1, 2.5, null]}') == {"a": [1, 2.5, None]}
    assert loader.load(memoryview(b"\x01[1] ")) == [1]  # trailing space: json.loads rules
    with pytest.raises(psycopg.DataError, match="unknown jsonb binary format"):
        loader.load(b"\x02{}")
    with pytest.raises(psycopg.DataError, match="unknown jsonb binary format"):
        loader.load(b"")
    for bad in (b"\x01{", b"\x01[1] x", b"\x01 "):
        with pytest.raises(json.JSONDecodeError):
            loader.load(bad)


def test_ten_kilobytes_of_random_text_round_trip_where_nothing_indexes_them(pgq_queue: Queue, db: SQL) -> None:
    text = RANDOM_10KB
    # A kind is indexed since revision 0027 (jobs_claim_kind_idx): one this long is refused, nothing written.
    before = all_rows(db)
    with pytest.raises(InvalidJob, match="keep queue names, kinds and dedupe keys under about 2 KB"):
        pgq_queue.enqueue(text, {"n": 1}, queue="q")
    assert all_rows(db) == before
    job_id = pgq_queue.enqueue("k", {text: text}, queue="q")
    [claim] = pgq_queue.claim(worker=text, queues=["q"])
    pgq_queue.fail(claim, text, retry_in=0)
    job = pgq_queue.get(job_id)
    assert job is not None
    assert (job.kind, job.payload, job.claimed_by, job.last_error) == ("k", {text: text}, text, text)
    [claim] = pgq_queue.claim(worker=text, queues=["q"])  # and a terminal failure, which is indexed too
    assert pgq_queue.fail(claim, text, final=True).status is JobStatus.FAILED


@TEXTS
def test_sql_api_stores_and_reads_back_text_unchanged(db: SQL, text: str) -> None:
    enqueue = ("SELECT pgq.enqueue(%(t)s, jsonb_build_object(%(t)s::text, %(t)s::text), queue => %(t)s, "
               "dedupe_key => %(t)s)"
               " AS id")
    [first] = db(enqueue, {"t": text})
    assert db(enqueue, {"t": text}) == [first]
    assert db("SELECT kind, queue, dedupe_key, payload FROM pgq.jobs") == [
        {"kind": text, "queue": text, "dedupe_key": text, "payload": {text: text}}]
    assert db("SELECT queue FROM pgq.queue_stats") == [{"queue": text}]


@TEXTS
def test_command_line_stores_and_reads_back_text_unchanged(pgq_dsn: str, capsys: pytest.CaptureFixture[str],
                                                           text: str) -> None:
    payload = {text: text}
    assert main(["enqueue", text, "--dsn", pgq_dsn, "--queue", text, "--dedupe-key", text,
                 "--payload", json.dumps(payload)]) == 0
    job_id = int(capsys.readouterr().out)
    assert main(["jobs", "list", "--dsn", pgq_dsn, "--queue", text, "--kind", text, "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert main(["jobs", "show", str(job_id), "--dsn", pgq_dsn, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    for job in (listed, shown):
        assert (job["id"], job["kind"], job["queue"], job["dedupe_key"], job["payload"]) == (
            job_id, text, text, text, payload)
    # The table view stays one line per job whatever the text holds.
    assert main(["jobs", "list", "--dsn", pgq_dsn, "--queue", text]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


# ---------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"payload": {1, 2}}, "payload is not JSON-serializable"),
        ({"payload": b"bytes"}, "payload is not JSON-serializable"),
        ({"payload": {"x": float("inf")}}, "payload is not JSON-serializable"),
        ({"payload": {"k\x00": 1}}, "payload contains a NUL character"),
        ({"queue": "q\x00"}, "queue contains a NUL character"),
        ({"dedupe_key": "d\x00"}, "dedupe_key contains a NUL character"),
        ({"priority": 32_768}, "priority 32768 out of range [-32768, 32767]"),
        ({"priority": -32_769}, "priority -32769 out of range [-32768, 32767]"),
        ({"priority": True}, "priority must be an int"),
        ({"payload": "x" * (MAX_PAYLOAD_BYTES - 1)}, f"the limit is {MAX_PAYLOAD_BYTES}"),
        ({"queue": RANDOM_10KB}, "too large for pgq's indexes"),
        ({"dedupe_key": RANDOM_10KB}, "too large for pgq's indexes"),
    ],
    ids=lambda v: str(v)[:30] if isinstance(v, str) else None,
)
def test_python_api_rejects_bad_input_with_one_line_and_writes_nothing(pgq_queue: Queue, db: SQL,
                                                                       kwargs: dict[str, Any], message: str) -> None:
    pgq_queue.enqueue("existing", {"n": 1}, queue="q", dedupe_key="e")
    before = all_rows(db)
    for attempt in (
        lambda: pgq_queue.enqueue("k", **kwargs),
        lambda: pgq_queue.enqueue_many([JobSpec("ok"), JobSpec("ok2", queue="q"), {"kind": "k", **kwargs}]),
    ):
        with pytest.raises(InvalidJob) as info:
            attempt()
        assert message in str(info.value) and "\n" not in str(info.value)
    assert all_rows(db) == before


def test_payload_size_limit_is_exact(pgq_queue: Queue) -> None:
    # JSON text of a string payload is the string plus its two quotes.
    at_limit = "x" * (MAX_PAYLOAD_BYTES - 2)
    job = pgq_queue.get(pgq_queue.enqueue("k", at_limit))
    assert job is not None and job.payload == at_limit
    with pytest.raises(InvalidJob, match=f"{MAX_PAYLOAD_BYTES + 1} bytes of JSON; the limit is {MAX_PAYLOAD_BYTES}"):
        pgq_queue.enqueue("k", at_limit + "x")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["enqueue", "k", "--payload", "{'a': 1}"], 2, "--payload is not valid JSON"),
        (["enqueue", "k", "--payload", '{"a": NaN}'], 2, "--payload is not valid JSON"),
        (["enqueue", "k", "--payload", '{"k\\u0000": 1}'], 2, "payload contains a NUL character"),
        (["enqueue", "k", "--payload", json.dumps({"x": "x" * MAX_PAYLOAD_BYTES})], 2,
         f"the limit is {MAX_PAYLOAD_BYTES}"),
        (["enqueue", "k", "--priority", "32768"], 2, "priority must be in -32768..32767, got 32768"),
        (["enqueue", "k", "--priority", "-32769"], 2, "priority must be in -32768..32767, got -32769"),
        (["enqueue", "k", "--queue", ""], 2, "queue must not be empty"),
        (["enqueue", "k", "--queue", RANDOM_10KB], 2, "too large for pgq's indexes"),
        (["jobs", "list", "--queue", "no such queue"], 1, "no such queue: 'no such queue' holds no jobs"),
        (["jobs", "list", "--queue", "q", "--status", "done"], 2, "unknown status 'done'"),
    ],
    ids=lambda v: " ".join(a[:20] for a in v) if isinstance(v, list) else None,
)
def test_command_line_rejects_bad_input_with_one_line_and_writes_nothing(
    pgq_dsn: str, pgq_queue: Queue, db: SQL, capsys: pytest.CaptureFixture[str], args: list[str], code: int,
    message: str,
) -> None:
    pgq_queue.enqueue("existing", {"n": 1}, queue="q")
    before = all_rows(db)
    capsys.readouterr()
    assert main([*args, "--dsn", pgq_dsn]) == code
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("pgq: error: ") or captured.err.startswith("usage: ")
    assert message in captured.err and "Traceback" not in captured.err
    assert all_rows(db) == before


def test_sql_api_refuses_bad_input_and_writes_nothing(db: SQL) -> None:
    import psycopg

    before = all_rows(db)
    for statement, params in (
        ("SELECT pgq.enqueue('k', 'not json')", None),
        ("SELECT pgq.enqueue('k', priority => 40000)", None),
        ("SELECT pgq.enqueue('')", None),
        ("SELECT pgq.enqueue('k', queue => %s)", [RANDOM_10KB]),
    ):
        with pytest.raises(psycopg.Error):
            db(statement, params)
    assert all_rows(db) == before


def test_worker_fails_a_payload_that_does_not_fit_its_handler_and_keeps_going(pgq_dsn: str, db: SQL) -> None:
    import asyncio

    from ..worker.conftest import run_worker_until

    app = pgq.App(pgq_dsn)

    @app.task(queue="q")
    def resize(image: str, width: int = 100) -> str:
        return f"{image}@{width}"

    async def enqueue(queue: pgq.AsyncQueue) -> None:
        await queue.enqueue("resize", {"image": "a"}, queue="q")
        await queue.enqueue("resize", {"imgae": "b"}, queue="q")  # misspelt
        await queue.enqueue("resize", {"image": "c", "height": 5}, queue="q")  # unexpected
        await queue.enqueue("resize", ["d"], queue="q")  # not an object
        await queue.enqueue("resize", {"image": "e", "width": 7}, queue="q")

    async def finished(queue: pgq.AsyncQueue) -> bool:
        return all(j.status in (JobStatus.SUCCEEDED, JobStatus.FAILED) for j in await queue.list(limit=10))

    asyncio.run(run_worker_until(app, finished, before=enqueue, queues=["q"]))
    jobs = db("SELECT status::text, attempts, result, last_error FROM pgq.jobs ORDER BY id")
    assert [(j["status"], j["attempts"]) for j in jobs] == [
        ("succeeded", 1), ("failed", 1), ("failed", 1), ("failed", 1), ("succeeded", 1)]
    assert (jobs[0]["result"], jobs[4]["result"]) == ("a@100", "e@7")
    errors = [j["last_error"] for j in jobs[1:4]]
    assert "task 'resize'" in errors[0] and "'image'" in errors[0] and "unexpected: 'imgae'" in errors[0]
    assert "task 'resize'" in errors[1] and "unexpected keyword argument 'height'" in errors[1]
    assert "task 'resize'" in errors[2] and "JSON object" in errors[2]
