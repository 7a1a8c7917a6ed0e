"""SQLite engines for a state.db file and the event hooks that make SQLite behave.

SQLAlchemy's documented pysqlite recipe (decision D8): the driver's own transaction
handling is switched off on connect, and a ``begin`` hook emits the BEGIN chosen per
unit through the ``hermes_begin`` execution option (``hermes_store.connections``):

* ``"IMMEDIATE"`` for write units: the write lock is taken at BEGIN, where the busy
  timeout and the retry loop apply (a deferred BEGIN that upgrades later fails with
  SQLITE_BUSY without consulting the busy handler);
* ``"DEFERRED"`` (the default) for reads;
* ``None`` for maintenance that must run outside a transaction (checkpoints, VACUUM).

Everything about SQLite connections (pragmas, journal mode, checkpoints, VACUUM) is here.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from ...connections import POOLED_PER_STORE, autocommit, begin_statement
from ...driver import driver_execute, uses_driver
from ...policy import DEFAULT_BUSY_TIMEOUT
from .errors import is_busy_error, raise_translated
from .files import journal as _journal
from .files import latch as _latch
from . import library as _library
from .files.uri import sqlite_url

log = logging.getLogger(__name__)

#: bytes a -wal file is cut back to after a checkpoint reset it (64 MiB)
WAL_SIZE_LIMIT = 64 * 1024 * 1024
#: ``create_engine(journal_mode=AUTO)``: the journal plan decides (``journal.py``)
AUTO = "auto"



#: the SQLite backend, which every engine made here carries (``Backend.carry``: code
#: holding a connection reads it back with ``backends.base.backend_of``); the package hands
#: it over as it loads, before anything can call this module
CARRIED = None

def create_engine(
    path: str | os.PathLike,
    *,
    read_only: bool = False,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    foreign_keys: bool = True,
    journal_mode: str | None = AUTO,
    poolclass=None,
    watch=None,
) -> Engine:
    """An Engine for one SQLite file with the connect and begin hooks installed, on the
    package's SQLite library (``library.py``: SQLAlchemy's pysqlite dialect takes its
    DB-API module), whose FTS5/trigram capabilities are checked here.

    ``journal_mode``: ``AUTO`` plans it (``journal.py``: an explicit setting, else the
    filesystem), ``"wal"``/``"delete"`` is an explicit setting, None leaves the file's
    journal mode alone (used when we must not write to a file we are only inspecting).
    ``watch`` (``identity.FileWatch``): a connection made after the file was replaced
    fails with ``StoreReplacedError`` before it could change the new file (its journal
    mode) — a store never switches files by itself.
    """
    lib = _library.check_capabilities()
    plan = None
    if journal_mode is not None and not read_only:
        plan = _journal.plan(path, None if journal_mode == AUTO else journal_mode)
    kwargs = {}
    if poolclass is not None:
        kwargs["poolclass"] = poolclass
    else:
        # The connections a store keeps or lends (KeptConnections) stay checked out and
        # are bounded there (connections.py, the budget): the pool never makes a thread
        # wait, and keeps only the few its maintenance returns.
        kwargs["pool_size"] = POOLED_PER_STORE
        kwargs["max_overflow"] = -1
    engine = sa.create_engine(
        sqlite_url(path, read_only=read_only),
        module=lib.module,
        connect_args={"timeout": busy_timeout, "check_same_thread": False},
        **kwargs,
    )
    label = Path(path)
    durable = durability_pragmas()

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        # The driver must never BEGIN on its own: the begin hook decides.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            # Only ``checkpoint`` below checkpoints, under the writer lock (D19).
            cur.execute("PRAGMA wal_autocheckpoint=0")
            cur.execute(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
            if not read_only:
                for pragma in durable:  # a commit that returned survives power loss
                    cur.execute(pragma)
                # After a checkpoint that reset the log, shrink a -wal that a long
                # reader let grow, instead of keeping its peak size on disk forever.
                cur.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        finally:
            cur.close()
        if watch is not None:
            watch.check()
        if plan is not None:
            _journal.apply(dbapi_conn, plan, label)

    event.listen(engine, "begin", _on_begin)
    # a damaged file's log stays as it is when its connections close (``files/latch.py``)
    event.listen(engine, "close", _latch.on_pool_close(label))
    return CARRIED.carry(engine)


def full_fsync_pragmas() -> tuple[str, ...]:
    """On macOS, whose ``fsync`` stops at the drive's cache, ``F_FULLFSYNC`` for every
    sync and every checkpoint (upstream #30636); elsewhere nothing."""
    if sys.platform == "darwin":
        return ("PRAGMA fullfsync=ON", "PRAGMA checkpoint_fullfsync=ON")
    return ()


def durability_pragmas() -> tuple[str, ...]:
    """What a writing connection sets so that a commit that returned survives a power
    cut: ``synchronous=FULL`` (upstream's setting; NORMAL can lose the last commits) and
    the platform's full fsync. The one list: the agent shim applies it to the agent's
    own databases on macOS (``files.make_durable``)."""
    return ("PRAGMA synchronous=FULL",) + full_fsync_pragmas()


def _on_begin(conn: sa.Connection) -> None:
    """The begin hook: the BEGIN the ``hermes_begin`` option asks for (D8)."""
    statement = begin_statement(conn)
    if statement is None:
        return
    if not uses_driver(conn.dialect):
        conn.exec_driver_sql(statement)
    elif not conn.connection.dbapi_connection.in_transaction:
        driver_execute(conn, statement, ())
    # else: a transaction begun on the driver (``connections.transaction``), which a Core
    # statement has now joined: SQLAlchemy only takes note of it


def checkpoint(engine: Engine, label: object) -> tuple | None:
    """The store's WAL checkpoint: ``(busy, log frames, checkpointed frames)``, or None
    when it was skipped. ``engine`` is an autocommit engine (no BEGIN of its own).

    It runs only while the database's writer lock is held for its whole run (decision
    D19), so that no other connection can commit — and restart the WAL — while it
    copies frames back: that commit is the third party of the WAL-reset race of SQLite
    3.7.0-3.51.2 (sqlite.org/wal.html#walresetbug). Asking SQLite for a FULL checkpoint
    is not enough: when a FULL/RESTART/TRUNCATE checkpoint cannot get the writer lock it
    silently carries on as a PASSIVE one, without it (``wal.c``,
    ``sqlite3WalCheckpoint``). So a second connection takes the lock first (``BEGIN
    IMMEDIATE``, within the busy timeout), the PASSIVE checkpoint runs on the first, and
    the lock is released by ROLLBACK (a connection cannot checkpoint inside its own
    transaction). When the lock cannot be had the checkpoint is skipped: it happens
    next time, and the store's connections never checkpoint on their own
    (``wal_autocheckpoint=0``). Best effort by design, but a failure is logged, never
    hidden. A file latched as damaged (``files/latch.py``) is never checkpointed.
    """
    if _latch.latched(label) is not None:
        return None
    try:
        with engine.connect() as holder:
            try:
                holder.exec_driver_sql("BEGIN IMMEDIATE")
            except sa.exc.OperationalError as exc:
                if not is_busy_error(exc):
                    raise
                log.debug("WAL checkpoint of %s skipped: another writer holds the lock", label)
                return None
            try:
                with engine.connect() as conn:
                    return tuple(conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").one())
            finally:
                holder.exec_driver_sql("ROLLBACK")
    except sa.exc.DBAPIError as exc:
        log.warning("WAL checkpoint of %s failed: %s", label, exc)
        return None


def synchronous_normal(dbapi_conn, _record) -> None:
    """A connect hook for bulk loads (``db copy``): WAL + NORMAL can lose the last
    transactions at a power cut, never consistency."""
    dbapi_conn.execute("PRAGMA synchronous=NORMAL")


#: a VACUUM asked for only when worthwhile (auto-maintenance) runs when at least this
#: share of the file's pages is free: below it, rewriting the whole file under the write
#: lock wins back little (upstream #54189)
VACUUM_MIN_FREE_SHARE = 0.25


def vacuum(engine: Engine, label: object, *, worthwhile_only: bool = False) -> str | None:
    """Rewrite the file compactly (``VACUUM`` runs outside any transaction); None when it
    ran, else why not: with ``worthwhile_only``, free pages under
    :data:`VACUUM_MIN_FREE_SHARE` of the file.

    A file latched as damaged (``files/latch.py``) is never rewritten: its
    ``DatabaseDamagedError`` is raised before anything runs. VACUUM needs the write lock
    for its whole run; when another writer holds it the busy timeout applies once and a
    ``StoreBusyError`` says to retry later.
    """
    from ...errors import StoreBusyError

    _latch.check(label)
    try:
        with autocommit(engine).connect() as conn:
            if worthwhile_only:
                pages = conn.exec_driver_sql("PRAGMA page_count").scalar() or 0
                free = conn.exec_driver_sql("PRAGMA freelist_count").scalar() or 0
                if not free or free < pages * VACUUM_MIN_FREE_SHARE:
                    return (f"{free} of {pages} pages free ({free / max(pages, 1):.0%}), "
                            f"under the {VACUUM_MIN_FREE_SHARE:.0%} a VACUUM is worth")
            conn.exec_driver_sql("VACUUM")
    except sa.exc.DBAPIError as exc:
        if is_busy_error(exc):
            raise StoreBusyError(label, 1, exc.orig) from exc
        raise_translated(exc, label)
    return None


__all__ = ["AUTO", "VACUUM_MIN_FREE_SHARE", "WAL_SIZE_LIMIT", "checkpoint", "create_engine",
           "durability_pragmas", "full_fsync_pragmas", "sqlite_url", "synchronous_normal",
           "vacuum"]
