"""The one interface of what differs between engines (decisions D17, D21), and its registry.

A ``Backend`` is resolved once, when a store opens (:func:`get`, by a target's backend
name: the registry), and carried from then on — on the opened store, and on every engine
it makes (:meth:`Backend.carry`: the engine's dialect holds it, as SQLAlchemy carries
``connection.dialect``), so that any code holding a connection reads it back with
:func:`backend_of` and never looks it up by name. ``backends/sqlite`` and
``backends/postgresql`` implement it side by side, as Alembic's ``SQLiteImpl`` and
``PostgresqlImpl`` implement ``DefaultImpl``. It has facets, each an object of its own so
that a newcomer reads one concern at a time:

* the backend itself: engines and connections, write units (begin, lock, what a failed
  statement means), error translation, the repository's dialect-dependent SQL;
* ``search`` — how a full-text route is written (:class:`SearchRoute`), and the index
  upkeep methods (``*_fts``);
* ``migrations`` — creating, inspecting and migrating a schema (:class:`Migrations`);
* ``copying`` — what ``db copy`` needs of either side (:class:`CopySide`);
* ``files`` and ``roles`` — where the engine has them (a file's backup and recovery; a
  server's grants), else None.

This module imports only the foundation (the retry policy, the errors): what it needs of
the core it names as protocols of its own (:class:`StoreTarget`, :class:`Readers`,
:class:`UnitLocks`), so no import runs from the interface back into the core. A backend's
package is imported on first use from :data:`PACKAGES`, so a process that only opens
SQLite files never imports the PostgreSQL side (nor psycopg). A third engine is one more
package implementing ``Backend`` and one more line there.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Callable, Iterator, NamedTuple, NoReturn, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..policy import RetryPolicy
from .facets import CopySide, Migrations, SearchRoute, StoreTarget

#: ``progress(table, done, total)`` of an index rebuild
ProgressCallback = Callable[[str, int, int], None]

#: what became of a unit whose connection was lost while COMMIT was on its way
#: (:meth:`Backend.commit_outcome`)
COMMITTED, ABORTED, IN_PROGRESS = "committed", "aborted", "in progress"

#: backend name (a SQLAlchemy dialect name) -> the package that implements it
PACKAGES = {
    "sqlite": "hermes_store.backends.sqlite",
    "postgresql": "hermes_store.backends.postgresql",
}

#: the attribute of a SQLAlchemy dialect that carries its engine's backend
_CARRIED = "hermes_backend"

_loaded: dict[str, "Backend"] = {}


def get(name: str) -> "Backend":
    """The registry: the backend called ``name`` (a target's ``backend``), its package
    imported on first use. Called where a store or a tool opens a target, never on a
    call path: everything after the opening reads the carried backend
    (:func:`backend_of`)."""
    backend = _loaded.get(name)
    if backend is not None:
        return backend
    try:
        package = PACKAGES[name]
    except KeyError:
        from ..errors import UnsupportedBackendError

        raise UnsupportedBackendError(
            f"no hermes_store backend for the database {name!r} (known: "
            f"{', '.join(sorted(PACKAGES))})"
        ) from None
    backend = _loaded[name] = importlib.import_module(package).BACKEND
    return backend


def loaded() -> list[str]:
    """The backends this process has imported so far (for tests and ``status``)."""
    return sorted(_loaded)


def backend_of(bind) -> "Backend":
    """The backend an engine, a connection or a dialect carries (:meth:`Backend.carry`)."""
    dialect = getattr(bind, "dialect", bind)
    try:
        return getattr(dialect, _CARRIED)
    except AttributeError:
        from ..errors import UnsupportedBackendError

        raise UnsupportedBackendError(
            f"{bind!r} was not made by a hermes_store backend: open the database through "
            "SessionDB or hermes_store.migrate, or make its engine with the backend's "
            "engine factory") from None


class Readers(Protocol):
    """The read connections an opened store keeps (``connections.KeptConnections`` or
    ``PooledConnections``)."""

    kept: bool

    def close(self) -> None: ...


class UnitLocks(Protocol):
    """What a write unit decides on, and what it already holds (``unit_locks``)."""


class OpenedStore(NamedTuple):
    """What ``Backend.open_store`` hands ``SessionDB``: the engine, how errors name the
    database, and the connections reads go through (``singles``: single statements
    outside a transaction, where the engine has a cheaper way than a snapshot)."""

    engine: Engine
    label: object
    readers: Readers
    singles: Readers | None = None
    #: is the database still the one opened? ``check()`` raises the package's error,
    #: ``replaced()`` answers, ``check_before_commit()`` runs inside every unit,
    #: ``settle()`` runs at close (SQLite: the file's identity,
    #: ``backends/sqlite/files/identity.py``); None where nothing can replace it (a server)
    guard: Any = None


class Backend:
    """One engine's answers (the defaults below are the generic SQLAlchemy ones)."""

    #: the SQLAlchemy dialect name, and the key in ``backends.PACKAGES``
    name: str = ""
    #: DBAPI drivers whose statements may take the driver door (``driver.driver_execute``)
    door_drivers: frozenset[str] = frozenset()
    #: one connection per thread, kept (True), or one per call from the pool (False)
    keeps_connections: bool = True
    #: threads of one process run their write units one at a time
    serializes_units: bool = True
    #: a write unit takes the locks of what it decides on first (``lock_unit``); where
    #: False every unit runs alone anyway (SQLite's ``BEGIN IMMEDIATE``)
    locks_units: bool = False
    #: committed units are followed by a checkpoint every ``RetryPolicy.checkpoint_every``
    checkpoints: bool = False
    #: a store is one file at a path (backup, recover, WAL sidecars apply)
    stores_files: bool = False
    #: a page's LIMIT/OFFSET numbers are written into the SQL of a prebuilt statement
    #: instead of bound (``Prebuilt(paging=…)``)
    pages_in_sql: bool = False

    # ------------------------------------------------------------------ facets

    @property
    def search(self) -> "SearchRoute":
        raise NotImplementedError

    @property
    def migrations(self) -> "Migrations":
        raise NotImplementedError

    @property
    def copying(self) -> "CopySide":
        raise NotImplementedError

    @property
    def roles(self):
        """Who may use the database, where the engine has roles of its own (PostgreSQL:
        ``grant_runtime``, ``missing_runtime``, ``runtime_findings``, ``RoleError``);
        None where access is a file's owner and mode."""
        return None

    @property
    def files(self):
        """Operations on a store that is a file (backup, recover, repair, health), or
        None where a store is a database on a server."""
        return None

    # ------------------------------------------------------------------ location

    def require_driver(self, target: StoreTarget) -> None:
        """Raise ``DriverMissingError`` when the target's driver cannot be imported."""

    def same_database(self, a: StoreTarget, b: StoreTarget) -> bool:
        """Whether two targets of this backend name one database."""
        return a.url == b.url

    # ------------------------------------------------------------------ engines

    def carry(self, bind):
        """Make an engine (its connections, through its dialect) or a dialect carry this
        backend (:func:`backend_of`); every engine factory of a backend calls it."""
        setattr(getattr(bind, "dialect", bind), _CARRIED, self)
        return bind

    def open_store(self, target: StoreTarget, *, read_only: bool, auto_upgrade: bool,
                   retry: RetryPolicy, pool_size: int | None = None,
                   max_overflow: int | None = None,
                   journal_mode: str | None = None, reopening: bool = False) -> OpenedStore:
        """Everything ``SessionDB`` needs before its first call: the database checked
        (refused with a clear error when it cannot be used), its schema at head (or the
        error naming the command to run), the engine and the read connections.
        ``pool_size``/``max_overflow`` size a pool where the engine keeps one (a server);
        ``journal_mode`` is a file's (refused for a backend that does not store files);
        ``reopening`` (``SessionDB.reopen()``): a file's vanished directory is not made."""
        raise NotImplementedError

    def inspection_engine(self, target: StoreTarget) -> Engine:
        """An engine that reads ``target`` without changing anything about it (not even
        a journal mode), each connection made on demand; the caller disposes of it."""
        raise NotImplementedError

    def tool_engine(self, target: StoreTarget, *, read_only: bool) -> Engine:
        """An engine for the package's own tools on a store (export, import): nothing
        about the database changed but what they write."""
        raise NotImplementedError

    def label(self, engine: Engine) -> str:
        """How messages name the database of ``engine`` (never with a password)."""
        return engine.url.render_as_string(hide_password=True)

    def computed_column(self, name: str) -> bool:
        """A column the engine computes itself (derived data, never exported)."""
        return False

    def driver_transactions(self, dialect) -> bool:
        """Whether BEGIN and COMMIT go through the driver door (else ``conn.begin()``)."""
        return False

    #: ``outside_transaction`` has something to do (else a statement on a connection
    #: outside a transaction already runs on its own, and hot paths skip the call)
    switches_to_autocommit: bool = False

    def outside_transaction(self, conn: sa.Connection) -> None:
        """Make the next driver statement on ``conn`` run on its own (autocommit)."""

    def end_driver_transaction(self, conn: sa.Connection) -> None:
        """After SQLAlchemy rolled back a failed unit: end what the driver may still
        hold open (never revive a lost connection)."""

    def is_disconnect(self, dialect, exc: BaseException, dbapi_conn, cursor) -> bool:
        """Whether a driver error on the door means the connection is gone."""
        return bool(dialect.is_disconnect(exc, dbapi_conn, cursor))

    # ------------------------------------------------------------------ write units

    def lock_unit(self, conn: sa.Connection, locks: UnitLocks, held: UnitLocks) -> None:
        """Where ``locks_units`` (else never called): take what ``locks`` names and
        ``held`` does not hold yet, until the unit's transaction ends, and record it in
        ``held`` — a write unit's first statement, and again when a running unit finds
        more to lock (``units.hold``)."""
        raise NotImplementedError

    def start_unit(self, conn: sa.Connection, locks: UnitLocks, held: UnitLocks) -> object | None:
        """Where ``locks_units``: a write unit's first statement (``lock_unit``). Returns
        a ticket for :meth:`commit_outcome`, or None where there is nothing to ask."""
        self.lock_unit(conn, locks, held)
        return None

    def commit_outcome(self, engine: Engine, ticket: object) -> str | None:
        """After the connection was lost while a unit's COMMIT was on its way: what
        became of it, asked on a fresh connection — :data:`COMMITTED`, :data:`ABORTED`
        or ``IN_PROGRESS`` — or None when it cannot be told (the unit is then an unknown
        outcome). A connection that cannot be made raises."""
        return None

    def session_ended(self, conn: sa.Connection) -> BaseException | None:
        """Just before COMMIT: an error to raise (and re-run the unit) when the server
        already ended the connection's session; None on the usual path."""
        return None

    def checkpoint(self, engine: Engine, label: object) -> tuple | None:
        """Copy the write-ahead log back into the database (best effort, failures
        logged; SQLite: only under the writer lock, decision D19); None where it was
        skipped or the engine does this on its own."""
        return None

    def vacuum(self, engine: Engine, label: object, *, worthwhile_only: bool = False) -> str | None:
        """Compact the store (``SessionDB.vacuum``): None, or why not (``worthwhile_only``)."""
        raise NotImplementedError

    def maintenance_turn(self, engine: Engine, label: object) -> contextlib.AbstractContextManager[bool]:
        """Auto-maintenance's cross-process turn: True inside when this process has it."""
        raise NotImplementedError

    # ------------------------------------------------------------------ errors

    def is_transient(self, exc: BaseException) -> bool:
        """A failure after which re-running the whole unit can succeed (busy, locked,
        serialization failure, deadlock, lock timeout)."""
        return False

    def is_connection_lost(self, exc: BaseException) -> bool:
        """The connection broke or could not be made (a file has none to lose)."""
        return bool(getattr(exc, "connection_invalidated", False))

    def translate_error(self, exc: BaseException, where: object) -> BaseException | None:
        """The package's own error for a driver error (it says what to do), or None."""
        return None

    def raise_translated(self, exc: BaseException, where: object) -> NoReturn:
        """Raise :meth:`translate_error`'s error for ``exc``, or ``exc`` itself; called
        in the handler that caught ``exc``."""
        mapped = self.translate_error(exc, where)
        if mapped is None:
            raise exc
        raise mapped from exc

    @contextlib.contextmanager
    def translated_errors(self, where: object) -> Iterator[None]:
        """Re-raise the driver's errors inside the block as the package's."""
        try:
            yield
        except Exception as exc:
            mapped = self.translate_error(exc, where)
            if mapped is None:
                raise
            raise mapped from exc

    # ------------------------------------------------------------------ repository SQL

    def insert(self, table: sa.Table):
        """``insert(table)`` with ``on_conflict_do_update``/``_do_nothing``."""
        raise NotImplementedError

    def keep_ids_ahead(self, conn: sa.Connection, column: sa.Column) -> None:
        """After rows were inserted with explicit values in an autoincrementing key,
        make the next generated value larger than every stored one."""

    # ------------------------------------------------------------------ schema objects

    def create_display_triggers(self, conn: sa.Connection) -> None:
        """The display-order triggers (``hermes_store.display_order``'s rules)."""
        raise NotImplementedError

    def drop_display_triggers(self, conn: sa.Connection) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ full-text upkeep

    def usable_fts_indexes(self, conn: sa.Connection) -> list[str]:
        raise NotImplementedError

    def rebuild_fts(self, conn: sa.Connection, *, progress: ProgressCallback | None = None) -> list[str]:
        raise NotImplementedError

    def detach_damaged_index(self, exc: BaseException) -> Callable[[sa.Connection], bool] | None:
        """Where ``exc`` is a damaged search index: what a unit re-runs first (detach it, D20)."""

    def substring_scope(self, conn: sa.Connection, session_id: str) -> Any:
        """Ahead of a unit's change to a session's ``source`` or ``model_config``: what
        :meth:`rescope_substring_index` needs after it (None: the engine keeps the
        substring index's scope itself, as PostgreSQL's trigger does)."""
        return None

    def rescope_substring_index(self, conn: sa.Connection, session_id: str, before: Any) -> None:
        """After that change: the session's messages moved out of or into the substring
        index (``before``: :meth:`substring_scope`'s answer)."""

    def fts_integrity_check(self, conn: sa.Connection) -> list[str]:
        raise NotImplementedError

    def optimize_fts(self, conn: sa.Connection) -> bool:
        """One bounded step of index upkeep; True once nothing is left to do."""
        raise NotImplementedError

    def fts_sizes(self, conn: sa.Connection) -> dict[str, int]:
        raise NotImplementedError

    # ------------------------------------------------------------------ reporting

    def describe(self, target: StoreTarget) -> dict[str, Any]:
        """Facts ``status``/``doctor`` show about where the store lives (library,
        journal mode, server version…), read without writing."""
        return {}

    def size_bytes(self, conn: sa.Connection, target: StoreTarget) -> int | None:
        """The store's size on disk (a file and its sidecars; a server's relations)."""
        return None

    def wal_bytes(self, target: StoreTarget) -> int | None:
        """Bytes in a write-ahead log waiting for a checkpoint (None: not applicable)."""
        return None


__all__ = ["ABORTED", "COMMITTED", "IN_PROGRESS", "PACKAGES", "Backend", "OpenedStore",
           "ProgressCallback", "Readers", "UnitLocks", "backend_of", "get", "loaded"]
