"""Connections a store works through, and the transactions on them (any engine).

``hermes_begin`` (:data:`BEGIN_MODE`) is the execution option every transaction reads;
each backend's begin hook turns it into its engine's BEGIN (decisions D8, D13):

* ``"IMMEDIATE"`` — a write unit (SQLite ``BEGIN IMMEDIATE``; PostgreSQL READ COMMITTED);
* ``"DEFERRED"`` — a read snapshot (the default; PostgreSQL REPEATABLE READ, READ ONLY);
* ``None`` — no transaction at all (checkpoints, VACUUM, a single autocommit statement).

:func:`writer`, :func:`reader` and :func:`autocommit` are the same engine with that option
set. :class:`KeptConnections` keeps one connection per thread checked out for a store's
lifetime (SQLite: a checkout, reset and check-in per call cost more than a small read),
within the budget below (``KEPT_PER_STORE``…: the threads past it borrow or share);
:class:`PooledConnections` checks one out per unit or read (PostgreSQL: the pool's
``pool_size`` + ``max_overflow`` bound them).
"""

from __future__ import annotations

import itertools
import logging
import os
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


# --------------------------------------------------------------------------- the budget

#: threads that keep a connection of their own, per store and role (its reads; its write
#: units): a kept connection is a thread-local lookup, the fast path
KEPT_PER_STORE = 8
#: kept connections of every store of the process together
KEPT_PER_PROCESS = 32
#: per store, readers lent for one read to the threads past those caps (they wait their
#: turn for one); the threads past them that write share one connection, since a
#: store's write units run one at a time
LENT_PER_STORE = 2
#: idle connections a store's engine pools between uses (a checkpoint takes two)
POOLED_PER_STORE = 2
#: descriptors a new kept connection must leave free below ``RLIMIT_NOFILE``; short of
#: them, threads borrow instead (upstream's figure, #98573)
DESCRIPTOR_HEADROOM = 64
#: descriptors one connection holds: a SQLite file and its -wal (its -shm is one per
#: file and process)
DESCRIPTORS_PER_CONNECTION = 2


def most_connections(stores: int) -> int:
    """The most connections ``stores`` stores of one process hold at once (SQLite; the
    formula of docs/operations.md, "Descriptors and connections"): the kept ones, at
    most ``KEPT_PER_STORE`` per store and role and ``KEPT_PER_PROCESS`` in all, and per
    store ``LENT_PER_STORE`` lent readers, the writer shared past the caps and
    ``POOLED_PER_STORE`` idle in its engine's pool. Descriptors (SQLite): two per
    connection (``DESCRIPTORS_PER_CONNECTION``), and one ``-shm`` per file."""
    kept = min(KEPT_PER_PROCESS, stores * 2 * KEPT_PER_STORE)
    return kept + stores * (LENT_PER_STORE + 1 + POOLED_PER_STORE)


def free_descriptors() -> int | None:
    """Descriptors this process may still open below its soft ``RLIMIT_NOFILE`` (0 when
    none is left even to count them), or None where that cannot be told."""
    try:
        import resource
    except ImportError:  # Windows: no descriptor limit of this kind
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            used = len(os.listdir(listing)) - 1  # the listing's own descriptor is closed
        except FileNotFoundError:
            continue
        except OSError:  # EMFILE
            return 0
        return soft - used
    return None


def _has_headroom() -> bool:
    free = free_descriptors()
    return free is None or free >= DESCRIPTOR_HEADROOM + DESCRIPTORS_PER_CONNECTION


class _ProcessBudget:
    """The kept connections of every store of this process (``KEPT_PER_PROCESS``).
    ``released`` counts the ones given up: a thread that was refused asks again only
    after it changed, so the threads past the caps skip the checks on their reads."""

    def __init__(self) -> None:
        # reentrant: a finalizer (``_release_kept``) may fire while this thread holds it
        self.lock = threading.RLock()
        self.kept = 0
        self.released = 0

    def take(self) -> bool:
        """One more kept connection, if the process's cap and its descriptors allow."""
        # the descriptors are counted outside the lock (a directory listing)
        if self.kept >= KEPT_PER_PROCESS or not _has_headroom():
            return False
        with self.lock:
            if self.kept >= KEPT_PER_PROCESS:
                return False
            self.kept += 1
            return True

    def give(self) -> None:
        with self.lock:
            self.kept -= 1
            self.released += 1


_BUDGET = _ProcessBudget()


# --------------------------------------------------------------------------- kept connections

class _Slot:
    """A thread's entry in a ``KeptConnections``; dropped with the thread's locals."""

    __slots__ = ("conn", "__weakref__")

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn


class KeptConnections:
    """One connection per thread, checked out of the engine once and kept, within a
    budget (issue 31, row 6: upstream ran out of descriptors with one per thread).

    A checkout, a reset and a check-in per call cost more than a small read, so each
    thread keeps its own connection (threads never share one, so never a transaction),
    up to ``KEPT_PER_STORE`` threads per store and ``KEPT_PER_PROCESS`` connections in
    all, and while ``DESCRIPTOR_HEADROOM`` descriptors stay free. A thread past that
    never fails: ``get`` answers None and the thread borrows a connection for the call
    (``lend``, then ``give_back``), waiting for one of ``LENT_PER_STORE``; or, with
    ``shared_past_cap`` (write units, which run one at a time per store), ``get`` hands
    it the one connection the threads past the caps share. Only when no connection can
    be opened at all does ``DescriptorLimitError`` name the limit.

    Connections come from the engine, so the connect hook's settings apply. Every kept
    connection is in a registry: ``close()`` releases all of them, whatever thread holds
    them, and a thread that ends releases its own (its locals are dropped, which fires a
    finalizer), so short-lived threads do not leak connections.
    """

    def __init__(self, engine: Engine, label: object = None, *,
                 shared_past_cap: bool = False) -> None:
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
        #: a lent connection was given back (``lend`` waits on it)
        self._given_back = threading.Condition(self._lock)
        self._lent: list[sa.Connection] = []
        self._idle: list[sa.Connection] = []
        self._shared_past_cap = shared_past_cap
        self._shared: sa.Connection | None = None
        self._closed = False

    #: the access methods use ``get()`` (kept) rather than ``checkout()`` (``PooledConnections``)
    kept = True

    def get(self) -> sa.Connection | None:
        """This thread's connection (kept on first use); past the caps None (borrow one
        with ``lend``), or with ``shared_past_cap`` the connection shared past them."""
        slot = getattr(self._local, "slot", None)
        if slot is not None:
            return slot.conn
        return self._hold()

    def _hold(self) -> sa.Connection | None:
        from .errors import StoreClosedError

        released = _BUDGET.released
        if getattr(self._local, "refused", None) != released:
            with self._lock:
                if self._closed:
                    raise StoreClosedError(self.label)
                if len(self._kept) < KEPT_PER_STORE and _BUDGET.take():
                    try:
                        conn = self._connect()
                    except BaseException:
                        _BUDGET.give()
                        raise
                    slot, key = _Slot(conn), next(self._keys)
                    self._kept[key] = conn
                    self._finalizers[key] = weakref.finalize(
                        slot, _release_kept, self._kept, self._finalizers, self._lock, key
                    )
                    self._local.slot = slot
                    return conn
            self._local.refused = released  # asked again once a kept one is given up
        if not self._shared_past_cap:
            return None
        shared = self._shared
        if shared is not None:
            return shared
        with self._lock:
            if self._closed:
                raise StoreClosedError(self.label)
            if self._shared is None:
                self._shared = self._connect(last_resort=True)
            return self._shared

    def lend(self) -> sa.Connection:
        """A connection for one call of a thread past the caps, to ``give_back`` after:
        an idle lent one, else a new one while fewer than ``LENT_PER_STORE`` are lent
        (beyond the first, only with the descriptor headroom), else the thread waits."""
        from .errors import StoreClosedError

        with self._given_back:
            while True:
                if self._closed:
                    raise StoreClosedError(self.label)
                if self._idle:
                    return self._idle.pop()
                if not self._lent or (len(self._lent) < LENT_PER_STORE and _has_headroom()):
                    conn = self._connect(last_resort=not self._lent)
                    self._lent.append(conn)
                    return conn
                self._given_back.wait()

    def give_back(self, conn: sa.Connection) -> None:
        """The end of a ``lend``: the connection goes to the next thread waiting."""
        with self._given_back:
            if not self._closed:  # else ``close()`` closed it
                self._idle.append(conn)
                self._given_back.notify()

    def _connect(self, *, last_resort: bool = False) -> sa.Connection:
        """A new connection, the driver's errors as the package's; ``last_resort``: the
        store has no other to offer, so only a process out of descriptors refuses it."""
        free = free_descriptors() if last_resort else None
        if free is not None and free < DESCRIPTORS_PER_CONNECTION:
            raise self._out_of_descriptors(free)
        try:
            return self._engine.connect()
        except sa.exc.DBAPIError as exc:
            free = free_descriptors()
            if free is not None and free < DESCRIPTORS_PER_CONNECTION:
                raise self._out_of_descriptors(free) from exc
            backend_of(self._engine).raise_translated(exc, self.label)

    def _out_of_descriptors(self, free: int) -> BaseException:
        import resource

        from .errors import DescriptorLimitError

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return DescriptorLimitError(
            f"{self.label}: no connection can be opened: this process has {free} of its "
            f"{soft} file descriptors (RLIMIT_NOFILE) left, a connection needs "
            f"{DESCRIPTORS_PER_CONNECTION}, and the store has none to lend. Raise the limit "
            "(ulimit -n, or LimitNOFILE= in a systemd unit), or close files, sockets and "
            "stores this process keeps open (docs/operations.md, \"Descriptors and "
            "connections\")."
        )

    def __len__(self) -> int:
        return len(self._kept)

    def close(self) -> None:
        """Release every thread's connection, lent and shared ones too; ``get`` and
        ``lend`` raise ``StoreClosedError`` after."""
        with self._lock:
            self._closed = True
            kept = list(self._kept.values())
            finalizers = list(self._finalizers.values())
            others = self._lent + ([self._shared] if self._shared is not None else [])
            self._kept.clear()
            self._finalizers.clear()
            self._lent, self._idle, self._shared = [], [], None
            self._given_back.notify_all()
        for fin in finalizers:
            fin.detach()
        for conn in kept:
            _BUDGET.give()
            _close_quietly(conn)
        for conn in others:
            _close_quietly(conn)


def _release_kept(kept: dict, finalizers: dict, lock, key: int) -> None:
    with lock:
        conn = kept.pop(key, None)
        finalizers.pop(key, None)
    if conn is not None:
        _BUDGET.give()
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


def connections_for(engine: Engine, kept: bool, label: object = None, *,
                    shared_past_cap: bool = False) -> KeptConnections | PooledConnections:
    """Kept (one per thread) or pooled (one per call) connections of ``engine``
    (``shared_past_cap``: see ``KeptConnections``)."""
    if kept:
        return KeptConnections(engine, label, shared_past_cap=shared_past_cap)
    return PooledConnections(engine, label)


__all__ = [
    "BEGIN_MODE",
    "DESCRIPTORS_PER_CONNECTION",
    "DESCRIPTOR_HEADROOM",
    "KEPT_PER_PROCESS",
    "KEPT_PER_STORE",
    "LENT_PER_STORE",
    "POOLED_PER_STORE",
    "KeptConnections",
    "PooledConnections",
    "autocommit",
    "begin_statement",
    "connections_for",
    "end_failed_transaction",
    "free_descriptors",
    "most_connections",
    "reader",
    "transaction",
    "writer",
]
