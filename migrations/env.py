"""Alembic environment for state.db: revisions 0001…0030 are upstream schema versions 1…30.

Which database:
  * ``config.attributes["connection"]`` — a live connection handed in by Python code;
  * ``config.attributes["db_path"]`` / ``["db_target"]`` — set by :mod:`hermes_store.migrate`;
  * ``alembic -x db=PATH`` or ``-x db=URL`` (``sqlite:///PATH``, or a PostgreSQL URL) on the
    command line;
  * else ``$HERMES_STATE_DATABASE_URL``, else ``$HERMES_HOME/state.db``, else
    ``~/.hermes/state.db`` (:mod:`hermes_store.location`).

The run itself is the database's engine's (``Backend.migrations.run_env``, decision D17):
a SQLite file is probed read-only, adopted when upstream Hermes wrote it, then migrated
one revision per ``BEGIN IMMEDIATE`` transaction with ``schema_version`` following each
step (``backends/sqlite/migrate/env.py``); a PostgreSQL database takes the advisory lock,
gets the baseline at ``0030`` when empty, and runs nothing below it
(``backends/postgresql/migrate/``).
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from alembic.util import CommandError

from hermes_store import errors, location
from hermes_store.backends.base import backend_of, get
from hermes_store.migrate import read_only_command

config = context.config

if config.config_file_name and config.file_config.has_section("loggers"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _target() -> location.Target:
    """The database this run is for: a URL is never taken for a path (D11)."""
    given = (
        config.attributes.get("db_target")
        or config.attributes.get("db_path")
        or context.get_x_argument(as_dictionary=True).get("db")
    )
    return location.resolve(given or None)


def main() -> None:
    if context.is_offline_mode():
        # Revisions look at the live file to stay idempotent (decision D4): no --sql script.
        raise CommandError("offline (--sql) mode is not supported: revisions inspect the database")
    connection = config.attributes.get("connection")
    try:
        if connection is not None:
            backend_of(connection).migrations.run_env_on(context, connection, "database")
        else:
            target = _target()
            get(target.backend).migrations.run_env(
                context, target, read_only=read_only_command(context))
    except errors.HermesStoreError as exc:
        if config.cmd_opts is not None:  # the alembic CLI: print "FAILED: <reason>", no traceback
            raise CommandError(str(exc)) from exc
        raise


main()
