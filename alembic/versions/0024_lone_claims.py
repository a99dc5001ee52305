"""A claim alone in its queue locks its rows in one scan instead of reserving each (issue #47).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-28
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Install pgq.claim with its lone-claim path (sql/schema/0024_lone_claims.up.sql)."""
    execute_schema_file("0024_lone_claims.up.sql")


def downgrade() -> None:
    """Restore revision 0023's pgq.claim (sql/schema/0024_lone_claims.down.sql)."""
    execute_schema_file("0024_lone_claims.down.sql")
