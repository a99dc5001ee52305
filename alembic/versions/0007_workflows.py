"""Workflows: job dependencies (status waiting, pgq.job_dependencies) and their release.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add them (sql/schema/0007_workflows.up.sql)."""
    execute_schema_file("0007_workflows.up.sql")


def downgrade() -> None:
    """Remove them (sql/schema/0007_workflows.down.sql)."""
    execute_schema_file("0007_workflows.down.sql")
