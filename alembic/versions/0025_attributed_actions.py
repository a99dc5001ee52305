"""Every operator action attributed and audited (issue #44): pgq.cancel, pgq.pause, pgq.resume and
the new pgq.retry take the actor and record it with the database role (pgq.job_audit,
pgq.control_audit, pgq.paused_queues.paused_role), and pgq.explain names them.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-28
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add pgq.control_audit and pgq.paused_queues.paused_role, and install the auditing pgq.cancel,
    pgq.retry, pgq.pause, pgq.resume and pgq.explain (sql/schema/0025_attributed_actions.up.sql)."""
    execute_schema_file("0025_attributed_actions.up.sql")


def downgrade() -> None:
    """Restore the earlier functions and drop what 0025 added (sql/schema/0025_attributed_actions.down.sql)."""
    execute_schema_file("0025_attributed_actions.down.sql")
