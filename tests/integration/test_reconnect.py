"""Connection errors after a database restart: safe operations are retried, unsafe ones are not."""

from __future__ import annotations

import psycopg
import pytest

from pgq import Queue
from pgq.embedded import EmbeddedServer


def test_after_a_restart_safe_operations_retry_and_unsafe_ones_raise(
    pgq_embedded_server: EmbeddedServer, pgq_dsn: str
) -> None:
    with Queue(pgq_dsn, min_size=2, max_size=2) as queue:
        job_id = queue.enqueue("k")
        queue.enqueue("k")
        with queue.pool.connection():
            pass  # both connections are open now (this one and the one the queue keeps for itself)
        pgq_embedded_server.stop()
        pgq_embedded_server.start()
        # A read is retry-safe: the broken connection is discarded and the read retried.
        job = queue.get(job_id)
        assert job is not None and job.id == job_id
        # A claim may have committed before the connection broke: it is never re-run blindly.
        pgq_embedded_server.stop()
        pgq_embedded_server.start()
        with queue.pool.connection():
            pass
        with pytest.raises(psycopg.OperationalError):
            queue.claim(worker="w", limit=1)
        # Each broken connection fails at most one such call and is replaced by the pool (the one the
        # queue kept for itself failed the call above).
        outcomes = []
        for _ in range(3):
            try:
                outcomes.append(len(queue.claim(worker="w", limit=1)))
            except psycopg.OperationalError:
                outcomes.append(-1)
        assert outcomes.count(-1) <= 1 and outcomes.count(1) == 2, outcomes  # two jobs were queued
        job = queue.get(job_id)
        assert job is not None
