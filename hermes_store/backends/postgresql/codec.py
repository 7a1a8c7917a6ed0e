"""The NUL-safe text codec of PostgreSQL connections (decision D12).

The NUL encoding. PostgreSQL ``text`` cannot hold U+0000, which SQLite stores without
fuss (and the messages concern writes ``"\\x00json:" + JSON`` for multimodal content).
Every Python ``str`` sent to PostgreSQL goes through one reversible substitution, and
every ``text``/``varchar`` value read back goes through its inverse:

    U+0001 → U+0001 U+0001        U+0000 → U+0001 U+0002

A string without U+0000 and U+0001 — nearly all — is sent and read unchanged (one
``in`` test each way). The substitution is applied per character, so it keeps
equality, ``LIKE`` patterns and substring search over ordinary text exact. It lives at
the driver's type level (psycopg dumpers and loaders, installed on each connection by
the engine's connect hook) rather than in SQLAlchemy column types, so that it covers
every path a string can take — Core statements, ``exec_driver_sql``, the prebuilt
statements and ``COPY`` — and SQLite connections never see it (no cost, bytes
untouched). A tool that reads the database without hermes_store sees the escaped
form; :func:`decode_text` undoes it.

What the server computes over stored text sees the escaped form too. Equality, ``IN``
and prefix tests are exact on it (the substitution is one-to-one, and no escaped
character is a prefix of another); what differs — SQLite reads text as a C string in
``LIKE``, ``substr`` and ``length`` (up to its first U+0000), counts U+0001 as one
character, and sorts U+0000 before U+0001 — the engine's constructs restore in SQL
(``constructs.py``).
"""

from __future__ import annotations

import re

#: the escape character, and what U+0001 and U+0000 become
ESCAPE = "\x01"
ESCAPED_ESCAPE = "\x01\x01"
ESCAPED_NUL = "\x01\x02"
_ESCAPED_PAIR = re.compile("\x01([\x01\x02])")


def encode_text(value: str) -> str:
    """``value`` as stored on PostgreSQL (see module docstring)."""
    if "\x00" not in value and ESCAPE not in value:
        return value
    return value.replace(ESCAPE, ESCAPED_ESCAPE).replace("\x00", ESCAPED_NUL)


def _unescape(match: re.Match) -> str:
    return ESCAPE if match.group(1) == ESCAPE else "\x00"


def decode_text(value: str) -> str:
    """The inverse of :func:`encode_text` (a lone U+0001, which it never writes, stays)."""
    if ESCAPE not in value:
        return value
    return _ESCAPED_PAIR.sub(_unescape, value)


# --------------------------------------------------------------------------- the escaped text in SQL
#
# Stored text holds U+0001 and U+0000 escaped (above: U+0001 → 01 01, U+0000 →
# 01 02). SQLite reads text as a C string in LIKE, substr and length — up to its first
# U+0000 — and counts U+0001 as one character. Each construct below tests the text for
# the escape first (``strpos``, one C scan): text without it — nearly all — takes the
# plain SQL; text with it is read token by token with a regular expression.

#: one character of the escaped text: a plain one, an escaped U+0001, or a lone escape
#: character (never written by the codec); an escaped U+0000 is none of them, so a
#: repeat of these tokens from the start ends at the text's first U+0000
_TOKEN = (f"(?:[^{ESCAPE}]|{ESCAPED_ESCAPE}|{ESCAPE}(?![{ESCAPED_ESCAPE[1]}{ESCAPED_NUL[1]}]))")


def sql_literal(text: str) -> str:
    """``text`` as a PostgreSQL escape-string literal: control characters spelled
    ``\\xNN`` (the SQL stays printable), and ``%`` too (the driver's paramstyle reads a
    bare one as a placeholder)."""
    body = "".join(
        "\\\\" if ch == "\\" else "\\'" if ch == "'" else
        f"\\x{ord(ch):02x}" if ord(ch) < 0x20 or ch == "%" else ch
        for ch in text)
    return f"E'{body}'"


ESCAPE_SQL = sql_literal(ESCAPE)


def sql_plain(text_sql: str) -> str:
    """SQL: true when the escaped text holds no escape, i.e. is the text itself."""
    return f"strpos({text_sql}, {ESCAPE_SQL}) = 0"


def sql_before_nul(text_sql: str, count: int | None = None) -> str:
    """SQL: the escaped text up to its first U+0000 (at most ``count`` characters),
    still escaped — for a value the driver reads back (and unescapes)."""
    repeat = "*" if count is None else f"{{0,{int(count)}}}"
    return f"substring({text_sql} from {sql_literal('^' + _TOKEN + repeat)})"


def sql_c_string(text_sql: str) -> str:
    """SQL: the text SQLite's LIKE and length read — up to its first U+0000 — with
    U+0001 unescaped (PostgreSQL text holds U+0001; only U+0000 needs the codec)."""
    return (f"CASE WHEN {sql_plain(text_sql)} THEN {text_sql} ELSE replace("
            f"{sql_before_nul(text_sql)}, {sql_literal(ESCAPED_ESCAPE)}, {ESCAPE_SQL}) END")


#: JSON's escapes of U+0001 and U+0000 (not preceded by an escaped backslash), and what
#: they become: the escapes of the codec's pairs, so ``->>`` gives the stored form of
#: the value, which the driver unescapes (PostgreSQL's ``->>`` refuses ``\u0000``)
_JSON_ESCAPES = (
    (r"(?<!\\)((?:\\\\)*)\\u0001", r"\1\\u0001\\u0001"),
    (r"(?<!\\)((?:\\\\)*)\\u0000", r"\1\\u0001\\u0002"),
)


def sql_json_as_sqlite_reads_it(doc_sql: str) -> str:
    """SQL: the JSON text SQLite's JSON functions read (up to its first U+0000), with
    U+0000/U+0001 escapes made readable by PostgreSQL's ``->>``."""
    rewritten = sql_before_nul(doc_sql)
    for escape, readable in _JSON_ESCAPES:
        rewritten = f"regexp_replace({rewritten}, {sql_literal(escape)}, {sql_literal(readable)}, 'g')"
    return (f"CASE WHEN {sql_plain(doc_sql)} AND strpos({doc_sql}, {sql_literal(chr(92) + 'u000')}) = 0 "
            f"THEN {doc_sql} ELSE {rewritten} END")


def sql_c_string_head(text_sql: str, chars: int) -> str:
    """SQL: SQLite's ``substr(text, 1, chars)`` — the text up to its first U+0000, at
    most ``chars`` characters, U+0001 unescaped — reading no more than ``2 * chars``
    stored characters (the most ``chars`` escaped characters take)."""
    head = f"left({text_sql}, {int(chars)})"
    window = f"left({text_sql}, {2 * int(chars)})"
    return (f"CASE WHEN {sql_plain(head)} THEN {head} ELSE left(replace("
            f"{sql_before_nul(window)}, {sql_literal(ESCAPED_ESCAPE)}, {ESCAPE_SQL}), {int(chars)}) END")


def _codec_adapters():
    """psycopg dumper/loader classes applying the codec (built on first use: psycopg
    is imported only when PostgreSQL is)."""
    from psycopg.types import string as pg_string

    def dumper(base):
        class NulSafe(base):
            def dump(self, obj):
                return super().dump(encode_text(obj))

        NulSafe.__name__ = f"NulSafe{base.__name__}"
        return NulSafe

    def loader(base):
        # called once per text value read: one Python frame (psycopg's own TextLoader
        # is Python too; calling it through super() cost a second one)
        class NulSafe(base):
            def load(self, data):
                if not self._encoding:  # SQL_ASCII: bytes (check_server refuses it)
                    return super().load(data)
                text = str(data, self._encoding)
                return decode_text(text) if ESCAPE in text else text

        NulSafe.__name__ = f"NulSafe{base.__name__}"
        return NulSafe

    # Registration order matters: per format, the last dumper registered for ``str`` is
    # the default; psycopg's own order ends with the text-format "unknown" dumper.
    dumpers = [dumper(getattr(pg_string, name)) for name in (
        "StrBinaryDumperVarchar", "StrBinaryDumper",
        "StrDumperVarchar", "StrDumper", "StrDumperUnknown",
    )]
    text_loader = loader(pg_string.TextLoader)
    binary_loader = loader(pg_string.TextBinaryLoader)
    return dumpers, text_loader, binary_loader


_adapters = None


def install_text_codec(dbapi_conn) -> None:
    """Make one psycopg connection apply the NUL codec to every string."""
    global _adapters
    if _adapters is None:
        _adapters = _codec_adapters()
    dumpers, text_loader, binary_loader = _adapters
    adapters = dbapi_conn.adapters
    for dumper in dumpers:
        adapters.register_dumper(str, dumper)
    for type_name in ("text", "varchar"):
        adapters.register_loader(type_name, text_loader)
        adapters.register_loader(type_name, binary_loader)


__all__ = ["ESCAPE", "ESCAPED_ESCAPE", "ESCAPED_NUL", "ESCAPE_SQL", "decode_text",
           "encode_text", "install_text_codec", "sql_before_nul", "sql_c_string",
           "sql_c_string_head", "sql_json_as_sqlite_reads_it", "sql_literal", "sql_plain"]
