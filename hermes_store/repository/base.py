"""What every concern module of the repository stands on.

A concern mixin (sessions, messages, titles, search, …) talks to the database only
through four access methods:

* ``self._write(fn, locks=…)`` — ``fn(conn)`` runs as one write unit (``BEGIN
  IMMEDIATE`` on SQLite; on PostgreSQL READ COMMITTED under the locks of what it
  decides on), re-run whole on contention, committed whole or not at all; returns
  ``fn``'s result. ``locks`` (``hermes_store.unit_locks``) names what the unit reads
  and decides on — ``sessions(id)``, ``title(text)`` …; the default, ``STORE``, runs it
  alone — so on PostgreSQL units that decide on different things run side by side;
  SQLite ignores it. A unit that finds more to lock as it runs calls
  ``units.hold(conn, locks)`` before changing it (docs/postgres.md, "Write locks").
* ``with self._read() as conn:`` — one read snapshot (a deferred transaction), so a
  reader never sees half of a write unit even across several statements.
* ``self._query(statement, values)`` — the rows of one prebuilt SELECT
  (``sql.prebuilt.Prebuilt``). A single statement is a consistent snapshot by
  itself, so outside a unit or a snapshot it needs no transaction at all.
* ``self._read_lazily(fn)`` — ``fn(reads)`` for a read that usually needs one statement
  and sometimes more (a search): on PostgreSQL it runs without a transaction, like
  ``_query``, until it asks for a second data statement; then it is started over inside
  one snapshot, so every answer still comes from one snapshot. On SQLite it is a
  ``_read`` (a snapshot costs nothing there).

The access methods nest: a ``_write`` called while a unit is running on the same thread joins
that unit (it does not open a second transaction that would wait for the first), and a
``_read`` or ``_query`` inside a unit reads through the unit's connection (so it sees
the unit's own changes), inside another ``_read`` it reuses the outer snapshot. That
lets a public method compose other public methods and still be one unit / one snapshot.

On SQLite each thread reads on its own kept connection (``connections.KeptConnections``)
and writes on another, so threads never share a transaction; past the store's cap of
kept connections a thread borrows one lent for the read (``lend``/``give_back``), so the
descriptors a process holds stay bounded (issue 31, row 6). On PostgreSQL each unit and
each read checks a connection out of the pool (``connections.PooledConnections``).

A read-only store runs a read that failed with a disk I/O error again on the same
connection, within ``RetryPolicy.io_attempts`` (issue 31, row 5): a ``mode=ro``
connection cannot rebuild the ``-shm`` itself. A snapshot (``_read``) reads first, so
that such a failure comes before the caller's block, which cannot be run twice.

``SessionDB.__init__`` (``hermes_store.store``) opens the database and sets the
attributes; ``target`` names it in errors (a path, or a URL with its password masked).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from .. import schema
from ..connections import BEGIN_MODE, KeptConnections, PooledConnections, transaction
from ..errors import ServerUnreachableError, StoreClosedError, StoreIOError, StoreReadOnlyError
from ..unit_locks import STORE, Locks
from ..policy import RetryPolicy, tried_through_io_errors
from ..units import Outage, WriteUnits
from ..sql.prebuilt import Prebuilt

if TYPE_CHECKING:  # pragma: no cover
    from ..backends.base import Backend

T = TypeVar("T")

#: what a read-only store's snapshot reads first: it takes the snapshot's read lock
_START_READING = Prebuilt(sa.select(schema.schema_version.c.version).limit(1))


class ReadInterrupted(ServerUnreachableError):
    """A read snapshot (``_read``) lost its connection after its block had begun, so it
    cannot be re-run there; the API boundary (``store._guarded``) re-runs the whole call
    when the call has written nothing, within the outage budget (decision D16).
    Anywhere else it is what it says: the server could not be reached."""


class SnapshotNeeded(Exception):
    """A ``_read_lazily`` function asked for a second data statement (or declared that
    it will need one) while running outside a snapshot: the access method starts it over in one."""


class LazyReads:
    """What a ``_read_lazily`` function reads through: ``rows(statement, values)``.

    Outside a snapshot (``in_snapshot`` False) it allows one data statement, run on its
    own (autocommit: one round trip); a second one raises ``SnapshotNeeded``.
    ``data=False`` marks a catalog lookup (which index exists), which is not part of
    the data's snapshot and is not counted.
    """

    __slots__ = ("conn", "in_snapshot", "_statements")

    def __init__(self, conn: sa.Connection, in_snapshot: bool) -> None:
        self.conn = conn
        self.in_snapshot = in_snapshot
        self._statements = 0

    def rows(self, statement: Prebuilt, values: Mapping[str, Any] | None = None, *,
             data: bool = True) -> list:
        if self.in_snapshot:
            return statement.rows(self.conn, values)
        if data:
            if self._statements:
                raise SnapshotNeeded()
            self._statements += 1
        return statement.rows_alone(self.conn, values)

    def need_snapshot(self) -> None:
        """Declare, before reading data, that more than one data statement will follow."""
        if not self.in_snapshot:
            raise SnapshotNeeded()


class ThreadSnapshot(threading.local):
    """Per thread: the connection of the read snapshot open on it, if any (a class-level
    default: a missing thread-local attribute costs a caught AttributeError per read)."""

    conn: sa.Connection | None = None


class RepositoryBase:
    db_path: Path | None
    #: the database, as errors name it (a path, or a URL with its password masked)
    target: object = None
    read_only: bool = False
    _engine: Engine | None = None
    #: the engine's answers (``hermes_store.backends``): set by ``SessionDB.__init__``
    _backend: "Backend | None" = None
    _units: WriteUnits | None = None
    _readers: KeptConnections | PooledConnections | None = None
    #: PostgreSQL only: single statements run without a transaction from here
    _singles: KeptConnections | PooledConnections | None = None
    _snapshots: ThreadSnapshot | None = None
    #: how units and reads ride out contention and outages (``SessionDB(retry=…)``)
    retry: RetryPolicy = RetryPolicy()

    def _require_open(self) -> Engine:
        if self._engine is None:
            raise StoreClosedError(self.target)
        return self._engine

    def _write(self, fn: Callable[[sa.Connection], T], *, locks: Locks = STORE) -> T:
        self._require_open()
        if self.read_only:
            raise StoreReadOnlyError(self.target)
        return self._units.run(fn, locks=locks)

    def _joined(self) -> sa.Connection | None:
        """The connection of this thread's running unit or open snapshot, if any."""
        units, local = self._units, self._snapshots
        joined = units.active_connection() if units is not None else None
        if joined is None and local is not None:
            joined = local.conn
        return joined

    def _readers_open(self) -> KeptConnections | PooledConnections:
        readers = self._readers
        if readers is None:  # normally set by SessionDB.__init__; None once closed
            raise StoreClosedError(self.target)
        return readers

    def _rerun_lost(self, read: Callable[[], T]) -> T:
        """``read()`` — one checkout of its own and the statements on it, nothing else —
        re-run on a fresh connection while the connection it got was lost (a server
        restart, a failover), within the outage budget (``RetryPolicy.outage_timeout``):
        a read is idempotent. Other driver errors become the package's."""
        backend, outage = self._backend, None
        while True:
            try:
                return read()
            except sa.exc.DBAPIError as exc:
                if not backend.is_connection_lost(exc):
                    backend.raise_translated(exc, self.target)
                if outage is None:
                    outage = Outage(self.retry)
                if not outage.wait():
                    raise outage.error(exc, self.target, backend) from exc

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        self._require_open()
        joined = self._joined()
        if joined is not None:
            yield joined
            return
        if self._snapshots is None:  # normally set by SessionDB.__init__
            self._snapshots = ThreadSnapshot()
        readers, backend = self._readers_open(), self._backend
        if readers.kept:  # the thread's own reader (SQLite: a local BEGIN DEFERRED)
            conn = readers.get()
            lent = conn is None
            if lent:  # past the store's connection cap: one lent for this snapshot
                conn = readers.lend()
            try:
                with self._snapshot(conn) as conn:
                    if self.read_only:
                        self._start_reading(conn)
                    yield conn
            except sa.exc.DBAPIError as exc:
                backend.raise_translated(exc, self.target)
            finally:
                if lent:
                    readers.give_back(conn)
            return
        # A pooled reader (PostgreSQL): the checkout and the BEGIN are re-run while the
        # connection is lost; once the block has begun, a lost connection interrupts it
        # (``ReadInterrupted``: the API boundary re-runs the call)
        conn = self._rerun_lost(lambda: self._begin_snapshot(readers))
        try:
            with conn:  # back to the pool at the end (rolled back if the block raised)
                self._snapshots.conn = conn
                try:
                    yield conn
                finally:
                    self._snapshots.conn = None
                conn.commit()
        except sa.exc.DBAPIError as exc:
            if backend.is_connection_lost(exc):
                mapped = backend.translate_error(exc, self.target)
                raise ReadInterrupted(str(mapped or exc)) from exc
            backend.raise_translated(exc, self.target)

    @staticmethod
    def _begin_snapshot(readers: PooledConnections) -> sa.Connection:
        """A pooled reader in its snapshot (the begin hook sends its BEGIN at once)."""
        conn = readers.checkout()
        try:
            conn.begin()
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def _snapshot(self, conn: sa.Connection) -> Iterator[sa.Connection]:
        """One read transaction on ``conn``, joined by the access methods this thread uses inside."""
        with transaction(conn):  # BEGIN DEFERRED (PostgreSQL: REPEATABLE READ, READ ONLY)
            self._snapshots.conn = conn
            try:
                yield conn
            finally:
                self._snapshots.conn = None

    def _start_reading(self, conn: sa.Connection) -> None:
        """A read-only store's snapshot takes its read lock before the caller's block runs
        (a disk I/O error is tried again here: the block cannot be run twice)."""
        try:
            _START_READING.rows(conn)
        except sa.exc.DBAPIError as exc:
            self._read_again(lambda: _START_READING.rows(conn), exc)

    def _read_again(self, read: Callable[[], T], failed: sa.exc.DBAPIError) -> T:
        """After ``read()`` failed on a kept connection with ``failed``: the package's
        error, except that a read-only store first runs it again on the same connection
        while it fails with a disk I/O error — an error its backend translates to
        ``StoreIOError`` (``policy.tried_through_io_errors``) — and past that budget
        raises ``StoreIOError`` saying how often it tried. Each error is translated once
        (a translation may look at the file)."""
        backend, where, policy = self._backend, self.target, self.retry
        translated: dict[BaseException, BaseException | None] = {}

        def is_io_error(exc: BaseException) -> bool:
            translated[exc] = backend.translate_error(exc, where)
            return isinstance(translated[exc], StoreIOError)

        if self.read_only:
            try:
                return tried_through_io_errors(read, is_io_error, policy, failed)
            except sa.exc.DBAPIError as exc:
                failed = exc
        if failed not in translated:
            translated[failed] = backend.translate_error(failed, where)
        mapped = translated[failed]
        if mapped is None:
            raise failed
        if self.read_only and isinstance(mapped, StoreIOError):
            mapped = StoreIOError(mapped.path, mapped.detail, policy.io_attempts, policy.io_pause)
        raise mapped from failed

    def _query(self, statement: Prebuilt, values: Mapping[str, Any] | None = None) -> list:
        """The rows (tuples; ``statement.keys`` names their columns) of one SELECT."""
        self._require_open()
        joined = self._joined()
        if joined is not None:  # the running unit's or snapshot's access method handles errors
            return statement.rows(joined, values)
        # SQLite: the thread's reader; PostgreSQL: an autocommit connection (one
        # round trip instead of BEGIN, the statement and COMMIT)
        singles = self._singles
        if singles is None:
            singles = self._readers_open()
        if singles.kept:
            conn = singles.get()
            lent = conn is None
            if lent:  # past the store's connection cap: one lent for this read
                conn = singles.lend()
            try:
                return statement.rows_alone(conn, values)
            except sa.exc.DBAPIError as exc:
                return self._read_again(lambda: statement.rows_alone(conn, values), exc)
            finally:
                if lent:
                    singles.give_back(conn)

        def read():
            with singles.checkout() as conn:
                return statement.rows_alone(conn, values)

        return self._rerun_lost(read)

    def _read_lazily(self, fn: Callable[[LazyReads], T]) -> T:
        """``fn(reads)``, every data statement it reads in one snapshot, paying for the
        snapshot (BEGIN and COMMIT: two round trips on a server) only when ``fn`` reads
        more than one (see ``LazyReads``). ``fn`` may be run twice: it must only read."""
        self._require_open()
        joined = self._joined()
        if joined is not None:
            return fn(LazyReads(joined, True))
        singles = self._singles
        if singles is None:  # SQLite: a snapshot is a local BEGIN DEFERRED
            with self._read() as conn:
                return fn(LazyReads(conn, True))
        if self._snapshots is None:  # normally set by SessionDB.__init__
            self._snapshots = ThreadSnapshot()
        if singles.kept:
            conn = singles.get()
            lent = conn is None
            if lent:  # past the store's connection cap: one lent for this read
                conn = singles.lend()
            try:
                return self._lazily_on(conn, fn)
            except sa.exc.DBAPIError as exc:
                self._backend.raise_translated(exc, self.target)
            finally:
                if lent:
                    singles.give_back(conn)

        def read():
            with singles.checkout() as conn:
                return self._lazily_on(conn, fn)

        return self._rerun_lost(read)

    def _lazily_on(self, conn: sa.Connection, fn: Callable[[LazyReads], T]) -> T:
        """``_read_lazily`` on an autocommit connection of ``_singles``."""
        try:
            return fn(LazyReads(conn, False))
        except SnapshotNeeded:
            pass
        # started over on the same connection, now in a read snapshot (the statement
        # run without one left no transaction behind)
        conn.execution_options(**{BEGIN_MODE: "DEFERRED"})
        try:
            with self._snapshot(conn):
                return fn(LazyReads(conn, True))
        finally:
            conn.execution_options(**{BEGIN_MODE: None})

    def _release_connections(self) -> None:
        """Release every thread's kept connections (``close()``)."""
        readers, self._readers = self._readers, None
        singles, self._singles = self._singles, None
        if self._units is not None:
            self._units.close()
        for connections in (readers, singles):
            if connections is not None:
                connections.close()
