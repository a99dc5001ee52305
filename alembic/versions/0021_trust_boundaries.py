"""Trust boundaries between services: scoped role sets boxed in their queues (pgq.role_scopes, row
security on pgq.jobs, checks in the enqueue, claim and rescue functions), and nothing squattable
(maintenance leaders and unique enqueues hold row locks of pgq's own tables, the claim reserves
under keys derived from a per-database secret).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add the scoped role sets' table, functions and row security, pgq.leaders, pgq.lead,
    pgq.claim_secret, pgq.claim_key and pgq.unique_locks, and redefine the claim, the settle, the
    rescue and the enqueue functions on them (sql/schema/0021_trust_boundaries.up.sql)."""
    execute_schema_file("0021_trust_boundaries.up.sql")


def downgrade() -> None:
    """Restore revision 0020's functions and drop what 0021 added (sql/schema/0021_trust_boundaries.down.sql)."""
    execute_schema_file("0021_trust_boundaries.down.sql")
