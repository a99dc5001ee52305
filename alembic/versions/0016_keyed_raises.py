"""Keyed raises: a keyed enqueue locks no existing job; a watermark above the active job's is a row
of pgq.key_raises, applied by the completion and pgq.settle.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add pgq.key_raises and the enqueue, completion and settle that use it
    (sql/schema/0016_keyed_raises.up.sql)."""
    execute_schema_file("0016_keyed_raises.up.sql")


def downgrade() -> None:
    """Fold the pending raises into the jobs, restore the former functions and drop the table
    (sql/schema/0016_keyed_raises.down.sql)."""
    execute_schema_file("0016_keyed_raises.down.sql")
