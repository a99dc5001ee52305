"""The shape of an operation (`Stmt`, `Operation`), the checks operations share, and which of
pgq's statements write (lock rows) and which only read."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from ..bounds import check_job_id
from ..errors import InvalidJob, LeaseLost

T = TypeVar("T")

Fetch = Literal["rows", "tuples", "rowcount", "none"]


@dataclass(frozen=True, slots=True)
class Stmt:
    """Run `sql/<name>.sql` with `params`; the operation receives rows (dicts, or tuples in binary
    format, cheaper to decode, for the hot paths that read many rows), the row count, or None."""

    name: str
    params: dict[str, Any]
    fetch: Fetch = "rows"


Steps = Generator[Stmt, Any, T]


@dataclass(frozen=True, slots=True)
class Operation(Generic[T]):
    """An operation ready to be driven.

    `transaction`: run all statements in one transaction (otherwise each statement commits on its
    own; on a caller's connection, statements simply join the caller's transaction).
    `retry_safe`: re-running the whole operation after a connection error that may have happened
    after a statement reached the server cannot do harm (reads, heartbeats, deduplicated enqueues).
    `then`: given this operation's result, an operation to run next on the same connection (in its
    own transaction) whose result replaces it, or None to stop there.
    `guards_itself`: its first statement already applies `transaction_guard.sql`'s settings to its
    transaction (maintenance_lock does), so the driver runs no `transaction_guard` before it.
    """

    name: str
    steps: Callable[[], Steps[T]]
    transaction: bool = False
    retry_safe: bool = False
    then: Callable[[T], Operation[T] | None] | None = None
    guards_itself: bool = False


K = TypeVar("K")


def _check_lost(operation: str, sent: list[int], done: dict[int, K], raise_lost: bool) -> dict[int, K]:
    if raise_lost and len(done) < len(sent):
        raise LeaseLost((i for i in sent if i not in done), operation)
    return done


def _queue_name(queue: object) -> str:
    if not isinstance(queue, str) or not queue or "\x00" in queue:
        raise InvalidJob(f"queue must be a non-empty str, got {queue!r}")
    return queue


def _text_list(name: str, values: Iterable[str] | None) -> list[str] | None:
    if values is None:
        return None
    if isinstance(values, str):
        raise InvalidJob(f"{name} must be a list of str, not a str")
    result = list(values)
    if not result or not all(isinstance(v, str) and v for v in result):
        raise InvalidJob(f"{name} must be a non-empty list of non-empty str")
    return result


def _check_id(job_id: object) -> None:
    check_job_id(job_id)  # an int within bigint (pgq.bounds)


ACTOR_MAX = 200
"""Longest actor name an operation records (pgq.job_audit.actor, pgq.control_audit.actor,
pgq.paused_queues.paused_by)."""


def check_actor(actor: object) -> str | None:
    """`actor` as an operation records it: None (no name: the database role stands alone) or a str of
    1..ACTOR_MAX characters without NUL ("" counts as None). Raises InvalidJob otherwise."""
    if actor is None or actor == "":
        return None
    if not isinstance(actor, str) or "\x00" in actor or len(actor) > ACTOR_MAX:
        raise InvalidJob(f"actor must be a str of at most {ACTOR_MAX} characters without NUL, got {actor!r}")
    return actor


def _clean_text(text: str) -> str:
    # Error texts come from exceptions and may hold anything; Postgres text cannot hold NUL, nor a
    # lone surrogate (a file name decoded with surrogateescape), which is kept as its escape.
    text = str(text).replace("\x00", "\\0")
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


# pgq's statements that lock job (or limit) rows or hold a lock until they commit: a session stuck
# sending the result of one of these to a frozen client holds those rows. No other statement takes
# a row lock (READ_ONLY_STATEMENTS); tests check that every .sql file is in exactly one of the two.
WRITING_STATEMENTS: tuple[str, ...] = (
    "concurrency_limit_delete", "concurrency_limit_set", "dashboard_job_run_now", "finished_count",
    "finished_partitions_drop", "finished_partitions_ensure", "group_limits_delete", "group_limits_set",
    "job_after_finish", "job_cancel", "job_cancel_many", "job_claim", "job_claim_fast", "job_complete",
    "job_complete_skip", "job_delete_many", "job_enqueue", "job_enqueue_after", "job_enqueue_one",
    "job_enqueue_unique", "job_error_set", "job_fail", "job_fail_skip", "job_heartbeat", "job_heartbeat_skip",
    "job_insert", "job_insert_one", "job_purge", "job_rescue", "job_retry", "job_retry_many", "job_settle",
    "job_snooze", "job_snooze_skip", "job_trace_context_set", "job_wait_mark", "limit_audit", "limits_changed",
    "maintenance_lock", "maintenance_lock_seen", "periodic_enqueue", "queue_pause", "queue_resume",
    "rate_limit_delete", "rate_limit_set", "worker_prune", "worker_register", "worker_seen", "worker_unregister",
)
READ_ONLY_STATEMENTS: tuple[str, ...] = (
    "dashboard_concurrency_limits", "dashboard_failed_groups",
    "dashboard_finished_counts", "dashboard_guard", "dashboard_job_audit", "dashboard_job_bounds",
    "dashboard_job_states", "dashboard_jobs", "dashboard_jobs_failed", "dashboard_jobs_indexed",
    "dashboard_queue_counts", "dashboard_queue_names", "dashboard_queue_tab", "dashboard_queue_workers",
    "dashboard_queues", "dashboard_rate_limits", "dashboard_running", "dashboard_ticks", "dashboard_workers",
    "group_limits_list", "job_dependencies", "job_explain", "job_get", "job_lease_check", "job_list",
    "job_next_run_at", "job_select_where", "job_trace_context_get", "key_is_dirty", "limit_audit_allowed", "ping",
    "queue_backlog", "queue_exists", "queue_live_workers", "queue_stats", "queue_unknown_kinds", "schema_check",
    "session_utc", "stalled_session_end", "transaction_guard", "worker_list",
)
