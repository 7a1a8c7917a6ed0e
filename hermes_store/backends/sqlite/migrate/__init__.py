"""Schema management of a SQLite file (``Backend.migrations`` of the SQLite backend).

Revision ``00NN`` is upstream schema version N (D2). A file upstream Hermes wrote has
``schema_version`` but no ``alembic_version``: upgrading it *adopts* it first (D5,
``adopt.py``). Before anything touches a file it is probed read-only (``inspect.py``),
and before a migration rewrites an existing file ``quick_check`` must pass.

    inspect.py  what a file holds; verify_sound; the migration lock
    adopt.py    healing an upstream file to its version's shape, stamping it
    topics.py   the Telegram topic branch on a file
    check.py    drift from ``hermes_store.schema``
    env.py      the body of ``migrations/env.py`` on a file or a live connection
    commands.py upgrading a file (what opening a store below head runs)
"""

from __future__ import annotations

from pathlib import Path

from alembic import command

from ....migrate.scripts import config
from ...base import Migrations, StoreState
from ..errors import sqlite_errors
from . import topics
from .commands import upgrade_file
from .inspect import inspect_file


def _file(target) -> Path:
    return target.path


class SQLiteMigrations(Migrations):
    def first_step(self, revision: str) -> str | None:
        # a new file going to head gets the head schema in one step (``create``)
        from ....migrate.scripts import head, is_at

        return head() if is_at(head(), revision) else None

    def state(self, target) -> StoreState:
        return inspect_file(_file(target))

    def schema_version_of(self, target) -> int | None:
        return inspect_file(_file(target)).schema_version

    def upgrade(self, target, revision: str = "head", *, progress=None) -> str | None:
        return upgrade_file(_file(target), revision, progress=progress)

    def downgrade(self, target, revision: str) -> str | None:
        path = _file(target)
        inspect_file(path)
        with sqlite_errors(path):
            command.downgrade(config(path), revision)
        return inspect_file(path).revision

    def stamp(self, target, revision: str) -> None:
        path = _file(target)
        inspect_file(path)
        with sqlite_errors(path):
            command.stamp(config(path), revision)

    def check(self, target):
        from .check import check

        return check(_file(target))

    def ensure_schema(self, target, *, auto_upgrade: bool, read_only: bool) -> None:
        from ..files import ensure_schema

        ensure_schema(_file(target), auto_upgrade=auto_upgrade, read_only=read_only)

    def run_env(self, context, target, *, read_only: bool) -> None:
        from .env import run_env

        run_env(context, _file(target))

    def run_env_on(self, context, connection, where) -> None:
        from .env import run_env_on

        run_env_on(context, connection, where)

    def run_topics_env(self, context, target, *, read_only: bool) -> None:
        from .env import run_env

        run_env(context, _file(target), topics=True)

    def run_topics_env_on(self, context, connection, where) -> None:
        from .env import run_env_on

        run_env_on(context, connection, where, topics=True)

    # -- Telegram topics

    def topics_state(self, target):
        return topics.inspect_telegram_topics(_file(target))

    def topics_state_on(self, conn, where):
        return topics.classify_topics(lambda sql: conn.exec_driver_sql(sql).fetchall(), where)

    def upgrade_topics(self, target, revision: str, *, only_if_present: bool) -> str | None:
        return topics.upgrade_file(_file(target), revision, only_if_present=only_if_present)

    def upgrade_topics_on(self, conn, revision: str) -> str | None:
        return topics.upgrade_on(conn, revision)

    def downgrade_topics(self, target, revision: str) -> str | None:
        return topics.downgrade_file(_file(target), revision)

    def topics_drift(self, conn, diffs: list, metadata) -> list:
        from .check import without_fk_artefacts

        return without_fk_artefacts(conn, diffs)


MIGRATIONS = SQLiteMigrations()

__all__ = ["MIGRATIONS", "SQLiteMigrations"]
