"""A queue's cancelled jobs, newest first: jobs_cancelled_idx, read by the dashboard's queue page (issue #44).

Revision ID: 0031
Revises: 0029
Create Date: 2026-11-29
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0031"
down_revision: str | None = "0029"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Create jobs_cancelled_idx (sql/schema/0031_cancelled_jobs.up.sql)."""
    execute_schema_file("0031_cancelled_jobs.up.sql")


def downgrade() -> None:
    """Drop jobs_cancelled_idx (sql/schema/0031_cancelled_jobs.down.sql)."""
    execute_schema_file("0031_cancelled_jobs.down.sql")
