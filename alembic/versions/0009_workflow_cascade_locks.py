"""Workflow cascade locks: a statement that fails or cancels parents locks every waiting job its
cascade of cancellations can reach up front, in id order, instead of level by level.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Replace the release trigger's body (sql/schema/0009_workflow_cascade_locks.up.sql)."""
    execute_schema_file("0009_workflow_cascade_locks.up.sql")


def downgrade() -> None:
    """Put revision 0008's body back (sql/schema/0009_workflow_cascade_locks.down.sql)."""
    execute_schema_file("0009_workflow_cascade_locks.down.sql")
