"""A running job cancelled by SQL tells its worker; heartbeats lock only leases held.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Notify pgq_cancel for running jobs cancelled without pgq's functions; lock only held leases
    in pgq.heartbeat (sql/schema/0034_running_cancels.up.sql)."""
    execute_schema_file("0034_running_cancels.up.sql")


def downgrade() -> None:
    """Restore revision 0033's triggers and heartbeat (sql/schema/0034_running_cancels.down.sql)."""
    execute_schema_file("0034_running_cancels.down.sql")
