"""JSON from callers bounded in depth and size; trace contexts hold only traceparent and
tracestate.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add pgq.json_bounded, pgq.trace_context_valid, the triggers of pgq.jobs that refuse JSON out of
    bounds and the NOT VALID checks of pgq.key_raises and pgq.job_audit
    (sql/schema/0019_bounded_json.up.sql)."""
    execute_schema_file("0019_bounded_json.up.sql")


def downgrade() -> None:
    """Drop what 0019 added (sql/schema/0019_bounded_json.down.sql)."""
    execute_schema_file("0019_bounded_json.down.sql")
