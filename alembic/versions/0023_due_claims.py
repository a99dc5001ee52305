"""Claims that read no scheduled job (pgq.claim one priority at a time) and JSON bound triggers
that plan no SQL function per statement (issue #42).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Install pgq.claim bounded by due-ness per priority, and the JSON bounds' triggers with built-in
    WHEN clauses (sql/schema/0023_due_claims.up.sql)."""
    execute_schema_file("0023_due_claims.up.sql")


def downgrade() -> None:
    """Restore revision 0021's pgq.claim and 0019's triggers (sql/schema/0023_due_claims.down.sql)."""
    execute_schema_file("0023_due_claims.down.sql")
