"""Connections a store works through, and the transactions on them (any engine).

``hermes_begin`` (:data:`BEGIN_MODE`) is the execution option every transaction reads;
each backend's begin hook turns it into its engine's BEGIN (decisions D8, D13):

* ``"IMMEDIATE"`` — a write unit (SQLite ``BEGIN IMMEDIATE``; PostgreSQL READ COMMITTED);
* ``"DEFERRED"`` — a read snapshot (the default; PostgreSQL REPEATABLE READ, READ ONLY);
* ``None`` — no transaction at all (checkpoints, VACUUM, a single autocommit statement).

:func:`writer`, :func:`reader` and :func:`autocommit` are the same engine with that option
set. :class:`KeptConnections` keeps one connection per thread checked out for a store's
lifetime (SQLite: a checkout, reset and check-in per call cost more than a small read);
:class:`PooledConnections` checks one out per unit or read (PostgreSQL).
"""

from __future__ import annotations

import itertools
import logging
import threading
import weakref

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from .backends.base import backend_of
from .driver import driver_execute, listeners_fixed, listeners_released

log = logging.getLogger(__name__)

#: execution option read by every backend's begin hook
BEGIN_MODE = "hermes_begin"


def writer(engine: Engine) -> Engine:
    """The same engine, beginning every transaction as a write unit."""
    return engine.execution_options(**{BEGIN_MODE: "IMMEDIATE"})


def autocommit(engine: Engine) -> Engine:
    """The same engine, with no BEGIN at all (checkpoints, VACUUM, pragmas)."""
    return engine.execution_options(**{BEGIN_MODE: None})


def reader(engine: Engine) -> Engine:
    """The same engine, beginning every transaction as a read snapshot (SQLite's
    default BEGIN DEFERRED; on PostgreSQL the begin hook's REPEATABLE READ, READ ONLY)."""
    return engine.execution_options(**{BEGIN_MODE: "DEFERRED"})


def begin_statement(conn: sa.Connection) -> str | None:
    """The BEGIN that starts a transaction on ``conn``, from its ``hermes_begin``
    execution option (None: none at all). The one place that picks the mode, for the
    begin hooks and for :func:`transaction` alike."""
    mode = conn.get_execution_options().get(BEGIN_MODE, "DEFERRED")
    return None if mode is None else f"BEGIN {mode}"


class transaction:
    """One transaction on a kept connection: a write unit (``writer`` connections) or a
    read snapshot (``reader``). ``with transaction(conn):`` commits when the block ends
    and rolls back when it raises.

    Where the backend runs BEGIN and COMMIT through the driver (SQLite's pysqlite:
    SQLAlchemy's transaction bookkeeping and event dispatch around them cost more than
    the statements), they go through the driver door; a Core statement run inside still
    works: SQLAlchemy begins its own transaction object, the begin hook sees that the
    driver is already in one and emits nothing, and the transaction then ends through
    SQLAlchemy. Elsewhere ``conn.begin()`` (their statements may still take the driver
    door: the DBAPI connection is in SQLAlchemy's transaction).

    A class rather than a generator: every write unit and snapshot passes through here,
    and a generator-based context manager costs several extra Python calls each time.
    """

    __slots__ = ("conn", "_driver", "_core", "_statement")

    def __init__(self, conn: sa.Connection, *, driver: bool | None = None) -> None:
        #: ``driver``: the caller already asked ``Backend.driver_transactions``
        self.conn, self._driver = conn, driver

    def __enter__(self) -> sa.Connection:
        conn, driver = self.conn, self._driver
        if driver is None:
            driver = backend_of(conn).driver_transactions(conn.dialect)
        if not driver:
            self._core = core = conn.begin()
            core.__enter__()
            return conn
        self._core = None
        self._statement = statement = begin_statement(conn)
        listeners_fixed(conn)
        if statement is not None:
            try:
                driver_execute(conn, statement, ())
            except BaseException:
                listeners_released(conn)
                raise
        return conn

    def __exit__(self, exc_type, exc, tb) -> bool:
        conn, core = self.conn, self._core
        if core is not None:
            return core.__exit__(exc_type, exc, tb)
        try:
            if exc_type is not None:
                end_failed_transaction(conn)
                return False
            try:
                if conn.in_transaction():  # a Core statement joined: SQLAlchemy ends it
                    conn.commit()
                elif self._statement is not None:
                    driver_execute(conn, "COMMIT", ())
            except BaseException:
                end_failed_transaction(conn)
                raise
        finally:
            listeners_released(conn)
        return False


def end_failed_transaction(conn: sa.Connection) -> None:
    """Leave a kept connection outside any transaction after a unit failed (a failed
    COMMIT can leave SQLAlchemy's or the driver's transaction open), so the next unit
    can BEGIN on it."""
    try:
        # ``get_transaction``, not ``in_transaction``: a transaction that failed (SQLite's
        # "disk is full" on COMMIT) is inactive but still there, and SQLAlchemy refuses
        # to begin the next one until it is rolled back (``PendingRollbackError``)
        if conn.get_transaction() is not None:
            conn.rollback()
        backend_of(conn).end_driver_transaction(conn)
    except Exception as exc:
        log.warning("rolling back a failed write unit did not complete: %s", exc)


# --------------------------------------------------------------------------- kept connections

class _Slot:
    """A thread's entry in a ``KeptConnections``; dropped with the thread's locals."""

    __slots__ = ("conn", "__weakref__")

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn


class KeptConnections:
    """One connection per thread, checked out of the engine once and kept.

    A checkout, a reset and a check-in per call cost more than a small read, so each
    thread keeps its own connection (threads never share one, so never a transaction).
    Connections come from the engine, so the connect hook's settings apply. Every kept
    connection is in a registry: ``close()`` releases all of them, whatever thread holds
    them, and a thread that ends releases its own (its locals are dropped, which fires a
    finalizer), so short-lived threads do not leak connections.
    """

    def __init__(self, engine: Engine, label: object = None) -> None:
        self._engine = engine
        #: how ``StoreClosedError`` names the database (a file's path, not its URI)
        self.label = engine.url.database if label is None else label
        self._local = threading.local()
        # key -> connection / finalizer: plain dicts the finalizers reach without `self`
        self._kept: dict[int, sa.Connection] = {}
        self._finalizers: dict[int, weakref.finalize] = {}
        self._keys = itertools.count()
        # reentrant: a finalizer may fire (garbage collection) while this thread holds it
        self._lock = threading.RLock()
        self._closed = False

    #: the doors use ``get()`` (kept) rather than ``checkout()`` (``PooledConnections``)
    kept = True

    def get(self) -> sa.Connection:
        """This thread's connection (checked out on first use)."""
        slot = getattr(self._local, "slot", None)
        if slot is not None:
            return slot.conn
        return self._hold()

    def _hold(self) -> sa.Connection:
        from .errors import StoreClosedError

        with self._lock:
            if self._closed:
                raise StoreClosedError(self.label)
            conn = self._engine.connect()
            slot, key = _Slot(conn), next(self._keys)
            self._kept[key] = conn
            self._finalizers[key] = weakref.finalize(
                slot, _release_kept, self._kept, self._finalizers, self._lock, key
            )
            self._local.slot = slot
        return conn

    def __len__(self) -> int:
        return len(self._kept)

    def close(self) -> None:
        """Release every thread's connection; ``get`` raises ``StoreClosedError`` after."""
        with self._lock:
            self._closed = True
            kept = list(self._kept.values())
            finalizers = list(self._finalizers.values())
            self._kept.clear()
            self._finalizers.clear()
        for fin in finalizers:
            fin.detach()
        for conn in kept:
            _close_quietly(conn)


def _release_kept(kept: dict, finalizers: dict, lock, key: int) -> None:
    with lock:
        conn = kept.pop(key, None)
        finalizers.pop(key, None)
    if conn is not None:
        _close_quietly(conn)


def _close_quietly(conn: sa.Connection) -> None:
    try:
        conn.close()
    except Exception as exc:  # a connection of a thread that died mid-call
        log.debug("closing a kept connection failed: %s", exc)


class PooledConnections:
    """A connection checked out of the engine's pool for one unit or one read, and
    returned right after (PostgreSQL; see docs/postgres.md, "Connections").

    The same role as ``KeptConnections`` (``kept`` tells the access methods which one they
    have): every checkout passes the engine's checkout check, so a connection the
    server dropped (a restart, an idle timeout) is replaced between units instead of
    failing the next one, and a process holds only the connections it is using.
    """

    kept = False

    def __init__(self, engine: Engine, label: object = None) -> None:
        self._engine = engine
        self.label = engine.url.database if label is None else label
        self._closed = False

    def checkout(self) -> sa.Connection:
        """A connection of its own until it is closed (use it in a ``with`` block)."""
        if self._closed:
            from .errors import StoreClosedError

            raise StoreClosedError(self.label)
        return self._engine.connect()

    def __len__(self) -> int:
        return 0

    def close(self) -> None:
        self._closed = True


def connections_for(engine: Engine, kept: bool,
                    label: object = None) -> KeptConnections | PooledConnections:
    """Kept (one per thread) or pooled (one per call) connections of ``engine``."""
    return KeptConnections(engine, label) if kept else PooledConnections(engine, label)


__all__ = [
    "BEGIN_MODE",
    "KeptConnections",
    "PooledConnections",
    "autocommit",
    "begin_statement",
    "connections_for",
    "end_failed_transaction",
    "reader",
    "transaction",
    "writer",
]
