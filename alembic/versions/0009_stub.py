"""Temporary stub (replaced by the dag branch's revision 0009).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Nothing."""


def downgrade() -> None:
    """Nothing."""
