"""No BEFORE UPDATE row trigger on pgq.jobs, one lease token per claim (issues #43, #47).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-06
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Make the update triggers AFTER triggers; one token per claim (sql/schema/0032_unlocked_updates.up.sql)."""
    execute_schema_file("0032_unlocked_updates.up.sql")


def downgrade() -> None:
    """Restore the BEFORE UPDATE triggers and 0027's claim (sql/schema/0032_unlocked_updates.down.sql)."""
    execute_schema_file("0032_unlocked_updates.down.sql")
