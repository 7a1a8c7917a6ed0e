"""How the repository's portable constructs compile on PostgreSQL where the generic
SQL of ``sql.constructs`` is not enough, and the partial indexes' predicates of the
shared metadata for this engine. Registered when the backend is imported.

Text as SQLite reads it: stored text holds U+0000 and U+0001 escaped (``codec.py``), and
``like_nocase``, ``flat_head``, ``text_length``, ``text_order`` and ``json_text`` read
through the escape, so that each gives SQLite's answer for such text too (issue 32).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import FunctionElement

from ... import schema, telegram_schema
from ...sql.constructs import (
    _ASCII_LOWER,
    _ASCII_UPPER,
    _escape_clause,
    _flatten_lines,
    _like_nocase,
    _like_nocase_default,
    flat_head,
    head_or_whole,
    json_text,
    text_length,
    text_order,
)
from .codec import (
    ESCAPE,
    ESCAPED_ESCAPE,
    sql_before_nul,
    sql_c_string,
    sql_json_as_sqlite_reads_it,
    sql_literal,
    sql_plain,
)

# A partial index has the same predicate on every engine; ``schema`` writes it once, as
# SQLite's option, so that a SQLite process never loads this dialect (``schema._partial``).
# Setting ``dialect_kwargs`` is SQLAlchemy's documented way to add a dialect's option.
for _metadata in (schema.metadata, telegram_schema.metadata):
    for _index, _where in schema.partial_predicates(_metadata):
        _index.dialect_kwargs["postgresql_where"] = _where


@compiles(json_text, "postgresql")
def _json_text_postgresql(element, compiler, **kw):
    # hermes_json_text (fts/ddl.py, part of the PostgreSQL head): malformed JSON and
    # non-objects read as NULL, as the json_valid guard does on SQLite; the document as
    # SQLite reads it (below), so that a value holding U+0000 is found too.
    (column,) = element.clauses
    doc = sql_json_as_sqlite_reads_it(compiler.process(column, **kw))
    return f"hermes_json_text({doc}, '{element.key}')"


@compiles(flat_head, "postgresql")
def _flat_head_postgresql(element, compiler, **kw):
    # the cut first, then the line breaks (the same characters): only the head of a
    # long message is read (PostgreSQL slices a stored value), and tested for the escape
    (text,) = element.clauses
    sql = compiler.process(text, **kw)
    head = f"substr({sql}, 1, {int(element.count)})"
    return _flatten_lines(f"CASE WHEN {sql_plain(head)} THEN {head} "
                         f"ELSE {sql_before_nul(sql, element.count)} END")


#: a text of at most this many bytes per character of the head is read whole
#: (``head_or_whole``): cutting it cost the server more than sending it (two ``left()``
#: and a ``strpos``: a search's 40 neighbours 0.1–0.17 ms; docs/performance.md, issue 32)
_WHOLE_BYTES_PER_CHAR = 4


@compiles(head_or_whole, "postgresql")
def _head_or_whole_postgresql(element, compiler, **kw):
    # left() reads only a stored value's head (a compressed one is decompressed that far);
    # a head holding the escape could end inside a pair, or hold fewer characters than
    # the codec gives back: the whole text then (the multimodal marker is one such)
    (text,) = element.clauses
    sql, count = compiler.process(text, **kw), int(element.count)
    head = f"left({sql}, {count})"
    return (f"CASE WHEN octet_length({sql}) <= {count * _WHOLE_BYTES_PER_CHAR} THEN {sql} "
            f"WHEN {sql_plain(head)} THEN {head} ELSE {sql} END")


@compiles(text_length, "postgresql")
def _text_length_postgresql(element, compiler, **kw):
    (text,) = element.clauses
    return f"length({sql_c_string(compiler.process(text, **kw))})"


#: escaped U+0001 (01 01) sorts after escaped U+0000 (01 02) as 01 03: U+0000 < U+0001
#: < U+0002 (02) … as code points sort
_SORTS_AS_ESCAPE = ESCAPE + "\x03"


@compiles(text_order, "postgresql")
def _text_order_postgresql(element, compiler, **kw):
    # COLLATE "C": byte order, which is code-point order in UTF-8 (SQLite's BINARY),
    # whatever collation the database was created with
    (column,) = element.clauses
    sql = compiler.process(column, **kw)
    return (f'(CASE WHEN {sql_plain(sql)} THEN {sql} ELSE replace({sql}, '
            f'{sql_literal(ESCAPED_ESCAPE)}, {sql_literal(_SORTS_AS_ESCAPE)}) END) COLLATE "C"')


def _only_trailing_wildcards(element) -> str:
    """A regular expression true for a LIKE pattern whose only wildcards are ``%`` and
    which ends with one. Matched over the escaped text, such a pattern finds every row
    SQLite finds (and a few more: text after a U+0000), so the plain match can pick the
    candidates and SQLite's reading decide only among them."""
    if element.escape is None:
        return "^[^_]*%$"
    escape = "\\" + element.escape
    return f"^(?:[^{escape}_]|{escape}.)*%$"


@compiles(_like_nocase, "postgresql")
def _like_nocase_postgresql(element, compiler, **kw):
    # The generic SQL (ILIKE's candidates, then the ASCII fold) where both sides read
    # as SQLite reads them; else SQLite's reading of both sides decides: for every row
    # when the pattern holds the escape (PostgreSQL folds that test when it plans with
    # the pattern's value), only for the plain match's candidates otherwise.
    column, pattern = (compiler.process(c, **kw) for c in element.clauses)
    fold = f"'{_ASCII_UPPER}', '{_ASCII_LOWER}'"
    as_sqlite = (f"translate({sql_c_string(column)}, {fold}) "
                 f"LIKE translate({sql_c_string(pattern)}, {fold}){_escape_clause(element)}")
    candidates = sql_literal(_only_trailing_wildcards(element))
    return (f"(CASE WHEN {sql_plain(pattern)} AND ({pattern} ~ {candidates} OR {sql_plain(column)}) "
            f"THEN {_like_nocase_default(element, compiler, **kw)} "
            f"AND ({sql_plain(column)} OR {as_sqlite}) "
            f"ELSE {as_sqlite} END)")


class before_nul(FunctionElement):
    """This engine's: the (escaped) text up to its first U+0000, as SQLite's C-string
    readers see it — FTS5's trigram tokenizer (``fts/search.py``). One regular
    expression, no test for text without an escape first: it is read where a row
    holds one (``unescaped`` failed), and the test would lengthen the statement only."""

    type = sa.Text()
    inherit_cache = True
    name = "before_nul"


@compiles(before_nul, "postgresql")
def _before_nul_postgresql(element, compiler, **kw):
    (text,) = element.clauses
    sql = compiler.process(text, **kw)
    return sql_before_nul(sql)


class unescaped(FunctionElement):
    """This engine's: true when the text holds neither U+0000 nor U+0001 (stored as it
    is, so read by every expression as SQLite reads it); NULL counts as such a text."""

    type = sa.Boolean()
    inherit_cache = True
    name = "unescaped"


@compiles(unescaped, "postgresql")
def _unescaped_postgresql(element, compiler, **kw):
    (text,) = element.clauses
    return sql_plain(f"coalesce({compiler.process(text, **kw)}, '')")
