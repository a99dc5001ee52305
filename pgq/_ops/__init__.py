"""pgq's operations, written once, free of I/O.

An operation is a generator: it yields `Stmt` objects ("run sql/<name>.sql with these parameters")
and receives each statement's result; its return value is the operation's result. The sync driver
(`run_sync`) and the async driver (`run_async`) are the only code that talks to psycopg, so `Queue`
and `AsyncQueue` share every line of queue logic and differ only in how they wait. Database errors
are thrown back into the generator, so an operation can translate them.

Modules, bottom-up: `core` (Stmt, Operation, shared checks, the statement registry), `jobs`
(enqueue, claim, acknowledgements), `admin` (operators' operations), `bulk` (bulk actions), `leader` (maintenance runs),
`registry` (the worker registry, explain),
`driver` (run_sync / run_async), `watchdog` (severing a connection that stopped answering).
Callers use this package's names (`_ops.claim`), never a module's.
"""

from .admin import (
    DEPENDENCIES_LIMIT,
    PURGE_BATCH,
    cancel,
    dependencies,
    get,
    is_dirty,
    list_jobs,
    parse_rate,
    pause,
    purge,
    queue_backlog,
    queue_stats,
    resume,
    retry,
    set_concurrency_limit,
    set_group_limits,
    set_rate_limit,
    wait_mark,
)
from .bulk import BULK_BATCH, BULK_IDS_MAX, BULK_STATUSES, BulkAction, JobFilter, bulk, bulk_ids
from .core import READ_ONLY_STATEMENTS, WRITING_STATEMENTS, Fetch, Operation, Steps, Stmt
from .driver import (
    KEPT_CURSOR_MAX_ROWS,
    TRANSACTION_IDLE_LIMIT,
    configure_connection,
    configure_connection_async,
    jsonb_bytes_decoded,
    keeps_cursor,
    run_async,
    run_sync,
)
from .jobs import (
    RESCUE_BATCH,
    claim,
    complete,
    enqueue,
    enqueue_traced,
    error_set,
    fail,
    heartbeat,
    lease_check,
    rescue_expired,
    snooze,
    trace_context_get,
)
from .leader import (
    LeaderRun,
    StalledSession,
    end_stalled_as_leader,
    next_run_at,
    periodic_enqueue_as_leader,
    purge_as_leader,
    rescue_as_leader,
    settle,
)
from .registry import WorkerRow, explain, worker_register, worker_seen, worker_unregister, workers
from .watchdog import AsyncWatchdog, Watchdog, sever

__all__ = [
    "BULK_BATCH",
    "BULK_IDS_MAX",
    "BULK_STATUSES",
    "DEPENDENCIES_LIMIT",
    "KEPT_CURSOR_MAX_ROWS",
    "PURGE_BATCH",
    "READ_ONLY_STATEMENTS",
    "RESCUE_BATCH",
    "TRANSACTION_IDLE_LIMIT",
    "WRITING_STATEMENTS",
    "AsyncWatchdog",
    "BulkAction",
    "Fetch",
    "JobFilter",
    "LeaderRun",
    "Operation",
    "StalledSession",
    "Steps",
    "Stmt",
    "Watchdog",
    "WorkerRow",
    "bulk",
    "bulk_ids",
    "cancel",
    "claim",
    "complete",
    "configure_connection",
    "configure_connection_async",
    "dependencies",
    "end_stalled_as_leader",
    "enqueue",
    "enqueue_traced",
    "error_set",
    "explain",
    "fail",
    "get",
    "heartbeat",
    "is_dirty",
    "jsonb_bytes_decoded",
    "keeps_cursor",
    "lease_check",
    "list_jobs",
    "next_run_at",
    "parse_rate",
    "pause",
    "periodic_enqueue_as_leader",
    "purge",
    "purge_as_leader",
    "queue_backlog",
    "queue_stats",
    "rescue_as_leader",
    "rescue_expired",
    "resume",
    "retry",
    "run_async",
    "run_sync",
    "set_concurrency_limit",
    "set_group_limits",
    "set_rate_limit",
    "settle",
    "sever",
    "snooze",
    "trace_context_get",
    "wait_mark",
    "worker_register",
    "worker_seen",
    "worker_unregister",
    "workers",
]
