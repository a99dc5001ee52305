"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

from pgq.migrate import execute_schema_file

revision: str = ${repr(up_revision)}
down_revision: str | None = ${repr(down_revision)}
branch_labels: str | None = ${repr(branch_labels)}
depends_on: str | None = ${repr(depends_on)}

## pgq revisions hold no DDL of their own: write sql/schema/<revision>_<slug>.up.sql and .down.sql
## (plain SQL a DBA can read and paste into psql) and execute them here. Use a sequential,
## zero-padded revision id: `--rev-id 0002`.


def upgrade() -> None:
    """Apply sql/schema/${up_revision}_<slug>.up.sql."""
    execute_schema_file("${up_revision}_CHANGE_ME.up.sql")


def downgrade() -> None:
    """Revert it: sql/schema/${up_revision}_<slug>.down.sql."""
    execute_schema_file("${up_revision}_CHANGE_ME.down.sql")
