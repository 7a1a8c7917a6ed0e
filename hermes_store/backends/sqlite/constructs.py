"""How the repository's portable constructs compile on SQLite (``sql.constructs``).

Registered when the SQLite backend is imported. Each renders exactly the SQL the
construct replaced in the repository: SQLite's own ``LIKE``/``lower()`` (which fold ASCII
letters only), a negative LIMIT/OFFSET read as SQLite reads it, ``json_extract`` guarded
by ``json_valid``, and a ``>=``/``<`` range for an exact prefix (an index can serve it).
"""

from __future__ import annotations

from sqlalchemy.ext.compiler import compiles

from ...sql.constructs import (
    _ascii_fold,
    _escape_clause,
    _like_nocase,
    ascii_lower,
    int_sum,
    json_text,
    limit_or_all,
    offset_or_zero,
    starts_with,
)


@compiles(json_text, "sqlite")
def _json_text_sqlite(element, compiler, **kw):
    (column,) = element.clauses
    col = compiler.process(column, **kw)
    return f"CASE WHEN json_valid({col}) THEN json_extract({col}, '$.{element.key}') END"


@compiles(starts_with, "sqlite")
def _starts_with_sqlite(element, compiler, **kw):
    column, prefix, successor = (compiler.process(c, **kw) for c in element.clauses)
    return f"({column} >= {prefix} AND {column} < {successor})"


@compiles(_ascii_fold, "sqlite")
def _ascii_fold_sqlite(element, compiler, **kw):
    (text,) = element.clauses
    return compiler.process(text, **kw)


@compiles(ascii_lower, "sqlite")
def _ascii_lower_sqlite(element, compiler, **kw):
    (text,) = element.clauses
    return f"lower({compiler.process(text, **kw)})"


@compiles(_like_nocase, "sqlite")
def _like_nocase_sqlite(element, compiler, **kw):
    column, pattern = (compiler.process(c, **kw) for c in element.clauses)
    return f"{column} LIKE {pattern}{_escape_clause(element)}"


@compiles(int_sum, "sqlite")
def _int_sum_sqlite(element, compiler, **kw):
    (column,) = element.clauses
    return f"sum({compiler.process(column, **kw)})"


@compiles(limit_or_all, "sqlite")
def _limit_or_all_sqlite(element, compiler, **kw):
    (count,) = element.clauses
    return compiler.process(count, **kw)


@compiles(offset_or_zero, "sqlite")
def _offset_or_zero_sqlite(element, compiler, **kw):
    (count,) = element.clauses
    return compiler.process(count, **kw)
