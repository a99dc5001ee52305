"""pgq's alembic environment. Run it through `pgq.migrate` (or `pgq migrate`), not the alembic CLI.

`pgq.migrate` builds the Config in code and passes the DSN in `config.attributes["dsn"]`; a DSN given
as `-x dsn=...` is accepted too. No ORM models: every revision executes a file of `sql/schema/`.

Both modes emit the same preamble inside the migration transaction:
1. `pg_advisory_xact_lock(MIGRATION_LOCK_KEY)`: migrations of one database serialize, whoever runs
   them. Taken first, because even `CREATE SCHEMA IF NOT EXISTS` fails when two run at once.
2. `CREATE SCHEMA IF NOT EXISTS pgq`: the version table lives there and alembic creates it before
   the first revision runs. Only when the schema is missing: Postgres checks CREATE on the database
   even when the schema exists, and pgq's admin role (`pgq roles`) owns the schema but has no right
   to create schemas.

An upgrade through `pgq.migrate.upgrade` then keeps the grants of pgq's roles current in the same
transaction (pgq.roles.sync_grants), when they exist.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import alembic.context as context
import psycopg
from alembic.runtime.migration import MigrationContext, MigrationInfo
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from pgq.migrate import MIGRATION_LOCK_KEY, VERSION_SCHEMA, VERSION_TABLE, logger
from pgq.role_sets import sync_scoped
from pgq.roles import sync_grants

PREAMBLE = (
    f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})",
    f"DO $schema$ BEGIN IF to_regnamespace('{VERSION_SCHEMA}') IS NULL THEN "
    f"CREATE SCHEMA IF NOT EXISTS {VERSION_SCHEMA}; END IF; END $schema$",
)

# Common to both modes. One transaction for the whole run: Postgres has transactional DDL, so a
# failed upgrade leaves the database exactly as it was.
CONFIGURE: dict[str, Any] = {
    "version_table": VERSION_TABLE,
    "version_table_schema": VERSION_SCHEMA,
    "transactional_ddl": True,
    "transaction_per_migration": False,
}


def log_step(ctx: MigrationContext, step: MigrationInfo, heads: Collection[Any], run_args: Mapping[str, Any]) -> None:
    """Report each applied revision on the "pgq.migrate" logger (alembic's `on_version_apply` hook)."""
    action = "upgrade" if step.is_upgrade else "downgrade"
    source = ", ".join(step.source_revision_ids) or "base"
    destination = ", ".join(step.destination_revision_ids) or "base"
    logger.info("applied %s %s -> %s", action, source, destination)


def dsn_from_config() -> str:
    """The DSN pgq.migrate put into the config, or the one given with `-x dsn=`."""
    dsn = context.config.attributes.get("dsn") or context.get_x_argument(as_dictionary=True).get("dsn")
    if not dsn:
        raise RuntimeError("no database given: use pgq.migrate (or `alembic -x dsn=...`)")
    return str(dsn)


def run_migrations_offline() -> None:
    """Write the migration script to the output buffer; connect to nothing."""
    context.configure(dialect_name="postgresql", literal_binds=True, **CONFIGURE)
    with context.begin_transaction():  # emits BEGIN; ... COMMIT;
        for statement in PREAMBLE:
            context.get_context().impl.static_output(f"{statement};")
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the migrations over one psycopg connection, in one transaction holding the migration lock."""
    dsn = dsn_from_config()
    # psycopg parses the DSN itself, so URLs and key=value strings both work, unix sockets included.
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=NullPool)
    try:
        with engine.begin() as connection:  # commits at the end, rolls back on any error
            for statement in PREAMBLE:
                connection.exec_driver_sql(statement)
            # The transaction is already open: alembic joins it instead of starting its own.
            context.configure(connection=connection, on_version_apply=log_step, **CONFIGURE)
            with context.begin_transaction():
                context.run_migrations()
            if context.config.attributes.get("sync_roles"):
                # pgq.migrate.upgrade: pgq's roles, when they exist, get the grants of the objects the
                # revisions created, before the transaction commits.
                driver = connection.connection.driver_connection
                names = sync_grants(driver, context.config.attributes.get("roles_prefix"))
                if names is not None:
                    logger.info("kept the grants of %s, %s and %s current", names.producer, names.worker, names.admin)
                # The scoped role sets of this database (revision 0021), likewise.
                for prefix in sync_scoped(driver):
                    logger.info("kept the grants of the scoped role set %s current", prefix)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
