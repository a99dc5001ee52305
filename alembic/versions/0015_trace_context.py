"""Trace context: the W3C trace context of the span that enqueued a job, stored with it
(pgq.otel), and the function that sets it in the enqueueing transaction.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add pgq.jobs.trace_context and pgq.trace_context_set (sql/schema/0015_trace_context.up.sql)."""
    execute_schema_file("0015_trace_context.up.sql")


def downgrade() -> None:
    """Drop them (sql/schema/0015_trace_context.down.sql)."""
    execute_schema_file("0015_trace_context.down.sql")
