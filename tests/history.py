"""A history recorder and checker for runs under faults.

`install(conn)` adds triggers to a migrated test database that record, in the same transaction as
the change itself, every event of every job in table `history`:

- `enqueue` (an insert into pgq.jobs), `claim` (to running: the new lease token and attempt), `beat`
  (a heartbeat: a running job's lease moved, or its progress), `end` (running to anything else: the
  old token, the new status, the error, the lease's expiry before the change and, for a claim of a
  kind with a concurrency limit, how many of its jobs ran), `change` (any other update: a
  cancel of a queued job, a watermark raised by a deduplicated enqueue), `purge` (a delete);
- `watermark`: a change of pgq.key_watermarks (old and new done_watermark).

Each row has the database's transaction time (`tx_at`, what pgq's statements call now()) and the
clock time of the change (`at`). Per job, rows are in the order of `id`: changes of one job hold its
row lock until commit, so their trigger rows are numbered in commit order.

`check(conn)` reads the whole history back and returns the violated properties with examples (empty
when all hold):

- each job's events form a valid sequence: enqueued first; each change starts from the state the
  previous one left; a claim takes a queued job, with a fresh token and the next attempt number; a
  heartbeat and an end concern the live attempt; nothing changes a finished job; at most one live
  lease per job at any time (a claim never meets a running job);
- no accepted completion from a lease that was not current: a succeeded attempt's result names its
  own token (the test tasks return their lease token), and a rescue only took leases that had
  expired by the database's clock;
- at most one success per job;
- dedupe: never two active (queued or running) jobs of one (queue, dedupe key) at once;
- per-kind concurrency limits were never exceeded at any claim, nor per-group ones (pgq.group_limits);
- per-group rate limits: no group of a kind with a group rate limit (as pgq.group_limits holds it at
  the check) started more than max_starts jobs in any window of per_s seconds (by the claims'
  started_at, the time the claim counts starts at);
- sequences: the jobs of one (queue, sequence key) ran strictly in id order (enqueue order), never
  overlapping: no attempt of a job was claimed before the key's previous job had finished for the
  last time (each claim's clock time after that finish's), and none while that job had not finished;
- watermarks never went backwards (per key, and per job input and done watermarks);
- side effects, when the run has an `effects` table (tests/worker/conftest.py): at most one per
  attempt, each by a claimed attempt of its job, and one by each succeeded attempt.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row

FINISHED = frozenset({"succeeded", "failed", "cancelled"})

DDL = """
CREATE TABLE history (
    id             bigserial PRIMARY KEY,
    event          text NOT NULL,
    job_id         bigint,
    queue          text,
    kind           text,
    dedupe_key     text,
    old_status     text,
    new_status     text,
    token          uuid,        -- claim: the new lease token; beat and end: the attempt's token
    attempt        integer,     -- the attempt's number (an end: the number before the change)
    new_attempts   integer,     -- attempts after the change (a release hands an attempt back)
    worker         text,
    error          text,
    result_token   uuid,        -- the lease token the stored result names (test tasks return theirs)
    lease_was      timestamptz, -- the lease's expiry before the change
    lease_now      timestamptz, -- and after it
    input_wm       bigint,
    done_wm        bigint,
    old_input_wm   bigint,
    old_done_wm    bigint,
    running_of_kind integer,    -- a claim of a limited kind: its running jobs once this claim ran
    kind_limit     integer,
    group_key      text,
    sequence_key   text,        -- an enqueue: the job's sequence key
    started_at     timestamptz, -- a claim: the job's started_at (the time the claim counts starts at)
    running_of_group integer,   -- a claim of a kind with a group concurrency limit: its group's running jobs
    group_limit    integer,
    tx_at          timestamptz NOT NULL DEFAULT now(),
    at             timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE FUNCTION history_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.history (event, job_id, queue, kind, dedupe_key, new_status, new_attempts, input_wm,
                                sequence_key)
    SELECT 'enqueue', n.id, n.queue, n.kind, n.dedupe_key, n.status::text, n.attempts, n.input_watermark,
           n.sequence_key
    FROM new_rows n;
    RETURN NULL;
END $$;

CREATE FUNCTION history_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.history (event, job_id, queue, kind, dedupe_key, old_status, new_status, token, attempt,
                         new_attempts, worker, error, result_token, lease_was, lease_now, input_wm, done_wm,
                         old_input_wm, old_done_wm, running_of_kind, kind_limit, group_key, started_at,
                         running_of_group, group_limit)
    SELECT CASE WHEN n.status = 'running' AND (o.status <> 'running' OR o.lease_token IS DISTINCT FROM n.lease_token)
                    THEN 'claim'
                WHEN o.status = 'running' AND n.status = 'running' THEN 'beat'
                WHEN o.status = 'running' THEN 'end'
                ELSE 'change' END,
           n.id, n.queue, n.kind, n.dedupe_key, o.status::text, n.status::text,
           CASE WHEN n.status = 'running' THEN n.lease_token ELSE o.lease_token END,
           CASE WHEN n.status = 'running' THEN n.attempts ELSE o.attempts END,
           n.attempts, n.claimed_by, n.last_error,
           CASE WHEN jsonb_typeof(n.result) = 'object' THEN (n.result->>'token')::uuid END,
           o.lease_expires_at, n.lease_expires_at, n.input_watermark, n.done_watermark,
           o.input_watermark, o.done_watermark,
           CASE WHEN n.status = 'running' AND o.status <> 'running' AND l.kind IS NOT NULL
                THEN (SELECT count(*) FROM pgq.jobs r WHERE r.kind = n.kind AND r.status = 'running') END,
           l.max_running, n.group_key, n.started_at,
           CASE WHEN n.status = 'running' AND o.status <> 'running' AND g.max_running IS NOT NULL
                     AND n.group_key IS NOT NULL
                THEN (SELECT count(*) FROM pgq.jobs r
                      WHERE r.kind = n.kind AND r.group_key = n.group_key AND r.status = 'running') END,
           g.max_running
    FROM old_rows o
    JOIN new_rows n ON n.id = o.id
    LEFT JOIN pgq.concurrency_limits l ON l.kind = n.kind
    LEFT JOIN pgq.group_limits g ON g.kind = n.kind
    WHERE (o.status, o.lease_token, o.attempts, o.finished_at, o.result, o.last_error, o.run_at,
           o.lease_expires_at, o.input_watermark, o.done_watermark, o.dedupe_key)
          IS DISTINCT FROM
          (n.status, n.lease_token, n.attempts, n.finished_at, n.result, n.last_error, n.run_at,
           n.lease_expires_at, n.input_watermark, n.done_watermark, n.dedupe_key);
    RETURN NULL;
END $$;

CREATE FUNCTION history_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.history (event, job_id, queue, kind, old_status)
    SELECT 'purge', o.id, o.queue, o.kind, o.status::text FROM old_rows o;
    RETURN NULL;
END $$;

CREATE FUNCTION history_watermark() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.history (event, job_id, queue, dedupe_key, old_done_wm, done_wm)
    VALUES ('watermark', NEW.job_id, NEW.queue, NEW.dedupe_key,
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.done_watermark END, NEW.done_watermark);
    RETURN NULL;
END $$;

CREATE TRIGGER history_watermark AFTER INSERT OR UPDATE ON pgq.key_watermarks
    FOR EACH ROW EXECUTE FUNCTION history_watermark();

-- From revision 0033 on, pgq.jobs is partitioned: pgq's functions write its partitions by name, and a
-- job that finishes (or is retried) moves, a delete from one partition and an insert into the other
-- in one statement (an UPDATE of pgq.jobs that changes the status does the same). So row triggers,
-- defined on pgq.jobs and so on every partition, record each row once whichever table a statement
-- names; a delete is recorded as a purge and remembered in history_moving, and an insert of the
-- same job after it, in the same transaction, turns that purge into the change the move was.
CREATE TABLE history_moving (job_id bigint PRIMARY KEY, history_id bigint NOT NULL, old jsonb NOT NULL);

CREATE FUNCTION history_row_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    m record;
BEGIN
    SELECT * INTO m FROM public.history_moving WHERE job_id = NEW.id;
    IF FOUND THEN
        DELETE FROM public.history_moving WHERE job_id = NEW.id;
        DELETE FROM public.history WHERE id = m.history_id;
        PERFORM public.history_change(m.old, to_jsonb(NEW));
    ELSE
        INSERT INTO public.history (event, job_id, queue, kind, dedupe_key, new_status, new_attempts, input_wm,
                                    sequence_key)
        VALUES ('enqueue', NEW.id, NEW.queue, NEW.kind, NEW.dedupe_key, NEW.status::text, NEW.attempts,
                NEW.input_watermark, NEW.sequence_key);
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION history_row_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM public.history_change(to_jsonb(OLD), to_jsonb(NEW));
    RETURN NULL;
END $$;

CREATE FUNCTION history_row_delete() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    purge_id bigint;
BEGIN
    INSERT INTO public.history (event, job_id, queue, kind, old_status)
    VALUES ('purge', OLD.id, OLD.queue, OLD.kind, OLD.status::text)
    RETURNING id INTO purge_id;
    INSERT INTO public.history_moving (job_id, history_id, old) VALUES (OLD.id, purge_id, to_jsonb(OLD))
    ON CONFLICT (job_id) DO UPDATE SET history_id = excluded.history_id, old = excluded.old;
    RETURN NULL;
END $$;

DO $triggers$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'pgq.jobs'::regclass) = 'p' THEN
        -- history_change(old, new): history_update's statement over one row of each, as jsonb.
        EXECUTE replace(replace(replace(replace(replace(
                    pg_get_functiondef('history_update()'::regprocedure),
                    'history_update()', 'history_change(o_json jsonb, n_json jsonb)'),
                    'RETURNS trigger', 'RETURNS void'),
                    'RETURN NULL;', 'RETURN;'),
                    'FROM old_rows o', 'FROM jsonb_populate_record(NULL::pgq.jobs, o_json) o'),
                    'JOIN new_rows n', 'JOIN jsonb_populate_record(NULL::pgq.jobs, n_json) n');
        CREATE TRIGGER history_insert AFTER INSERT ON pgq.jobs
            FOR EACH ROW EXECUTE FUNCTION history_row_insert();
        CREATE TRIGGER history_update AFTER UPDATE ON pgq.jobs
            FOR EACH ROW EXECUTE FUNCTION history_row_update();
        CREATE TRIGGER history_delete AFTER DELETE ON pgq.jobs
            FOR EACH ROW EXECUTE FUNCTION history_row_delete();
    ELSE
        CREATE TRIGGER history_insert AFTER INSERT ON pgq.jobs
            REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION history_insert();
        CREATE TRIGGER history_update AFTER UPDATE ON pgq.jobs
            REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
            EXECUTE FUNCTION history_update();
        CREATE TRIGGER history_delete AFTER DELETE ON pgq.jobs
            REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION history_delete();
    END IF;
END $triggers$;
"""


def install(conn: psycopg.Connection[Any]) -> None:
    """Create the `history` table and its triggers in the (migrated) database of `conn`."""
    conn.execute(DDL)


@dataclass
class Report:
    """What `check` found: violations by property (a few examples each) and counts of what happened."""

    violations: dict[str, list[Any]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, what: str, example: Any) -> None:
        """Record one violation of property `what` (keeping at most 5 examples)."""
        examples = self.violations.setdefault(what, [])
        if len(examples) < 5:
            examples.append(example)
        self.counts[f"violations: {what}"] = self.counts.get(f"violations: {what}", 0) + 1

    def summary(self) -> str:
        """One line of counts."""
        return ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))


def check(conn: psycopg.Connection[Any], *, effects: bool = True, allow_retry_of_finished: bool = False) -> Report:
    """Check the recorded history of the database of `conn` (see the module docstring); `effects`:
    also check the `effects` table when there is one."""
    report = Report()
    cur = conn.cursor(row_factory=dict_row)
    rows = cur.execute("SELECT * FROM history WHERE event <> 'watermark' ORDER BY job_id, id").fetchall()
    counts: dict[str, int] = defaultdict(int)
    by_job: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_job[row["job_id"]].append(row)
        counts[row["event"]] += 1
        if row["event"] == "end":
            counts["rescues" if _is_rescue(row) else f"ends {row['new_status']}"] += 1
    counts["jobs"] = len(by_job)
    succeeded_tokens: dict[int, Any] = {}
    claimed: dict[int, set[Any]] = defaultdict(set)
    for job_id, events in by_job.items():
        _check_job(job_id, events, report, succeeded_tokens, claimed, allow_retry_of_finished)
    _check_dedupe(by_job, report)
    _check_limits(rows, report)
    _check_group_rates(cur, rows, report)
    _check_sequences(by_job, report)
    _check_watermarks(cur, by_job, report)
    if effects and cur.execute("SELECT to_regclass('effects') IS NOT NULL AS e").fetchone()["e"]:  # type: ignore[index]
        _check_effects(cur, succeeded_tokens, claimed, report)
    report.counts.update(counts)
    return report


def _check_job(job_id: int, events: list[dict[str, Any]], report: Report, succeeded: dict[int, Any],
               claimed: dict[int, set[Any]], allow_retry: bool) -> None:
    first = events[0]
    if first["event"] != "enqueue":
        report.add("a job's history does not start with its enqueue", (job_id, first["event"]))
    status = first["new_status"]
    attempts = first["new_attempts"] or 0
    live: Any = None  # the token of the live attempt
    tokens: set[Any] = set()
    for ev in events[1:]:
        kind = ev["event"]
        if kind == "purge":
            if ev["old_status"] not in FINISHED:
                report.add("an unfinished job was deleted", (job_id, ev["old_status"]))
            status = "purged"
            continue
        if status == "purged":
            report.add("a deleted job changed", (job_id, kind))
        if ev["old_status"] != status:
            report.add("a change did not start from the state the previous one left (a lost event)",
                       (job_id, kind, status, ev["old_status"]))
        if status in FINISHED and not (allow_retry and kind == "change" and ev["new_status"] == "queued"):
            report.add("a finished job was changed again", (job_id, kind, status, ev["new_status"]))
        if kind == "claim":
            if ev["old_status"] == "running":
                report.add("a job was claimed while running (two live leases)", (job_id, ev["token"]))
            if ev["token"] is None or ev["token"] in tokens:
                report.add("a claim reused a lease token", (job_id, ev["token"]))
            if ev["attempt"] != attempts + 1:
                report.add("a claim did not take the next attempt number", (job_id, attempts, ev["attempt"]))
            live = ev["token"]
            tokens.add(live)
            claimed[job_id].add(live)
        elif kind == "beat":
            if ev["token"] != live:
                report.add("a heartbeat changed an attempt that was not live", (job_id, ev["token"], live))
            if ev["lease_was"] is not None and ev["lease_now"] is not None and ev["lease_now"] < ev["lease_was"]:
                report.add("a heartbeat shortened a lease", (job_id, ev["lease_was"], ev["lease_now"]))
        elif kind == "end":
            if ev["token"] != live:
                report.add("an end concerned an attempt that was not live", (job_id, ev["token"], live))
            if _is_rescue(ev) and ev["lease_was"] is not None and ev["lease_was"] >= ev["tx_at"]:
                report.add("a rescue took a lease before it expired (database clock)",
                           (job_id, ev["lease_was"], ev["tx_at"]))
            if ev["new_status"] == "succeeded":
                if job_id in succeeded:
                    report.add("a job succeeded twice", job_id)
                succeeded[job_id] = ev["token"]
                if ev["result_token"] is not None and ev["result_token"] != ev["token"]:
                    report.add("a completion was accepted from an attempt that did not hold the lease",
                               (job_id, ev["token"], ev["result_token"]))
            live = None
        attempts = ev["new_attempts"] if ev["new_attempts"] is not None else attempts
        status = ev["new_status"] if ev["new_status"] is not None else status


def _is_rescue(ev: dict[str, Any]) -> bool:
    """Whether end event `ev` is a rescue (sql/job_rescue.sql's error names the attempt it ends; a
    later end keeps the error of an earlier rescue)."""
    return (ev["new_status"] in ("queued", "failed")
            and (ev["error"] or "").startswith("lease expired at ")
            and f"(attempt {ev['attempt']}," in ev["error"])


def _check_dedupe(by_job: dict[int, list[dict[str, Any]]], report: Report) -> None:
    spans: dict[tuple[str, str], list[tuple[dt.datetime, dt.datetime | None, int]]] = defaultdict(list)
    for job_id, events in by_job.items():
        key = events[0]["dedupe_key"]
        if key is None or events[0]["event"] != "enqueue":
            continue
        start = events[0]["at"]
        end = next((e["at"] for e in events[1:] if e["new_status"] in FINISHED), None)
        spans[(events[0]["queue"], key)].append((start, end, job_id))
    for key, items in spans.items():
        items.sort(key=lambda s: s[0])
        for (_s1, e1, j1), (s2, _e2, j2) in itertools.pairwise(items):
            if e1 is None or s2 < e1:
                report.add("two active jobs had one dedupe key at once", (key, j1, j2))


def _check_limits(rows: list[dict[str, Any]], report: Report) -> None:
    for ev in rows:
        if ev["event"] == "claim" and ev["kind_limit"] is not None and ev["running_of_kind"] is not None \
                and ev["running_of_kind"] > ev["kind_limit"]:
            report.add("a concurrency limit was exceeded", (ev["kind"], ev["running_of_kind"], ev["kind_limit"]))
        if ev["event"] == "claim" and ev["group_limit"] is not None and ev["running_of_group"] is not None \
                and ev["running_of_group"] > ev["group_limit"]:
            report.add("a group concurrency limit was exceeded",
                       (ev["kind"], ev["group_key"], ev["running_of_group"], ev["group_limit"]))


def _check_group_rates(cur: psycopg.Cursor[dict[str, Any]], rows: list[dict[str, Any]], report: Report) -> None:
    limits = {r["kind"]: (r["max_starts"], dt.timedelta(seconds=r["per_s"])) for r in cur.execute(
        "SELECT kind, max_starts, per_s FROM pgq.group_limits WHERE per_s IS NOT NULL")}
    starts: dict[tuple[str, str], list[dt.datetime]] = defaultdict(list)
    for ev in rows:
        if ev["event"] == "claim" and ev["kind"] in limits and ev["group_key"] is not None:
            starts[(ev["kind"], ev["group_key"])].append(ev["started_at"])
    for (kind, group), times in starts.items():
        most, per = limits[kind]
        times.sort()
        first = 0
        for last, at in enumerate(times):
            # The claim's window is (at - per, at]: the starts in it, this one included.
            while times[first] <= at - per:
                first += 1
            if last - first + 1 > most:
                report.add("a group rate limit was exceeded", (kind, group, at, last - first + 1, most))


def _check_sequences(by_job: dict[int, list[dict[str, Any]]], report: Report) -> None:
    keys: dict[tuple[str, str], list[int]] = defaultdict(list)
    for job_id, events in by_job.items():
        if events[0]["event"] == "enqueue" and events[0]["sequence_key"] is not None:
            keys[(events[0]["queue"], events[0]["sequence_key"])].append(job_id)
    report.counts["sequenced jobs"] = sum(len(ids) for ids in keys.values())
    for key, ids in keys.items():
        ids.sort()
        for prev, job in itertools.pairwise(ids):
            finishes = [e["at"] for e in by_job[prev] if e["new_status"] in FINISHED and e["event"] != "purge"]
            claims = [e["at"] for e in by_job[job] if e["event"] == "claim"]
            if claims and not finishes:
                report.add("a sequence's job ran before the job ahead of it finished", (key, prev, job, None))
            elif claims and min(claims) <= max(finishes):
                report.add("a sequence's job ran before the job ahead of it finished",
                           (key, prev, job, min(claims), max(finishes)))


def _check_watermarks(cur: psycopg.Cursor[dict[str, Any]], by_job: dict[int, list[dict[str, Any]]],
                      report: Report) -> None:
    for ev in cur.execute("SELECT * FROM history WHERE event = 'watermark' ORDER BY id"):
        if ev["old_done_wm"] is not None and ev["done_wm"] is not None and ev["done_wm"] < ev["old_done_wm"]:
            report.add("a key's done watermark went backwards", (ev["queue"], ev["dedupe_key"],
                                                                 ev["old_done_wm"], ev["done_wm"]))
    for job_id, events in by_job.items():
        for ev in events:
            for new, old in (("input_wm", "old_input_wm"), ("done_wm", "old_done_wm")):
                if ev[old] is not None and (ev[new] is None or ev[new] < ev[old]):
                    report.add(f"a job's {new.replace('_wm', '')} watermark went backwards",
                               (job_id, ev["event"], ev[old], ev[new]))


def _check_effects(cur: psycopg.Cursor[dict[str, Any]], succeeded: dict[int, Any], claimed: dict[int, set[Any]],
                   report: Report) -> None:
    seen: set[tuple[int, Any]] = set()
    effects = 0
    for row in cur.execute("SELECT job_id, token FROM effects WHERE note IS DISTINCT FROM 'started' "
                           "AND note IS DISTINCT FROM 'interrupted' ORDER BY id"):
        effects += 1
        key = (row["job_id"], row["token"])
        if key in seen:
            report.add("one attempt recorded its side effect twice", key)
        seen.add(key)
        if row["token"] not in claimed.get(row["job_id"], ()):
            report.add("a side effect came from an attempt that was never claimed", key)
    for job_id, token in succeeded.items():
        if (job_id, token) not in seen:
            report.add("a succeeded attempt left no side effect", (job_id, token))
    report.counts["side effects"] = effects
    report.counts["repeated side effects"] = effects - len({job for job, _ in seen})
