"""The reporting commands' view of a database on either engine, without a ``SessionDB``.

``status``, ``db current/history/upgrade``, ``sessions stats/export`` and ``maintenance
doctor`` look at a database that may be missing, empty, below head or written by
upstream Hermes, so they cannot open a store (which refuses or upgrades such a
database). What they need from it, per engine:

``probe(target) -> Probe``
    Where the database stands (``missing``, ``empty``, ``alembic``, ``upstream``), read
    without writing (the backend's ``Migrations.state``); a database the server does
    not have is ``missing``.
``read_engine(target)``
    A read-only engine for the CLI's own statements, every transaction a read
    snapshot (SQLite ``mode=ro``; PostgreSQL read-only on the server, REPEATABLE READ),
    driver errors translated into the package's.
``size_bytes(target, conn)`` / ``wal_bytes(target)``
    The file's size (PostgreSQL: ``pg_database_size``) and its ``-wal`` (None on a
    server: it keeps its own WAL).

Each asks the target's backend, so the PostgreSQL side (and psycopg) is imported only
for a PostgreSQL target.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
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
    """Where ``target`` stands, read without writing anything (a database the server
    does not have is ``missing``)."""
    from .common import backend_for

    migrations = backend_for(target).migrations
    try:
        found = migrations.state(target)
    except errors.StoreNotFoundError:
        if target.is_file:
            raise
        return Probe("missing", None, None)
    version = found.schema_version
    if version is None and found.kind == "alembic" and target.is_server:
        version = migrations.schema_version_of(target)
    return Probe(found.kind, found.revision, version)


@contextlib.contextmanager
def read_engine(target: "Target") -> Iterator["sa.Engine"]:
    """A read-only engine on ``target`` whose transactions are read snapshots; disposed
    on exit. Driver errors become the package's errors (they name the database)."""
    import sqlalchemy as sa

    from .common import backend_for
    from ..connections import reader

    backend = backend_for(target)
    engine = backend.inspection_engine(target)
    try:
        yield reader(engine)
    except sa.exc.DBAPIError as exc:
        backend.raise_translated(exc, target)
    finally:
        engine.dispose()


def size_bytes(target: "Target", conn: "sa.Connection | None" = None) -> int | None:
    """The file's size, or the server database's (through ``conn``); None when there is
    nothing to measure."""
    from .common import backend_for

    return backend_for(target).size_bytes(conn, target)


def wal_bytes(target: "Target") -> int | None:
    """The size of a file's ``-wal`` (0 when absent); None on a server."""
    from .common import backend_for

    return backend_for(target).wal_bytes(target)
