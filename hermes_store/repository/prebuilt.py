"""Hot-path statements: written in Core, compiled once, sent straight to the driver.

``Connection.execute(core_statement, values)`` costs ~35 µs per statement on top of the
driver even when the statement is prebuilt (cache-key lookup, parameter processing,
result setup) — as much as SQLite needs to store a message row. A ``Prebuilt`` compiles
its Core statement once per dialect and sends the SQL text with
``exec_driver_sql`` (~12 µs), which keeps what matters from the engine: the
transaction, error wrapping (busy retries, ``StoreFullError``…) and cursor events.

The shortcut is taken only when the compiled form needs nothing else from Core at run
time than the types' bind conversions (applied here): positional parameters, no
RETURNING, no expanding ``IN``.
Any other dialect runs the Core statement as usual, so the SQL stays portable and has
one source (the Core statement, built from ``schema``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import sqlalchemy as sa

_NOT_COMPILED = object()


class Prebuilt:
    """One Core statement with named bind parameters, run by ``execute(conn, values)``.

    ``column_keys`` fixes the columns of an INSERT (the keys every ``values`` carries).
    """

    def __init__(self, statement: sa.Executable, column_keys: Sequence[str] | None = None):
        self.statement = statement
        self.column_keys = list(column_keys) if column_keys is not None else None
        self._forms: dict[Any, Any] = {}

    def _driver_form(self, dialect) -> tuple[str, tuple] | None:
        """The SQL text and, per ``?``: (key in values or None, conversion, literal)."""
        compiled = self.statement.compile(dialect=dialect, column_keys=self.column_keys)
        if (not compiled.positional or compiled.returning or compiled.literal_execute_params
                or compiled.post_compile_params):
            return None
        if compiled.isinsert and not compiled.postfetch_lastrowid:
            return None  # the new id would need RETURNING or a sequence
        slots = []
        for name in compiled.positiontup:
            bind = compiled.binds[name]
            convert = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if bind.required:
                slots.append((bind.key, convert, None))
            else:  # a literal Core bound into the statement (the 0 of coalesce(x, 0))
                literal = bind.effective_value
                if convert is not None and literal is not None:
                    literal = convert(literal)
                slots.append((None, None, literal))
        return compiled.string, tuple(slots)

    def _form(self, dialect):
        form = self._forms.get(dialect, _NOT_COMPILED)
        if form is _NOT_COMPILED:
            form = self._forms[dialect] = self._driver_form(dialect)
        return form

    def execute(self, conn: sa.Connection, values: Mapping[str, Any]):
        form = self._form(conn.dialect)
        if form is None:
            return conn.execute(self.statement, dict(values))
        sql, slots = form
        return conn.exec_driver_sql(sql, _positional(slots, values))

    def execute_many(self, conn: sa.Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run the statement once per row (the driver's ``executemany``)."""
        if not rows:
            return
        form = self._form(conn.dialect)
        if form is None:
            conn.execute(self.statement, [dict(row) for row in rows])
            return
        sql, slots = form
        conn.exec_driver_sql(sql, [_positional(slots, row) for row in rows])

    def insert(self, conn: sa.Connection, values: Mapping[str, Any]) -> Any:
        """Run an INSERT of one row; returns the new row's primary key."""
        form = self._form(conn.dialect)
        if form is None:
            return conn.execute(self.statement, dict(values)).inserted_primary_key[0]
        return self.execute(conn, values).lastrowid


def _positional(slots, values: Mapping[str, Any]) -> tuple:
    params = []
    for key, convert, literal in slots:
        if key is None:
            params.append(literal)
            continue
        value = values[key]
        params.append(value if convert is None or value is None else convert(value))
    return tuple(params)
