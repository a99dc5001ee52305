"""pgq: a Postgres-native job queue. Public API re-exports only."""

from __future__ import annotations

from .client import AsyncQueue, Queue
from .errors import InvalidJob, InvalidState, LeaseLost, NotFound, NotMigrated, PgqError
from .models import Claim, Job, JobSpec, JobStatus

__all__ = [
    "AsyncQueue",
    "Claim",
    "InvalidJob",
    "InvalidState",
    "Job",
    "JobSpec",
    "JobStatus",
    "LeaseLost",
    "NotFound",
    "NotMigrated",
    "PgqError",
    "Queue",
]
