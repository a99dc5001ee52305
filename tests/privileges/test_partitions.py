"""The partitions of pgq.jobs and the roles (revision 0033).

pgq.jobs is partitioned: pgq.live_jobs, and pgq.finished_jobs with its days, the jobs finished before
0033 and a default. A read or write through pgq.jobs checks the grants and row security policies of
pgq.jobs alone, but a partition has privileges and row security of its own: a grant on one would let
its holder read lease tokens (revision 0020) and other services' jobs (revision 0021) past them. So no
pgq role but the admin has any right on a partition, those made after `pgq roles` ran included; a
producer has USAGE (nextval) on pgq.jobs_id_seq for its plain INSERT and nothing more; the worker may
make the history's days ahead (pgq.finished_partitions_ensure). What the roles do through pgq.jobs
keeps working. And `pgq migrate` from 0032 with role sets leaves the same, also from the SQL a DBA runs
(`pgq migrate --sql`), which does not re-run the roles scripts."""

from __future__ import annotations

import psycopg
import pytest

import pgq
from pgq import migrate
from pgq.models import JobStatus
from pgq.role_sets import apply_scoped, revoke_role_set
from pgq.roles import apply_roles

from .conftest import Roles
from .test_roles import assert_refused, rows, seed
from .test_scoped_sets import Service, services  # noqa: F401 (a fixture)

# Every table partition of schema pgq.
_PARTITIONS = """
    SELECT c.oid::regclass::text AS name FROM pg_catalog.pg_class c
    WHERE c.relnamespace = 'pgq'::regnamespace AND c.relispartition AND c.relkind IN ('r', 'p')
    ORDER BY 1
"""

# Every right any role but the owner holds on a partition of schema pgq (table or column).
_PARTITION_GRANTS = """
    SELECT c.oid::regclass::text AS name, x.grantee::regrole::text AS grantee, x.privilege_type AS privilege
    FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) x
    WHERE c.relnamespace = 'pgq'::regnamespace AND c.relispartition AND x.grantee <> c.relowner
    UNION ALL
    SELECT c.oid::regclass::text, x.grantee::regrole::text, x.privilege_type || ' (' || a.attname || ')'
    FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
    CROSS JOIN LATERAL pg_catalog.aclexplode(a.attacl) x
    WHERE c.relnamespace = 'pgq'::regnamespace AND c.relispartition AND x.grantee <> c.relowner
    ORDER BY 1, 2, 3
"""

# Row security policies on the partitions (they would be stale copies: pgq.jobs' alone apply).
_PARTITION_POLICIES = """
    SELECT p.tablename, p.policyname FROM pg_catalog.pg_policies p
    JOIN pg_catalog.pg_class c ON c.relname = p.tablename AND c.relnamespace = 'pgq'::regnamespace
    WHERE p.schemaname = 'pgq' AND c.relispartition
"""

_SEQUENCE_ACL = """
    SELECT x.grantee::regrole::text AS grantee, x.privilege_type AS privilege
    FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) x
    WHERE c.oid = 'pgq.jobs_id_seq'::regclass AND x.grantee <> c.relowner
    ORDER BY 1, 2
"""


@pytest.fixture
def sets(services: dict[str, Service]) -> dict[str, Service]:  # noqa: F811 (the fixture imported)
    """The scoped role sets `a` (queues a1, a2) and `b` (queue b) of test_scoped_sets."""
    return services


def _partitions(roles: Roles) -> dict[str, str]:
    """The partitions to try, by kind: live, history, before_0033, day, default."""
    names = [r["name"] for r in rows(roles.dsn, _PARTITIONS)]
    days = [n for n in names if n.removeprefix("pgq.finished_jobs_").isdigit()]
    assert days, names
    found = {"live": "pgq.live_jobs", "history": "pgq.finished_jobs", "before_0033": "pgq.finished_jobs_before_0033",
             "day": days[0], "default": "pgq.finished_jobs_default"}
    assert set(found.values()) <= set(names)
    return found


def _seed(roles: Roles) -> dict[str, int]:
    """As the superuser: a running job in queue a1, a succeeded one in a1, a failed one in b."""
    with pgq.Queue(roles.dsn) as q:
        ids = {"done": q.enqueue("k", queue="a1"), "failed": q.enqueue("k", queue="b")}
        (done,) = q.claim(worker="s", queues=["a1"])
        q.complete(done)
        (failed,) = q.claim(worker="s", queues=["b"])
        q.fail(failed, "boom", final=True)
        ids["running"] = q.enqueue("k", queue="a1")
        q.claim(worker="s", queues=["a1"])
    return ids


def _logins(roles: Roles, sets: dict[str, Service]) -> dict[str, str]:
    a = sets["a"]
    return {"producer": roles.producer, "worker": roles.worker,
            "scoped producer": a.producer, "scoped worker": a.worker}


def _our_roles(roles: Roles, sets: dict[str, Service]) -> set[str]:
    return {roles.names.producer, roles.names.worker,
            *(s.prefix + w for s in sets.values() for w in ("producer", "worker"))}


def test_no_role_but_the_admin_has_a_right_on_a_partition(roles: Roles, sets: dict[str, Service]) -> None:
    _partitions(roles)
    assert rows(roles.dsn, _PARTITION_GRANTS) == []
    assert rows(roles.dsn, _PARTITION_POLICIES) == []
    owners = rows(roles.dsn, "SELECT DISTINCT relowner::regrole::text AS owner FROM pg_catalog.pg_class "
                             "WHERE relnamespace = 'pgq'::regnamespace AND relispartition")
    assert owners == [{"owner": roles.names.admin}]
    # The sequence of the ids: USAGE (nextval, currval) for the producers, which the worker has as one.
    assert rows(roles.dsn, _SEQUENCE_ACL) == sorted(
        [{"grantee": roles.names.producer, "privilege": "USAGE"}]
        + [{"grantee": s.prefix + "producer", "privilege": "USAGE"} for s in sets.values()],
        key=lambda r: (r["grantee"], r["privilege"]))


@pytest.mark.parametrize("who", ["producer", "worker", "scoped producer", "scoped worker"])
def test_no_partition_can_be_read_or_written_directly(roles: Roles, sets: dict[str, Service], who: str) -> None:
    ids = _seed(roles)
    login = _logins(roles, sets)[who]
    before = rows(roles.dsn, "SELECT * FROM pgq.jobs ORDER BY id")
    for part in _partitions(roles).values():
        for statement in (
            f"SELECT lease_token FROM {part}",
            f"SELECT id, queue, payload FROM {part}",
            f"SELECT id FROM {part} WHERE queue = 'b'",  # another service's rows
            f"SELECT count(*) FROM {part}",
            f"UPDATE {part} SET priority = 9",
            f"UPDATE {part} SET status = 'cancelled', finished_at = now() WHERE id = {ids['running']}",
            f"DELETE FROM {part}",
            f"DELETE FROM {part} WHERE queue = 'b'",
            f"INSERT INTO {part} (kind, queue) VALUES ('evil', 'b')",
            f"TRUNCATE {part}",
        ):
            assert_refused(login, statement)
    # Through pgq.jobs the token stays unreadable, as before.
    assert_refused(login, "SELECT lease_token FROM pgq.jobs")
    assert rows(roles.dsn, "SELECT * FROM pgq.jobs ORDER BY id") == before


@pytest.mark.parametrize("who", ["producer", "worker", "scoped producer", "scoped worker"])
def test_the_sequence_gives_ids_only(roles: Roles, sets: dict[str, Service], who: str) -> None:
    login = _logins(roles, sets)[who]
    last = rows(roles.dsn, "SELECT last_value, is_called FROM pgq.jobs_id_seq")
    for statement in ("SELECT setval('pgq.jobs_id_seq', 1)", "SELECT setval('pgq.jobs_id_seq', 1, false)",
                      "SELECT last_value FROM pgq.jobs_id_seq", "ALTER SEQUENCE pgq.jobs_id_seq RESTART",
                      "ALTER SEQUENCE pgq.jobs_id_seq INCREMENT BY -1"):
        assert_refused(login, statement)
    assert rows(roles.dsn, "SELECT last_value, is_called FROM pgq.jobs_id_seq") == last


@pytest.mark.parametrize("who", ["producer", "worker", "scoped producer", "scoped worker"])
def test_no_role_but_the_admin_drops_a_day_of_finished_jobs(roles: Roles, sets: dict[str, Service],
                                                           who: str) -> None:
    """pgq.finished_partitions_drop deletes finished jobs (a purge): the admin's alone."""
    login = _logins(roles, sets)[who]
    before = rows(roles.dsn, _PARTITIONS)
    assert_refused(login, "SELECT * FROM pgq.finished_partitions_drop(interval '0 s', '', interval '1 s')")
    assert rows(roles.dsn, _PARTITIONS) == before


@pytest.mark.parametrize("who", ["producer", "scoped producer"])
def test_a_producer_cannot_make_the_historys_days(roles: Roles, sets: dict[str, Service], who: str) -> None:
    login = _logins(roles, sets)[who]
    before = rows(roles.dsn, _PARTITIONS)
    assert_refused(login, "SELECT pgq.finished_partitions_ensure(30)")
    assert_refused(login, "SELECT pgq.finished_partitions_ensure()")
    assert rows(roles.dsn, _PARTITIONS) == before


def test_days_the_worker_makes_later_are_granted_to_nobody(roles: Roles, sets: dict[str, Service]) -> None:
    before = {r["name"] for r in rows(roles.dsn, _PARTITIONS)}
    for dsn in (roles.worker, sets["a"].worker):
        rows(dsn, "SELECT pgq.finished_partitions_ensure(20)")
    made = {r["name"] for r in rows(roles.dsn, _PARTITIONS)} - before
    assert len(made) >= 13, made  # 7 days ahead came with the migration
    assert rows(roles.dsn, _PARTITION_GRANTS) == []
    owners = rows(roles.dsn, "SELECT DISTINCT relowner::regrole::text AS owner FROM pg_catalog.pg_class "
                             "WHERE oid::regclass::text = ANY(%s)", [sorted(made)])
    assert owners == [{"owner": roles.names.admin}]
    day = sorted(made)[-1]
    for login in _logins(roles, sets).values():
        assert_refused(login, f"SELECT lease_token FROM {day}")
        assert_refused(login, f"SELECT id FROM {day}")


@pytest.mark.parametrize("lease", ["kept", "cleared"])
def test_an_admins_update_that_cancels_a_running_job_tells_its_worker(roles: Roles, lease: str) -> None:
    """Revision 0034: the admin (not a superuser) cancels a running job with a plain UPDATE of pgq.jobs,
    which moves the row to the history; the triggers that tell the job's worker need no other right,
    and the worker's role hears it once."""
    ids = seed(roles)
    [mark] = rows(roles.dsn, "SELECT md5(lease_token::text) AS m FROM pgq.jobs WHERE id = %s", [ids["running"]])
    clear = ", lease_token = NULL, lease_expires_at = NULL" if lease == "cleared" else ""
    with psycopg.connect(roles.worker, autocommit=True) as listener:
        listener.execute(b"LISTEN pgq_cancel")
        with psycopg.connect(roles.admin, autocommit=True) as admin:
            admin.execute(f"UPDATE pgq.jobs SET status = 'cancelled', finished_at = now(){clear} "
                          f"WHERE id = ANY(%s)".encode(), [[ids["running"], ids["queued"]]])
            admin.execute(b"SELECT pg_notify('pgq_cancel', 'end')")
        notices = []
        for note in listener.notifies(timeout=10):
            if note.payload == "end":
                break
            notices.append(note.payload)
    assert notices == [f"{ids['running']}:{mark['m']}"]


def test_what_the_roles_do_through_pgq_jobs_still_works(roles: Roles, sets: dict[str, Service]) -> None:
    a, b = sets["a"], sets["b"]
    with pgq.Queue(roles.producer) as p:
        mine = p.enqueue("k", {"n": 1}, queue="q")  # the plain INSERT (sql/job_insert_one.sql)
    with pgq.Queue(a.producer) as p:
        a_job = p.enqueue("k", {"n": 2}, queue="a1")
    with pgq.Queue(b.producer) as p:
        b_job = p.enqueue("k", {"secret": 3}, queue="b")
    assert mine < a_job < b_job  # the ids from pgq.jobs_id_seq
    with pgq.Queue(roles.worker) as w:
        (claim,) = w.claim(worker="w", queues=["q"])
        assert w.complete(claim, {"ok": True}) is JobStatus.SUCCEEDED
    with pgq.Queue(a.worker) as w:
        (claim,) = w.claim(worker="wa", queues=["a1", "b"])
        assert claim.id == a_job
        assert w.complete(claim) is JobStatus.SUCCEEDED
    # The finished jobs are in the history; a scoped producer reads its own through pgq.jobs only.
    assert rows(roles.dsn, "SELECT id FROM pgq.finished_jobs ORDER BY id") == [{"id": mine}, {"id": a_job}]
    assert rows(a.producer, "SELECT id, status::text FROM pgq.jobs ORDER BY id") == [
        {"id": a_job, "status": "succeeded"}]
    assert rows(b.producer, "SELECT id, status::text FROM pgq.jobs ORDER BY id") == [
        {"id": b_job, "status": "queued"}]
    with pgq.Queue(a.producer) as p:
        assert p.get(b_job) is None
        job = p.get(a_job)
        assert job is not None and job.status is JobStatus.SUCCEEDED
    assert rows(roles.producer, "SELECT count(*) AS n FROM pgq.jobs") == [{"n": 3}]
    with pgq.Queue(roles.producer) as p:
        job = p.get(mine)
        assert job is not None and job.result == {"ok": True}


def _as_at_0032(roles: Roles, sets: dict[str, Service]) -> dict[str, int]:
    """The database of `roles` and `sets` down at revision 0032, with both sets applied there,
    and the jobs of `_seed` (written directly: pgq's client wants the head revision)."""
    migrate.downgrade(roles.dsn, "0032")
    apply_roles(roles.dsn, roles.names.producer.removesuffix("producer"))
    apply_scoped(roles.dsn, sets["a"].prefix, ["a1", "a2"])
    apply_scoped(roles.dsn, sets["b"].prefix, ["b"])
    assert rows(roles.dsn, "SELECT relkind::text AS k FROM pg_class WHERE oid = 'pgq.jobs'::regclass") == [{"k": "r"}]
    made = rows(roles.dsn, """
        INSERT INTO pgq.jobs (queue, kind, status, attempts, started_at, finished_at, lease_token, lease_expires_at)
        VALUES ('a1', 'k', 'succeeded', 1, now(), now(), NULL, NULL),
               ('b', 'k', 'failed', 1, now(), now(), NULL, NULL),
               ('a1', 'k', 'running', 1, now(), NULL, gen_random_uuid(), now() + interval '1 hour')
        RETURNING id""")
    return dict(zip(("done", "failed", "running"), (r["id"] for r in made), strict=True))


def _check_after_upgrade(roles: Roles, sets: dict[str, Service], ids: dict[str, int], *,
                         owned: bool) -> None:
    assert migrate.current_revision(roles.dsn) == migrate.head_revision()
    ours = _our_roles(roles, sets)
    assert [g for g in rows(roles.dsn, _PARTITION_GRANTS) if g["grantee"] in ours] == []
    assert rows(roles.dsn, _PARTITION_POLICIES) == []
    a, b = sets["a"], sets["b"]
    policies = rows(roles.dsn, "SELECT policyname FROM pg_policies WHERE schemaname = 'pgq' AND tablename = 'jobs' "
                               "ORDER BY 1")
    assert {p["policyname"] for p in policies} == {"jobs_every_row", a.prefix + "scope", b.prefix + "scope"}
    # The scoped producers stay boxed in their queues, the finished jobs of before the upgrade included.
    assert rows(a.producer, "SELECT id FROM pgq.jobs ORDER BY id") == [{"id": ids["done"]}, {"id": ids["running"]}]
    assert rows(b.producer, "SELECT id FROM pgq.jobs ORDER BY id") == [{"id": ids["failed"]}]
    for login in _logins(roles, sets).values():
        assert_refused(login, "SELECT lease_token FROM pgq.jobs")
        assert_refused(login, "SELECT id FROM pgq.finished_jobs_before_0033")
        assert_refused(login, "SELECT id FROM pgq.live_jobs")
    # Enqueueing by the plain INSERT works on (the sequence's USAGE came along).
    with pgq.Queue(roles.producer) as p:
        assert p.enqueue("k", queue="q") > ids["running"]
    with pgq.Queue(a.producer) as p:
        assert p.enqueue("k", queue="a2") > ids["running"]
    assert_refused(a.producer, "INSERT INTO pgq.jobs (kind, queue) VALUES ('evil', 'b')")
    if owned:
        with pgq.Queue(roles.worker) as w:
            (claim,) = w.claim(worker="w", queues=["q"])
            assert w.complete(claim) is JobStatus.SUCCEEDED
        rows(roles.worker, "SELECT pgq.finished_partitions_ensure(10)")
        assert [g for g in rows(roles.dsn, _PARTITION_GRANTS) if g["grantee"] in ours] == []
    # Revoking a set leaves no policy naming its roles, so that they can be dropped.
    revoke_role_set(roles.dsn, b.prefix)
    with psycopg.connect(roles.dsn, autocommit=True) as conn:
        left = conn.execute("SELECT count(*) FROM pg_shdepend WHERE refobjid = %s::regrole "
                            "AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
                            [b.prefix + "producer"]).fetchone()
    assert left == (0,)


def test_migrate_from_0032_with_role_sets_keeps_their_access_right(roles: Roles,
                                                                   sets: dict[str, Service]) -> None:
    ids = _as_at_0032(roles, sets)
    migrate.upgrade(roles.dsn)  # re-runs the roles scripts
    _check_after_upgrade(roles, sets, ids, owned=True)


def test_the_sql_of_migrate_keeps_their_access_right_without_the_roles_scripts(
    roles: Roles, sets: dict[str, Service],
) -> None:
    ids = _as_at_0032(roles, sets)
    script = migrate.upgrade_sql(roles.dsn)  # what `pgq migrate --sql` prints, run as it is
    with psycopg.connect(roles.dsn, autocommit=True) as conn:
        conn.execute(script.encode())
    _check_after_upgrade(roles, sets, ids, owned=False)
    # The new objects are the migrating superuser's until `pgq roles` runs again, which hands them over.
    apply_roles(roles.dsn, roles.names.producer.removesuffix("producer"))
    assert rows(roles.dsn, "SELECT DISTINCT relowner::regrole::text AS owner FROM pg_catalog.pg_class "
                           "WHERE relnamespace = 'pgq'::regnamespace") == [{"owner": roles.names.admin}]
    ours = _our_roles(roles, sets)
    assert [g for g in rows(roles.dsn, _PARTITION_GRANTS) if g["grantee"] in ours] == []

