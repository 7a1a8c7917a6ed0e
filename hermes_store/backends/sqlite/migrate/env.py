"""What ``migrations/env.py`` (and the topic branch's) does on a SQLite file.

Every run goes through the same steps, whichever entry point started it
(``alembic -x db=PATH``, ``hermes_store.migrate``, ``SessionDB``):

  1. probe the file read-only — refuse (unchanged) a non-SQLite, damaged or newer file;
  2. adopt a file upstream Hermes wrote (heal it to its version's shape, stamp it);
  3. run each revision in its own ``BEGIN IMMEDIATE`` transaction (SQLite DDL is
     transactional once the driver stops managing transactions, so a failing
     revision leaves the file exactly as the previous one did);
  4. after each step, write ``schema_version`` so upstream Hermes reads the same
     version Alembic records (one hook, not thirty copies: decision D2).

A read-only command (``alembic current``/``history``) never adopts or creates anything.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import sqlalchemy as sa

from .... import errors, telegram_schema
from ....connections import BEGIN_MODE, autocommit, writer
from ....migrate.scripts import head, read_only_command, significant_only
from ....migrate.topics import include_telegram_topics_name, write_telegram_topic_meta
from ....revisions import upstream_version
from ..engine import checkpoint, create_engine
from ..errors import sqlite_errors
from ..files.ops import create_private_file, migration_lock
from .adopt import adopt
from .check import include_name, without_fk_artefacts
from .inspect import inspect_file, verify_sound
from .topics import adopt_telegram_topics, require_head

log = logging.getLogger("hermes_store.migrations")


def _target_metadata():
    from ....schema import metadata

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
    version = upstream_version(destination[0])
    if not conn.exec_driver_sql("UPDATE schema_version SET version = ?", (version,)).rowcount:
        conn.exec_driver_sql("INSERT INTO schema_version (version) VALUES (?)", (version,))
    progress = ctx.config.attributes.get("progress") if ctx.config is not None else None
    if progress is not None and not step.is_stamp:
        doc = (step.up_revision.doc or "").strip().splitlines()
        progress(destination[0], doc[0] if doc else "")


def record_topic_version(ctx, step, heads, run_args) -> None:
    """Inside the step's transaction: ``state_meta`` follows the branch's revision."""
    destination = step.destination_revision_ids
    write_telegram_topic_meta(ctx.connection, destination[0] if destination else None)


class _Chain:
    """The main chain or the topic branch: how to configure and adopt on a connection."""

    def __init__(self, topics: bool) -> None:
        self.topics = topics

    def run_on_connection(self, context, connection, where: object) -> None:
        options = dict(
            connection=connection,
            render_as_batch=True,
            transactional_ddl=True,
            transaction_per_migration=True,
            compare_type=True,
        )
        if self.topics:
            options.update(target_metadata=telegram_schema.metadata,
                           include_name=include_telegram_topics_name,
                           version_table=telegram_schema.VERSION_TABLE,
                           on_version_apply=record_topic_version)
        else:
            options.update(target_metadata=_target_metadata(), include_name=include_name,
                           on_version_apply=record_schema_version,
                           process_revision_directives=significant_only(without_fk_artefacts))
        context.configure(**options)
        if not read_only_command(context):
            (adopt_telegram_topics if self.topics else adopt)(connection, context.script, where)
        with context.begin_transaction():
            context.run_migrations()

    def run_on_file(self, context, path: Path) -> None:
        if read_only_command(context):
            if not path.exists():
                log.info("no database at %s", path)
                return
            engine = create_engine(path, read_only=True, journal_mode=None,
                                   poolclass=sa.pool.NullPool)
            try:
                with engine.connect() as connection:
                    self.run_on_connection(context, connection, path)
            finally:
                engine.dispose()
            return
        if self.topics:
            require_head(path)
        else:
            state = inspect_file(path)
            if not state.writable:
                raise errors.DatabaseAccessError(
                    f"{path} (or its directory) is read-only: cannot migrate it; make it "
                    "writable or run as the user that owns it"
                )
            if state.kind == "missing":
                create_private_file(path)  # owner-only from the first byte (D8)
        with migration_lock(path):
            if not self.topics:
                state = inspect_file(path)  # again: another process may have migrated it
                if _will_rewrite(context, state):
                    verify_sound(path)
            engine = writer(create_engine(path, poolclass=sa.pool.NullPool))
            try:
                with engine.connect() as connection:
                    self.run_on_connection(context, connection, path)
                # its connections never checkpoint on their own (D19): a rebuilt index
                # is copied back now, under the writer lock, not left in the log
                checkpoint(autocommit(engine), path)
            finally:
                engine.dispose()


def _will_rewrite(context, state) -> bool:
    """Whether this run changes an existing file (then it must be sound first)."""
    if state.kind not in ("upstream", "alembic"):
        return False
    at_head_already = (
        state.kind == "alembic"
        and state.revision == head()
        and context.get_revision_argument() in ("head", "heads", head())
    )
    return not at_head_already


@contextlib.contextmanager
def _handed_in(connection):
    """Migrate a caller's connection with BEGIN IMMEDIATE, restoring its options after."""
    previous = connection.get_execution_options().get(BEGIN_MODE, "DEFERRED")
    connection.execution_options(**{BEGIN_MODE: "IMMEDIATE"})
    try:
        yield connection
    finally:
        connection.execution_options(**{BEGIN_MODE: previous})


def run_env(context, path: Path, *, topics: bool = False) -> None:
    with sqlite_errors(path):
        _Chain(topics).run_on_file(context, path)


def run_env_on(context, connection, where: object, *, topics: bool = False) -> None:
    with _handed_in(connection), sqlite_errors(where):
        _Chain(topics).run_on_connection(context, connection, where)


__all__ = ["record_schema_version", "run_env", "run_env_on"]
