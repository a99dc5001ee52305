"""pgq: a Postgres-native job queue. Public API re-exports only."""

from __future__ import annotations

from .app import (
    App,
    Backoff,
    PermanentFailure,
    PollingTimeout,
    RetryPolicy,
    Snooze,
    Task,
    current_job,
    poll_later,
    polling_schedule,
)
from .client import AsyncQueue, Queue
from .errors import InvalidJob, InvalidState, LeaseLost, NotFound, NotMigrated, PgqError
from .models import Claim, Job, JobSpec, JobStatus
from .worker import Worker, WorkerConfig

__all__ = [
    "App",
    "AsyncQueue",
    "Backoff",
    "Claim",
    "InvalidJob",
    "InvalidState",
    "Job",
    "JobSpec",
    "JobStatus",
    "LeaseLost",
    "NotFound",
    "NotMigrated",
    "PermanentFailure",
    "PgqError",
    "PollingTimeout",
    "Queue",
    "RetryPolicy",
    "Snooze",
    "Task",
    "Worker",
    "WorkerConfig",
    "current_job",
    "poll_later",
    "polling_schedule",
]
