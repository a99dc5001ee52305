"""Claims that read no job of a kind they do not ask for: jobs_claim_kind_idx, and pgq.claim reading
each asked kind's head from it; pgq.explain says an unknown kind's job waits (issue #42).

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-28
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Create jobs_claim_kind_idx, install pgq.claim reading it when kinds are given and pgq.explain's
    new unknown_kind detail (sql/schema/0027_known_kinds.up.sql)."""
    execute_schema_file("0027_known_kinds.up.sql")


def downgrade() -> None:
    """Restore revision 0023's pgq.claim and 0017's pgq.explain, drop jobs_claim_kind_idx
    (sql/schema/0027_known_kinds.down.sql)."""
    execute_schema_file("0027_known_kinds.down.sql")
