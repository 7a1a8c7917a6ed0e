"""Engine factory for a state.db file and the event hooks that make SQLite behave.

SQLAlchemy's documented pysqlite recipe (decision D8): the driver's own transaction
handling is switched off on connect, and a ``begin`` hook emits the BEGIN we choose
per unit through the ``hermes_begin`` execution option:

* ``"IMMEDIATE"`` for write units: the write lock is taken at BEGIN, where the busy
  timeout and the retry loop apply (a deferred BEGIN that upgrades later fails with
  SQLITE_BUSY without consulting the busy handler);
* ``"DEFERRED"`` (the default) for reads;
* ``None`` for maintenance that must run outside a transaction (checkpoints, VACUUM).

Everything SQLite-specific about connections (pragmas, journal mode) lives here.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

log = logging.getLogger(__name__)

#: execution option read by the begin hook
BEGIN_MODE = "hermes_begin"
#: seconds SQLite's busy handler waits for a lock before reporting SQLITE_BUSY
DEFAULT_BUSY_TIMEOUT = 1.0
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
        finally:
            cur.close()
        if journal_mode == "WAL" and not read_only:
            apply_journal_mode(dbapi_conn)
        elif journal_mode and not read_only:
            dbapi_conn.execute(f"PRAGMA journal_mode={journal_mode}")

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        mode = conn.get_execution_options().get(BEGIN_MODE, "DEFERRED")
        if mode is not None:
            conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


def writer(engine: Engine) -> Engine:
    """The same engine, beginning every transaction with BEGIN IMMEDIATE."""
    return engine.execution_options(**{BEGIN_MODE: "IMMEDIATE"})


def autocommit(engine: Engine) -> Engine:
    """The same engine, with no BEGIN at all (checkpoints, VACUUM, pragmas)."""
    return engine.execution_options(**{BEGIN_MODE: None})
