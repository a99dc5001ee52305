"""Exact counts of finished jobs per minute, queue, kind and status, kept by the maintenance loop
(issue #44).

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-28
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Create pgq.finished_counts, its state and deleted-jobs tables, pgq.count_finished and the trigger
    that keeps the counts of deleted finished jobs (sql/schema/0026_finished_counts.up.sql)."""
    execute_schema_file("0026_finished_counts.up.sql")


def downgrade() -> None:
    """Drop them (sql/schema/0026_finished_counts.down.sql)."""
    execute_schema_file("0026_finished_counts.down.sql")
