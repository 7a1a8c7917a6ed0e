"""Upkeep of SQLite's FTS5 indexes: rebuild, integrity check, bounded optimize, sizes,
and taking a damaged index out of the write path.

Every function but ``rebuild_stale`` takes a SQLAlchemy ``Connection`` and works inside
the caller's transaction (nothing here commits), so the caller chooses the unit: one
transaction for a rebuild, a short write transaction per ``optimize`` call.

``rebuild(conn, *, progress=None) -> list[str]``
    FTS5 ``'rebuild'`` of every index present (the cjk one only where its tokenizer is
    loadable); a stale index (``ddl.STALE``) is first dropped and made anew, and its
    triggers come back; clears the rebuild-gate keys.
``detach_damaged(conn, why) -> bool``
    Decision D20 for derived data (issue 31, row 1): a write failed because an FTS5
    index is damaged, so every index is marked stale (``fts_stale`` = ``why``) and its
    triggers are dropped, in the caller's transaction: the write, re-run, goes on
    without the index, and search scans ``messages`` (``search.PRESENT_INDEXES``).
``rebuild_stale(engine, path) -> bool``
    At a writable open: the stale indexes rebuilt in a write transaction of its own,
    one process at a time (``files.ops.fts_rebuild_lock``; a process that finds it
    taken skips, one that gets it afterwards finds nothing stale).
``integrity_check(conn) -> list[str]``
    Human-readable problems, empty when all is well: missing tables/triggers, a
    stale index, a pending rebuild, and FTS5 ``integrity-check`` failures (rank = 1:
    the index is also compared with its external content, which is what goes wrong
    when a trigger misses a write).
``optimize(conn, *, pages=MERGE_PAGES, steps=MERGE_STEPS) -> bool``
    At most ``steps`` bounded FTS5 ``'merge'`` commands per index (each writes about
    ``pages`` pages) instead of one unbounded ``'optimize'``; True once nothing is left
    to merge. Call it repeatedly, one short transaction each, until it returns True.
``fts_sizes(conn) -> dict[str, int]``
    Bytes used by each index (its shadow tables), from ``dbstat`` where SQLite has it,
    else an estimate from the stored payload.
``usable_indexes(conn) -> list[str]``
    The indexes present, not stale and usable here (by the FTS5 tables' names).

The SQLite backend's ``*_fts`` methods are these; callers use them through
``hermes_store.fts.maintenance``, which asks the connection's backend.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ....connections import autocommit, writer
from ....fts.layout import FTS_STALE_HINT
from ...base import ProgressCallback
#: the package's SQLite library (library.py): its errors, from the driver door
from ..library import SQLITE as sqlite3
from . import ddl

log = logging.getLogger(__name__)

#: pages one merge step writes (about 1 MiB with 4 KiB pages): short write transactions
MERGE_PAGES = 256
#: merge steps per index and per ``optimize`` call
MERGE_STEPS = 16

_BASE_TRIGGERS = tuple(t for t in ddl.FTS_TRIGGERS if t not in ddl.CJK_TRIGGERS)
_REBUILD_HINT = "rebuild the full-text index (hermes_store.fts.maintenance.rebuild)"


def usable_indexes(conn: Connection) -> list[str]:
    """The full-text indexes present, not stale and usable on this connection."""
    stale = {table for key in _stale_keys(conn) for table in ddl.STALE[key][0]}
    return [table for table in _usable_tables(conn) if table not in stale]


def _present_tables(conn: Connection) -> list[str]:
    rows = conn.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?)",
        ddl.FTS_TABLES,
    ).scalars()
    present = set(rows)
    return [t for t in ddl.FTS_TABLES if t in present]


def _usable_tables(conn: Connection) -> list[str]:
    """Present indexes that can be opened here (cjk needs its tokenizer)."""
    tables = _present_tables(conn)
    if ddl.CJK_TABLE in tables and not ddl.table_usable(conn, ddl.CJK_TABLE):
        log.info("%s skipped: its tokenizer is not available here", ddl.CJK_TABLE)
        tables.remove(ddl.CJK_TABLE)
    return tables


def _meta_int(conn: Connection, key: str) -> int | None:
    value = conn.exec_driver_sql("SELECT value FROM state_meta WHERE key = ?", (key,)).scalar()
    return None if value is None else int(value)


def _stale_keys(conn: Connection, keys=tuple(ddl.STALE)) -> dict[str, str]:
    """The stale keys set (``ddl.STALE``), with their values."""
    marks = ", ".join("?" for _ in keys)
    return dict(conn.exec_driver_sql(
        f"SELECT key, value FROM state_meta WHERE key IN ({marks})", tuple(keys)).all())


def rebuild(conn: Connection, *, progress: ProgressCallback | None = None) -> list[str]:
    """Rebuild every usable index from its source view; returns the tables rebuilt.

    A stale index is dropped and created anew first (FTS5 cannot even open one whose
    structure record is damaged), and its triggers come back in this same transaction,
    so every message is in it exactly once: the rebuild read them all, and every later
    write goes through the triggers."""
    tables = _usable_tables(conn)
    stale = _stale_keys(conn)
    recreated = {table for key in stale for table in ddl.STALE[key][0]}
    for done, table in enumerate(tables, start=1):
        if table in recreated:
            ddl.recreate(conn, table)
        conn.exec_driver_sql(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
        if progress is not None:
            progress(table, done, len(tables))
    keys = [ddl.REBUILD_HIGH_WATER_KEY, ddl.REBUILD_PROGRESS_KEY]
    if ddl.CJK_TABLE in tables:
        keys += [ddl.CJK_REBUILD_HIGH_WATER_KEY, ddl.CJK_REBUILD_PROGRESS_KEY]
    for key in keys:
        conn.exec_driver_sql("DELETE FROM state_meta WHERE key = ?", (key,))
    for key in stale:
        if set(ddl.STALE[key][0]) <= set(tables):
            ddl.attach(conn, key)
    return tables


def detach_damaged(conn: Connection, why: str) -> bool:
    """A write failed on a damaged FTS5 index (``errors.is_index_damage``): mark every
    index stale and drop its triggers, in the caller's transaction, so the write can be
    re-run without them. False when no trigger was attached (nothing to detach: the
    damage is elsewhere). Which index is damaged cannot always be told ("database disk
    image is malformed" names none), so all go stale and are rebuilt together."""
    dropped = [t for key in ddl.STALE for t in ddl.detach(conn, key, why)]
    if dropped:
        log.warning("a full-text index is damaged (%s): detached (%s) and marked stale; "
                    "writes go on, %s", why, ", ".join(dropped), FTS_STALE_HINT)
    return bool(dropped)


def rebuild_stale(engine: sa.Engine, path) -> bool:
    """At a writable open of the file at ``path``: rebuild the indexes found damaged
    (``ddl.FTS_STALE_KEY`` set), in one write transaction, under the cross-process
    rebuild lock; True when this call rebuilt them.

    One indexed lookup when nothing is stale. A process that finds the lock taken
    skips (another one is rebuilding: this one opens with the index stale, and its
    search scans until the rebuild commits); one that gets the lock after another
    finished finds nothing stale any more. A failure is logged, not raised: the store
    works without the index."""
    from ..files.ops import fts_rebuild_lock

    def stale(conn: Connection) -> bool:
        return bool(_stale_keys(conn, (ddl.FTS_STALE_KEY,)))

    with autocommit(engine).connect() as conn:
        if not stale(conn):
            return False
    with fts_rebuild_lock(path) as held:
        if not held:
            log.info("%s: another process is rebuilding the full-text index", path)
            return False
        try:
            with writer(engine).begin() as conn:
                if not stale(conn):
                    return False
                tables = rebuild(conn)
        except (sa.exc.DBAPIError, sqlite3.Error) as exc:
            log.warning("%s: the stale full-text index was not rebuilt (%s); search keeps "
                        "scanning the messages until `hermes-store maintenance rebuild-fts`",
                        path, getattr(exc, "orig", exc))
            return False
    log.warning("%s: rebuilt the full-text indexes (%s), which were stale",
                path, ", ".join(tables))
    return True


def integrity_check(conn: Connection) -> list[str]:
    problems: list[str] = []
    present = _present_tables(conn)
    for table in (ddl.FTS_TABLE, ddl.TRIGRAM_TABLE):
        if table not in present:
            problems.append(f"{table}: missing; recreate the full-text search tables")
    triggers = set(conn.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'trigger'"
    ).scalars())
    stale = _stale_keys(conn)
    missing = [t for t in _BASE_TRIGGERS if t not in triggers]
    if ddl.FTS_STALE_KEY in stale:
        problems.append(f"{ddl.FTS_TABLE}, {ddl.TRIGRAM_TABLE}: stale, found damaged ("
                        f"{stale[ddl.FTS_STALE_KEY]}), their triggers detached: {FTS_STALE_HINT}")
    elif missing:
        problems.append(
            f"triggers missing ({', '.join(missing)}): new messages are not indexed; "
            f"recreate them and {_REBUILD_HINT}"
        )

    high_water = _meta_int(conn, ddl.REBUILD_HIGH_WATER_KEY)
    done = _meta_int(conn, ddl.REBUILD_PROGRESS_KEY)
    pending = high_water is not None and (done or 0) < high_water
    if pending:
        problems.append(
            f"rebuild pending: messages {(done or 0) + 1}..{high_water} are not indexed yet; "
            f"{_REBUILD_HINT}"
        )
    if ddl.CJK_TABLE in present and ddl.CJK_STALE_KEY in stale:
        problems.append(f"{ddl.CJK_TABLE}: stale (its triggers were detached); {_REBUILD_HINT}")

    for table in usable_indexes(conn):  # a stale index is known to be behind
        gated = pending if table != ddl.CJK_TABLE else _cjk_pending(conn)
        # While rows are deliberately missing, only the index's own structure can be
        # checked (rank 0); comparing with the content (rank 1) would flag the gap.
        rank = 0 if gated else 1
        try:
            conn.exec_driver_sql(
                f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', {rank})"
            )
        except sa.exc.DBAPIError as exc:
            problems.append(
                f"{table}: integrity-check failed ({exc.orig}): the index does not match "
                f"the messages; {_REBUILD_HINT}"
            )
    return problems


def _cjk_pending(conn: Connection) -> bool:
    high_water = _meta_int(conn, ddl.CJK_REBUILD_HIGH_WATER_KEY)
    done = _meta_int(conn, ddl.CJK_REBUILD_PROGRESS_KEY) or 0
    return high_water is not None and done < high_water


def _total_changes(conn: Connection) -> int:
    return conn.exec_driver_sql("SELECT total_changes()").scalar()


def merge_step(
    conn: Connection, table: str, *, pages: int = MERGE_PAGES, start: bool = False
) -> bool:
    """One bounded FTS5 merge of ``table``; True when it did work (more may remain).

    ``start=True`` makes every segment eligible (the first step of an incremental
    optimize); later steps continue that merge.
    """
    if pages < 1:
        raise ValueError(f"pages must be a positive number of pages, got {pages!r}")
    before = _total_changes(conn)
    amount = -pages if start else pages
    conn.exec_driver_sql(f"INSERT INTO {table}({table}, rank) VALUES ('merge', {amount})")
    # FTS5 documents a change-count delta below 2 as "nothing was merged".
    return _total_changes(conn) - before >= 2


def optimize(conn: Connection, *, pages: int = MERGE_PAGES, steps: int = MERGE_STEPS) -> bool:
    """Bounded incremental optimize of every usable index; True when fully merged
    ."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps!r}")
    finished = True
    for table in usable_indexes(conn):
        worked = False
        for step in range(steps):
            worked = merge_step(conn, table, pages=pages, start=step == 0)
            if not worked:
                break
        finished = finished and not worked
    return finished


def fts_sizes(conn: Connection) -> dict[str, int]:
    """Bytes per index (sum over its shadow tables); estimated where dbstat is missing."""
    sizes: dict[str, int] = {}
    for table in _present_tables(conn):
        shadows = [
            name for name in conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?, ?, ?)",
                tuple(table + s for s in ddl.SHADOW_SUFFIXES),
            ).scalars()
        ]
        measured = _dbstat_bytes(conn, shadows)
        sizes[table] = measured if measured is not None else _payload_bytes(conn, shadows)
    return sizes


#: the dbstat virtual table (absent when SQLite lacks SQLITE_ENABLE_DBSTAT_VTAB)
_DBSTAT = "dbstat"


def _dbstat_bytes(conn: Connection, tables: list[str]) -> int | None:
    if not tables:
        return 0
    marks = ", ".join("?" for _ in tables)
    try:
        return conn.exec_driver_sql(
            f"SELECT COALESCE(SUM(pgsize), 0) FROM {_DBSTAT} WHERE name IN ({marks})",
            tuple(tables),
        ).scalar()
    except sa.exc.OperationalError as exc:  # SQLite built without SQLITE_ENABLE_DBSTAT_VTAB
        log.debug("dbstat unavailable (%s); estimating FTS sizes", exc.orig)
        return None


def _payload_bytes(conn: Connection, tables: list[str]) -> int:
    """Sum of stored value sizes: a lower bound of the pages used, good enough to compare."""
    total = 0
    for table in tables:
        columns = [r[1] for r in conn.exec_driver_sql(f'PRAGMA table_info("{table}")')]
        row_size = " + ".join(f'COALESCE(length(CAST("{c}" AS BLOB)), 0)' for c in columns)
        query = f'SELECT COALESCE(SUM({row_size}), 0) FROM "{table}"'
        total += conn.exec_driver_sql(query).scalar()
    return total


__all__ = [
    "MERGE_PAGES",
    "MERGE_STEPS",
    "detach_damaged",
    "fts_sizes",
    "integrity_check",
    "merge_step",
    "optimize",
    "rebuild",
    "rebuild_stale",
    "usable_indexes",
]
