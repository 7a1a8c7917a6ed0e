"""Hot-path statements: written in Core, compiled once, sent straight to the driver.

``Connection.execute(core_statement, values)`` adds, even for a prebuilt statement
(cache-key lookup, parameter processing, result setup), about what SQLite needs to
store a message row or answer a small read. A ``Prebuilt`` compiles its Core statement
once per dialect and, where the dialect allows it (``driver.uses_driver``: pysqlite,
psycopg), sends the SQL text through ``driver.driver_execute``, which keeps what
matters from the engine: the transaction, cursor events and SQLAlchemy's exception
types (busy retries, ``StoreFullError``, lost connections…).

The shortcut is taken only when the compiled form needs nothing else from Core at run
time than the types' bind conversions (applied here): no expanding ``IN``, and no
RETURNING except, with named parameters (psycopg), an INSERT's own new key (SQLite
gives it as ``lastrowid``). Any other dialect or statement runs the Core statement as
usual, so the SQL stays portable and has one source (the Core statement, built from
``schema``). What the door saves on each engine: docs/performance.md.

Numbers written into the statement (``active = 1``, ``LIMIT 1``, ``coalesce(x, 0)``)
are rendered into its SQL text instead of being bound: SQLite re-prepares a statement
on every run when a bound value meets a column that a partial index's WHERE names
(``messages.active``). Text values stay bound parameters. A page's numbers
(``paging``: the LIMIT and OFFSET a caller gives) are written in only where the
backend says so (``Backend.pages_in_sql``: SQLite plans a bound LIMIT worse): the SQL
text is then made per call from a template, one text per pair of numbers, each
prepared once by the driver's statement cache.
"""

from __future__ import annotations

import math
import operator
import weakref
from typing import Any, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.sql import visitors
from sqlalchemy.sql.elements import BindParameter

from ..backends.base import backend_of
from ..driver import driver_execute, uses_driver

_NOT_COMPILED = object()
_NO_VALUES: Mapping[str, Any] = {}


class Prebuilt:
    """One Core statement with named bind parameters, run by ``execute(conn, values)``.

    ``column_keys`` fixes the columns of an INSERT (the keys every ``values`` carries).
    ``keys`` names the columns of a SELECT's rows (rows are tuples on the driver path).
    """

    def __init__(self, statement: sa.Executable, column_keys: Sequence[str] | None = None, *,
                 paging: Sequence[str] = ()):
        self.statement = statement
        self.column_keys = list(column_keys) if column_keys is not None else None
        #: bound parameters that carry a page's numbers (LIMIT, OFFSET)
        self.paging = tuple(paging)
        selected = getattr(statement, "selected_columns", None)
        self.keys: tuple[str, ...] = tuple(selected.keys()) if selected is not None else ()
        # per dialect instance (one per engine, dropped with it), filled from the forms
        # per dialect configuration: a process opening many stores compiles once
        self._forms: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._forms_by_config: dict = {}
        #: the last dialect asked for and its form: a process runs one store almost
        #: always, and the weak dictionary's lookup costs a new weakref per call
        self._last: tuple = (None, None)

    # ------------------------------------------------------------------ compiling

    def _driver_form(self, dialect) -> "_Form | None":
        """The SQL text and how to fill its parameters from ``values``."""
        if not uses_driver(dialect):
            return None
        backend = backend_of(dialect)
        paging = self.paging if self.paging and backend.pages_in_sql else ()
        statement = _numbers_inlined(self.statement, dialect, paging)
        compiled = statement.compile(dialect=dialect, column_keys=self.column_keys)
        if compiled.literal_execute_params or compiled.post_compile_params:
            return None
        if compiled.positional:
            if compiled.returning:
                return None
            if compiled.isinsert and not compiled.postfetch_lastrowid:
                return None  # the new id would need RETURNING or a sequence
            binds = [(None, compiled.binds[name]) for name in compiled.positiontup]
        else:
            # named (psycopg): RETURNING only of an INSERT's new key, read by ``insert``
            key = [c.key for c in self.statement.table.primary_key] if compiled.isinsert else None
            if compiled.returning and [c.key for c in compiled.returning] != key:
                return None
            escaped = compiled.escaped_bind_names
            binds = [(escaped.get(name, name), bind) for bind, name in compiled.bind_names.items()]
        slots = []
        for name, bind in binds:
            convert = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if bind.required:
                slots.append((name, bind.key, convert, None))
            else:  # a constant Core bound into the statement (text: '' of coalesce(x, ''))
                literal = bind.effective_value
                if convert is not None and literal is not None:
                    literal = convert(literal)
                slots.append((name, None, None, literal))
        return _Form(compiled.string, tuple(slots), named=not compiled.positional,
                     returns_key=bool(compiled.returning), paging=paging,
                     alone=backend.outside_transaction if backend.switches_to_autocommit else None)

    def _form(self, dialect):
        last_dialect, last_form = self._last
        if last_dialect is dialect:
            return last_form
        form = self._forms.get(dialect, _NOT_COMPILED)
        if form is _NOT_COMPILED:
            key = (type(dialect), dialect.paramstyle, dialect.server_version_info,
                   uses_driver(dialect))
            form = self._forms_by_config.get(key, _NOT_COMPILED)
            if form is _NOT_COMPILED:
                form = self._forms_by_config[key] = self._driver_form(dialect)
            self._forms[dialect] = form
        self._last = (dialect, form)
        return form

    # ------------------------------------------------------------------ running

    def execute(self, conn: sa.Connection, values: Mapping[str, Any] = _NO_VALUES):
        """Run the statement; the result has ``rowcount`` (and ``lastrowid`` on SQLite)."""
        form = self._form(conn.dialect)
        sql = _text(form, values)
        if sql is None:
            return conn.execute(self.statement, dict(values))
        return driver_execute(conn, sql, form.params(values))

    def execute_many(self, conn: sa.Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run the statement once per row (the driver's ``executemany``)."""
        if not rows:
            return
        form = self._form(conn.dialect)
        if form is None or form.sql is None:  # a paged form has no one text
            conn.execute(self.statement, [dict(row) for row in rows])
            return
        driver_execute(conn, form.sql, [form.params(row) for row in rows], many=True)

    def insert(self, conn: sa.Connection, values: Mapping[str, Any]) -> Any:
        """Run an INSERT of one row; returns the new row's primary key."""
        form = self._form(conn.dialect)
        sql = _text(form, values)
        if sql is None:
            return conn.execute(self.statement, dict(values)).inserted_primary_key[0]
        cursor = driver_execute(conn, sql, form.params(values))
        return cursor.fetchone()[0] if form.returns_key else cursor.lastrowid

    def rows(self, conn: sa.Connection, values: Mapping[str, Any] | None = None) -> list:
        """Every row of a SELECT, as tuples in ``keys`` order (within the caller's
        transaction, if any)."""
        values = values or _NO_VALUES
        form = self._form(conn.dialect)
        sql = _text(form, values)
        if sql is None:
            return conn.execute(self.statement, dict(values)).all()
        return driver_execute(conn, sql, form.params(values), fetch_all=True)

    def rows_alone(self, conn: sa.Connection, values: Mapping[str, Any] | None = None) -> list:
        """``rows`` on a connection outside any transaction: one statement is one
        snapshot. On the driver path it runs in the driver's autocommit mode (no BEGIN
        and COMMIT to pay: one round trip on a server); through Core it gets a
        transaction of its own, ended here, so a kept connection is never left inside
        one."""
        values = values or _NO_VALUES
        form = self._form(conn.dialect)
        sql = _text(form, values)
        if sql is not None:
            if form.alone is not None:
                form.alone(conn)
            return driver_execute(conn, sql, form.params(values), fetch_all=True)
        with conn.begin():
            return conn.execute(self.statement, dict(values)).all()

    def scalar(self, conn: sa.Connection, values: Mapping[str, Any] | None = None) -> Any:
        """The first column of the first row, or None."""
        found = self.rows(conn, values)
        return found[0][0] if found else None


#: bound at most this many texts per paged statement (then it starts over)
_PAGE_TEXTS = 64


class _Form:
    """A statement's driver form: its SQL text and, per parameter, (name in the SQL or
    None for ``?``, key in ``values`` or None, conversion, constant).

    With ``paging`` (``Prebuilt.paging``) the page numbers are written into the text:
    ``sql`` is None and :meth:`text` makes the text per pair of numbers from the
    template, kept; None (run through Core, bound) for a value that is not a plain
    integer, which SQLite would still read."""

    __slots__ = ("sql", "slots", "named", "returns_key", "alone", "template", "paging",
                 "marks", "texts", "_pick", "_converts", "_names")

    def __init__(self, sql: str, slots: tuple, *, named: bool, returns_key: bool,
                 alone=None, paging: tuple[str, ...] = ()) -> None:
        self.slots, self.named, self.returns_key = slots, named, returns_key
        #: what makes a connection outside a transaction run the statement on its own
        #: (``Backend.outside_transaction``), None where nothing needs doing
        self.alone = alone
        self.template, self.paging = sql, paging
        #: the one text, or None for a paged form (see ``text``)
        self.sql = None if paging else sql
        self.marks = tuple(_page_mark(key) for key in paging)
        self.texts: dict[tuple, str] = {}
        # Where every parameter comes from ``values`` (no constants), one C-level
        # itemgetter picks them all: an append's INSERT has nineteen.
        keys = [key for _, key, _, _ in slots]
        self._pick = (operator.itemgetter(*keys)
                      if len(keys) > 1 and None not in keys else None)
        self._converts = tuple((i, convert) for i, (_, _, convert, _) in enumerate(slots)
                               if convert is not None)
        self._names = tuple(name for name, _, _, _ in slots)

    def text(self, values: Mapping[str, Any]) -> str | None:
        """The SQL text to send with ``values`` (None: run the Core statement)."""
        if self.sql is not None:
            return self.sql
        numbers = tuple(values[key] for key in self.paging)
        text = self.texts.get(numbers)
        if text is None:
            if not all(type(n) is int for n in numbers):
                return None
            text = self.template
            for mark, number in zip(self.marks, numbers):
                text = text.replace(mark, str(number))
            if len(self.texts) >= _PAGE_TEXTS:
                self.texts.clear()
            self.texts[numbers] = text
        return text

    def params(self, values: Mapping[str, Any]):
        """The driver's parameters: a tuple (``?``) or a dict (``%(name)s``)."""
        pick = self._pick
        if pick is not None:
            out = pick(values)
            if self._converts:
                out = list(out)
                for i, convert in self._converts:
                    if out[i] is not None:
                        out[i] = convert(out[i])
                out = tuple(out)
            return dict(zip(self._names, out)) if self.named else out
        out = []
        for _, key, convert, literal in self.slots:
            if key is None:
                out.append(literal)
                continue
            value = values[key]
            out.append(value if convert is None or value is None else convert(value))
        if self.named:
            return {slot[0]: value for slot, value in zip(self.slots, out)}
        return tuple(out)


def _text(form: _Form | None, values: Mapping[str, Any]) -> str | None:
    """The SQL text to send ``values`` with; None: run the Core statement."""
    if form is None:
        return None
    sql = form.sql
    return sql if sql is not None else form.text(values)


def _page_mark(key: str) -> str:
    """What stands for the page number ``key`` in a paged form's template."""
    return f"__hermes_page_{key}__"


def _numbers_inlined(statement, dialect, paging: tuple[str, ...] = ()):
    """A copy of ``statement`` with every numeric constant as literal SQL (see the module
    docstring), and each ``paging`` parameter as its mark (``_Form.text``); other named
    parameters and text constants are left as they are."""

    def replace(element):
        if not isinstance(element, BindParameter):
            return None
        if element.key in paging:
            return sa.literal_column(_page_mark(element.key), type_=element.type)
        if element.required:
            return None
        value = element.effective_value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return None
        render = element.type.dialect_impl(dialect).literal_processor(dialect)
        if render is None:
            return None
        return sa.literal_column(render(value), type_=element.type)

    # Looking is much cheaper than copying, and most statements have nothing to inline:
    # find the replacements first, copy only a statement that has some (the copy is
    # handed the originals it found)
    found = {}
    for element in visitors.iterate(statement):
        new = replace(element)
        if new is not None:
            found[id(element)] = new
    if not found:
        return statement
    return visitors.replacement_traverse(statement, {}, lambda element: found.get(id(element)))
