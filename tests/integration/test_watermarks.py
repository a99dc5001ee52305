"""Watermark dedupe: monotonic input watermark, dirty re-runs, already-processed input, is_dirty."""

from __future__ import annotations

from pgq import JobStatus, Queue

from .conftest import SQL


def test_input_watermark_only_grows(pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("build", dedupe_key="doc:1", watermark=5)
    assert pgq_queue.enqueue("build", dedupe_key="doc:1", watermark=3) == job_id
    job = pgq_queue.get(job_id)
    assert job is not None and job.input_watermark == 5
    assert pgq_queue.enqueue("build", dedupe_key="doc:1", watermark=9) == job_id
    job = pgq_queue.get(job_id)
    assert job is not None and job.input_watermark == 9


def test_watermark_bumped_during_run_causes_exactly_one_more_run(pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("build", dedupe_key="doc:1", watermark=1)
    [first] = pgq_queue.claim(worker="w")
    assert first.job.input_watermark == 1
    assert pgq_queue.is_dirty("default", "doc:1")
    assert pgq_queue.enqueue("build", dedupe_key="doc:1", watermark=2) == job_id  # arrives mid-run
    assert pgq_queue.enqueue("build", dedupe_key="doc:1", watermark=3) == job_id
    assert pgq_queue.complete(first, {"built": 1}) is JobStatus.QUEUED  # dirty: one more run
    assert pgq_queue.claim(worker="w2", kinds=["other"]) == []
    [second] = pgq_queue.claim(worker="w")
    assert second.id == job_id and second.job.input_watermark == 3 and second.job.attempts == 1
    assert second.job.done_watermark == 1
    assert pgq_queue.claim(worker="w") == []  # never two runs of one key at once
    assert pgq_queue.complete(second, {"built": 3}) is JobStatus.SUCCEEDED
    assert pgq_queue.claim(worker="w") == []  # exactly one more run, not two
    job = pgq_queue.get(job_id)
    assert job is not None and job.done_watermark == 3 and job.result == {"built": 3}
    assert not pgq_queue.is_dirty("default", "doc:1")


def test_processed_watermark_creates_nothing_and_returns_processing_job(pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("build", dedupe_key="doc:2", watermark=10)
    [claim] = pgq_queue.claim(worker="w")
    pgq_queue.complete(claim)
    assert pgq_queue.enqueue("build", dedupe_key="doc:2", watermark=10) == job_id
    assert pgq_queue.enqueue("build", dedupe_key="doc:2", watermark=7) == job_id
    assert db("SELECT count(*) AS n FROM pgq.jobs") == [{"n": 1}]
    newer = pgq_queue.enqueue("build", dedupe_key="doc:2", watermark=11)
    assert newer != job_id
    assert pgq_queue.is_dirty("default", "doc:2")


def test_processed_watermark_survives_purge_of_the_job(pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("build", dedupe_key="doc:3", watermark=4)
    [claim] = pgq_queue.claim(worker="w")
    pgq_queue.complete(claim)
    db("UPDATE pgq.jobs SET finished_at = now() - interval '30 days'")
    assert pgq_queue.purge(60) == 1
    assert pgq_queue.enqueue("build", dedupe_key="doc:3", watermark=4) == job_id  # still known as done
    assert db("SELECT count(*) AS n FROM pgq.jobs") == [{"n": 0}]


def test_failed_run_does_not_mark_watermark_processed(pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("build", dedupe_key="doc:4", watermark=1, max_attempts=1)
    [claim] = pgq_queue.claim(worker="w")
    pgq_queue.fail(claim, "broken")
    again = pgq_queue.enqueue("build", dedupe_key="doc:4", watermark=1)
    assert again != job_id


def test_watermark_from_sql_api_and_python_agree(pgq_queue: Queue, db: SQL) -> None:
    [row] = db("SELECT pgq.enqueue('build', dedupe_key => 'doc:5', watermark => 2) AS id")
    assert pgq_queue.enqueue("build", dedupe_key="doc:5", watermark=6) == row["id"]
    job = pgq_queue.get(row["id"])
    assert job is not None and job.input_watermark == 6


def test_unknown_key_is_not_dirty(pgq_queue: Queue) -> None:
    assert not pgq_queue.is_dirty("default", "never-seen")


def test_an_enqueue_racing_the_completion_adds_no_run_of_processed_input(pgq_dsn: str, pgq_queue: Queue,
                                                                        db: SQL) -> None:
    # The key's run processed watermark 5 and its acknowledgement is in flight (not committed) when
    # watermark 5 is enqueued again. Either order of the two is covered by the contract: no second
    # run. The enqueue waits for the acknowledgement and then answers with the job that processed it.
    import threading
    import time

    import psycopg

    from pgq import _sql

    job_id = pgq_queue.enqueue("build", dedupe_key="doc:3", watermark=5)
    [claim] = pgq_queue.claim(worker="w")
    answers: list[int] = []
    with psycopg.connect(pgq_dsn) as finisher:  # one open transaction
        finisher.execute(_sql.query("job_complete"), {
            "ids": [claim.id], "tokens": [claim.token], "results": [None], "watermarks": [5], "progress": None,
            "lock_timeout": None})
        enqueuer = threading.Thread(
            target=lambda: answers.append(pgq_queue.enqueue("build", dedupe_key="doc:3", watermark=5)))
        enqueuer.start()
        time.sleep(0.5)
        assert answers == []  # waiting for the acknowledgement's transaction
        finisher.commit()
    enqueuer.join(10)
    assert answers == [job_id]
    assert db("SELECT id, status::text FROM pgq.jobs") == [{"id": job_id, "status": "succeeded"}]
    assert not pgq_queue.is_dirty("default", "doc:3")
