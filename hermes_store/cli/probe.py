"""The reporting commands' view of a database on either engine, without a ``SessionDB``.

``status``, ``db current/history/upgrade``, ``sessions stats/export`` and ``maintenance
doctor`` look at a database that may be missing, empty, below head or written by
upstream Hermes, so they cannot open a store (which refuses or upgrades such a
database). What they need from it, per engine:

``probe(target) -> Probe``
    Where the database stands (``missing``, ``empty``, ``alembic``, ``upstream``), read
    without writing: ``migrate.inspect_file`` for a file, ``migrate_pg`` (one read-only
    transaction) for PostgreSQL, where a database the server does not have is
    ``missing``.
``read_engine(target)``
    A read-only engine for the CLI's own statements, every transaction a read
    snapshot (SQLite ``mode=ro``; PostgreSQL read-only on the server, REPEATABLE READ),
    driver errors translated into the package's.
``size_bytes(target, conn)`` / ``wal_bytes(target)``
    The file's size (PostgreSQL: ``pg_database_size``) and its ``-wal`` (None on a
    server: it keeps its own WAL).

The PostgreSQL side (``hermes_store.postgres``, psycopg) is imported only for a
PostgreSQL target.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from .. import errors

if TYPE_CHECKING:
    import sqlalchemy as sa

    from ..location import Target


@dataclass(frozen=True)
class Probe:
    """``kind``: ``missing`` (no file / no such database on the server), ``empty`` (no
    tables), ``alembic`` (managed by hermes_store) or ``upstream`` (a file upstream
    Hermes wrote, not adopted yet)."""

    kind: str
    revision: str | None
    schema_version: int | None

    @property
    def exists(self) -> bool:
        return self.kind != "missing"


def probe(target: "Target") -> Probe:
    """Where ``target`` stands, read without writing anything."""
    if target.is_sqlite:
        from .. import migrate

        found = migrate.inspect_file(target.path)
        return Probe(found.kind, found.revision, found.schema_version)
    from .. import migrate_pg

    try:
        found = migrate_pg.inspect_database(target)
    except errors.StoreNotFoundError:
        return Probe("missing", None, None)
    version = migrate_pg.schema_version_of(target) if found.kind == "alembic" else None
    return Probe(found.kind, found.revision, version)


@contextlib.contextmanager
def read_engine(target: "Target") -> Iterator["sa.Engine"]:
    """A read-only engine on ``target`` whose transactions are read snapshots; disposed
    on exit. Driver errors become the package's errors (they name the database)."""
    import sqlalchemy as sa

    from ..engine import create_engine, raise_translated, reader

    if target.is_sqlite:
        engine = create_engine(target.path, read_only=True, journal_mode=None,
                               poolclass=sa.pool.NullPool)
    else:
        from .. import postgres

        engine = postgres.create_engine(target, read_only=True, poolclass=sa.pool.NullPool)
    try:
        yield reader(engine)
    except sa.exc.DBAPIError as exc:
        raise_translated(exc, target)
    finally:
        engine.dispose()


def size_bytes(target: "Target", conn: "sa.Connection | None" = None) -> int | None:
    """The file's size, or the PostgreSQL database's (``pg_database_size``, through
    ``conn``); None when there is nothing to measure."""
    if target.is_sqlite:
        return target.path.stat().st_size if target.path.exists() else None
    if conn is None:
        return None
    return conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar()


def wal_bytes(target: "Target") -> int | None:
    """The size of a file's ``-wal`` (0 when absent); None on PostgreSQL."""
    if not target.is_sqlite:
        return None
    wal = Path(f"{target.path}-wal")
    return wal.stat().st_size if wal.exists() else 0
