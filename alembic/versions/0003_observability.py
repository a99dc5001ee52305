"""Observability: views for operators (queue_backlog, stuck_jobs, failing_jobs, workers), their two
partial indexes, and pgq.jobs' fillfactor and autovacuum settings for a high-churn table.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Create the views and indexes, set the storage parameters (sql/schema/0003_observability.up.sql)."""
    execute_schema_file("0003_observability.up.sql")


def downgrade() -> None:
    """Drop them and reset the storage parameters (sql/schema/0003_observability.down.sql)."""
    execute_schema_file("0003_observability.down.sql")
