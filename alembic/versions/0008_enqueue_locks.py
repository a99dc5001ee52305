"""pgq.enqueue_after locks its parents all at once or none, never waiting while holding some.

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
    """Replace pgq.enqueue_after's body (sql/schema/0008_enqueue_locks.up.sql)."""
    execute_schema_file("0008_enqueue_locks.up.sql")


def downgrade() -> None:
    """Put revision 0007's body back (sql/schema/0008_enqueue_locks.down.sql)."""
    execute_schema_file("0008_enqueue_locks.down.sql")
