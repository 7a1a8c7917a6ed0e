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
    json_text,
    text_length,
    text_order,
)
from .codec import ESCAPE, ESCAPED_ESCAPE, ESCAPED_NUL

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
    doc = _json_as_sqlite_reads_it(compiler.process(column, **kw))
    return f"hermes_json_text({doc}, '{element.key}')"


# --------------------------------------------------------------------------- text as SQLite reads it
#
# Stored text holds U+0001 and U+0000 escaped (``codec``: U+0001 → 01 01, U+0000 →
# 01 02). SQLite reads text as a C string in LIKE, substr and length — up to its first
# U+0000 — and counts U+0001 as one character. Each construct below tests the text for
# the escape first (``strpos``, one C scan): text without it — nearly all — takes the
# plain SQL; text with it is read token by token with a regular expression.

#: one character of the escaped text: a plain one, an escaped U+0001, or a lone escape
#: character (never written by the codec); an escaped U+0000 is none of them, so a
#: repeat of these tokens from the start ends at the text's first U+0000
_TOKEN = (f"(?:[^{ESCAPE}]|{ESCAPED_ESCAPE}|{ESCAPE}(?![{ESCAPED_ESCAPE[1]}{ESCAPED_NUL[1]}]))")


def _literal(text: str) -> str:
    """``text`` as a PostgreSQL escape-string literal: control characters spelled
    ``\\xNN`` (the SQL stays printable), and ``%`` too (the driver's paramstyle reads a
    bare one as a placeholder)."""
    body = "".join(
        "\\\\" if ch == "\\" else "\\'" if ch == "'" else
        f"\\x{ord(ch):02x}" if ord(ch) < 0x20 or ch == "%" else ch
        for ch in text)
    return f"E'{body}'"


_ESCAPE_SQL = _literal(ESCAPE)


def _plain(text_sql: str) -> str:
    """SQL: true when the escaped text holds no escape, i.e. is the text itself."""
    return f"strpos({text_sql}, {_ESCAPE_SQL}) = 0"


def _before_nul(text_sql: str, count: int | None = None) -> str:
    """SQL: the escaped text up to its first U+0000 (at most ``count`` characters),
    still escaped — for a value the driver reads back (and unescapes)."""
    repeat = "*" if count is None else f"{{0,{int(count)}}}"
    return f"substring({text_sql} from {_literal('^' + _TOKEN + repeat)})"


def _c_string(text_sql: str) -> str:
    """SQL: the text SQLite's LIKE and length read — up to its first U+0000 — with
    U+0001 unescaped (PostgreSQL text holds U+0001; only U+0000 needs the codec)."""
    return (f"CASE WHEN {_plain(text_sql)} THEN {text_sql} ELSE replace("
            f"{_before_nul(text_sql)}, {_literal(ESCAPED_ESCAPE)}, {_ESCAPE_SQL}) END")


@compiles(flat_head, "postgresql")
def _flat_head_postgresql(element, compiler, **kw):
    # the cut first, then the line breaks (the same characters): only the head of a
    # long message is read (PostgreSQL slices a stored value), and tested for the escape
    (text,) = element.clauses
    sql = compiler.process(text, **kw)
    head = f"substr({sql}, 1, {int(element.count)})"
    return _flatten_lines(f"CASE WHEN {_plain(head)} THEN {head} "
                         f"ELSE {_before_nul(sql, element.count)} END")


@compiles(text_length, "postgresql")
def _text_length_postgresql(element, compiler, **kw):
    (text,) = element.clauses
    return f"length({_c_string(compiler.process(text, **kw))})"


#: escaped U+0001 (01 01) sorts after escaped U+0000 (01 02) as 01 03: U+0000 < U+0001
#: < U+0002 (02) … as code points sort
_SORTS_AS_ESCAPE = ESCAPE + "\x03"


@compiles(text_order, "postgresql")
def _text_order_postgresql(element, compiler, **kw):
    # COLLATE "C": byte order, which is code-point order in UTF-8 (SQLite's BINARY),
    # whatever collation the database was created with
    (column,) = element.clauses
    sql = compiler.process(column, **kw)
    return (f'(CASE WHEN {_plain(sql)} THEN {sql} ELSE replace({sql}, '
            f'{_literal(ESCAPED_ESCAPE)}, {_literal(_SORTS_AS_ESCAPE)}) END) COLLATE "C"')


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
    as_sqlite = (f"translate({_c_string(column)}, {fold}) "
                 f"LIKE translate({_c_string(pattern)}, {fold}){_escape_clause(element)}")
    candidates = _literal(_only_trailing_wildcards(element))
    return (f"(CASE WHEN {_plain(pattern)} AND ({pattern} ~ {candidates} OR {_plain(column)}) "
            f"THEN {_like_nocase_default(element, compiler, **kw)} "
            f"AND ({_plain(column)} OR {as_sqlite}) "
            f"ELSE {as_sqlite} END)")


#: JSON's escapes of U+0001 and U+0000 (not preceded by an escaped backslash), and what
#: they become: the escapes of the codec's pairs, so ``->>`` gives the stored form of
#: the value, which the driver unescapes (PostgreSQL's ``->>`` refuses ``\u0000``)
_JSON_ESCAPES = (
    (r"(?<!\\)((?:\\\\)*)\\u0001", r"\1\\u0001\\u0001"),
    (r"(?<!\\)((?:\\\\)*)\\u0000", r"\1\\u0001\\u0002"),
)


def _json_as_sqlite_reads_it(doc_sql: str) -> str:
    """SQL: the JSON text SQLite's JSON functions read (up to its first U+0000), with
    U+0000/U+0001 escapes made readable by PostgreSQL's ``->>``."""
    rewritten = _before_nul(doc_sql)
    for escape, readable in _JSON_ESCAPES:
        rewritten = f"regexp_replace({rewritten}, {_literal(escape)}, {_literal(readable)}, 'g')"
    return (f"CASE WHEN {_plain(doc_sql)} AND strpos({doc_sql}, {_literal(chr(92) + 'u000')}) = 0 "
            f"THEN {doc_sql} ELSE {rewritten} END")


class before_nul(FunctionElement):
    """This engine's: the (escaped) text up to its first U+0000, as SQLite's C-string
    readers see it — its LIKE, and FTS5's trigram tokenizer (``fts/search.py``)."""

    type = sa.Text()
    inherit_cache = True
    name = "before_nul"


@compiles(before_nul, "postgresql")
def _before_nul_postgresql(element, compiler, **kw):
    (text,) = element.clauses
    sql = compiler.process(text, **kw)
    return f"CASE WHEN {_plain(sql)} THEN {sql} ELSE {_before_nul(sql)} END"


class unescaped(FunctionElement):
    """This engine's: true when the text holds neither U+0000 nor U+0001 (stored as it
    is, so read by every expression as SQLite reads it); NULL counts as such a text."""

    type = sa.Boolean()
    inherit_cache = True
    name = "unescaped"


@compiles(unescaped, "postgresql")
def _unescaped_postgresql(element, compiler, **kw):
    (text,) = element.clauses
    return _plain(f"coalesce({compiler.process(text, **kw)}, '')")
