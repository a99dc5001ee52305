"""Revision 0026's counts of finished jobs, by who may do what: a pass of the counts
(pgq.count_finished) is the worker's, whose maintenance loop runs it; no pgq role but the admin (the
owner) may write the counts tables, which would let it forge the dashboard's numbers; everyone who
reads jobs may read them; the trigger's function is no one's to call. A worker's pass, and a delete
by the admin (retention), keep the counts through functions that run as their owner."""

from __future__ import annotations

import pytest

from .conftest import Roles
from .test_roles import assert_refused, rows

WRITES = [
    "INSERT INTO pgq.finished_counts (minute, queue, kind, status, jobs) "
    "VALUES (date_bin('1 minute', now(), '2000-01-01 00:00:00+00'), 'q', 'k', 'failed', 1000)",
    "UPDATE pgq.finished_counts SET jobs = 0",
    "UPDATE pgq.finished_counts_hourly SET jobs = 0",
    "DELETE FROM pgq.finished_counts",
    "INSERT INTO pgq.finished_counts_deleted (minute, queue, kind, status, jobs) "
    "VALUES (now(), 'q', 'k', 'failed', 1000)",
    "UPDATE pgq.finished_counts_state SET counted_through = 'infinity'",
    "SELECT * FROM pgq.finished_counts_state FOR UPDATE",
    "SELECT pgq.finished_counts_keep_deleted()",
]


@pytest.mark.parametrize("statement", WRITES)
def test_no_producer_or_worker_may_write_the_counts(roles: Roles, statement: str) -> None:
    for dsn in (roles.producer, roles.worker):
        assert_refused(dsn, statement)


def test_a_pass_is_the_workers_and_the_counts_are_readable(roles: Roles) -> None:
    rows(roles.dsn, "INSERT INTO pgq.jobs (kind, queue, status, attempts, finished_at) "
                    "VALUES ('k', 'q', 'failed', 1, now() - interval '10 minutes')")
    assert_refused(roles.producer, "SELECT pgq.count_finished('2 minutes', '1 day')")
    assert rows(roles.worker, "SELECT pgq.count_finished('2 minutes', '1 day') AS t")[0]["t"] is not None
    for dsn in (roles.producer, roles.worker):
        assert rows(dsn, "SELECT sum(jobs) AS n FROM pgq.finished_counts")[0]["n"] == 1
        rows(dsn, "SELECT * FROM pgq.finished_counts_deleted, pgq.finished_counts_state")
    # The admin's retention deletes the job: its count stays, kept by the trigger as the owner.
    rows(roles.admin, "DELETE FROM pgq.jobs")
    rows(roles.worker, "SELECT pgq.count_finished('2 minutes', '1 day')")
    assert rows(roles.producer, "SELECT sum(jobs) AS n FROM pgq.finished_counts")[0]["n"] == 1
