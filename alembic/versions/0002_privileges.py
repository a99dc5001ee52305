"""Privileges: enqueue as a SECURITY DEFINER function with a pinned search_path, EXECUTE revoked from
PUBLIC, and a trigger that keeps cancel and retry to administrators. Roles come from `pgq roles`.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Narrow what callers of pgq's SQL need (sql/schema/0002_privileges.up.sql)."""
    execute_schema_file("0002_privileges.up.sql")


def downgrade() -> None:
    """Back to revision 0001's privileges (sql/schema/0002_privileges.down.sql)."""
    execute_schema_file("0002_privileges.down.sql")
