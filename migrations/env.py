"""Alembic environment for state.db: revisions 0001…0030 are upstream schema versions 1…30.

Which database:
  * ``config.attributes["connection"]`` — a live connection handed in by Python code;
  * ``config.attributes["db_path"]`` / ``["db_target"]`` — set by :mod:`hermes_store.migrate`;
  * ``alembic -x db=PATH`` or ``-x db=URL`` (``sqlite:///PATH``, or a PostgreSQL URL) on the
    command line;
  * else ``$HERMES_STATE_DATABASE_URL``, else ``$HERMES_HOME/state.db``, else
    ``~/.hermes/state.db`` (:mod:`hermes_store.location`).

A PostgreSQL database takes its own path (:func:`run_on_postgres`, in
:mod:`hermes_store.migrate_pg`): advisory lock, the baseline at ``0030`` on an empty
database, nothing below it. The steps below are the SQLite file's.

Every run goes through the same steps, whichever entry point started it:
  1. probe the file read-only — refuse (unchanged) a non-SQLite, damaged or newer file;
  2. adopt a file upstream Hermes wrote (heal it to its version's shape, stamp it);
  3. run each revision in its own ``BEGIN IMMEDIATE`` transaction (SQLite DDL is
     transactional once the driver stops managing transactions, so a failing
     revision leaves the file exactly as the previous one did);
  4. after each step, write ``schema_version`` so upstream Hermes reads the same
     version Alembic records (one hook, not thirty copies: decision D2).
"""

from __future__ import annotations

import contextlib
import logging
import os
from logging.config import fileConfig
from pathlib import Path

import sqlalchemy as sa
from alembic import context
from alembic.util import CommandError

from hermes_store import errors, location, migrate
from hermes_store.engine import BEGIN_MODE, create_engine, writer

config = context.config
log = logging.getLogger("hermes_store.migrations")

if config.config_file_name and config.file_config.has_section("loggers"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _target_metadata():
    try:
        from hermes_store.schema import metadata
    except ImportError:  # autogenerate is the only user; migrations never need it
        return None
    return metadata


def record_schema_version(ctx, step, heads, run_args) -> None:
    """Keep upstream's ``schema_version`` equal to the revision just reached.

    Runs inside the step's transaction, so the row and the schema move together.
    Keeps upstream's single-row convention: update every row, insert when empty,
    delete at base.
    """
    conn = ctx.connection
    has_table = conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).first()
    if not has_table:
        return  # before 0001, or after 0001's downgrade removed it
    destination = step.destination_revision_ids
    if not destination:
        conn.exec_driver_sql("DELETE FROM schema_version")
        return
    version = int(destination[0])
    if not conn.exec_driver_sql("UPDATE schema_version SET version = ?", (version,)).rowcount:
        conn.exec_driver_sql("INSERT INTO schema_version (version) VALUES (?)", (version,))
    progress = config.attributes.get("progress")
    if progress is not None and not step.is_stamp:
        doc = (step.up_revision.doc or "").strip().splitlines()
        progress(destination[0], doc[0] if doc else "")


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=_target_metadata(),
        include_name=migrate.include_name,
        render_as_batch=True,
        transactional_ddl=True,
        transaction_per_migration=True,
        compare_type=True,
        on_version_apply=record_schema_version,
    )


def run_on_connection(connection, where: object) -> None:
    _configure(connection)
    if not migrate.read_only_command(context):
        migrate.adopt(connection, context.script, where)
    with context.begin_transaction():
        context.run_migrations()


def _target() -> location.Target:
    """The database this run is for: a URL is never taken for a path (D11)."""
    given = (
        config.attributes.get("db_target")
        or config.attributes.get("db_path")
        or context.get_x_argument(as_dictionary=True).get("db")
    )
    return location.resolve(given or None)


def run_on_postgres(target: location.Target) -> None:
    from hermes_store import migrate_pg

    def configure(connection, on_version_apply) -> None:
        context.configure(
            connection=connection,
            target_metadata=_target_metadata(),
            include_name=migrate_pg.include_name,
            transactional_ddl=True,
            transaction_per_migration=True,
            compare_type=True,
            on_version_apply=on_version_apply,
        )

    migrate_pg.run_env(context, target, read_only=migrate.read_only_command(context), configure=configure)


def run_on_file(path: Path) -> None:
    state = migrate.inspect_file(path)
    if migrate.read_only_command(context):
        if state.kind == "missing":
            log.info("no database at %s", path)
            return
        engine = create_engine(path, read_only=True, journal_mode=None, poolclass=sa.pool.NullPool)
        with engine.connect() as connection:
            run_on_connection(connection, path)
        engine.dispose()
        return
    if not state.writable:
        raise errors.DatabaseAccessError(
            f"{path} (or its directory) is read-only: cannot migrate it; make it writable "
            "or run as the user that owns it"
        )
    if state.kind == "missing":
        _create_private_file(path)
    with migrate.migration_lock(path):
        state = migrate.inspect_file(path)  # again: another process may have migrated it
        if _will_rewrite(state):
            migrate.verify_sound(path)
        engine = writer(create_engine(path, poolclass=sa.pool.NullPool))
        try:
            with engine.connect() as connection:
                run_on_connection(connection, path)
        finally:
            engine.dispose()


def _will_rewrite(state) -> bool:
    """Whether this run changes an existing file (then it must be sound first)."""
    if state.kind not in ("upstream", "alembic"):
        return False
    at_head_already = (
        state.kind == "alembic"
        and state.revision == migrate.head()
        and context.get_revision_argument() in ("head", "heads", migrate.head())
    )
    return not at_head_already


def _create_private_file(path: Path) -> None:
    # A state.db holds private conversations: owner-only from the first byte (D8).
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass  # another process created it meanwhile


@contextlib.contextmanager
def _handed_in(connection):
    """Migrate a caller's connection with BEGIN IMMEDIATE, restoring its options after."""
    previous = connection.get_execution_options().get(BEGIN_MODE, "DEFERRED")
    connection.execution_options(**{BEGIN_MODE: "IMMEDIATE"})
    try:
        yield connection
    finally:
        connection.execution_options(**{BEGIN_MODE: previous})


def run_migrations_offline() -> None:
    # Revisions look at the live file to stay idempotent (decision D4): no --sql script.
    raise CommandError("offline (--sql) mode is not supported: revisions inspect the database")


def main() -> None:
    if context.is_offline_mode():
        run_migrations_offline()
        return
    connection = config.attributes.get("connection")
    try:
        if connection is not None:
            with _handed_in(connection), migrate.sqlite_errors("database"):
                run_on_connection(connection, "database")
        else:
            target = _target()
            if target.is_postgresql:
                run_on_postgres(target)
            else:
                with migrate.sqlite_errors(target.path):
                    run_on_file(target.path)
    except errors.HermesStoreError as exc:
        if config.cmd_opts is not None:  # the alembic CLI: print "FAILED: <reason>", no traceback
            raise CommandError(str(exc)) from exc
        raise


main()
