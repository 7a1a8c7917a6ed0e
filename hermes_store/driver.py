"""The one door past Core: SQL text straight to the DBAPI connection (any engine).

:func:`driver_execute` skips what ``Connection.exec_driver_sql`` adds per statement
(docs/performance.md, "What issue 12 changed") and keeps what callers rely on: the
``before_cursor_execute``/``after_cursor_execute`` listeners still see every statement,
and a driver error is raised as SQLAlchemy's exception type (``OperationalError``…,
``.orig`` the driver's error), so busy retries and error translation work unchanged; a
connection the driver reports broken is invalidated, as SQLAlchemy does, and the error
says so (``connection_invalidated``).

Which drivers may take the door is the backend's to say, the one the connection's
engine carries (``Backend.door_drivers``: pysqlite, psycopg); ``sql.prebuilt``
compiles the SQL text for each, and any other driver runs the same statements through
Core.

Asking SQLAlchemy whether anything listens walks three levels of joined dispatch
(connection, option engine, engine), so a transaction asks once
(:func:`listeners_fixed`) and its statements reuse the answer: a listener added while
one runs sees statements from the next transaction on.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from .backends.base import backend_of


def uses_driver(dialect) -> bool:
    """Whether :func:`driver_execute` may be used on connections of this dialect."""
    return dialect.driver in backend_of(dialect).door_drivers


def outside_transaction(conn: sa.Connection) -> None:
    """Make the DBAPI connection of ``conn`` (not in a transaction) run the next driver
    statement on its own (SQLite already does; psycopg is switched to autocommit)."""
    backend_of(conn).outside_transaction(conn)


#: key in a connection's ``__dict__``: whether its cursor events have listeners, while a
#: transaction holds the answer fixed
_LISTENED = "_hermes_cursor_listeners"


def _has_cursor_listeners(conn: sa.Connection) -> bool:
    dispatch = conn.dispatch
    return bool(dispatch.before_cursor_execute or dispatch.after_cursor_execute)


def listeners_fixed(conn: sa.Connection) -> None:
    """Ask once whether ``conn``'s cursor events have listeners, for the statements of
    the transaction about to run (:func:`listeners_released` ends it)."""
    conn.__dict__[_LISTENED] = _has_cursor_listeners(conn)


def listeners_released(conn: sa.Connection) -> None:
    conn.__dict__[_LISTENED] = None  # None: ask again, statement by statement


def driver_execute(conn: sa.Connection, sql: str, params: Any, *, many: bool = False,
                   fetch_all: bool = False):
    """Run SQL text on the connection's DBAPI connection; returns the DBAPI cursor, or
    with ``fetch_all`` its rows: fetched here, because SQLite steps to every row after
    the first only as it is fetched, and an error met there (a damaged page) must be
    raised as SQLAlchemy's exception type too.

    The connection's transaction is SQLAlchemy's: the caller runs this inside
    ``conn.begin()`` (or, for a single statement, after :func:`outside_transaction`).
    """
    dbapi_conn = conn.connection.dbapi_connection
    listened = conn.__dict__.get(_LISTENED)
    if listened is None:
        listened = _has_cursor_listeners(conn)
    cursor = None
    try:
        if listened:
            cursor = dbapi_conn.cursor()
            for fn in conn.dispatch.before_cursor_execute:
                fn(conn, cursor, sql, params, None, many)
            if many:
                cursor.executemany(sql, params)
            else:
                cursor.execute(sql, params)
            for fn in conn.dispatch.after_cursor_execute:
                fn(conn, cursor, sql, params, None, many)
            return cursor.fetchall() if fetch_all else cursor
        if many:
            cursor = dbapi_conn.cursor()
            cursor.executemany(sql, params)
            return cursor
        if fetch_all:
            return dbapi_conn.execute(sql, params).fetchall()
        return dbapi_conn.execute(sql, params)
    except conn.dialect.loaded_dbapi.Error as exc:  # sqlite3.Error, psycopg.Error
        dialect = conn.dialect
        lost = backend_of(dialect).is_disconnect(dialect, exc, dbapi_conn, cursor)
        error = sa.exc.DBAPIError.instance(
            sql, params, exc, dialect.loaded_dbapi.Error, dialect=dialect, ismulti=many,
            connection_invalidated=lost,
        )
        if lost:
            conn.invalidate(error)
        raise error from exc


__all__ = ["driver_execute", "listeners_fixed", "listeners_released", "outside_transaction",
           "uses_driver"]
