"""Producer locks: pgq.enqueue_after and pgq.mark_awaited write no existing job (a producer's open
transaction holds nothing a worker or an admin waits for); the functions that finish jobs release
children and tell waiters themselves, and the rescue settles what they could not see.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Apply sql/schema/0012_producer_locks.up.sql."""
    execute_schema_file("0012_producer_locks.up.sql")


def downgrade() -> None:
    """Apply sql/schema/0012_producer_locks.down.sql, then restore the release trigger's body of
    revision 0009 (its up file holds only that function)."""
    execute_schema_file("0012_producer_locks.down.sql")
    execute_schema_file("0009_workflow_cascade_locks.up.sql")
