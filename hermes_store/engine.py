"""Engine factory for a state.db file and the event hooks that make SQLite behave.

SQLAlchemy's documented pysqlite recipe (decision D8): the driver's own transaction
handling is switched off on connect, and a ``begin`` hook emits the BEGIN we choose
per unit through the ``hermes_begin`` execution option:

* ``"IMMEDIATE"`` for write units: the write lock is taken at BEGIN, where the busy
  timeout and the retry loop apply (a deferred BEGIN that upgrades later fails with
  SQLITE_BUSY without consulting the busy handler);
* ``"DEFERRED"`` (the default) for reads;
* ``None`` for maintenance that must run outside a transaction (checkpoints, VACUUM).

Everything SQLite-specific about connections (pragmas, journal mode) lives here, and so
does the one door past Core: ``driver_execute`` sends a compiled statement straight to
the DBAPI connection (pysqlite, psycopg: ``uses_driver`` says for which dialects),
keeping SQLAlchemy's cursor events and exception types. ``HeldConnections`` keeps one
connection per thread checked out for a store's lifetime, so a call pays neither a pool
checkout nor a reset.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import random
import sqlite3
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

log = logging.getLogger(__name__)
T = TypeVar("T")

#: execution option read by the begin hook
BEGIN_MODE = "hermes_begin"
#: seconds SQLite's busy handler waits for a lock before reporting SQLITE_BUSY
DEFAULT_BUSY_TIMEOUT = 1.0
#: bytes a -wal file is cut back to after a checkpoint reset it (64 MiB)
WAL_SIZE_LIMIT = 64 * 1024 * 1024
#: a non-empty -wal at open is verified with quick_check up to this database size;
#: beyond it the full scan would make every open slow, so only the schema is read
WAL_QUICK_CHECK_MAX_BYTES = 256 * 1024 * 1024
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

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        statement = begin_statement(conn)
        if statement is None:
            return
        if not uses_driver(conn.dialect):
            conn.exec_driver_sql(statement)
        elif not conn.connection.dbapi_connection.in_transaction:
            driver_execute(conn, statement, ())
        # else: a transaction begun on the driver (``transaction``), which a Core
        # statement has now joined: SQLAlchemy only takes note of it

    return engine


def begin_statement(conn: sa.Connection) -> str | None:
    """The BEGIN that starts a transaction on ``conn``, from its ``hermes_begin``
    execution option (None: none at all). The one place that picks the mode, for the
    begin hook and for ``transaction`` alike."""
    mode = conn.get_execution_options().get(BEGIN_MODE, "DEFERRED")
    return None if mode is None else f"BEGIN {mode}"


@contextlib.contextmanager
def transaction(conn: sa.Connection) -> Iterator[sa.Connection]:
    """One transaction on a held connection: a write unit (``writer`` connections:
    ``BEGIN IMMEDIATE``) or a read snapshot (``BEGIN DEFERRED``). Commits when the block
    ends, rolls back when it raises.

    On pysqlite BEGIN and COMMIT go through the driver: SQLAlchemy's transaction
    bookkeeping and event dispatch around them cost more than the statements. A Core
    statement run inside still works: SQLAlchemy begins its own transaction object, the
    begin hook sees that the driver is already in one and emits nothing, and the
    transaction then ends through SQLAlchemy. Other dialects use ``conn.begin()`` (their
    statements may still take the driver door: the DBAPI connection is in SQLAlchemy's
    transaction).
    """
    if not driver_transactions(conn.dialect):
        with conn.begin():
            yield conn
        return
    statement = begin_statement(conn)
    if statement is not None:
        driver_execute(conn, statement, ())
    try:
        yield conn
    except BaseException:
        end_failed_transaction(conn)
        raise
    try:
        if conn.in_transaction():  # a Core statement joined: SQLAlchemy ends it
            conn.commit()
        elif statement is not None:
            driver_execute(conn, "COMMIT", ())
    except BaseException:
        end_failed_transaction(conn)
        raise


# --------------------------------------------------------------------------- the driver door

#: (dialect name, driver) pairs whose statements may go straight to the DBAPI connection:
#: pysqlite (positional parameters) and psycopg (named ``%(name)s`` parameters, an
#: INSERT's new key through RETURNING); ``repository.prebuilt`` compiles the SQL text
#: for each. Any other dialect runs the same statements through Core; tests empty this
#: set to exercise that path.
DRIVER_DIALECTS = frozenset({("sqlite", "pysqlite"), ("postgresql", "psycopg")})


def uses_driver(dialect) -> bool:
    """Whether ``driver_execute`` may be used on connections of this dialect."""
    return (dialect.name, dialect.driver) in DRIVER_DIALECTS


def driver_transactions(dialect) -> bool:
    """Whether BEGIN and COMMIT, too, go through the driver (pysqlite's ``BEGIN
    IMMEDIATE``…); elsewhere SQLAlchemy's ``conn.begin()`` and the begin hook run them."""
    return dialect.name == "sqlite" and uses_driver(dialect)


def outside_transaction(conn: sa.Connection) -> None:
    """Make the DBAPI connection of ``conn`` (not in a transaction) run the next driver
    statement on its own: pysqlite already does (no implicit BEGIN); psycopg would
    otherwise open a transaction, so it is switched to autocommit (an attribute, no
    round trip; the begin hook switches it back for the next transaction)."""
    if conn.dialect.name == "sqlite":
        return
    dbapi_conn = conn.connection.dbapi_connection
    if not dbapi_conn.autocommit:
        dbapi_conn.autocommit = True


def driver_execute(conn: sa.Connection, sql: str, params: Any, *, many: bool = False):
    """Run SQL text on the connection's DBAPI connection; returns the DBAPI cursor.

    ``Connection.exec_driver_sql`` costs ~10 µs per statement on top of SQLite; this
    costs well under one, and keeps what callers rely on: ``before_cursor_execute`` /
    ``after_cursor_execute`` listeners still see every statement, and a driver error is
    raised as SQLAlchemy's exception type (``OperationalError``…, ``.orig`` the sqlite3
    error), so busy retries and ``translate_error`` work unchanged; a connection the
    driver reports broken is invalidated, as SQLAlchemy does, and the error says so
    (``connection_invalidated``). The connection's transaction is SQLAlchemy's: the
    caller runs this inside ``conn.begin()`` (or, for a single statement, after
    ``outside_transaction``).
    """
    dbapi_conn = conn.connection.dbapi_connection
    dispatch = conn.dispatch
    cursor = None
    try:
        if dispatch.before_cursor_execute or dispatch.after_cursor_execute:
            cursor = dbapi_conn.cursor()
            for fn in conn.dispatch.before_cursor_execute:
                fn(conn, cursor, sql, params, None, many)
            if many:
                cursor.executemany(sql, params)
            else:
                cursor.execute(sql, params)
            for fn in conn.dispatch.after_cursor_execute:
                fn(conn, cursor, sql, params, None, many)
            return cursor
        if many:
            cursor = dbapi_conn.cursor()
            cursor.executemany(sql, params)
            return cursor
        return dbapi_conn.execute(sql, params)
    except conn.dialect.loaded_dbapi.Error as exc:  # sqlite3.Error, psycopg.Error
        dialect = conn.dialect
        lost = dialect.name != "sqlite" and dialect.is_disconnect(exc, dbapi_conn, cursor)
        error = sa.exc.DBAPIError.instance(
            sql, params, exc, dialect.loaded_dbapi.Error, dialect=dialect, ismulti=many,
            connection_invalidated=lost,
        )
        if lost:
            conn.invalidate(error)
        raise error from exc


# --------------------------------------------------------------------------- held connections

class _Slot:
    """A thread's entry in a ``HeldConnections``; dropped with the thread's locals."""

    __slots__ = ("conn", "__weakref__")

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn


class HeldConnections:
    """One connection per thread, checked out of the engine once and kept.

    A checkout, a reset and a check-in per call cost more than a small read, so each
    thread keeps its own connection (threads never share one, so never a transaction).
    Connections come from the engine, so the connect hook's pragmas apply. Every held
    connection is in a registry: ``close()`` releases all of them, whatever thread holds
    them, and a thread that ends releases its own (its locals are dropped, which fires a
    finalizer), so short-lived threads do not leak connections.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._local = threading.local()
        # key -> connection / finalizer: plain dicts the finalizers reach without `self`
        self._held: dict[int, sa.Connection] = {}
        self._finalizers: dict[int, weakref.finalize] = {}
        self._keys = itertools.count()
        # reentrant: a finalizer may fire (garbage collection) while this thread holds it
        self._lock = threading.RLock()
        self._closed = False

    #: the doors use ``get()`` (kept) rather than ``checkout()`` (``PooledConnections``)
    held = True

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
                raise StoreClosedError(self._engine.url.database)
            conn = self._engine.connect()
            slot, key = _Slot(conn), next(self._keys)
            self._held[key] = conn
            self._finalizers[key] = weakref.finalize(
                slot, _release_held, self._held, self._finalizers, self._lock, key
            )
            self._local.slot = slot
        return conn

    def __len__(self) -> int:
        return len(self._held)

    def close(self) -> None:
        """Release every thread's connection; ``get`` raises ``StoreClosedError`` after."""
        with self._lock:
            self._closed = True
            held = list(self._held.values())
            finalizers = list(self._finalizers.values())
            self._held.clear()
            self._finalizers.clear()
        for fin in finalizers:
            fin.detach()
        for conn in held:
            _close_quietly(conn)


def _release_held(held: dict, finalizers: dict, lock, key: int) -> None:
    with lock:
        conn = held.pop(key, None)
        finalizers.pop(key, None)
    if conn is not None:
        _close_quietly(conn)


def _close_quietly(conn: sa.Connection) -> None:
    try:
        conn.close()
    except Exception as exc:  # a connection of a thread that died mid-call
        log.debug("closing a held connection failed: %s", exc)


class PooledConnections:
    """A connection checked out of the engine's pool for one unit or one read, and
    returned right after (PostgreSQL; see ``postgres.HOLD_CONNECTIONS`` for why).

    The same role as ``HeldConnections`` (``held`` tells the doors which one they
    have): every checkout passes the engine's check (``postgres._check_on_checkout``),
    so a connection the server dropped (a restart, an idle timeout) is replaced between
    units instead of failing the next one, and a process holds only the connections it
    is using.
    """

    held = False

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._closed = False

    def checkout(self) -> sa.Connection:
        """A connection of its own until it is closed (use it in a ``with`` block)."""
        if self._closed:
            from .errors import StoreClosedError

            raise StoreClosedError(self._engine.url.database)
        return self._engine.connect()

    def __len__(self) -> int:
        return 0

    def close(self) -> None:
        self._closed = True


def writer(engine: Engine) -> Engine:
    """The same engine, beginning every transaction with BEGIN IMMEDIATE."""
    return engine.execution_options(**{BEGIN_MODE: "IMMEDIATE"})


def autocommit(engine: Engine) -> Engine:
    """The same engine, with no BEGIN at all (checkpoints, VACUUM, pragmas)."""
    return engine.execution_options(**{BEGIN_MODE: None})


def reader(engine: Engine) -> Engine:
    """The same engine, beginning every transaction as a read snapshot (SQLite's
    default BEGIN DEFERRED; on PostgreSQL the begin hook's REPEATABLE READ, READ ONLY)."""
    return engine.execution_options(**{BEGIN_MODE: "DEFERRED"})


# --------------------------------------------------------------------------- write units

@dataclass(frozen=True)
class RetryPolicy:
    """How a write unit rides out another process's write lock (decision D8).

    Each attempt first waits up to ``busy_timeout`` inside SQLite's busy handler, then
    sleeps a random 20-150 ms so that writers that collided do not collide again.
    """

    attempts: int = 15
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    jitter_min: float = 0.020
    jitter_max: float = 0.150
    #: PASSIVE WAL checkpoint after this many successful write units (0 = never)
    checkpoint_every: int = 50

    def __post_init__(self):
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be at least 1")
        if not 0 <= self.jitter_min <= self.jitter_max:
            raise ValueError("RetryPolicy needs 0 <= jitter_min <= jitter_max")


def sqlite_error_name(exc: BaseException) -> str:
    """SQLite's symbolic result code ("SQLITE_BUSY", …) of a driver error, if any."""
    orig = getattr(exc, "orig", exc)
    return getattr(orig, "sqlite_errorname", "") or ""


def is_busy_error(exc: BaseException) -> bool:
    """True for lock contention, classified by result code (message as a fallback
    for drivers that do not expose codes)."""
    name = sqlite_error_name(exc)
    if name:
        return name.startswith("SQLITE_BUSY") or name.startswith("SQLITE_LOCKED")
    text = str(getattr(exc, "orig", exc)).lower()
    return "database is locked" in text or "database is busy" in text


def _from_psycopg(exc: BaseException) -> bool:
    """Whether a driver error is psycopg's (PostgreSQL), without importing psycopg."""
    return (type(getattr(exc, "orig", None) or exc).__module__ or "").startswith("psycopg")


def is_transient_error(exc: BaseException) -> bool:
    """A failure after which the whole unit is re-run: SQLite's busy/locked, and on
    PostgreSQL serialization failures, deadlocks and lock timeouts (``postgres``)."""
    if _from_psycopg(exc):
        from . import postgres

        return postgres.is_transient(exc)
    return isinstance(exc, sa.exc.OperationalError) and is_busy_error(exc)


def is_connection_lost(exc: BaseException) -> bool:
    """The connection broke or could not be made (PostgreSQL: a server restart, the
    network). A SQLite file has no connection to lose."""
    if getattr(exc, "connection_invalidated", False):
        return True
    if _from_psycopg(exc):
        from . import postgres

        return postgres.is_connection_lost(exc)
    return False


def raise_translated(exc: BaseException, path: object) -> NoReturn:
    """Raise the package's own error for a driver error (:func:`translate_error`), or
    ``exc`` itself when it has none; called in the handler that caught ``exc``."""
    mapped = translate_error(exc, path)
    if mapped is None:
        raise exc
    raise mapped from exc


def translate_error(exc: BaseException, path: object) -> BaseException | None:
    """Map a driver error to the package's own error (which says what to do), or
    None to re-raise as is. The one place that reads SQLite's result codes; psycopg's
    errors go to ``postgres.translate_error``."""
    from . import errors

    if _from_psycopg(exc):
        from . import postgres

        return postgres.translate_error(exc, path)
    name = sqlite_error_name(exc)
    text = str(getattr(exc, "orig", exc))
    if is_busy_error(exc):
        return errors.StoreBusyError(
            path, 1, "another process holds a write lock; close other Hermes processes "
            "using this file or retry later"
        )
    if name == "SQLITE_FULL" or "database or disk is full" in text:
        return errors.StoreFullError(
            f"{path}: the disk (or the database's page limit) is full; the write was rolled "
            "back and nothing was stored. Free space and retry."
        )
    if name == "SQLITE_NOTADB" or "file is not a database" in text:
        return errors.NotADatabaseError(
            f"{path} is not a SQLite database ({text}); it was left untouched. If it is a "
            f"damaged state.db, {errors.RECOVER_HINT}"
        )
    if name.startswith("SQLITE_CORRUPT") or "malformed" in text:
        # A duplicated schema entry (upstream #43149) is healable in place.
        hint = errors.REPAIR_HINT if "already exists" in text else errors.RECOVER_HINT
        return errors.DatabaseDamagedError(f"{path} is damaged ({text}); {hint}")
    if name.startswith("SQLITE_READONLY") or "readonly database" in text:
        return errors.DatabaseAccessError(
            f"{path} is read-only ({text}); make the file and its directory writable, or "
            "run as the user that owns them"
        )
    if name.startswith("SQLITE_CANTOPEN"):
        return errors.DatabaseAccessError(
            f"cannot open {path} ({text}); check that the directory exists and is writable"
        )
    return None


class WriteUnits:
    """Runs callables as write units, re-running a unit whole when it failed on
    contention (decisions D8, D13).

    A unit is retried only when it failed *before* its COMMIT returned, so a unit that
    committed is never applied twice; a connection lost while COMMIT was on its way
    (PostgreSQL) is an unknown outcome, raised as ``CommitOutcomeUnknownError`` and
    never retried.

    SQLite (``hold_connections=True``, ``serialize=True``): each thread runs its units
    on its own held writer connection (``HeldConnections``), one unit at a time per
    instance: threads of one process queue on a lock instead of spinning in SQLite's
    busy handler; every unit begins with ``BEGIN IMMEDIATE``.

    PostgreSQL: each unit checks a connection out of the pool (``PooledConnections``),
    begins READ COMMITTED (the engine's begin hook) and takes the store's unit lock
    first (``postgres.lock_unit``): exclusive, or shared for units declared
    ``concurrent``. Threads and processes run side by side; serialization failures,
    deadlocks and lock timeouts re-run the unit, and so does a connection lost before
    COMMIT (the server rolled the transaction back), on a fresh connection.
    """

    def __init__(self, engine: Engine, policy: RetryPolicy, *, label: object,
                 hold_connections: bool = True, serialize: bool = True) -> None:
        connections = HeldConnections if hold_connections else PooledConnections
        self._writers = connections(writer(engine))
        self._maintenance = autocommit(engine)
        self._sqlite = engine.dialect.name == "sqlite"
        self._lock_unit = self._session_ended = None
        if engine.dialect.name == "postgresql":
            from . import postgres

            self._lock_unit = postgres.lock_unit
            self._session_ended = postgres.session_ended
        self.policy = policy
        self.label = label
        self._lock = threading.RLock() if serialize else None
        self._local = threading.local()
        self.committed = 0
        #: busy retries seen since creation (load tests and benchmarks report it)
        self.retries = 0

    def active_connection(self) -> sa.Connection | None:
        """The connection of the unit running on this thread, if any."""
        return getattr(self._local, "conn", None)

    def run(self, fn: Callable[[sa.Connection], T], *, concurrent: bool = False) -> T:
        """Run ``fn(conn)`` as one unit and return its result. ``concurrent=True``
        declares that the unit only changes rows through statements that lock them
        (no read-decide-write), so on PostgreSQL it may run beside other such units;
        SQLite runs every unit alone either way."""
        joined = self.active_connection()
        if joined is not None:
            # A unit started inside a unit joins it: a second BEGIN IMMEDIATE on another
            # connection would wait for the lock this thread already holds.
            if not concurrent and self._local.concurrent and self._lock_unit is not None:
                self._lock_unit(joined, exclusive=True)  # it must run alone after all
                self._local.concurrent = False
            return fn(joined)
        if self._lock is None:
            return self._run(fn, concurrent)
        with self._lock:
            return self._run(fn, concurrent)

    def _run(self, fn, concurrent: bool):
        from .errors import CommitOutcomeUnknownError, StoreBusyError

        policy, writers = self.policy, self._writers
        for attempt in range(1, policy.attempts + 1):
            try:
                if writers.held:
                    result = self._attempt(writers.get(), fn, concurrent)
                else:
                    with writers.checkout() as conn:
                        result = self._attempt(conn, fn, concurrent)
            except CommitOutcomeUnknownError:
                raise
            except BaseException as exc:
                if not isinstance(exc, sa.exc.DBAPIError):
                    raise
                transient = is_transient_error(exc)
                if not transient and not is_connection_lost(exc):
                    raise_translated(exc, self.label)
                if attempt == policy.attempts:
                    if transient:
                        raise StoreBusyError(self.label, attempt, exc.orig) from exc
                    raise_translated(exc, self.label)  # the server stayed away
                self.retries += 1
                time.sleep(random.uniform(policy.jitter_min, policy.jitter_max))
                continue
            self.committed += 1
            if self._sqlite and policy.checkpoint_every \
                    and self.committed % policy.checkpoint_every == 0:
                self.checkpoint()
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _attempt(self, conn: sa.Connection, fn, concurrent: bool):
        """One try of a unit on ``conn``: begin, (lock,) run, commit."""
        local = self._local
        if driver_transactions(conn.dialect):
            with transaction(conn):  # BEGIN IMMEDIATE: a writer connection
                local.conn, local.concurrent = conn, concurrent
                try:
                    return fn(conn)
                finally:
                    local.conn = None
        try:
            trans = conn.begin()  # the begin hook picks the dialect's mode
            if self._lock_unit is not None:
                self._lock_unit(conn, exclusive=not concurrent)
            local.conn, local.concurrent = conn, concurrent
            try:
                result = fn(conn)
            finally:
                local.conn = None
            if self._session_ended is not None:
                # a session the server ended while the unit was idle (a restart) never
                # received COMMIT: re-run the unit rather than report an unknown outcome
                ended = self._session_ended(conn)
                if ended is not None:
                    raise ended
        except BaseException:
            end_failed_transaction(conn)
            raise
        try:
            trans.commit()
        except BaseException as exc:
            end_failed_transaction(conn)
            if isinstance(exc, sa.exc.DBAPIError) and is_connection_lost(exc):
                from .errors import CommitOutcomeUnknownError

                raise CommitOutcomeUnknownError(
                    f"{self.label}: the connection was lost while the write was being "
                    f"committed ({getattr(exc, 'orig', exc)}); the server may or may not "
                    "have stored it. It was not retried (that could store it twice): "
                    "read the data back before writing it again."
                ) from exc
            raise
        return result

    def close(self) -> None:
        """Release every thread's writer connection, once a running unit has finished."""
        if self._lock is None:
            self._writers.close()
            return
        with self._lock:
            self._writers.close()

    def checkpoint(self, mode: str = "PASSIVE") -> tuple | None:
        """Copy WAL frames back into the database without waiting for readers.

        Best effort by design (a busy checkpoint just happens next time), but a
        failure is logged, never hidden. PostgreSQL checkpoints on its own: nothing
        to do there (None).
        """
        if not self._sqlite:
            return None
        try:
            with self._maintenance.connect() as conn:
                return tuple(conn.exec_driver_sql(f"PRAGMA wal_checkpoint({mode})").one())
        except sa.exc.DBAPIError as exc:
            log.warning("WAL checkpoint (%s) of %s failed: %s", mode, self.label, exc)
            return None


def end_failed_transaction(conn: sa.Connection) -> None:
    """Leave a held connection outside any transaction after a unit failed (a failed
    COMMIT can leave SQLAlchemy's or SQLite's transaction open), so the next unit can
    BEGIN on it."""
    try:
        if conn.in_transaction():
            conn.rollback()
        if conn.dialect.name != "sqlite":
            return  # sqlite3's own flag; elsewhere a lost connection must not be revived
        dbapi_conn = conn.connection.dbapi_connection
        if getattr(dbapi_conn, "in_transaction", False):
            dbapi_conn.rollback()
    except Exception as exc:
        log.warning("rolling back a failed write unit did not complete: %s", exc)


def vacuum(engine: Engine, label: object) -> None:
    """Rewrite the file compactly (``VACUUM`` runs outside any transaction).

    It needs the write lock for its whole run; when another writer holds it the
    busy timeout applies once and a ``StoreBusyError`` says to retry later. On
    PostgreSQL its counterpart runs: ``VACUUM (ANALYZE)`` of the store's tables
    (``postgres.vacuum``), which blocks nobody.
    """
    from .errors import StoreBusyError

    if engine.dialect.name == "postgresql":
        from . import postgres
        from .schema import metadata

        try:
            postgres.vacuum(engine, [table.name for table in metadata.sorted_tables])
        except sa.exc.DBAPIError as exc:
            raise_translated(exc, label)
        return
    try:
        with autocommit(engine).connect() as conn:
            conn.exec_driver_sql("VACUUM")
    except sa.exc.OperationalError as exc:
        if is_busy_error(exc):
            raise StoreBusyError(label, 1, exc.orig) from exc
        raise_translated(exc, label)


def _wal_needs_verifying(path: Path) -> bool:
    wal = Path(f"{path}-wal")
    try:
        return wal.stat().st_size > 0 and path.stat().st_size <= WAL_QUICK_CHECK_MAX_BYTES
    except FileNotFoundError:
        return False


def probe_database(path: str | os.PathLike) -> None:
    """Read the file's header and schema through a read-only connection.

    Raises ``NotADatabaseError`` for a file that is not SQLite and
    ``DatabaseDamagedError`` for an unreadable schema — before anything writes to it.
    SQLite (not a raw ``open()``) reads the file: closing a raw descriptor would drop
    the POSIX locks other connections of this process hold on it.
    """
    from .errors import RECOVER_HINT, DatabaseDamagedError, NotADatabaseError

    uri = f"file:{Path(path).absolute()}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=DEFAULT_BUSY_TIMEOUT)
    except sqlite3.Error as exc:
        raise DatabaseDamagedError(f"{path} cannot be opened ({exc}); {RECOVER_HINT}") from exc
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if _wal_needs_verifying(Path(path)):
            # A -wal left by a crash (or copied in from another file) is replayed on
            # read; a foreign one shows up only as damage in the pages it overlays.
            problems = [r[0] for r in conn.execute("PRAGMA quick_check(5)")]
            if problems != ["ok"]:
                raise sqlite3.DatabaseError("; ".join(problems))
    except sqlite3.DatabaseError as exc:
        name = getattr(exc, "sqlite_errorname", "")
        if name == "SQLITE_NOTADB" or "not a database" in str(exc):
            raise NotADatabaseError(
                f"{path} is not a SQLite database ({exc}); it was left untouched. "
                f"If it is a damaged state.db, {RECOVER_HINT}"
            ) from exc
        if is_busy_error(exc):
            return  # locked by a writer: readable, the open proper will wait its turn
        raise DatabaseDamagedError(f"{path} is damaged ({exc}); {RECOVER_HINT}") from exc
    finally:
        conn.close()
