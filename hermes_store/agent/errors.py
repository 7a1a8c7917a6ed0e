"""The errors the agent catches, as the agent catches them (issue 16, item 3).

Agent code written against upstream's ``hermes_state`` catches ``sqlite3.DatabaseError``,
``sqlite3.OperationalError``, ``sqlite3.IntegrityError`` … The package raises its own
errors (``hermes_store.errors``), whose messages say what to do. Here each package error
gets a compat subclass that is *also* the ``sqlite3`` class upstream raised in the same
situation, so ``except sqlite3.DatabaseError`` still catches ours and ``except
NotADatabaseError`` still works. The core never imports this module.

Three kinds of error reach the agent through the compat module:

* a package error (``StoreBusyError``, ``NotADatabaseError`` …): its class is swapped for
  the compat subclass (same object, same message, same traceback);
* a driver error of a raw statement (``SessionDB._conn``): on SQLite the ``sqlite3``
  error itself (what upstream's connection raised); on PostgreSQL a ``RawStatementError``
  subclass chosen by SQLSTATE (``23…`` integrity, ``42…`` and lock/connection classes
  operational), whose message names the engine and the SQLSTATE;
* the same driver error *inside* a write unit (``_execute_write``): it must stay
  SQLAlchemy's type for the unit runner to retry a busy unit, so it becomes a subclass of
  both SQLAlchemy's class and the ``sqlite3`` one (``in_unit``).
"""

from __future__ import annotations

import sqlite3
from functools import lru_cache

import sqlalchemy as sa

from .. import errors as E

#: the sqlite3 class upstream raised where the package raises each error (first match
#: in this order wins; TitleError stays a plain ValueError, as upstream's was)
_SQLITE_CLASS: tuple[tuple[type, type], ...] = (
    (E.StoreClosedError, sqlite3.ProgrammingError),       # "Cannot operate on a closed database."
    (E.StoreBusyError, sqlite3.OperationalError),         # "database is locked"
    (E.StoreFullError, sqlite3.OperationalError),         # "database or disk is full"
    (E.StoreReadOnlyError, sqlite3.OperationalError),     # "attempt to write a readonly database"
    (E.StoreNotFoundError, sqlite3.OperationalError),     # "unable to open database file"
    (E.DatabaseAccessError, sqlite3.OperationalError),
    (E.UnsafePathError, sqlite3.OperationalError),
    (E.ServerUnreachableError, sqlite3.OperationalError),
    (E.CommitOutcomeUnknownError, sqlite3.OperationalError),
    (E.DriverMissingError, sqlite3.OperationalError),
    (E.UnsupportedServerError, sqlite3.OperationalError),
    (E.NotADatabaseError, sqlite3.DatabaseError),         # "file is not a database"
    (E.DatabaseDamagedError, sqlite3.DatabaseError),      # "database disk image is malformed"
    (E.SessionNotFoundError, sqlite3.IntegrityError),     # "FOREIGN KEY constraint failed"
    (E.InvalidArgumentError, sqlite3.IntegrityError),     # "NOT NULL constraint failed"
    (E.SchemaError, sqlite3.DatabaseError),
    (E.HermesStoreError, sqlite3.DatabaseError),
)
_KEEP = (E.TitleError,)


class RawStatementError(E.HermesStoreError):
    """A raw statement (``SessionDB._conn``) failed on PostgreSQL; ``sqlstate`` says why.
    Always also one of the ``sqlite3`` error classes (see ``raw_statement_error``)."""

    sqlstate: str | None = None


class UnsupportedStatementError(RawStatementError, sqlite3.NotSupportedError):
    """A raw statement uses a construct this engine cannot answer as SQLite would; the
    message names the construct. Nothing was run."""


class RawUsageError(RawStatementError, sqlite3.ProgrammingError):
    """A raw-connection call upstream's ``sqlite3`` connection would also refuse (wrong
    number of bindings, several statements) or that the store's connections do not
    allow (explicit transaction control, pragmas that change the connection)."""


def sqlite_class_for(cls: type) -> type | None:
    for package_cls, sqlite_cls in _SQLITE_CLASS:
        if issubclass(cls, package_cls):
            return sqlite_cls
    return None


@lru_cache(maxsize=None)
def compat_class(cls: type) -> type:
    """``cls`` (a package error) with the sqlite3 class upstream raised as a second base;
    the name stays ``cls.__name__`` so messages built from ``type(exc).__name__`` read as
    before."""
    sqlite_cls = sqlite_class_for(cls)
    if sqlite_cls is None or issubclass(cls, sqlite_cls):
        return cls
    return type(cls.__name__, (cls, sqlite_cls), {
        "__module__": __name__, "__qualname__": cls.__name__, "__doc__": cls.__doc__,
    })


def as_compat(exc: BaseException) -> BaseException:
    """The same exception object, its class swapped for the compat subclass (no-op for
    anything that is not a package error, and for errors upstream raised as ValueError)."""
    if isinstance(exc, E.HermesStoreError) and not isinstance(exc, _KEEP) \
            and not isinstance(exc, sqlite3.Error):
        exc.__class__ = compat_class(type(exc))
    return exc


# --------------------------------------------------------------------------- raw statements

def _pg_sqlstate(orig: BaseException) -> str | None:
    return getattr(orig, "sqlstate", None) or getattr(getattr(orig, "diag", None), "sqlstate", None)


def _sqlite_class_for_sqlstate(sqlstate: str | None) -> type:
    code = sqlstate or ""
    if code.startswith("23"):
        return sqlite3.IntegrityError
    if code.startswith("0A"):
        return sqlite3.NotSupportedError
    if code.startswith(("42", "40", "55", "57", "08", "53", "25")):
        # undefined table/column and syntax (SQLite: OperationalError), lock and
        # serialization failures ("database is locked"), connection trouble
        return sqlite3.OperationalError
    if code.startswith("22"):
        return sqlite3.DataError
    return sqlite3.DatabaseError


def _stdlib_class(orig: BaseException) -> type | None:
    """The standard library's ``sqlite3`` class of an error from another SQLite DB-API
    (the store on pysqlite3: its ``IntegrityError`` is ``sqlite3.IntegrityError``'s
    twin, not a subclass), or None for anything else."""
    for cls in type(orig).__mro__:
        twin = getattr(sqlite3, cls.__name__, None)
        if isinstance(twin, type) and issubclass(twin, sqlite3.Error) \
                and cls.__module__.startswith("pysqlite3"):
            return twin
    return None


@lru_cache(maxsize=None)
def _raw_class(sqlite_cls: type) -> type:
    return type(f"Raw{sqlite_cls.__name__}", (RawStatementError, sqlite_cls), {
        "__module__": __name__, "__qualname__": f"Raw{sqlite_cls.__name__}",
    })


def raw_statement_error(exc: sa.exc.DBAPIError, engine_name: str) -> BaseException:
    """What a raw statement's driver error is raised as outside a unit: on SQLite the
    ``sqlite3`` error itself, on PostgreSQL a ``RawStatementError`` of the matching
    ``sqlite3`` class with the server's message, the engine and the SQLSTATE."""
    orig = getattr(exc, "orig", None)
    if isinstance(orig, sqlite3.Error):
        return orig
    twin = _stdlib_class(orig) if orig is not None else None
    if twin is not None:  # SQLite's own message, as sqlite3 raises it
        error = _raw_class(twin)(*orig.args)
        error.sqlstate = None
        return error
    sqlstate = _pg_sqlstate(orig) if orig is not None else None
    text = str(orig if orig is not None else exc).strip()
    error = _raw_class(_sqlite_class_for_sqlstate(sqlstate))(
        f"{text} ({engine_name}{', SQLSTATE ' + sqlstate if sqlstate else ''})"
    )
    error.sqlstate = sqlstate
    return error


@lru_cache(maxsize=None)
def _in_unit_class(sa_cls: type, sqlite_cls: type) -> type:
    return type(sa_cls.__name__, (sa_cls, sqlite_cls), {
        "__module__": __name__, "__qualname__": sa_cls.__name__,
    })


def in_unit(exc: sa.exc.DBAPIError) -> sa.exc.DBAPIError:
    """A driver error raised inside a write unit: still SQLAlchemy's class (the unit
    runner retries busy units by it) and also the ``sqlite3`` class the agent's code in
    the unit may catch. Same object; its ``orig`` is the driver's error."""
    orig = getattr(exc, "orig", None)
    if isinstance(orig, sqlite3.Error):
        sqlite_cls = type(orig)
    else:
        sqlite_cls = (_stdlib_class(orig) if orig is not None else None) \
            or _sqlite_class_for_sqlstate(_pg_sqlstate(orig) if orig is not None else None)
    if not isinstance(exc, sqlite_cls):
        exc.__class__ = _in_unit_class(type(exc), sqlite_cls)
    return exc
