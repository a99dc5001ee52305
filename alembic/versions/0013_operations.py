"""Operations: a registry of live workers (pgq.workers becomes a table) and pgq.explain(id).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add the worker registry and pgq.explain (sql/schema/0013_operations.up.sql)."""
    execute_schema_file("0013_operations.up.sql")


def downgrade() -> None:
    """Drop them and restore the pgq.workers view (sql/schema/0013_operations.down.sql)."""
    execute_schema_file("0013_operations.down.sql")
