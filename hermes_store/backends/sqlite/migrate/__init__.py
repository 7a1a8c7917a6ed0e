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

from ...facets import Migrations, StoreState

# Light by design: a new file is created at head (``create.py``) and a file at head is
# recognised (``head.py``) without importing Alembic; each method imports what it runs.


def _file(target) -> Path:
    return target.path


class SQLiteMigrations(Migrations):
    def first_step(self, revision: str) -> str | None:
        # a new file going to head gets the head schema in one step (``create``)
        from ....migrate.scripts import head, is_at

        return head() if is_at(head(), revision) else None

    def state(self, target) -> StoreState:
        from .inspect import inspect_file

        return inspect_file(_file(target))

    def schema_version_of(self, target) -> int | None:
        from .inspect import inspect_file

        return inspect_file(_file(target)).schema_version

    def upgrade(self, target, revision: str = "head", *, progress=None) -> str | None:
        from .commands import upgrade_file

        return upgrade_file(_file(target), revision, progress=progress)

    def downgrade(self, target, revision: str) -> str | None:
        from .commands import downgrade_file

        return downgrade_file(_file(target), revision)

    def stamp(self, target, revision: str) -> None:
        from .commands import stamp_file

        stamp_file(_file(target), revision)

    def check(self, target):
        from .check import check

        return check(_file(target))

    def ensure_schema(self, target, *, auto_upgrade: bool, read_only: bool) -> None:
        from .commands import ensure_schema

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
        from . import topics

        return topics.inspect_telegram_topics(_file(target))

    def topics_state_on(self, conn, where):
        from . import topics

        return topics.classify_topics(lambda sql: conn.exec_driver_sql(sql).fetchall(), where)

    def upgrade_topics(self, target, revision: str, *, only_if_present: bool) -> str | None:
        from . import topics

        return topics.upgrade_file(_file(target), revision, only_if_present=only_if_present)

    def upgrade_topics_on(self, conn, revision: str) -> str | None:
        from . import topics

        return topics.upgrade_on(conn, revision)

    def downgrade_topics(self, target, revision: str) -> str | None:
        from . import topics

        return topics.downgrade_file(_file(target), revision)

    def topics_drift(self, conn, diffs: list, metadata) -> list:
        from .check import without_fk_artefacts

        return without_fk_artefacts(conn, diffs)


MIGRATIONS = SQLiteMigrations()

__all__ = ["MIGRATIONS", "SQLiteMigrations"]
