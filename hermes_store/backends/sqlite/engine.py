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
import sqlite3
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from ...connections import autocommit, begin_statement
from ...driver import driver_execute, uses_driver
from ...units import DEFAULT_BUSY_TIMEOUT
from .errors import is_busy_error, raise_translated

log = logging.getLogger(__name__)

#: bytes a -wal file is cut back to after a checkpoint reset it (64 MiB)
WAL_SIZE_LIMIT = 64 * 1024 * 1024
#: messages SQLite gives when a filesystem cannot do WAL's shared memory (NFS/SMB/FUSE)
_WAL_REFUSED = ("locking protocol", "not authorized")


def sqlite_url(path: str | os.PathLike, *, read_only: bool = False) -> str:
    """A SQLAlchemy URL for a file path (read-only opens use SQLite's URI form)."""
    p = Path(path).expanduser().absolute()
    if read_only:
        return f"sqlite+pysqlite:///file:{p}?mode=ro&uri=true"
    return f"sqlite+pysqlite:///{p}"


def apply_journal_mode(dbapi_conn: sqlite3.Connection) -> str:
    """Switch to WAL; fall back to DELETE where the filesystem refuses WAL.

    Returns the journal mode in force. A file whose header already says WAL is
    never downgraded (that would fail under other live connections anyway).
    """
    cur = dbapi_conn.cursor()
    try:
        try:
            mode = cur.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if not any(s in str(exc).lower() for s in _WAL_REFUSED):
                raise
            log.warning("WAL refused by the filesystem (%s); using journal_mode=DELETE", exc)
            mode = cur.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
        return str(mode).lower()
    finally:
        cur.close()


def create_engine(
    path: str | os.PathLike,
    *,
    read_only: bool = False,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    foreign_keys: bool = True,
    journal_mode: str | None = "WAL",
    poolclass=None,
) -> Engine:
    """An Engine for one SQLite file with the connect and begin hooks installed.

    ``journal_mode=None`` leaves the file's journal mode alone (used when we must
    not write to a file we are only inspecting).
    """
    kwargs = {}
    if poolclass is not None:
        kwargs["poolclass"] = poolclass
    else:
        # A store holds one or two connections per thread (HeldConnections): never make
        # a thread wait for the pool to hand one out.
        kwargs["max_overflow"] = -1
    engine = sa.create_engine(
        sqlite_url(path, read_only=read_only),
        connect_args={"timeout": busy_timeout, "check_same_thread": False},
        **kwargs,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        # The driver must never BEGIN on its own: the begin hook decides.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            cur.execute(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
            if not read_only:
                # FULL: a commit that returned survives power loss (upstream's setting).
                cur.execute("PRAGMA synchronous=FULL")
                # After a checkpoint that reset the log, shrink a -wal that a long
                # reader let grow, instead of keeping its peak size on disk forever.
                cur.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        finally:
            cur.close()
        if journal_mode == "WAL" and not read_only:
            apply_journal_mode(dbapi_conn)
        elif journal_mode and not read_only:
            dbapi_conn.execute(f"PRAGMA journal_mode={journal_mode}")

    event.listen(engine, "begin", _on_begin)
    return engine


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


def checkpoint(engine: Engine, mode: str, label: object) -> tuple | None:
    """``PRAGMA wal_checkpoint(mode)`` on an autocommit engine: copy WAL frames back
    into the database without waiting for readers (PASSIVE).

    Best effort by design (a busy checkpoint just happens next time), but a failure is
    logged, never hidden.
    """
    try:
        with engine.connect() as conn:
            return tuple(conn.exec_driver_sql(f"PRAGMA wal_checkpoint({mode})").one())
    except sa.exc.DBAPIError as exc:
        log.warning("WAL checkpoint (%s) of %s failed: %s", mode, label, exc)
        return None


def synchronous_normal(dbapi_conn, _record) -> None:
    """A connect hook for bulk loads (``db copy``): WAL + NORMAL can lose the last
    transactions at a power cut, never consistency."""
    dbapi_conn.execute("PRAGMA synchronous=NORMAL")


def vacuum(engine: Engine, label: object) -> None:
    """Rewrite the file compactly (``VACUUM`` runs outside any transaction).

    It needs the write lock for its whole run; when another writer holds it the
    busy timeout applies once and a ``StoreBusyError`` says to retry later.
    """
    from ...errors import StoreBusyError

    try:
        with autocommit(engine).connect() as conn:
            conn.exec_driver_sql("VACUUM")
    except sa.exc.OperationalError as exc:
        if is_busy_error(exc):
            raise StoreBusyError(label, 1, exc.orig) from exc
        raise_translated(exc, label)


__all__ = ["WAL_SIZE_LIMIT", "apply_journal_mode", "checkpoint", "create_engine", "sqlite_url",
           "synchronous_normal", "vacuum"]
