"""Revision 0032 runs `jobs_release_dependents` (SECURITY DEFINER) at the end of every statement that
sets a job's status, reading the parents its row trigger noted in the setting pgq.finished_parents,
which any session may set. A hostile pgq_worker that plants ids there before a claim of its own
releases and cancels nothing: the release reads each parent's status and acts only on parents that
have finished."""

from __future__ import annotations

import psycopg

import pgq

from .conftest import Roles


def test_a_worker_planting_parent_ids_releases_nothing_early(roles: Roles) -> None:
    with pgq.Queue(roles.dsn) as q:
        parent = q.enqueue("k", queue="held")  # queued, never claimed here
        child = q.enqueue("k", queue="held", depends_on=[parent])
        needy = q.enqueue("k", queue="held", depends_on=[parent], on_parent_failure="cancel")
        q.enqueue("k", queue="q")  # the hostile worker's own claim
    with psycopg.connect(roles.worker) as conn, conn.transaction():
        conn.execute("SELECT set_config('pgq.finished_parents', %s, true)", (f"{parent},{child},{needy},",))
        claimed = conn.execute("SELECT id, lease_token FROM pgq.claim(ARRAY['q'], NULL, 1, 30, 'hostile')").fetchall()
        assert len(claimed) == 1
        # Its own job finished in the same transaction: the history's statement trigger reads the
        # planted ids (revision 0033: the finish's insert into pgq.finished_jobs fires it) ...
        [(job_id, token)] = claimed
        done = conn.execute("SELECT id FROM pgq.complete(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[], "
                            "ARRAY[NULL]::jsonb[], ARRAY[NULL]::bigint[], NULL, NULL)", (job_id, token)).fetchall()
        assert done == [(job_id,)]
        assert conn.execute("SELECT current_setting('pgq.finished_parents')").fetchone() == ("",)
    with psycopg.connect(roles.dsn, autocommit=True) as conn:
        states = dict(conn.execute("SELECT id, status::text FROM pgq.jobs WHERE id = ANY(%s)",
                                   ([parent, child, needy],)).fetchall())
        edges = conn.execute("SELECT count(*) FROM pgq.job_dependencies WHERE parent_id = %s "
                             "AND parent_outcome IS NULL", (parent,)).fetchone()
    # ... and released and cancelled nothing: the parent has not finished.
    assert states == {parent: "queued", child: "waiting", needy: "waiting"}
    assert edges == (2,)
