"""Keyed enqueues that lock no job (revision 0016) under real concurrency: producers raise the
watermarks of a few keys while workers claim and complete them and the settle runs, then the whole
outcome is checked: every key's input was processed up to its highest watermark, no successful run
of a key processed a watermark an earlier one had done, and nothing deadlocked."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import psycopg

from pgq import _ops
from pgq.models import JobStatus

from .conftest import SQL

KEYS = ["a", "b", "c"]


def test_racing_producers_and_workers_on_a_few_keys_lose_no_watermark_and_run_none_twice(
    pgq_dsn: str, db: SQL
) -> None:
    stop = threading.Event()
    errors: list[BaseException] = []
    lock = threading.Lock()
    next_mark = dict.fromkeys(KEYS, 0)
    committed = dict.fromkeys(KEYS, 0)

    def produce(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with psycopg.connect(pgq_dsn) as conn:
                while not stop.is_set():
                    key = rng.choice(KEYS)
                    with lock:
                        next_mark[key] += 1
                        mark = next_mark[key]
                    conn.execute("SELECT pgq.enqueue('k', jsonb_build_object('w', %s::bigint), 'q', "
                                 "dedupe_key => %s, watermark => %s)", [mark, key, mark])
                    time.sleep(rng.random() * 0.02)  # sits in its transaction a little
                    conn.commit()
                    with lock:
                        committed[key] = max(committed[key], mark)
        except BaseException as e:  # reported by the test
            errors.append(e)

    def work(name: str) -> None:
        try:
            with psycopg.connect(pgq_dsn, autocommit=True) as conn:
                while True:
                    claims = _ops.run_sync(conn, _ops.claim(worker=name, queues=["q"], kinds=None, limit=2,
                                                            lease=60), own_transaction=True)
                    if not claims:
                        if stop.is_set() and drained():
                            return
                        time.sleep(0.005)
                        continue
                    time.sleep(random.random() * 0.01)  # the handler
                    busy: set[int] = set()
                    _ops.run_sync(conn, _ops.complete([(c, None, None) for c in claims], raise_lost=True,
                                                      busy=busy), own_transaction=True)
                    assert not busy
        except BaseException as e:  # reported by the test
            errors.append(e)

    def drained() -> bool:
        with psycopg.connect(pgq_dsn, autocommit=True) as conn:
            conn.execute("SELECT pgq.settle(100)")
            row = conn.execute("SELECT (SELECT count(*) FROM pgq.key_raises) + "
                               "(SELECT count(*) FROM pgq.jobs WHERE status IN ('queued', 'running'))").fetchone()
            return row is not None and row[0] == 0

    def settle() -> None:
        try:
            with psycopg.connect(pgq_dsn, autocommit=True) as conn:
                while not stop.is_set():
                    conn.execute("SELECT pgq.settle(100)")
                    time.sleep(0.05)
        except BaseException as e:  # reported by the test
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(3)]
    threads += [threading.Thread(target=work, args=(f"w{i}",)) for i in range(2)]
    threads += [threading.Thread(target=settle)]
    for t in threads:
        t.start()
    time.sleep(4)
    stop.set()
    for t in threads:
        t.join(60)
    assert not [t for t in threads if t.is_alive()], "a thread hung (a lock wait?)"
    assert not errors, errors

    marks = db("SELECT dedupe_key, done_watermark FROM pgq.key_watermarks")
    done = {r["dedupe_key"]: r["done_watermark"] for r in marks}
    assert done == committed
    assert db("SELECT count(*) AS n FROM pgq.key_raises") == [{"n": 0}]
    # Per key, the successful runs in the order they finished: each processed more than the last.
    runs: dict[str, list[Any]] = {}
    for r in db("SELECT dedupe_key, done_watermark FROM pgq.jobs WHERE status = %s ORDER BY finished_at, id",
                [JobStatus.SUCCEEDED.value]):
        runs.setdefault(r["dedupe_key"], []).append(r["done_watermark"])
    for key, marks in runs.items():
        assert marks == sorted(set(marks)), (key, marks)
