"""pgq's exceptions. Every error pgq raises on purpose is a `PgqError`."""

from __future__ import annotations

from collections.abc import Iterable


def one_line(exc: BaseException) -> str:
    """An exception's message with its whitespace (newlines included) collapsed, for one log line;
    the exception's type name when it has no message."""
    return " ".join(str(exc).split()) or type(exc).__name__


class PgqError(Exception):
    """Base class of every error pgq raises on purpose."""


class NotMigrated(PgqError):
    """The database has no pgq schema, or an older one: run `pgq migrate`."""


class InvalidJob(PgqError, ValueError):
    """Bad input, rejected before anything was written (payload, kind, priority, delay, lease ...)."""


class NotFound(PgqError, LookupError):
    """No job with the given id."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} not found")
        self.job_id = job_id


class InvalidState(PgqError):
    """The job exists but its status does not allow the operation (e.g. cancelling a finished job)."""

    def __init__(self, job_id: int, status: str, operation: str, detail: str = "") -> None:
        message = f"cannot {operation} job {job_id}: it is {status}"
        super().__init__(f"{message} ({detail})" if detail else message)
        self.job_id = job_id
        self.status = status
        self.operation = operation


class LeaseLost(PgqError):
    """The attempt no longer owns the job: its lease token is not the job's current one.

    Raised by complete / fail / heartbeat / snooze when the job was rescued after its lease expired,
    cancelled, or finished by someone else. Nothing was changed for the jobs in `job_ids`.
    """

    def __init__(self, job_ids: Iterable[int], operation: str) -> None:
        self.job_ids = sorted(job_ids)
        self.operation = operation
        shown = ", ".join(str(i) for i in self.job_ids[:10])
        more = f" and {len(self.job_ids) - 10} more" if len(self.job_ids) > 10 else ""
        super().__init__(
            f"{operation} refused: lease lost for job(s) {shown}{more} "
            "(rescued after lease expiry, cancelled, or finished elsewhere)"
        )


# Constraint names of sql/schema -> what they mean to a caller. Mapped by name, never by message text.
CONSTRAINT_MESSAGES: dict[str, str] = {
    "jobs_dedupe_active_uq": "another active job already holds this dedupe key",
    "live_jobs_dedupe_active_uq": "another active job already holds this dedupe key",  # revision 0033
    "jobs_kind_not_empty": "kind must not be empty",
    "jobs_queue_not_empty": "queue must not be empty",
    "jobs_max_attempts_positive": "max_attempts must be at least 1",
    "jobs_json_bounded": "a payload, result or progress nests deeper than 64 levels or is larger than 8 MiB",
    "jobs_trace_context_valid": "a trace context holds only a traceparent (at most 256 characters) and a "
                                "tracestate (at most 512)",
    "key_raises_payload_bounded": "a payload nests deeper than 64 levels or is larger than 8 MiB",
    "job_audit_filters_bounded": "the filters nest deeper than 64 levels or are larger than 8 MiB",
}
