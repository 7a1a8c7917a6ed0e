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

Every run (the engine's: ``Backend.migrations.run_topics_env``): (file) the main chain
must be at head; tables upstream Hermes created are adopted (stamped at the revision
their shape is); each revision runs in its own ``BEGIN IMMEDIATE`` transaction (or inside
the caller's); after each step the ``state_meta`` key is written as upstream writes it.
On PostgreSQL the opt-in creates the tables at the branch's head without Alembic.
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


def main() -> None:
    if context.is_offline_mode():
        raise CommandError("offline (--sql) mode is not supported: revisions inspect the database")
    connection = config.attributes.get("connection")
    try:
        if connection is not None:
            backend_of(connection).migrations.run_topics_env_on(context, connection, "database")
        else:
            given = (config.attributes.get("db_path")
                     or context.get_x_argument(as_dictionary=True).get("db"))
            target = location.resolve(given or None)
            get(target.backend).migrations.run_topics_env(
                context, target, read_only=read_only_command(context))
    except errors.HermesStoreError as exc:
        if config.cmd_opts is not None:  # the alembic CLI: one "FAILED: <reason>" line
            raise CommandError(str(exc)) from exc
        raise


main()
