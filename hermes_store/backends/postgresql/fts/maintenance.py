"""Upkeep of PostgreSQL's full-text layer (``Backend.*_fts``), as SQLite's
``fts/maintenance.py``: rebuild (the scope flags, then ``REINDEX``), the integrity check
(the layout's objects present and valid, the flags right), one bounded optimize step
(the GIN pending lists cleaned, ``ANALYZE``), sizes.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from ...base import ProgressCallback
from .ddl import (
    DOCUMENT_COLUMN,
    FTS_COLUMNS,
    FTS_INDEXES,
    FTS_TRIGGERS,
    SCOPE_OF_ROW,
    TRIGRAM_INDEX,
    TRIGRAM_SCOPE_COLUMN,
    WORD_INDEX,
    create_fts,
    has_column,
    refresh_scope,
)

#: ``progress(index, done, total)`` after each index is rebuilt (as fts.maintenance)
_REBUILD_HINT = "rebuild the full-text index (hermes_store.fts.maintenance.rebuild)"


def rebuild(conn: Connection, *, progress: ProgressCallback | None = None) -> list[str]:
    """PostgreSQL's counterpart of FTS5 ``'rebuild'``: re-create missing objects,
    re-derive the trigram scope of every row, ``REINDEX`` both indexes.

    The word column needs no re-derivation: PostgreSQL computes it on every write of
    its source columns. ``REINDEX`` takes a lock that blocks writes to ``messages``
    while it runs (use ``REINDEX … CONCURRENTLY`` by hand for a live server).
    """
    create_fts(conn)
    refresh_scope(conn)
    for done, name in enumerate(FTS_INDEXES, start=1):
        conn.exec_driver_sql(f"REINDEX INDEX {name}")
        if progress is not None:
            progress(name, done, len(FTS_INDEXES))
    return list(FTS_INDEXES)


def integrity_check(conn: Connection) -> list[str]:
    """Problems, empty when all is well: missing or invalid objects
    (:func:`layout_problems`), trigram-scope flags out of step with their sessions."""
    problems = layout_problems(conn)
    if has_column(conn, TRIGRAM_SCOPE_COLUMN):
        wrong = conn.exec_driver_sql(
            f"SELECT count(*) FROM messages AS m "
            f"WHERE m.{TRIGRAM_SCOPE_COLUMN} IS DISTINCT FROM {SCOPE_OF_ROW}"
        ).scalar()
        if wrong:
            problems.append(
                f"{TRIGRAM_INDEX}: {wrong} message(s) with a wrong trigram scope; {_REBUILD_HINT}"
            )
    return problems


def layout_problems(conn: Connection) -> list[str]:
    """The layout's objects that are missing or invalid — its columns, both indexes,
    its triggers — read from the catalog alone (``db check`` reports them as drift;
    the ordinary comparison leaves the layout out)."""
    problems: list[str] = []
    columns = {c for c in FTS_COLUMNS if has_column(conn, c)}
    for column in FTS_COLUMNS:
        if column not in columns:
            problems.append(f"messages.{column}: missing; {_REBUILD_HINT}")
    indexes = dict(conn.exec_driver_sql(
        "SELECT c.relname, i.indisvalid FROM pg_index AS i "
        "JOIN pg_class AS c ON c.oid = i.indexrelid "
        "JOIN pg_namespace AS n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relname = ANY(%(names)s)",
        {"names": list(FTS_INDEXES)},
    ).all())
    for name in FTS_INDEXES:
        if name not in indexes:
            problems.append(f"{name}: missing; {_REBUILD_HINT}")
        elif not indexes[name]:
            problems.append(f"{name}: invalid (an interrupted build); {_REBUILD_HINT}")
    triggers = set(conn.exec_driver_sql(
        "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgname = ANY(%(names)s)",
        {"names": list(FTS_TRIGGERS)},
    ).scalars())
    missing = [t for t in FTS_TRIGGERS if t not in triggers]
    if missing:
        problems.append(
            f"triggers missing ({', '.join(missing)}): the trigram scope of new messages is "
            f"not kept; {_REBUILD_HINT}"
        )
    return problems


def optimize(conn: Connection) -> bool:
    """Counterpart of FTS5's bounded merge: move both GIN indexes' pending lists
    (entries buffered by ``fastupdate``) into the main index and refresh the planner's
    statistics of ``messages``. Always finishes in one call (returns True)."""
    for name in FTS_INDEXES:
        if conn.exec_driver_sql("SELECT to_regclass(%(n)s)", {"n": name}).scalar():
            conn.exec_driver_sql("SELECT gin_clean_pending_list(%(n)s::regclass)", {"n": name})
    conn.exec_driver_sql("ANALYZE messages")
    return True


def fts_sizes(conn: Connection) -> dict[str, int]:
    """Bytes per index: the GIN index, plus the stored ``tsvector`` column for the
    word index (what FTS5 keeps in its shadow tables)."""
    sizes: dict[str, int] = {}
    for name in FTS_INDEXES:
        size = conn.exec_driver_sql(
            "SELECT pg_relation_size(to_regclass(%(n)s))", {"n": name}
        ).scalar()
        if size is not None:
            sizes[name] = int(size)
    if WORD_INDEX in sizes and has_column(conn, DOCUMENT_COLUMN):
        sizes[WORD_INDEX] += int(conn.exec_driver_sql(
            f"SELECT coalesce(sum(pg_column_size({DOCUMENT_COLUMN})), 0) FROM messages"
        ).scalar())
    return sizes


__all__ = ["fts_sizes", "integrity_check", "layout_problems", "optimize", "rebuild"]
