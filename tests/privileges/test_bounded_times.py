"""Times every reader can read (issue 40, findings 2 and 5).

One registry row with `lease_s => 1e12` (or NaN, or Infinity) used to make pgq.worker_prune raise
'timestamp out of range' inside the rescue's transaction, so expired leases stayed running, and
broke every read of the registry; a delay, debounce, run_at, retry_in or heartbeat lease of 1e12
(or 'infinity') stored a timestamp psycopg cannot read, which broke every listing of jobs for
everyone. Each attack, as the role that may try it, is refused by the database (revision 0020's
CHECK constraints) and changes nothing; the client refuses the same values first, with InvalidJob."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import psycopg
import pytest

import pgq
from pgq.worker.maintenance import Rescuer

from .conftest import Roles
from .test_roles import rows, table_state


def assert_out_of_bounds(dsn: str, statement: str, params: Any = None) -> None:
    """Run `statement` as the role of `dsn`: the database must refuse it for a bad value (a check
    constraint, or a value it cannot represent), not for lack of privilege."""
    with pytest.raises((psycopg.errors.CheckViolation, psycopg.DataError)):
        rows(dsn, statement, params)


BAD_SECONDS = ("1e12", "'NaN'", "'Infinity'", "1e7")


@pytest.mark.parametrize("bad", BAD_SECONDS)
def test_a_worker_cannot_register_an_unbounded_lease_or_refresh(roles: Roles, bad: str) -> None:
    before = rows(roles.dsn, "SELECT * FROM pgq.workers")
    for args in (f"{bad}, 5", f"10, {bad}", f"{bad}, {bad}"):
        assert_out_of_bounds(
            roles.worker, f"SELECT * FROM pgq.worker_register('w', 'h', 1, NULL, '{{k}}', 1, {args}, 'test')")
    assert rows(roles.dsn, "SELECT * FROM pgq.workers") == before


def test_prune_rescue_and_every_read_of_workers_survive_the_attack(roles: Roles) -> None:
    """After the refused attack the rescue still rescues and the registry reads fine."""
    with pgq.Queue(roles.producer) as p:
        job_id = p.enqueue("k", queue="q")
    with pgq.Queue(roles.worker) as w:
        [claim] = w.claim(worker="gone", queues=["q"], limit=1)
    assert_out_of_bounds(roles.worker,
                         "SELECT * FROM pgq.worker_register('w', 'h', 1, NULL, '{k}', 1, 1e12, 1e12, 'x')")
    rows(roles.dsn, "UPDATE pgq.jobs SET lease_expires_at = now() - interval '1 s' WHERE id = %s", [claim.id])
    assert rows(roles.worker, "SELECT pgq.worker_prune() AS n") == [{"n": 0}]
    with pgq.Queue(roles.worker) as w:
        assert w.rescue_expired() == [job_id]
        assert w.workers() == []
        assert w.explain(job_id).codes


BAD_JOB_WRITES = {
    # As a producer: the enqueue functions and the direct INSERT.
    "delay": ("producer", "SELECT * FROM pgq.enqueue_many(ARRAY['k'], ARRAY['{}'::jsonb], ARRAY['q'], "
                          "ARRAY[0::smallint], NULL, ARRAY[1e12::float8], NULL, NULL, NULL, NULL)"),
    "delay_inf": ("producer", "SELECT * FROM pgq.enqueue_many(ARRAY['k'], ARRAY['{}'::jsonb], ARRAY['q'], "
                              "ARRAY[0::smallint], NULL, ARRAY['Infinity'::float8], NULL, NULL, NULL, NULL)"),
    "delay_200_years": ("producer", "SELECT * FROM pgq.enqueue_many(ARRAY['k'], ARRAY['{}'::jsonb], ARRAY['q'], "
                                    "ARRAY[0::smallint], NULL, ARRAY[6.4e9::float8], NULL, NULL, NULL, NULL)"),
    "run_at_fn": ("producer", "SELECT pgq.enqueue('k', '{}', 'q', 0, 'infinity')"),
    "run_at_fn_past": ("producer", "SELECT pgq.enqueue('k', '{}', 'q', 0, '-infinity')"),
    "run_at_insert": ("producer", "INSERT INTO pgq.jobs (kind, queue, run_at) VALUES ('k', 'q', 'infinity')"),
    "run_at_insert_far": ("producer", "INSERT INTO pgq.jobs (kind, queue, run_at) VALUES ('k', 'q', '9999-01-01')"),
    "run_at_insert_bc": ("producer", "INSERT INTO pgq.jobs (kind, queue, run_at) VALUES ('k', 'q', '0100-01-01 BC')"),
    "debounce": ("producer", "SELECT pgq.enqueue('k', '{}', 'q', 0, NULL, dedupe_key => 'd', "
                             "debounce => make_interval(secs => 6.4e9))"),
    # As a worker holding the attempt: its own acknowledgements.
    "retry_in": ("worker", "SELECT * FROM pgq.fail(ARRAY[%(id)s]::bigint[], ARRAY[%(token)s]::uuid[], NULL, "
                           "ARRAY[1e12], NULL, NULL, NULL)"),
    "retry_in_nan": ("worker", "SELECT * FROM pgq.fail(ARRAY[%(id)s]::bigint[], ARRAY[%(token)s]::uuid[], NULL, "
                               "ARRAY['NaN'::float8], NULL, NULL, NULL)"),
    "snooze": ("worker", "SELECT * FROM pgq.snooze(ARRAY[%(id)s]::bigint[], ARRAY[%(token)s]::uuid[], "
                         "ARRAY[6.4e9], NULL, NULL)"),
    "heartbeat": ("worker", "SELECT * FROM pgq.heartbeat(ARRAY[%(id)s]::bigint[], ARRAY[%(token)s]::uuid[], "
                            "ARRAY[1e12], NULL, NULL)"),
    "heartbeat_week": ("worker", "SELECT * FROM pgq.heartbeat_skip(ARRAY[%(id)s]::bigint[], "
                                 "ARRAY[%(token)s]::uuid[], ARRAY[604800.0], NULL, true)"),
    "heartbeat_negative": ("worker", "SELECT * FROM pgq.heartbeat(ARRAY[%(id)s]::bigint[], "
                                     "ARRAY[%(token)s]::uuid[], ARRAY[-1e10], NULL, NULL)"),
    "claim_lease": ("worker", "SELECT * FROM pgq.claim(ARRAY['q'], NULL, 1, 1e7, 'w')"),
}


@pytest.mark.parametrize("attack", sorted(BAD_JOB_WRITES))
def test_no_role_stores_a_time_readers_cannot_read(roles: Roles, attack: str) -> None:
    role, statement = BAD_JOB_WRITES[attack]
    with pgq.Queue(roles.producer) as p:
        p.enqueue("k", queue="q")
        p.enqueue("k", queue="held")
    with pgq.Queue(roles.worker) as w:
        [claim] = w.claim(worker="w", queues=["held"], limit=1)
    before = table_state(roles)
    assert_out_of_bounds(getattr(roles, role), statement, {"id": claim.id, "token": claim.token})
    assert table_state(roles) == before
    with pgq.Queue(roles.producer) as p:
        assert len(p.list()) == 2


def _spec(**options: Any) -> None:
    pgq.JobSpec("k", dedupe_key="d" if {"debounce", "unique_for"} & set(options) else None, **options)


@pytest.mark.parametrize("options", [
    {"delay": 1e12}, {"delay": math.nan}, {"delay": math.inf}, {"delay": 10**400}, {"delay": -1},
    {"delay": dt.timedelta(days=36526)}, {"debounce": 1e12}, {"debounce": math.nan},
    {"unique_for": math.inf}, {"unique_for": math.nan},
    {"run_at": dt.datetime(1899, 12, 31, tzinfo=dt.UTC)}, {"run_at": dt.datetime(9999, 1, 1, tzinfo=dt.UTC)},
    # Relative to now, so under an id that does not change between the processes of a parallel run.
    pytest.param({"run_at": dt.datetime.now(dt.UTC) + dt.timedelta(days=36600)}, id="{'run_at': now + 36600 days}"),
], ids=repr)
def test_the_client_refuses_unbounded_times_before_sending(options: dict[str, Any]) -> None:
    with pytest.raises(pgq.InvalidJob):
        _spec(**options)


def test_the_client_refuses_unbounded_acknowledgements_before_sending(roles: Roles) -> None:
    with pgq.Queue(roles.producer) as p:
        p.enqueue("k", queue="q")
    with pgq.Queue(roles.worker) as w:
        with pytest.raises(pgq.InvalidJob):
            w.claim(worker="w", queues=["q"], limit=1, lease=86401)
        [claim] = w.claim(worker="w", queues=["q"], limit=1, lease=86400)
        before = table_state(roles)
        for call in (lambda: w.fail(claim, "x", retry_in=1e12), lambda: w.fail(claim, "x", retry_in=math.nan),
                     lambda: w.snooze(claim, math.inf), lambda: w.heartbeat([claim], lease=1e12),
                     lambda: w.heartbeat([claim], lease=math.nan), lambda: w.explain(2**63)):
            with pytest.raises(pgq.InvalidJob):
                call()
        assert table_state(roles) == before


def test_a_worker_lease_over_a_day_is_refused_and_the_registry_refresh_is_capped() -> None:
    with pytest.raises(pgq.InvalidJob, match="at most one day"):
        pgq.WorkerConfig(lease=86401)
    assert Rescuer is not None
