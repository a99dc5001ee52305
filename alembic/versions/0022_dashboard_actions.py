"""The dashboard's single actions in the audit: pgq.job_audit takes 'run_now' too.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Let pgq.job_audit record 'run_now' (sql/schema/0022_dashboard_actions.up.sql)."""
    execute_schema_file("0022_dashboard_actions.up.sql")


def downgrade() -> None:
    """Drop the run-now rows and restore the bulk-only check (sql/schema/0022_dashboard_actions.down.sql)."""
    execute_schema_file("0022_dashboard_actions.down.sql")
