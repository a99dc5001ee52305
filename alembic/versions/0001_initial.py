"""Initial schema: pgq.jobs, pgq.key_watermarks, pgq.concurrency_limits, the SQL API and the views.

Revision ID: 0001
Revises:
Create Date: 2025-11-22
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Create pgq's objects (sql/schema/0001_initial.up.sql)."""
    execute_schema_file("0001_initial.up.sql")


def downgrade() -> None:
    """Drop them again; the schema `pgq` and its version table stay (sql/schema/0001_initial.down.sql)."""
    execute_schema_file("0001_initial.down.sql")
