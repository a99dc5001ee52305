"""Finished jobs leave the hot table: pgq.jobs partitioned, live and by day (#43).

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-07
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Partition pgq.jobs: live jobs and finished ones by day (sql/schema/0033_finished_history.up.sql)."""
    execute_schema_file("0033_finished_history.up.sql")


def downgrade() -> None:
    """Make pgq.jobs one table again (sql/schema/0033_finished_history.down.sql)."""
    execute_schema_file("0033_finished_history.down.sql")
