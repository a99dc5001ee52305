"""Workflow locks: pgq.enqueue_after takes its parents' locks all at once or none, and a statement
that finishes parents locks the children it releases in one order.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Replace the bodies, add the collecting trigger (sql/schema/0008_workflow_locks.up.sql)."""
    execute_schema_file("0008_workflow_locks.up.sql")


def downgrade() -> None:
    """Put revision 0007's bodies back (sql/schema/0008_workflow_locks.down.sql)."""
    execute_schema_file("0008_workflow_locks.down.sql")
