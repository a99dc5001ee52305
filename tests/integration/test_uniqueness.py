"""Uniqueness variants of a dedupe key (revision 0018) on real PostgreSQL: unique_for dedupes against
recent (and purged) finishes, replace and debounce rewrite a job not started yet and queue a new one
behind a running job, bad input writes nothing, and concurrent producers (threads, and processes)
end with exactly the expected jobs per key, carrying the last committed payload."""

from __future__ import annotations

import datetime as dt
import itertools
import threading

import psycopg
import pytest

from pgq import InvalidJob, JobSpec, JobStatus, Queue

from .. import producers
from .conftest import SQL

HOUR = dt.timedelta(hours=1)


def test_unique_for_returns_a_recently_finished_job_even_after_its_purge(pgq_queue: Queue, db: SQL) -> None:
    a = pgq_queue.enqueue("k", dedupe_key="u", unique_for=HOUR)
    assert pgq_queue.enqueue("k", dedupe_key="u", unique_for=HOUR) == a
    (claim,) = pgq_queue.claim(worker="w")
    pgq_queue.complete(claim)
    assert pgq_queue.enqueue("k", dedupe_key="u", unique_for=HOUR) == a
    assert pgq_queue.enqueue("k", dedupe_key="u") != a  # the plain dedupe sees active jobs only
    db("DELETE FROM pgq.jobs WHERE dedupe_key = 'u'")
    assert pgq_queue.enqueue("k", dedupe_key="u", unique_for=HOUR) == a  # pgq.key_finishes
    db("UPDATE pgq.key_finishes SET finished_at = now() - interval '2 hours'")
    fresh = pgq_queue.enqueue("k", dedupe_key="u", unique_for=HOUR)
    assert fresh != a and pgq_queue.get(fresh).status is JobStatus.QUEUED


def test_replace_rewrites_a_queued_job_and_queues_one_behind_a_running_job(pgq_queue: Queue, db: SQL) -> None:
    a = pgq_queue.enqueue("k", {"v": 1}, dedupe_key="r", on_conflict="replace")
    assert pgq_queue.enqueue("k", {"v": 2}, dedupe_key="r", on_conflict="replace", priority=3) == a
    job = pgq_queue.get(a)
    assert (job.payload, job.priority) == ({"v": 2}, 3)
    (claim,) = pgq_queue.claim(worker="w")
    b = pgq_queue.enqueue("k", {"v": 3}, dedupe_key="r", on_conflict="replace")
    assert b != a and pgq_queue.get(b).status is JobStatus.WAITING
    assert pgq_queue.enqueue("k", {"v": 4}, dedupe_key="r", on_conflict="replace") == b
    assert pgq_queue.get(a).payload == {"v": 2}  # the running job is never touched
    pgq_queue.complete(claim)
    job = pgq_queue.get(b)
    assert (job.status, job.payload) == (JobStatus.QUEUED, {"v": 4})


def test_debounce_pushes_run_at_from_the_last_enqueue(pgq_queue: Queue, db: SQL) -> None:
    a = pgq_queue.enqueue("k", {"v": 1}, dedupe_key="d", debounce=dt.timedelta(seconds=5))
    first = pgq_queue.get(a).run_at
    assert pgq_queue.enqueue("k", {"v": 2}, dedupe_key="d", debounce=dt.timedelta(seconds=5)) == a
    job = pgq_queue.get(a)
    assert job.payload == {"v": 2} and job.run_at >= first
    (row,) = db("SELECT run_at - statement_timestamp() AS left FROM pgq.jobs WHERE id = %s", [a])
    assert dt.timedelta(seconds=3) < row["left"] <= dt.timedelta(seconds=5)
    assert pgq_queue.claim(worker="w") == []


@pytest.mark.parametrize("options", [
    {"unique_for": HOUR},
    {"on_conflict": "replace"},
    {"dedupe_key": "x", "unique_for": 0},
    {"dedupe_key": "x", "debounce": -1},
    {"dedupe_key": "x", "on_conflict": "overwrite"},
    {"dedupe_key": "x", "unique_for": HOUR, "on_conflict": "replace"},
    {"dedupe_key": "x", "debounce": 5, "on_conflict": "ignore"},
    {"dedupe_key": "x", "debounce": 5, "delay": 1},
    {"dedupe_key": "x", "on_conflict": "replace", "watermark": 1},
    {"dedupe_key": "x", "unique_for": HOUR, "depends_on": [1]},
])
def test_bad_uniqueness_options_raise_and_write_nothing(pgq_queue: Queue, db: SQL, options: dict[str, object]) -> None:
    with pytest.raises(InvalidJob):
        pgq_queue.enqueue("k", **options)  # type: ignore[arg-type]
    assert db("SELECT count(*) AS n FROM pgq.jobs")[0]["n"] == 0


def test_a_batch_mixes_variants_and_plain_jobs_in_input_order(pgq_queue: Queue) -> None:
    ids = pgq_queue.enqueue_many([
        JobSpec("k", {"n": 0}), JobSpec("k", {"n": 1}, dedupe_key="m", on_conflict="replace"),
        JobSpec("k", {"n": 2}, dedupe_key="m", on_conflict="replace"), JobSpec("k", {"n": 3}, dedupe_key="p")])
    assert ids[1] == ids[2] and len(set(ids)) == 3
    assert [pgq_queue.get(i).payload for i in ids] == [{"n": 0}, {"n": 2}, {"n": 2}, {"n": 3}]


def test_the_sql_api_takes_the_variants(pgq_queue: Queue, db: SQL) -> None:
    (a,) = db("SELECT pgq.enqueue('k', '{\"v\": 1}', dedupe_key => 's', on_conflict => 'replace') AS id")
    (b,) = db("SELECT pgq.enqueue('k', '{\"v\": 2}', dedupe_key => 's', debounce => interval '5 seconds') AS id")
    assert a == b and pgq_queue.get(a["id"]).payload == {"v": 2}
    with pytest.raises(Exception, match="on_conflict must be"):
        db("SELECT pgq.enqueue('k', dedupe_key => 's', on_conflict => 'bad')")


@pytest.mark.parametrize("options", [{"unique_for": HOUR}, {"on_conflict": "replace"},
                                     {"debounce": dt.timedelta(seconds=5)}])
def test_concurrent_producers_leave_one_job_per_key_with_the_last_committed_payload(
        pgq_queue: Queue, db: SQL, options: dict[str, object]) -> None:
    keys = ["c1", "c2", "c3"]
    ids: list[int] = []
    errors: list[BaseException] = []

    def producer(t: int) -> None:
        try:
            for i in range(15):
                for key in keys:
                    ids.append(pgq_queue.enqueue("k", {"t": t, "i": i}, dedupe_key=key, **options))  # type: ignore[arg-type]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    rows = db("SELECT dedupe_key, count(*) AS n, max(id) AS id FROM pgq.jobs GROUP BY dedupe_key ORDER BY 1")
    assert [(r["dedupe_key"], r["n"]) for r in rows] == [(k, 1) for k in keys]
    assert set(ids) == {r["id"] for r in rows}
    if "unique_for" not in options:
        # The last committed enqueue of each key wrote last: its payload is the one a thread's
        # final enqueue of the key gave, and every thread ends with i = 14.
        for r in rows:
            assert pgq_queue.get(r["id"]).payload["i"] == 14


def test_unique_for_is_at_most_31_days(pgq_queue: Queue, db: SQL) -> None:
    with pytest.raises(InvalidJob, match="at most 31 days"):
        pgq_queue.enqueue("k", dedupe_key="x", unique_for=dt.timedelta(days=32))
    with pytest.raises(Exception, match="at most 31 days"):
        db("SELECT pgq.enqueue('k', dedupe_key => 'x', unique_for => interval '32 days')")
    assert pgq_queue.enqueue("k", dedupe_key="x", unique_for=dt.timedelta(days=31)) > 0


def test_a_replace_behind_a_job_that_finishes_meanwhile_replaces_the_key_s_new_job(
        pgq_queue: Queue, db: SQL, pgq_dsn: str) -> None:
    # The running job finishes, and a plain enqueue adds the key's next job, after the replace put its
    # job behind the running one: when released, the replacement must not come out queued beside the
    # plain job, but chained behind it.
    a = pgq_queue.enqueue("k", {"v": 0}, dedupe_key="x", on_conflict="replace")
    pgq_queue.claim(worker="w")
    result: list[int] = []
    errors: list[BaseException] = []

    def producer() -> None:
        try:
            result.append(pgq_queue.enqueue("k", {"v": 2}, dedupe_key="x", on_conflict="replace"))
        except BaseException as exc:
            errors.append(exc)

    with psycopg.connect(pgq_dsn) as other:
        other.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR UPDATE", [a])
        thread = threading.Thread(target=producer)
        thread.start()
        # Since revision 0033 pgq.enqueue_after locks no parent that can still run (a finishing job's
        # move would wait for that lock): the replace does not wait on the held row, its job waits
        # behind the running one.
        thread.join(10)
        assert errors == [] and len(result) == 1
        other.execute("UPDATE pgq.jobs SET status = 'succeeded', finished_at = now(), lease_token = NULL, "
                      "lease_expires_at = NULL WHERE id = %s", [a])
        (plain,) = other.execute("SELECT pgq.enqueue('k', '{\"v\": 1}', dedupe_key => 'x')").fetchone()  # type: ignore[misc]
    thread.join(10)
    db("SELECT pgq.settle(100)")  # what the finish by hand did not release
    rows = db("SELECT id, status::text, payload FROM pgq.jobs WHERE dedupe_key = 'x' ORDER BY id")
    # One active job of the key at any time: the plain enqueue's, and the replacement (the newest
    # input) chained behind it, so that it runs last.
    [replacement] = result
    assert [(r["id"], r["status"], r["payload"]) for r in rows] == [
        (a, "succeeded", {"v": 0}), (replacement, "waiting", {"v": 2}), (plain, "queued", {"v": 1})]
    assert db("SELECT parent_id FROM pgq.job_dependencies WHERE job_id = %s AND parent_outcome IS NULL",
              (replacement,)) == [{"parent_id": plain}]


def test_the_job_behind_a_cancelled_running_job_still_runs(pgq_queue: Queue) -> None:
    # Replace: the job behind holds the newer input, which must still be processed.
    a = pgq_queue.enqueue("k", {"v": 1}, dedupe_key="c", on_conflict="replace")
    pgq_queue.claim(worker="w")
    b = pgq_queue.enqueue("k", {"v": 2}, dedupe_key="c", on_conflict="replace")
    assert pgq_queue.cancel(a).status is JobStatus.CANCELLED
    job = pgq_queue.get(b)
    assert (job.status, job.payload) == (JobStatus.QUEUED, {"v": 2})
    (claim,) = pgq_queue.claim(worker="w")
    assert claim.job.id == b


def test_a_purge_prunes_key_finishes_past_the_longest_window(pgq_queue: Queue, db: SQL) -> None:
    db("INSERT INTO pgq.key_finishes (queue, dedupe_key, job_id, finished_at) "
       "SELECT 'default', 'old' || n, n, now() - interval '40 days' - n * interval '1 second' "
       "FROM generate_series(1, 25) n")
    db("INSERT INTO pgq.key_finishes VALUES ('default', 'recent', 0, now() - interval '30 days')")
    a = pgq_queue.enqueue("k", dedupe_key="p", unique_for=HOUR)
    (claim,) = pgq_queue.claim(worker="w")
    pgq_queue.complete(claim)
    db("DELETE FROM pgq.jobs WHERE id = %s", [a])
    rows = db("SELECT dedupe_key FROM pgq.key_finishes ORDER BY finished_at")
    # Up to 10 of the oldest go per purged keyed job; the recent ones and the new one stay.
    assert len(rows) == 25 - 10 + 2
    assert {r["dedupe_key"] for r in rows} >= {"recent", "p"} and "old25" not in {r["dedupe_key"] for r in rows}
    assert pgq_queue.enqueue("k", dedupe_key="p", unique_for=HOUR) == a


def test_a_replace_released_late_behind_a_key_taken_meanwhile_waits_for_it(pgq_dsn: str, pgq_queue: Queue,
                                                                             db: SQL) -> None:
    """A replace queued behind a running job in a producer's transaction left open: the running job
    finishes without seeing the new edge, a plain enqueue takes the free key, then the producer
    commits. The settle that releases the replacement finds the key held: it chains the replacement
    behind the key's new job instead of failing on the unique index (which stopped every settle)."""
    running = pgq_queue.enqueue("k", {"v": 0}, dedupe_key="late")
    (claim,) = pgq_queue.claim(worker="w")
    with psycopg.connect(pgq_dsn) as producer:
        behind = pgq_queue.enqueue("k", {"v": 1}, dedupe_key="late", on_conflict="replace", conn=producer)
        pgq_queue.complete(claim)  # cannot see the edge yet
        plain = pgq_queue.enqueue("k", {"v": 2}, dedupe_key="late")
        assert plain not in (running, behind)
        producer.commit()
    db("SELECT pgq.settle(1000)")
    assert pgq_queue.get(behind).status is JobStatus.WAITING
    assert [p.id for p in pgq_queue.dependencies(behind).parents] == [running, plain]
    (claim,) = pgq_queue.claim(worker="w")
    assert claim.job.id == plain
    pgq_queue.complete(claim)
    job = pgq_queue.get(behind)
    assert (job.status, job.payload) == (JobStatus.QUEUED, {"v": 1})  # the newer input still runs
    db("SELECT pgq.settle(1000)")  # and the settle has nothing left that fails


def test_a_batch_of_many_keys_takes_no_entry_of_the_shared_lock_table(pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    """Producers of a key are serialized by the row lock of the key's row of pgq.unique_locks
    (revision 0021), one per key: a batch of 3,000 distinct keys takes no advisory lock (one per
    key would take a good part of PostgreSQL's shared lock table, and a few such batches at once
    would exhaust it), and each of its keys has its row."""
    specs = [JobSpec("k", {"i": i}, dedupe_key=f"many-{i}", unique_for=HOUR) for i in range(3000)]
    with psycopg.connect(pgq_dsn) as conn:
        ids = pgq_queue.enqueue_many(specs, conn=conn)
        (held,) = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                               "AND pid = pg_backend_pid()").fetchone() or (None,)
        conn.commit()
    assert len(set(ids)) == 3000
    assert held == 0
    assert db("SELECT count(*) AS n FROM pgq.unique_locks WHERE dedupe_key LIKE 'many-%%'") == [{"n": 3000}]
    assert pgq_queue.enqueue_many(specs[:10]) == ids[:10]  # and they dedupe


@pytest.mark.slow
@pytest.mark.parametrize("options", [{"unique_for": 3600.0}, {"on_conflict": "replace"}, {"debounce": 30.0}])
def test_producer_processes_leave_exactly_the_expected_jobs_with_the_last_committed_payload(
        pgq_dsn: str, pgq_queue: Queue, db: SQL, options: dict[str, object]) -> None:
    """Four producer processes (tests/producers.py) race on four keys: one with a running job, one
    with a job finished a moment ago, two new. Each producer's enqueue writes a row of `produced` in
    its own transaction, numbered in commit order per key (the key's lock is held until commit).
    Afterwards each key has exactly the jobs the variant allows, every producer got their ids, and a
    job a producer may write carries the payload of the key's first (unique_for) or last (replace,
    debounce) committed enqueue."""
    db("CREATE TABLE produced (id bigserial PRIMARY KEY, key text NOT NULL, payload jsonb NOT NULL, "
       "job_id bigint NOT NULL)")
    running = pgq_queue.enqueue("k", {"before": "running"}, dedupe_key="running")
    done = pgq_queue.enqueue("k", {"before": "done"}, dedupe_key="done")
    claims = {c.id: c for c in pgq_queue.claim(worker="w", limit=10)}
    pgq_queue.complete(claims[done])
    keys = ["running", "done", "new1", "new2"]
    rounds = 25
    producers.finish(producers.start(pgq_dsn, "unique", [
        {"kind": "k", "keys": keys, "rounds": rounds, "options": options, "finale_after": 4.0}] * 4))

    assert db("SELECT count(*) AS n FROM produced") == [{"n": 4 * rounds * len(keys)}]
    for key in keys:  # the race was real: the producers' enqueues of each key interleaved
        order = [r["p"] for r in db("SELECT payload->>'p' AS p FROM produced WHERE key = %s ORDER BY id", [key])]
        assert sum(a != b for a, b in itertools.pairwise(order)) >= rounds, (key, order)
    jobs = {key: db("SELECT id, status::text AS status, payload, run_at > now() + interval '20 s' AS pushed "
                    "FROM pgq.jobs WHERE dedupe_key = %s ORDER BY id", [key]) for key in keys}
    returned = {key: {r["job_id"] for r in db("SELECT DISTINCT job_id FROM produced WHERE key = %s", [key])}
                for key in keys}
    first, last = ({key: db(f"SELECT payload FROM produced WHERE key = %s ORDER BY id {order} LIMIT 1",
                            [key])[0]["payload"] for key in keys} for order in ("ASC", "DESC"))
    if "unique_for" in options:
        # Nothing new for the running and the recently finished key; one job for each new key, with
        # the payload its first committed producer gave.
        assert [(r["id"], r["status"]) for r in jobs["running"]] == [(running, "running")]
        assert [(r["id"], r["status"]) for r in jobs["done"]] == [(done, "succeeded")]
        assert returned["running"] == {running} and returned["done"] == {done}
        for key in ("new1", "new2"):
            [job] = jobs[key]
            assert returned[key] == {job["id"]} and (job["status"], job["payload"]) == ("queued", first[key])
        return
    # replace, debounce: the running job untouched, one job behind it; one new job after the finished
    # one; one job for each new key; each new job with the last committed payload.
    [before, behind] = jobs["running"]
    assert (before["id"], before["status"], before["payload"]) == (running, "running", {"before": "running"})
    assert behind["status"] == "waiting"
    [finished, after] = jobs["done"]
    assert (finished["id"], finished["status"]) == (done, "succeeded")
    news = {"running": behind, "done": after, "new1": jobs["new1"][0], "new2": jobs["new2"][0]}
    assert [len(jobs[k]) for k in ("new1", "new2")] == [1, 1]
    for key, job in news.items():
        assert returned[key] == {job["id"]}, key
        assert job["payload"] == last[key], key
        assert job["pushed"] is ("debounce" in options), key


def test_the_settle_prunes_key_lock_rows_unused_for_an_hour_but_not_a_held_one(pgq_dsn: str, db: SQL) -> None:
    db("INSERT INTO pgq.unique_locks (queue, dedupe_key, used_at) VALUES ('default', 'old', now() - interval '2 h'),"
       " ('default', 'held', now() - interval '2 h'), ('default', 'new', now())")
    with psycopg.connect(pgq_dsn) as holder:  # a producer of 'held' in an open transaction
        holder.execute("SELECT pgq.enqueue('k', dedupe_key => 'held', on_conflict => 'replace')")
        db("SELECT pgq.settle(100)")
        holder.commit()
    assert db("SELECT dedupe_key FROM pgq.unique_locks ORDER BY 1") == [{"dedupe_key": "held"}, {"dedupe_key": "new"}]
