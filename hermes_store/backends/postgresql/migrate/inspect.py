"""Where a PostgreSQL database stands, read without writing: its kind, revision and
upstream ``schema_version``."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import sqlalchemy as sa

from .... import errors
from ....location import Target
from ....migrate.scripts import scripts
from ....revisions import is_newer
from ..engine import create_engine
from ..errors import pg_errors


@dataclass(frozen=True)
class DbState:
    """What a PostgreSQL database holds: ``kind`` is ``"empty"`` (no tables),
    ``"alembic"`` (``revision`` from ``alembic_version``) or ``"foreign"``."""

    kind: str
    revision: str | None
    tables: frozenset[str]


def classify(conn: sa.Connection, target: Target) -> DbState:
    """Read what the database holds (its current schema) and refuse what we must not
    touch: tables that are not a Hermes store, a revision newer than this package."""
    tables = frozenset(sa.inspect(conn).get_table_names())
    if "alembic_version" not in tables:
        if not tables:
            return DbState("empty", None, tables)
        raise errors.NotADatabaseError(
            f"{target.display} holds tables ({', '.join(sorted(tables)[:5])}…) but is not a "
            "hermes_store database (no alembic_version); point hermes_store at an empty "
            "database or at one it created"
        )
    rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalars().all()
    if not rows:
        return DbState("empty" if tables == {"alembic_version"} else "alembic", None, tables)
    if len(rows) > 1:
        raise errors.DatabaseDamagedError(
            f"{target.display}: alembic_version holds {len(rows)} rows instead of one"
        )
    revision = rows[0]
    directory = scripts()
    try:
        directory.get_revision(revision)
    except Exception:
        newest = directory.get_current_head()
        if newest and is_newer(revision, newest):
            raise errors.SchemaTooNewError(
                f"{target.display} has revision {revision}, newer than this hermes_store "
                f"understands (up to {newest}); upgrade hermes_store. The database was not "
                "changed."
            ) from None
        raise errors.SchemaError(
            f"{target.display}: stamped with revision {revision!r}, which this package does "
            "not know; it was migrated by a different tool"
        ) from None
    return DbState("alembic", revision, tables)


@contextlib.contextmanager
def connection_to(target: Target):
    engine = create_engine(target, poolclass=sa.pool.NullPool)
    try:
        with pg_errors(target), engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def inspect_database(target: Target) -> DbState:
    """Probe without writing (one read-only transaction)."""
    with connection_to(target) as conn:
        conn.exec_driver_sql("SET TRANSACTION READ ONLY")
        state = classify(conn, target)
        conn.rollback()
        return state


def current(target: Target) -> str | None:
    """The database's revision (None for an empty database)."""
    return inspect_database(target).revision


def schema_version_of(target: Target) -> int | None:
    with connection_to(target) as conn:
        if not sa.inspect(conn).has_table("schema_version"):
            return None
        return conn.exec_driver_sql("SELECT version FROM schema_version LIMIT 1").scalar()
