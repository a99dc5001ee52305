"""Uniqueness variants of a dedupe key: unique_for (dedupe against recent finishes too),
on_conflict 'replace' and debounce.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add the finished-key index, pgq.key_finishes and its purge trigger, pgq.enqueue_unique and
    the SQL API's unique_for, on_conflict and debounce (sql/schema/0018_uniqueness.up.sql)."""
    execute_schema_file("0018_uniqueness.up.sql")


def downgrade() -> None:
    """Restore revision 0017's SQL API and drop what 0018 added (sql/schema/0018_uniqueness.down.sql)."""
    execute_schema_file("0018_uniqueness.down.sql")
