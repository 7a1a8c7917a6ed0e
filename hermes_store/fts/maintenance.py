"""Upkeep of the full-text indexes on either engine: rebuild, check, optimize, sizes.

Every function takes a SQLAlchemy ``Connection``, works inside the caller's transaction
(nothing here commits) and hands over to the connection's backend (``Backend.*_fts``):
FTS5 ``'rebuild'``/``'integrity-check'``/bounded ``'merge'`` on SQLite
(``backends/sqlite/fts/maintenance.py``), ``REINDEX``, validity checks and
``gin_clean_pending_list`` + ``ANALYZE`` on PostgreSQL (``backends/postgresql/fts``). So
callers — the repository's maintenance concern, the CLI, ``recover`` — never ask which
engine they have.

``rebuild(conn, *, progress=None) -> list[str]``   the indexes rebuilt
``integrity_check(conn) -> list[str]``            problems, empty when all is well
``optimize(conn) -> bool``                        one bounded step; True once done
``fts_sizes(conn) -> dict[str, int]``             bytes per index
``usable_indexes(conn) -> list[str]``             the indexes present, usable, not stale
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from ..backends.base import ProgressCallback, backend_of


def usable_indexes(conn: Connection) -> list[str]:
    return backend_of(conn).usable_fts_indexes(conn)


def rebuild(conn: Connection, *, progress: ProgressCallback | None = None) -> list[str]:
    return backend_of(conn).rebuild_fts(conn, progress=progress)


def integrity_check(conn: Connection) -> list[str]:
    return backend_of(conn).fts_integrity_check(conn)


def optimize(conn: Connection) -> bool:
    """One bounded step of index upkeep (SQLite: a few pages of FTS5 merging); True when
    nothing is left to do. Call it, one short transaction each, until True."""
    return backend_of(conn).optimize_fts(conn)


def fts_sizes(conn: Connection) -> dict[str, int]:
    return backend_of(conn).fts_sizes(conn)


__all__ = ["ProgressCallback", "fts_sizes", "integrity_check", "optimize", "rebuild",
           "usable_indexes"]
