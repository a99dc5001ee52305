"""The failed jobs in id order: jobs_failed_id_idx, read by the dashboard's failed list (issue #44).

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-29
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Create jobs_failed_id_idx (sql/schema/0029_failed_ids.up.sql)."""
    execute_schema_file("0029_failed_ids.up.sql")


def downgrade() -> None:
    """Drop jobs_failed_id_idx (sql/schema/0029_failed_ids.down.sql)."""
    execute_schema_file("0029_failed_ids.down.sql")
