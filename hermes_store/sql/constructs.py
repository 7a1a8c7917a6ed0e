"""The repository's constructs whose SQL depends on the engine, each defined once.

The repository modules build portable SQLAlchemy Core statements; the things Core
does not spell portably are kept here, each as one small construct with its generic
SQL (what PostgreSQL runs); a backend whose engine spells one differently registers
its own compilation in ``backends/<engine>/constructs.py`` (SQLite's are exactly the SQL
each construct replaced):

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

* ``like_nocase(column, pattern)`` and ``ascii_lower(text)`` — text matching as SQLite
  does it, on every engine: SQLite's ``LIKE`` and ``lower()`` fold the 26 ASCII letters
  only (``É`` stays ``É``), PostgreSQL's ``LIKE`` folds nothing and its ``lower()`` folds
  all of Unicode. So on PostgreSQL both sides go through ``translate(x, 'A…Z', 'a…z')``
  and the same rows match on both engines (the SQL SQLite gets is unchanged: its own
  ``LIKE``/``lower()``).
* ``limit_or_all(count)`` / ``offset_or_zero(count)`` — SQLite's paging rules for
  caller-given numbers: a negative LIMIT means no limit and a negative OFFSET counts as
  0 (upstream passes ``limit=-1`` for "all"); PostgreSQL refuses both, so there they
  become ``NULL`` (``LIMIT ALL``) and ``greatest(count, 0)``.
* ``int_sum(column)`` — ``sum()`` of an integer column as an integer: PostgreSQL's
  ``sum(bigint)`` is ``numeric`` (the driver would hand back ``Decimal``), SQLite's an
  integer.
* ``flat_head(text, count)``, ``text_length(text)`` and ``text_order(column)`` —
  a preview's ``substr(replace(replace(text, LF, ' '), CR, ' '), 1, count)``,
  ``length(text)`` and the sort order of text as SQLite computes them: SQLite reads
  text as a C string there (up to its first U+0000) and sorts by code point. Their
  generic SQL is the plain functions (the column itself for the order); PostgreSQL
  keeps U+0000 and U+0001 escaped (its NUL codec), so its own compilation reads through
  the escape (``backends/postgresql/constructs.py``, which also makes ``like_nocase``
  and ``json_text`` read text as SQLite does).
* ``head_or_whole(text, count)`` — at least the first ``count`` characters of the text
  as the repository reads it (the whole text, or less where the engine can cut it
  exactly), for a caller that shows a head only (search's ``context``). Generic: the
  text itself; PostgreSQL sends a long value's head only, unless it holds its NUL
  codec's escape (then the whole, for the codec to read).
On PostgreSQL ``json_text`` compiles to ``hermes_json_text()``, a function of the
PostgreSQL head (``backends/postgresql/fts/ddl.py``) with the same NULL-for-malformed
rule. ``starts_with`` renders PostgreSQL's own function there.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import FunctionElement
from sqlalchemy.sql.visitors import InternalTraversal

from ..backends.base import backend_of


def _generic(construct):
    """Register the decorated function as ``construct``'s generic SQL.

    Each backend registers its own SQL for a construct where it differs
    (``backends/<engine>/constructs.py``, imported with the backend, before any engine of
    it exists); a dialect whose backend has nothing of its own gets the generic SQL.
    """
    def decorate(fn):
        compiles(construct)(fn)
        return fn

    return decorate


def insert_for(conn: sa.Connection, table: sa.Table):
    """``insert(table)`` of the connection's dialect, with ``on_conflict_*`` methods."""
    return backend_of(conn).insert(table)


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


@_generic(json_text)
def _json_text_default(element, compiler, **kw):
    raise sa.exc.CompileError(
        f"json_text has no SQL for the dialect {compiler.dialect.name!r}")


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


@_generic(starts_with)
def _starts_with_default(element, compiler, **kw):
    column, prefix, _successor = element.clauses
    return f"starts_with({compiler.process(column, **kw)}, {compiler.process(prefix, **kw)})"


# --------------------------------------------------------------------------- SQLite's folding

_ASCII_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ASCII_LOWER = "abcdefghijklmnopqrstuvwxyz"


class _ascii_fold(FunctionElement):
    """Internal: text with ASCII letters lower-cased, for PostgreSQL; on SQLite the
    text itself (its LIKE already ignores ASCII case)."""

    type = sa.Text()
    inherit_cache = True
    name = "ascii_fold"


@_generic(_ascii_fold)
def _ascii_fold_default(element, compiler, **kw):
    (text,) = element.clauses
    return (f"translate({compiler.process(text, **kw)}, "
            f"'{_ASCII_UPPER}', '{_ASCII_LOWER}')")


class ascii_lower(FunctionElement):
    """``lower(text)`` as SQLite computes it: ASCII letters only (``É`` stays ``É``)."""

    type = sa.Text()
    inherit_cache = True
    name = "ascii_lower"


@_generic(ascii_lower)
def _ascii_lower_default(element, compiler, **kw):
    return _ascii_fold_default(element, compiler, **kw)


class _like_nocase(FunctionElement):
    """Internal: ``like_nocase``'s expression (compiled per dialect below)."""

    type = sa.Boolean()
    inherit_cache = True
    name = "like_nocase"

    def __init__(self, column, pattern, escape: str | None) -> None:
        self.escape = escape
        super().__init__(column, pattern)

    # the escape character is part of the SQL text, so of the statement's cache key
    _traverse_internals = FunctionElement._traverse_internals + [
        ("escape", InternalTraversal.dp_plain_obj)]


def _escape_clause(element) -> str:
    if element.escape is None:
        return ""
    return " ESCAPE '" + element.escape.replace("'", "''") + "'"


@_generic(_like_nocase)
def _like_nocase_default(element, compiler, **kw):
    # Folding every row with translate() is slow, so it runs only where it can matter: a
    # pattern without ASCII letters matches the same rows in either case, and plain LIKE
    # decides (PostgreSQL folds the CASE at planning, the pattern being a parameter's
    # value); with letters, ILIKE (C code; it folds more, so never drops a match) lets
    # through only candidates for the exact, ASCII-only fold.
    column, pattern = (compiler.process(c, **kw) for c in element.clauses)
    escape = _escape_clause(element)
    fold = f"'{_ASCII_UPPER}', '{_ASCII_LOWER}'"
    return (f"(CASE WHEN {pattern} ~ '[A-Za-z]' "
            f"THEN {column} ILIKE {pattern}{escape} "
            f"AND translate({column}, {fold}) LIKE translate({pattern}, {fold}){escape} "
            f"ELSE {column} LIKE {pattern}{escape} END)")


def like_nocase(column, pattern, *, escape: str | None = None) -> sa.ColumnElement[bool]:
    """``column LIKE pattern`` as SQLite matches it: ASCII letters in either case,
    every other character exactly (``%``/``_`` wildcards, ``escape`` their escape)."""
    if isinstance(pattern, str):
        pattern = sa.literal(pattern, sa.Text())
    return _like_nocase(column, pattern, escape)


class int_sum(FunctionElement):
    """``sum(column)`` of an integer column, as an integer on every engine (NULL when
    no row)."""

    type = sa.Integer()
    inherit_cache = True
    name = "int_sum"


@_generic(int_sum)
def _int_sum_default(element, compiler, **kw):
    (column,) = element.clauses
    return f"CAST(sum({compiler.process(column, **kw)}) AS BIGINT)"


# --------------------------------------------------------------------------- text as SQLite reads it


class flat_head(FunctionElement):
    """A preview's ``substr(replace(replace(text, LF, ' '), CR, ' '), 1, count)`` as
    SQLite computes it: the first ``count`` characters of the text before its first
    U+0000, line breaks as spaces."""

    type = sa.Text()
    inherit_cache = True
    name = "flat_head"
    # the count is spelled into the SQL (PostgreSQL's reads it as a regex bound)
    _traverse_internals = FunctionElement._traverse_internals + [
        ("count", InternalTraversal.dp_plain_obj)]

    #: the largest count (PostgreSQL's regular expressions bound a repeat by 255)
    MAX_COUNT = 255

    def __init__(self, text, count: int):
        if not isinstance(count, int) or not 0 < count <= self.MAX_COUNT:
            raise ValueError(f"flat_head needs a count in 1..{self.MAX_COUNT}, got {count!r}")
        self.count = count
        super().__init__(text)


def _flatten_lines(text_sql: str) -> str:
    """SQL: the text with CR and LF as spaces."""
    return f"replace(replace({text_sql}, '\n', ' '), '\r', ' ')"


@_generic(flat_head)
def _flat_head_default(element, compiler, **kw):
    (text,) = element.clauses
    return f"substr({_flatten_lines(compiler.process(text, **kw))}, 1, {int(element.count)})"


class head_or_whole(FunctionElement):
    """At least the first ``count`` characters of the text (the caller cuts): the whole
    text, or its head where the engine can cut it exactly without reading the rest."""

    type = sa.Text()
    inherit_cache = True
    name = "head_or_whole"
    # the count is spelled into the SQL (one statement per count, not a parameter)
    _traverse_internals = FunctionElement._traverse_internals + [
        ("count", InternalTraversal.dp_plain_obj)]

    def __init__(self, text, count: int):
        if not isinstance(count, int) or count <= 0:
            raise ValueError(f"head_or_whole needs a positive count, got {count!r}")
        self.count = count
        super().__init__(text)


@_generic(head_or_whole)
def _head_or_whole_default(element, compiler, **kw):
    (text,) = element.clauses
    return compiler.process(text, **kw)


class text_length(FunctionElement):
    """``length(text)`` as SQLite computes it: the characters before the first U+0000."""

    type = sa.Integer()
    inherit_cache = True
    name = "text_length"


@_generic(text_length)
def _text_length_default(element, compiler, **kw):
    (text,) = element.clauses
    return f"length({compiler.process(text, **kw)})"


class text_order(FunctionElement):
    """A text column in an ORDER BY, sorted as SQLite sorts it (by code point)."""

    type = sa.Text()
    inherit_cache = True
    name = "text_order"


@_generic(text_order)
def _text_order_default(element, compiler, **kw):
    (column,) = element.clauses
    return compiler.process(column, **kw)


# --------------------------------------------------------------------------- SQLite's paging


def _count_clause(count):
    if isinstance(count, int):
        return sa.literal(count, sa.Integer())
    return count


class limit_or_all(FunctionElement):
    """A LIMIT count as SQLite reads it: negative = no limit."""

    type = sa.Integer()
    inherit_cache = True
    name = "limit_or_all"

    def __init__(self, count):
        super().__init__(_count_clause(count))


@_generic(limit_or_all)
def _limit_or_all_default(element, compiler, **kw):
    (count,) = element.clauses
    value = compiler.process(count, **kw)
    return f"CASE WHEN {value} < 0 THEN NULL ELSE {value} END"


class offset_or_zero(FunctionElement):
    """An OFFSET count as SQLite reads it: negative = 0."""

    type = sa.Integer()
    inherit_cache = True
    name = "offset_or_zero"

    def __init__(self, count):
        super().__init__(_count_clause(count))


@_generic(offset_or_zero)
def _offset_or_zero_default(element, compiler, **kw):
    (count,) = element.clauses
    return f"greatest({compiler.process(count, **kw)}, 0)"


# --------------------------------------------------------------------------- explicit ids


def keep_ids_ahead(conn: sa.Connection, column: sa.Column) -> None:
    """After rows were inserted with explicit values in ``column`` (an autoincrementing
    key: an import keeping exported ids), make the next generated value larger than every
    stored one, as SQLite's AUTOINCREMENT does by itself (a PostgreSQL sequence does not
    move for explicit values). Callers run inside an exclusive write unit."""
    backend_of(conn).keep_ids_ahead(conn, column)
