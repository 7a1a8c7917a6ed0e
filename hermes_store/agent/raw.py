"""``SessionDB._conn`` and ``SessionDB._execute_write(fn)`` as the agent uses them
(issue 16, item 2), built on the repository's own access methods only.

Upstream's ``_conn`` is one ``sqlite3`` connection in autocommit mode, shared by every
thread of the process. Here it is a ``RawConnection`` bound to the store, and each
statement runs through the store's access methods:

* a read runs in one read snapshot (``store._read()``): on SQLite the thread's own held
  reader connection, on PostgreSQL a pooled ``REPEATABLE READ, READ ONLY`` transaction;
* a write runs as one write unit (``store._write``): ``BEGIN IMMEDIATE`` on the thread's
  writer connection (PostgreSQL: the unit lock), retried whole on contention, committed
  whole — so threads never share a transaction, and ``commit()`` has nothing left to
  commit (upstream's connection is in autocommit mode too);
* inside ``_execute_write(fn)`` both join the running unit, so ``fn(conn)`` is one unit.

On SQLite the statement text goes unchanged to the real ``sqlite3`` connection and rows
are real ``sqlite3.Row`` objects; on PostgreSQL ``sql.for_postgresql`` gives the text
and rows are ``Row`` (the same interface: by index, by name ignoring case, ``keys()``,
``dict(row)``). Rows are fetched whole before the snapshot ends, so a cursor kept for
later never holds a transaction (nor a stale snapshot) open.
"""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from typing import Any, Callable, Iterable, Iterator, Sequence

import sqlalchemy as sa

from . import sql as sqlmod
from .errors import RawUsageError, as_compat, in_unit, raw_statement_error

_NAMES_ONLY = (None,) * 6


class Row:
    """A result row of a raw statement on PostgreSQL, read as a ``sqlite3.Row`` is."""

    __slots__ = ("_names", "_values", "_index")

    def __init__(self, names: tuple[str, ...], values: tuple, index: dict[str, int]) -> None:
        self._names, self._values, self._index = names, values, index

    def keys(self) -> list[str]:
        return list(self._names)

    def __getitem__(self, key):
        if isinstance(key, str):
            position = self._index.get(key.lower())
            if position is None:
                raise IndexError("No item with that key")
            return self._values[position]
        return self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator:
        return iter(self._values)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Row):
            return NotImplemented
        return self._names == other._names and self._values == other._values

    def __hash__(self) -> int:
        return hash((self._names, self._values))

    def __repr__(self) -> str:
        return f"<Row {dict(zip(self._names, self._values))!r}>"


def _pg_value(value):
    """SQLite's type for a PostgreSQL value: ``sum`` of integers is ``numeric`` there
    (an integral ``Decimal``: SQLite's ``int``), other ``numeric`` is SQLite's ``REAL``,
    and SQLite has no booleans (0/1)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, Decimal):
        if value.is_finite() and value.as_tuple().exponent >= 0:
            return int(value)
        return float(value)
    if isinstance(value, memoryview):
        return value.tobytes()
    return value


def _pg_param(value):
    return int(value) if isinstance(value, bool) else value  # sqlite3 binds True as 1


class _Result:
    __slots__ = ("description", "rows", "rowcount", "lastrowid")

    def __init__(self, description, rows, rowcount, lastrowid):
        self.description, self.rows, self.rowcount, self.lastrowid = (
            description, rows, rowcount, lastrowid)


class Cursor:
    """What ``RawConnection.execute`` returns: rows already fetched (see module doc)."""

    arraysize = 1

    def __init__(self, connection: "RawConnection") -> None:
        self.connection = connection
        self.description = None
        self.rowcount = -1
        self._lastrowid = None
        self._rows: list = []
        self._at = 0

    # -- running
    def execute(self, sql: str, parameters: Sequence | dict = ()) -> "Cursor":
        result = self.connection._run(sql, parameters)
        self._take(result)
        return self

    def executemany(self, sql: str, seq_of_parameters: Iterable) -> "Cursor":
        result = self.connection._run_many(sql, seq_of_parameters)
        self._take(result)
        return self

    def _take(self, result: _Result) -> None:
        self.description = result.description
        self.rowcount = result.rowcount
        self._lastrowid = result.lastrowid
        self._rows = result.rows or []
        self._at = 0

    # -- reading
    def fetchone(self):
        if self._at >= len(self._rows):
            return None
        row = self._rows[self._at]
        self._at += 1
        return row

    def fetchmany(self, size: int | None = None) -> list:
        size = self.arraysize if size is None else size
        rows = self._rows[self._at:self._at + size]
        self._at += len(rows)
        return rows

    def fetchall(self) -> list:
        rows = self._rows[self._at:]
        self._at = len(self._rows)
        return rows

    def __iter__(self) -> Iterator:
        return self

    def __next__(self):
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    @property
    def lastrowid(self):
        if not self.connection._native:
            raise RawUsageError(
                "cursor.lastrowid is not available on PostgreSQL: add RETURNING id to the "
                "INSERT and read it from the row"
            )
        return self._lastrowid

    def close(self) -> None:
        self._rows, self._at = [], 0

    def setinputsizes(self, *_):  # DBAPI no-ops, as sqlite3's
        pass

    def setoutputsize(self, *_):
        pass


class RawConnection:
    """``SessionDB._conn``: a ``sqlite3.Connection``-shaped view of the store."""

    def __init__(self, store) -> None:
        self._store = store
        #: as upstream's connection: rows are ``sqlite3.Row``-like; ``None`` gives tuples,
        #: a callable ``factory(cursor, row_tuple)`` whatever it returns
        self.row_factory: Callable | None = sqlite3.Row
        # The agent writes SQLite's SQL: the engine that stores files (SQLite) takes it as
        # written; the server engine gets sql.for_postgresql's translation
        self._native = bool(store._backend.stores_files)
        self._engine_name = "SQLite" if self._native else sqlmod.ENGINE

    # -- sqlite3.Connection's surface the agent uses
    def execute(self, sql: str, parameters: Sequence | dict = ()) -> Cursor:
        return Cursor(self).execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Iterable) -> Cursor:
        return Cursor(self).executemany(sql, seq_of_parameters)

    def cursor(self, factory=None) -> Cursor:
        return (factory or Cursor)(self)

    def commit(self) -> None:
        """Nothing to commit: every statement outside ``_execute_write`` committed as
        its own unit, and a unit commits when ``fn`` returns (as upstream's autocommit
        connection, whose ``commit()`` found no open transaction)."""
        self._check_open()

    def rollback(self) -> None:
        self._check_open()
        if self._in_unit():
            raise RawUsageError(
                "rollback() inside SessionDB._execute_write is not supported: raise an "
                "exception from fn to roll the whole unit back"
            )

    def close(self) -> None:
        """The store owns the connections (``SessionDB.close()`` releases them)."""

    @property
    def in_transaction(self) -> bool:
        return self._in_unit()

    @property
    def total_changes(self):
        raise RawUsageError("total_changes is not available through SessionDB._conn")

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc_info) -> None:
        return None

    def __repr__(self) -> str:
        return f"<RawConnection {self._store!r}>"

    # -- running
    def _check_open(self) -> None:
        try:
            self._store._require_open()
        except Exception as exc:
            raise as_compat(exc) from None

    def _in_unit(self) -> bool:
        units = getattr(self._store, "_units", None)
        return units is not None and units.active_connection() is not None

    def _prepare(self, sql: str, parameters) -> tuple[sqlmod.Statement, str, Any]:
        statement = sqlmod.scan(sql)
        named = isinstance(parameters, dict)
        if named:
            params: Any = dict(parameters)
        elif parameters is None:
            params = ()
        elif isinstance(parameters, (str, bytes)) or not isinstance(parameters, Iterable):
            raise RawUsageError("parameters are of unsupported type")
        else:
            params = tuple(parameters)
        if not named and statement.named:
            raise RawUsageError(f"the statement names :{statement.named[0]}; pass a dict")
        if not named and len(params) != statement.placeholders:
            raise RawUsageError(
                f"Incorrect number of bindings supplied. The current statement uses "
                f"{statement.placeholders}, and there are {len(params)} supplied."
            )
        if self._native:
            return statement, sql, params  # the real sqlite3 connection takes it as written
        if named:
            missing = [name for name in statement.named if name not in params]
            if missing:
                raise RawUsageError(f"You did not supply a value for binding parameter :{missing[0]}.")
            params = {k: _pg_param(v) for k, v in params.items()}
        else:
            params = tuple(_pg_param(v) for v in params)
        return statement, sqlmod.for_postgresql(sql, bool(params)), params

    def _execute_on(self, conn: sa.Connection, text: str, params, sql_text: str) -> _Result:
        result = conn.exec_driver_sql(text, params) if params else conn.exec_driver_sql(text)
        if not result.returns_rows:
            lastrowid = result.lastrowid if self._native else None
            rowcount = result.rowcount
            result.close()
            return _Result(None, None, rowcount, lastrowid)
        cursor = result.cursor
        names = tuple(d[0] for d in cursor.description)
        if not self._native:
            names = sqlmod.sqlite_names(sql_text, names)
        description = tuple((name, *_NAMES_ONLY) for name in names)
        factory = self.row_factory
        if self._native and isinstance(cursor, sqlite3.Cursor):
            # the real sqlite3 cursor: its rows as sqlite3 made them (an agent process
            # runs the store on the standard library's sqlite3: hermes_state.py)
            raw = cursor.fetchall()
            result.close()
            if factory is sqlite3.Row:
                rows = [sqlite3.Row(cursor, tuple(r)) for r in raw]
            elif factory is None:
                rows = [tuple(r) for r in raw]
            else:
                rows = [factory(cursor, tuple(r)) for r in raw]
            return _Result(description, rows, -1, None)
        # PostgreSQL, or a store on another SQLite library (pysqlite3): rows read as a
        # sqlite3.Row is
        raw = [tuple(_pg_value(v) for v in r) for r in result.fetchall()]
        if factory is sqlite3.Row:
            index: dict[str, int] = {}
            for position, name in enumerate(names):
                index.setdefault(name.lower(), position)
            rows = [Row(names, r, index) for r in raw]
        elif factory is None:
            rows = raw
        else:
            shim = _DescriptionOnly(description)
            rows = [factory(shim, r) for r in raw]
        return _Result(description, rows, -1, None)

    def _run(self, sql: str, parameters) -> _Result:
        try:
            statement, text, params = self._prepare(sql, parameters)
        except Exception as exc:
            raise as_compat(exc) from None
        return self._through_the_store(statement, lambda conn: self._execute_on(conn, text, params, sql))

    def _run_many(self, sql: str, seq_of_parameters: Iterable) -> _Result:
        try:
            batches = [self._prepare(sql, p) for p in seq_of_parameters]
            statement = sqlmod.scan(sql)
        except Exception as exc:
            raise as_compat(exc) from None
        if statement.kind != sqlmod.WRITE:
            raise as_compat(RawUsageError("executemany() is only for INSERT/UPDATE/DELETE"))

        def unit(conn: sa.Connection) -> _Result:
            total = 0
            for _, text, params in batches:
                total += max(self._execute_on(conn, text, params, sql).rowcount, 0)
            return _Result(None, None, total, None)

        return self._through_the_store(statement, unit)

    def _through_the_store(self, statement: sqlmod.Statement, work: Callable[[sa.Connection], _Result]) -> _Result:
        store = self._store
        in_unit_now = self._in_unit()
        try:
            if statement.kind == sqlmod.WRITE:
                return store._write(work)
            with store._read() as conn:
                return work(conn)
        except sa.exc.DBAPIError as exc:
            if in_unit_now:
                raise in_unit(exc)  # the unit runner must still see SQLAlchemy's type
            raise raw_statement_error(exc, self._engine_name) from exc
        except Exception as exc:
            raise as_compat(exc)


class _DescriptionOnly:
    """What a custom ``row_factory`` gets as its cursor on PostgreSQL."""

    def __init__(self, description) -> None:
        self.description = description
