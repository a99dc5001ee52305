"""Scaling claim: pgq.claim reserves rows before locking them, limited kinds get their own index,
enqueues count from their statement, keyed batches insert in key order.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add pgq.claim, the `limited` mark and its indexes (sql/schema/0010_scaling_claim.up.sql)."""
    execute_schema_file("0010_scaling_claim.up.sql")


def downgrade() -> None:
    """Drop them and put the earlier enqueue bodies back (sql/schema/0010_scaling_claim.down.sql)."""
    execute_schema_file("0010_scaling_claim.down.sql")
