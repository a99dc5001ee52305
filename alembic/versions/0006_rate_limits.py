"""Global rate limits: pgq.rate_limits and the window of starts the claim keeps.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add them (sql/schema/0006_rate_limits.up.sql)."""
    execute_schema_file("0006_rate_limits.up.sql")


def downgrade() -> None:
    """Remove them (sql/schema/0006_rate_limits.down.sql)."""
    execute_schema_file("0006_rate_limits.down.sql")
