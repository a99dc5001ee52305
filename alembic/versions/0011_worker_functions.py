"""Worker functions: the acknowledgements, the rescue and error_set become SECURITY DEFINER
functions fenced by the lease token, so that pgq_worker needs no UPDATE on pgq.jobs.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add the worker functions (sql/schema/0011_worker_functions.up.sql)."""
    execute_schema_file("0011_worker_functions.up.sql")


def downgrade() -> None:
    """Drop them (sql/schema/0011_worker_functions.down.sql)."""
    execute_schema_file("0011_worker_functions.down.sql")
