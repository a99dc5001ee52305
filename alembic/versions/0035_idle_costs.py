"""An idle worker's query reads the live partition; settle plans nothing when nothing is to settle.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-07
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add pgq.next_run_at (the idle worker's query, over pgq.live_jobs), guard pgq.settle's reads,
    drop the acknowledgements' sort and simplify live_jobs' finished_at CHECK
    (sql/schema/0035_idle_costs.up.sql)."""
    execute_schema_file("0035_idle_costs.up.sql")


def downgrade() -> None:
    """Restore revision 0034's functions and CHECK; drop pgq.next_run_at
    (sql/schema/0035_idle_costs.down.sql)."""
    execute_schema_file("0035_idle_costs.down.sql")
