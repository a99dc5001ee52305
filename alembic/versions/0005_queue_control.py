"""Queue control: pausing queues (pgq.paused_queues, pgq.pause(), pgq.resume(), queue_stats with
paused) and awaited jobs that notify channel pgq_finished when they finish (Queue.wait).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add them (sql/schema/0005_queue_control.up.sql)."""
    execute_schema_file("0005_queue_control.up.sql")


def downgrade() -> None:
    """Remove them (sql/schema/0005_queue_control.down.sql)."""
    execute_schema_file("0005_queue_control.down.sql")
