"""The trust boundary, round two: secret lease tokens, bounded times, limits set through functions,
pruned sequence tails (issue 40).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add pgq.leases_lost and the limit setters, bound the times of pgq.jobs and pgq.workers with
    CHECK constraints (repairing rows outside them), and prune pgq.sequence_tails
    (sql/schema/0020_trust_boundary.up.sql)."""
    execute_schema_file("0020_trust_boundary.up.sql")


def downgrade() -> None:
    """Restore revision 0019's functions and checks (sql/schema/0020_trust_boundary.down.sql)."""
    execute_schema_file("0020_trust_boundary.down.sql")
