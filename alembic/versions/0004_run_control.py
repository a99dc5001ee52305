"""Control of running jobs: the progress column, the cancel notification (channel pgq_cancel),
pgq.cancel() for DBAs, and pgq.running_jobs with progress.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add them (sql/schema/0004_run_control.up.sql)."""
    execute_schema_file("0004_run_control.up.sql")


def downgrade() -> None:
    """Remove them (sql/schema/0004_run_control.down.sql)."""
    execute_schema_file("0004_run_control.down.sql")
