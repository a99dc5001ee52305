"""Global rate limits: at most N starts of a kind in any window, enforced by the claim statement,
exact under claimers racing from several connections."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

from pgq import InvalidJob, JobSpec, Queue

from .conftest import SQL


def busiest_window(starts: list[dt.datetime], per_s: float) -> int:
    """The most starts in any window (t - per_s, t] of the sorted start times."""
    most, first = 0, 0
    for last, at in enumerate(starts):
        while starts[first] <= at - dt.timedelta(seconds=per_s):
            first += 1
        most = max(most, last - first + 1)
    return most


@pytest.mark.parametrize("bad", ["", "10", "x/s", "10/fortnight", "0/s", "-1/s", "10/0s", "5/2d", (0, 1.0),
                                 (5, 0), ("5", 1.0), 10])
def test_bad_rates_are_refused_before_anything_is_written(pgq_queue: Queue, db: SQL, bad: object) -> None:
    with pytest.raises(InvalidJob):
        pgq_queue.set_rate_limit("k", bad)  # type: ignore[arg-type]
    assert db("SELECT count(*) AS n FROM pgq.rate_limits") == [{"n": 0}]


def test_rates_parse_to_starts_per_seconds(pgq_queue: Queue, db: SQL) -> None:
    for rate, row in [("100/s", (100, 1.0)), ("5/min", (5, 60.0)), ("1000 / h", (1000, 3600.0)),
                      ("10/2s", (10, 2.0)), ("3/0.5s", (3, 0.5)), ((7, 1.5), (7, 1.5))]:
        pgq_queue.set_rate_limit("k", rate)
        [got] = db("SELECT max_starts, per_s FROM pgq.rate_limits WHERE kind = 'k'")
        assert (got["max_starts"], got["per_s"]) == row
    pgq_queue.set_rate_limit("k", None)
    assert db("SELECT count(*) AS n FROM pgq.rate_limits") == [{"n": 0}]


def test_a_claim_takes_no_more_than_the_window_allows(pgq_queue: Queue) -> None:
    pgq_queue.set_rate_limit("slow", (5, 1.5))
    pgq_queue.enqueue_many([JobSpec("slow") for _ in range(12)] + [JobSpec("free") for _ in range(3)])
    first = pgq_queue.claim(worker="w", limit=100)
    assert sorted(c.job.kind for c in first) == ["free"] * 3 + ["slow"] * 5
    assert pgq_queue.claim(worker="w", limit=100, queues=["default"]) == []  # the one-queue claim too
    time.sleep(1.6)
    assert len(pgq_queue.claim(worker="w", limit=100)) == 5
    # Both limits on one kind: the tighter one wins.
    pgq_queue.set_concurrency_limit("slow", 1)
    time.sleep(1.6)
    assert pgq_queue.claim(worker="w", limit=100) == []  # 10 are running, over the concurrency limit
    pgq_queue.set_concurrency_limit("slow", 12)
    assert len(pgq_queue.claim(worker="w", limit=100)) == 2


def test_racing_claimers_never_exceed_the_limit_in_any_window(pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    max_starts, per_s = 20, 0.5
    pgq_queue.set_rate_limit("k", (max_starts, per_s))
    total = 200
    pgq_queue.enqueue_many([JobSpec("k") for _ in range(total)])
    errors: list[BaseException] = []

    def claimer(n: int) -> None:
        try:
            with Queue(pgq_dsn, max_size=1) as queue:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    claims = queue.claim(worker=f"w{n}", limit=7)
                    if claims:
                        queue.complete_many([(c, None) for c in claims])
                    elif db("SELECT count(*) AS n FROM pgq.jobs WHERE status = 'queued'") == [{"n": 0}]:
                        return
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    rows = db("SELECT started_at FROM pgq.jobs WHERE status = 'succeeded' ORDER BY started_at")
    assert len(rows) == total  # nothing lost, each once
    starts = [r["started_at"] for r in rows]
    assert busiest_window(starts, per_s) == max_starts  # the limit is reached, and never exceeded
    span = (starts[-1] - starts[0]).total_seconds()
    assert span >= (total / max_starts - 1) * per_s  # 200 starts at 20 per 0.5 s take at least 4.5 s
