"""The count of queued jobs of unknown kinds stops at a cap per queue and kind (issue #44): it runs on
every overview refresh and metrics scrape, and counting 990,000 such jobs cost 260 ms each time. Below
the cap a count is exact; a pair with more jobs reports the cap and says it was capped, through the
operation, `Queue.stats()`, `pgq status` and the metrics alike."""

from __future__ import annotations

import psycopg

from pgq import JobSpec, Queue, _ops
from pgq.cli.status import format_status
from pgq.metrics import BacklogReader, Metrics

from .conftest import SQL

CAP = 10


def _unknown(dsn: str, cap: int) -> tuple[dict[str, dict[str, int]], dict[str, list[str]]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        op = _ops.Operation("unknown_kinds", lambda: _ops.unknown_kinds(cap), retry_safe=True)
        return _ops.run_sync(conn, op, own_transaction=True)


def _fill(queue: Queue, db: SQL) -> None:
    """A live worker of queue q knowing `known` only; in q: 13 `big` jobs (7 plain, 6 limited: both
    halves of the count), 10 `exact`, 3 `small`, 20 `known`; in queue orphan (no live worker), 12 jobs
    an older worker handed back for their kind and 5 never handed back."""
    db("SELECT pgq.worker_register('host-a:1:w', 'host-a', 1, ARRAY['q'], ARRAY['known'], 8, 30, 5, 'test')")
    queue.set_concurrency_limit("big", 1)
    queue.enqueue_many([JobSpec("big", queue="q") for _ in range(13)])
    # 7 of them unmarked, as jobs enqueued before the limit was set are: both halves of the count.
    db("UPDATE pgq.jobs SET limited = false WHERE id IN (SELECT id FROM pgq.jobs WHERE kind = 'big' ORDER BY id "
       "LIMIT 7)")
    queue.enqueue_many([JobSpec("exact", queue="q") for _ in range(10)]
                       + [JobSpec("small", queue="q") for _ in range(3)]
                       + [JobSpec("known", queue="q") for _ in range(20)]
                       + [JobSpec("x", queue="orphan") for _ in range(17)])
    db("UPDATE pgq.jobs SET last_error = 'no worker of queue orphan knows kind x', attempts = 0 "
       "WHERE id IN (SELECT id FROM pgq.jobs WHERE queue = 'orphan' ORDER BY id LIMIT 12)")
    split = db("SELECT limited, count(*) AS n FROM pgq.jobs WHERE kind = 'big' GROUP BY limited ORDER BY limited")
    assert split == [{"limited": False, "n": 7}, {"limited": True, "n": 6}]


def test_counts_stop_at_the_cap_and_say_so(pgq_queue: Queue, pgq_dsn: str, db: SQL) -> None:
    _fill(pgq_queue, db)
    unknown, capped = _unknown(pgq_dsn, CAP)
    assert unknown == {"q": {"big": CAP, "exact": 10, "small": 3}, "orphan": {"x": CAP}}
    assert capped == {"q": ["big"], "orphan": ["x"]}  # exactly at the cap is not capped: exact
    # Under the default cap every count is exact.
    assert _unknown(pgq_dsn, _ops.UNKNOWN_KINDS_CAP) == (
        {"q": {"big": 13, "exact": 10, "small": 3}, "orphan": {"x": 12}}, {})


def test_stats_status_and_metrics_show_a_capped_count_as_a_floor(pgq_queue: Queue, pgq_dsn: str, db: SQL) -> None:
    """With the default cap lowered to 10, `Queue.stats()` lists the capped kinds, `pgq status` says
    "more than 10", and the gauge reads the cap."""
    _fill(pgq_queue, db)
    default = _ops.admin.unknown_kinds.__defaults__
    _ops.admin.unknown_kinds.__defaults__ = (CAP,)
    try:
        rows = {r["queue"]: r for r in pgq_queue.stats()}
        reader = BacklogReader(pgq_dsn, queues=["q"])
        families = {f.name: f for f in Metrics("w", queues=["q"], concurrency=1).families(reader.read())}
        reader.close()
    finally:
        _ops.admin.unknown_kinds.__defaults__ = default
    assert rows["q"]["unknown_kinds"] == {"big": CAP, "exact": 10, "small": 3}
    assert rows["q"]["unknown_kinds_capped"] == ["big"]
    assert rows["orphan"]["unknown_kinds_capped"] == ["x"]
    text = format_status(list(rows.values()))
    assert "q: more than 10 'big'" in text and "q: 10 'exact'" in text and "orphan: more than 10 'x'" in text
    gauge = {tuple(sorted(s.labels.items())): s.value for s in families["pgq_queue_unknown_kind_jobs"].samples}
    assert gauge == {(("kind", "big"), ("queue", "q")): CAP, (("kind", "exact"), ("queue", "q")): 10,
                     (("kind", "small"), ("queue", "q")): 3}
