"""What every claim and acknowledgement evaluates per row costs less: the run_at and lease bounds in
hours (no calendar arithmetic per row; a NULL lease tested first) and the JSON update trigger's size
test before its comparison (issue #47).

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-29
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Replace jobs_run_at_bounded, jobs_lease_bounded and the trigger jobs_json_bounded_update
    (sql/schema/0028_lean_acks.up.sql)."""
    execute_schema_file("0028_lean_acks.up.sql")


def downgrade() -> None:
    """Restore revision 0020's bounds in days and revision 0023's jobs_json_bounded_update
    (sql/schema/0028_lean_acks.down.sql)."""
    execute_schema_file("0028_lean_acks.down.sql")
