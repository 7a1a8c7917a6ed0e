"""The PostgreSQL side of :mod:`hermes_store.migrate` (decision D12).

``hermes_store.migrate``'s public functions hand a PostgreSQL target (a URL, see
:mod:`hermes_store.location`) to the functions of the same name here; ``migrations/env.py``
calls :func:`run_env` for ``alembic -x db=URL …``. Both run the same Alembic scripts.

One chain, one baseline. A PostgreSQL database starts at revision ``0030``: on an empty
database the first upgrade runs the frozen baseline (``migrations/pg_baseline.py``: the
whole v30 schema) and stamps ``0030`` in the same transaction. Revisions 0001–0030 never
run on PostgreSQL; an upgrade to, a downgrade to or a stamp of anything below ``0030`` is
refused with an error that says so. Revisions after ``0030`` run on both engines (each
declares ``dialects``; ``docs/migrations.md``).

Every migrating run is one transaction (PostgreSQL's DDL is transactional) that takes
``pg_advisory_xact_lock`` (:func:`locks.lock_migrations`) before it reads the version, so
two deploys cannot race, through a transaction pooler too (decision D16); a run that
fails leaves the database as it found it, and ``schema_version`` follows the revision as
on SQLite.

Its modules, as on SQLite (``backends/sqlite/migrate``): ``create`` (the baseline and the
head from the live definitions), ``inspect`` (where a database stands), ``commands``
(upgrade, downgrade, stamp, ``ensure_schema`` at open), ``env`` (the body of
``migrations/env.py``), ``check`` (drift against ``hermes_store.schema`` and the topic
tables' against ``telegram_schema``), ``topics`` (the Telegram topic branch), ``head``
(is the database at head? in two statements, without Alembic).
"""

from __future__ import annotations

from .... import errors
from ...facets import Migrations, StoreState
from .create import BASELINE

# Each method imports the module that does its work (Alembic is imported with the
# commands, never at open of a database at head).


class PostgresqlMigrations(Migrations):
    """``Backend.migrations`` of the PostgreSQL backend."""

    baseline = BASELINE

    def state(self, target) -> StoreState:
        from .inspect import inspect_database

        found = inspect_database(target)
        return StoreState(found.kind, found.revision)

    def schema_version_of(self, target):
        from .inspect import schema_version_of

        return schema_version_of(target)

    def upgrade(self, target, revision="head", *, progress=None):
        from .commands import upgrade

        return upgrade(target, revision, progress=progress)

    def downgrade(self, target, revision):
        from .commands import downgrade

        return downgrade(target, revision)

    def refuse_downgrade(self, target, revision) -> None:
        from .commands import refuse_below_baseline

        refuse_below_baseline(target, revision)

    def stamp(self, target, revision) -> None:
        from .commands import stamp

        stamp(target, revision)

    def check(self, target):
        from .check import check

        return check(target)

    def ensure_schema(self, target, *, auto_upgrade, read_only) -> None:
        from .commands import ensure_schema

        ensure_schema(target, auto_upgrade=auto_upgrade, read_only=read_only)

    def run_env(self, context, target, *, read_only) -> None:
        from .env import run_env

        run_env(context, target, read_only=read_only)

    def run_topics_env(self, context, target, *, read_only) -> None:
        raise errors.HermesStoreError(
            f"{target.display}: the Telegram topic branch runs through Alembic on SQLite "
            "files only; on PostgreSQL call SessionDB.apply_telegram_topic_migration()"
        )

    def topics_state(self, target):
        from .topics import inspect_telegram_topics

        return inspect_telegram_topics(target)

    def topics_state_on(self, conn, where):
        from .topics import telegram_topics_state

        return telegram_topics_state(conn, where)

    def upgrade_topics_on(self, conn, revision):
        from .topics import create_telegram_topics

        return create_telegram_topics(conn, revision)

    def topics_drift(self, conn, diffs, metadata):
        from .check import without_pk_nullability

        return without_pk_nullability(diffs, metadata)


MIGRATIONS = PostgresqlMigrations()

__all__ = ["BASELINE", "MIGRATIONS", "PostgresqlMigrations"]
