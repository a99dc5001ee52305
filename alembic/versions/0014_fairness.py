"""Fairness: group keys on jobs, per-group concurrency and rate limits, and a claim that walks a
kind's groups round-robin.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add group keys, group limits and the fair claim (sql/schema/0014_fairness.up.sql)."""
    execute_schema_file("0014_fairness.up.sql")


def downgrade() -> None:
    """Remove them (sql/schema/0014_fairness.down.sql)."""
    execute_schema_file("0014_fairness.down.sql")
