"""The only place where the repository's SQL depends on the database dialect.

The repository modules build portable SQLAlchemy Core statements; the things Core
does not spell portably are kept here, each as one small construct:

* ``insert_for(conn, table)`` — the dialect's ``INSERT`` with ``ON CONFLICT`` support
  (SQLite and PostgreSQL share the ``on_conflict_do_update``/``_do_nothing`` API);
* ``json_text(column, key)`` — a top-level key of a JSON *text* column as SQL text, NULL
  when the key is absent or the stored text is not valid JSON (``model_config`` markers
  such as ``_delegate_from`` are read this way). Compiled per dialect: SQLite guards
  ``json_extract`` with ``json_valid`` so one malformed row cannot fail a whole query.
* ``starts_with(column, prefix)`` — an exact, case-sensitive prefix test that an index
  on the column can serve. Core's ``startswith`` is a ``LIKE``, which SQLite compares
  case-insensitively and cannot serve from an ordinary index; a ``>= prefix AND <
  successor`` range is exact only under a byte-order collation, which SQLite's
  ``BINARY`` is and a PostgreSQL database's default collation usually is not. So SQLite
  gets the range and every other dialect PostgreSQL's built-in ``starts_with()``.

On PostgreSQL ``json_text`` compiles to ``hermes_json_text()``, a function of the
PostgreSQL head (``hermes_store/fts/postgres.py``) with the same NULL-for-malformed rule.
``starts_with`` renders PostgreSQL's own function there.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import FunctionElement
from sqlalchemy.sql.visitors import InternalTraversal


def insert_for(conn: sa.Connection, table: sa.Table):
    """``insert(table)`` of the connection's dialect, with ``on_conflict_*`` methods."""
    name = conn.dialect.name
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:  # pragma: no cover - only SQLite is shipped today
        raise NotImplementedError(f"no upsert support for dialect {name!r}")
    return insert(table)


class json_text(FunctionElement):
    """``json_text(column, "key")``: the key's value as text, or NULL."""

    type = sa.Text()
    inherit_cache = True
    name = "json_text"
    # The key is spelled into the SQL, so it must be part of the statement cache key:
    # otherwise two statements differing only in the key share one compiled form.
    _traverse_internals = FunctionElement._traverse_internals + [
        ("key", InternalTraversal.dp_string)
    ]

    def __init__(self, column, key: str):
        if not key.replace("_", "").isalnum():
            raise ValueError(f"unsupported JSON key {key!r}")
        self.key = key
        super().__init__(column)


@compiles(json_text, "sqlite")
def _json_text_sqlite(element, compiler, **kw):
    (column,) = element.clauses
    col = compiler.process(column, **kw)
    return f"CASE WHEN json_valid({col}) THEN json_extract({col}, '$.{element.key}') END"


@compiles(json_text, "postgresql")
def _json_text_postgresql(element, compiler, **kw):
    # hermes_json_text (fts/postgres.py, part of the PostgreSQL head): malformed JSON and
    # non-objects read as NULL, as the json_valid guard does on SQLite.
    (column,) = element.clauses
    return f"hermes_json_text({compiler.process(column, **kw)}, '{element.key}')"


class starts_with(FunctionElement):
    """``starts_with(column, "prefix")``: true when the text begins with ``prefix``,
    compared exactly (see the module docstring)."""

    # Untyped rather than Boolean: SQLite has no boolean type, and SQLAlchemy would
    # compare a Boolean expression with 1, hiding the range from the index.
    type = sa.types.NullType()
    inherit_cache = True
    name = "starts_with"

    def __init__(self, column, prefix: str):
        if not isinstance(prefix, str) or not prefix:
            raise ValueError("starts_with needs a non-empty text prefix")
        # the half-open range's upper end: the prefix with its last character bumped
        successor = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        super().__init__(column, sa.literal(prefix, sa.Text()),
                         sa.literal(successor, sa.Text()))


@compiles(starts_with)
def _starts_with_default(element, compiler, **kw):
    column, prefix, _successor = element.clauses
    return f"starts_with({compiler.process(column, **kw)}, {compiler.process(prefix, **kw)})"


@compiles(starts_with, "sqlite")
def _starts_with_sqlite(element, compiler, **kw):
    column, prefix, successor = (compiler.process(c, **kw) for c in element.clauses)
    return f"({column} >= {prefix} AND {column} < {successor})"
