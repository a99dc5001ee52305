"""Sequences: jobs with one sequence key run one at a time, in enqueue order; a job failing for
good holds the rest of its sequence unless enqueued with sequence_on_failure 'continue'.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add jobs.sequence_key, the sequence edges and pgq.sequence_tails, and the enqueue, release,
    settle, cancel and explain that use them (sql/schema/0017_sequences.up.sql)."""
    execute_schema_file("0017_sequences.up.sql")


def downgrade() -> None:
    """Refuse while a job waits on its sequence; otherwise restore the former functions and drop the
    sequence columns and table (sql/schema/0017_sequences.down.sql)."""
    execute_schema_file("0017_sequences.down.sql")
