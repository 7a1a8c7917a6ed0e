"""Alembic environment of the Telegram DM topic branch (opt-in tables, own version table).

Revisions ``t001``, ``t002`` are upstream's ``telegram_dm_topic_schema_version`` 1 and 2;
Alembic records them in ``alembic_version_telegram_topics``, so the main chain's
``alembic_version`` (and its single head) is never involved. Entry points:

  * ``SessionDB.apply_telegram_topic_migration()`` (and ``enable_telegram_topic_mode``,
    ``bind_telegram_topic``) hand in the connection of their write unit
    (``config.attributes["connection"]``): the whole opt-in is one transaction;
  * ``hermes_store.migrate.upgrade_telegram_topics(path)`` / ``downgrade_telegram_topics``
    (``config.attributes["db_path"]``);
  * ``alembic -n telegram_topics -x db=PATH upgrade head`` (``alembic.ini``'s section).

Every run: (file) the main chain must be at head; tables upstream Hermes created are
adopted (stamped at the revision their shape is); each revision runs in its own
``BEGIN IMMEDIATE`` transaction (or inside the caller's); after each step the
``state_meta`` key is written as upstream writes it.
"""

from __future__ import annotations

import logging
from logging.config import fileConfig
from pathlib import Path

import sqlalchemy as sa
from alembic import context
from alembic.util import CommandError

from hermes_store import errors, location, migrate, telegram_schema
from hermes_store.engine import BEGIN_MODE, create_engine, writer

config = context.config
log = logging.getLogger("hermes_store.migrations.telegram_topics")

if config.config_file_name and config.file_config.has_section("loggers"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def record_topic_version(ctx, step, heads, run_args) -> None:
    """Inside the step's transaction: ``state_meta`` follows the revision reached."""
    destination = step.destination_revision_ids
    migrate.write_telegram_topic_meta(ctx.connection, destination[0] if destination else None)


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=telegram_schema.metadata,
        include_name=migrate.include_telegram_topics_name,
        version_table=telegram_schema.VERSION_TABLE,
        render_as_batch=True,
        transactional_ddl=True,
        transaction_per_migration=True,
        compare_type=True,
        on_version_apply=record_topic_version,
    )


def run_on_connection(connection, where: object) -> None:
    _configure(connection)
    if not migrate.read_only_command(context):
        migrate.adopt_telegram_topics(connection, context.script, where)
    with context.begin_transaction():
        context.run_migrations()


def _db_path() -> Path:
    """The file this run is for, resolved like the main chain's (``location``)."""
    given = config.attributes.get("db_path") or context.get_x_argument(as_dictionary=True).get("db")
    target = location.resolve(given or None)
    if not target.is_sqlite:
        raise errors.HermesStoreError(
            f"{target.display}: the Telegram topic branch runs through Alembic on SQLite "
            "files only; on PostgreSQL call SessionDB.apply_telegram_topic_migration()"
        )
    return target.path


def run_on_file(path: Path) -> None:
    if migrate.read_only_command(context):
        if not path.exists():
            log.info("no database at %s", path)
            return
        engine = create_engine(path, read_only=True, journal_mode=None, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as connection:
                run_on_connection(connection, path)
        finally:
            engine.dispose()
        return
    migrate.require_head_for_telegram_topics(path)
    with migrate.migration_lock(path):
        engine = writer(create_engine(path, poolclass=sa.pool.NullPool))
        try:
            with engine.connect() as connection:
                run_on_connection(connection, path)
        finally:
            engine.dispose()


def main() -> None:
    if context.is_offline_mode():
        raise CommandError("offline (--sql) mode is not supported: revisions inspect the database")
    connection = config.attributes.get("connection")
    try:
        if connection is not None:
            previous = connection.get_execution_options().get(BEGIN_MODE, "DEFERRED")
            connection.execution_options(**{BEGIN_MODE: "IMMEDIATE"})
            try:
                with migrate.sqlite_errors("database"):
                    run_on_connection(connection, "database")
            finally:
                connection.execution_options(**{BEGIN_MODE: previous})
        else:
            path = _db_path()
            with migrate.sqlite_errors(path):
                run_on_file(path)
    except errors.HermesStoreError as exc:
        if config.cmd_opts is not None:  # the alembic CLI: one "FAILED: <reason>" line
            raise CommandError(str(exc)) from exc
        raise


main()
