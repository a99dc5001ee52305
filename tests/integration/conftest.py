"""Helpers for the integration tests: raw SQL access to the test database, next to the Queue API."""

from __future__ import annotations

from ..conftest import SQL

__all__ = ["SQL", "expire_lease"]


def expire_lease(db: SQL, job_id: int) -> None:
    """Move a running job's lease into the past (database clock) instead of sleeping through it."""
    db("UPDATE pgq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [job_id])
