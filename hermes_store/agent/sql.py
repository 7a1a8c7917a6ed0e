"""Raw SQL the agent sends through ``SessionDB._conn``: what kind of statement it is,
and the same statement for PostgreSQL (issue 16, item 2).

The agent writes SQLite SQL with ``?`` placeholders. A small scanner splits it into
tokens (string literals, quoted identifiers and comments are single tokens, so nothing
inside quotes is ever taken for a placeholder or a keyword) and answers:

* ``classify``: a read (``SELECT``, ``VALUES``, a ``WITH`` whose main statement is a
  ``SELECT``, a read-only ``PRAGMA``) runs in a read snapshot, a write (``INSERT``,
  ``UPDATE``, ``DELETE``, ``REPLACE``, a ``WITH`` leading to one) as one write unit;
  transaction control, ``ATTACH``, ``VACUUM``, schema changes and pragmas that set
  something are refused (``RawUsageError``): the store owns its connections and its
  schema.
* ``for_postgresql``: ``?`` → ``%s`` (``:name`` → ``%(name)s``), ``%`` doubled when
  there are parameters; where SQLite's answer differs from PostgreSQL's for the same
  text, the text is rewritten to give SQLite's answer:

  - ``date(x, 'unixepoch')`` → the UTC date of the epoch seconds, as ``'YYYY-MM-DD'``;
  - ``avg(…)`` is a float (PostgreSQL's ``avg`` of integers is ``numeric``);
  - ``ORDER BY`` sorts NULL first ascending and last descending, as SQLite does
    (PostgreSQL sorts NULL as the largest value);
  - ``ifnull`` is ``coalesce``;

  and a construct whose PostgreSQL reading would give another answer without an error
  (SQLite's ``LIKE`` ignores ASCII case, ``GLOB``, ``rowid``, SQLite's date and JSON
  functions, ``INSERT OR …``, two-argument ``max``/``min``, a division where ``sum()``
  of integers is ``numeric`` …) raises
  ``UnsupportedStatementError`` naming it. Result values are mended in ``raw``:
  ``numeric`` from ``sum`` of integers comes back as ``int``, booleans as 0/1.

Text comparison needs nothing: the store's PostgreSQL databases use the ``C.UTF-8``
collation (``docs/postgres.md``), which orders text as SQLite's ``BINARY`` does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .errors import RawUsageError, UnsupportedStatementError

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>--[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<string>'(?:[^']|'')*(?:'|\Z))
  | (?P<ident>"(?:[^"]|"")*(?:"|\Z)|`(?:[^`]|``)*(?:`|\Z)|\[[^\]]*(?:\]|\Z))
  | (?P<param>\?\d*|[:@$][A-Za-z_][A-Za-z0-9_]*)
  | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)
  | (?P<op>\|\||!=|<>|<=|>=|==|<<|>>|.)
    """,
    re.S | re.X,
)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else ""


def tokenize(sql: str) -> list[Token]:
    return [Token(m.lastgroup, m.group()) for m in _TOKEN.finditer(sql)]


def _code(tokens: list[Token]) -> list[int]:
    """Indexes of the tokens that are neither blanks nor comments."""
    return [i for i, t in enumerate(tokens) if t.kind not in ("ws", "comment")]


READ, WRITE = "read", "write"
_WRITE_VERBS = {"INSERT", "UPDATE", "DELETE", "REPLACE"}
_REFUSED_VERBS = {
    "BEGIN": "transaction control", "COMMIT": "transaction control",
    "END": "transaction control", "ROLLBACK": "transaction control",
    "SAVEPOINT": "transaction control", "RELEASE": "transaction control",
    "ATTACH": "ATTACH", "DETACH": "DETACH", "VACUUM": "VACUUM", "ANALYZE": "ANALYZE",
    "REINDEX": "REINDEX", "CREATE": "schema changes", "DROP": "schema changes",
    "ALTER": "schema changes",
}
_REFUSED_HINT = {
    "transaction control": "every statement through SessionDB._conn is its own unit; "
                           "run several as one with SessionDB._execute_write(fn)",
    "VACUUM": "call SessionDB.vacuum()",
    "ANALYZE": "call SessionDB.vacuum() (PostgreSQL: VACUUM (ANALYZE))",
    "REINDEX": "call SessionDB.rebuild_fts()",
    "schema changes": "the schema belongs to the migrations (hermes-store db upgrade)",
}


@dataclass(frozen=True)
class Statement:
    """One raw statement, scanned once (cached by its text)."""

    sql: str
    tokens: tuple[Token, ...]
    kind: str          # READ or WRITE
    verb: str          # SELECT, INSERT, PRAGMA, …
    placeholders: int  # positional ``?`` count
    named: tuple[str, ...]  # ``:name`` placeholders, in order


def _refuse(verb: str) -> RawUsageError:
    what = _REFUSED_VERBS[verb]
    return RawUsageError(
        f"{verb} through SessionDB._conn is not supported ({what}): the store owns its "
        f"connections; {_REFUSED_HINT.get(what, 'use the SessionDB methods')}"
    )


def _main_verb(tokens: list[Token], code: list[int]) -> str:
    """The statement's verb; for ``WITH …`` the first top-level verb after the CTEs."""
    if not code:
        return ""
    first = tokens[code[0]]
    if first.upper != "WITH":
        return first.upper or first.text
    depth = 0
    for i in code[1:]:
        t = tokens[i]
        if t.text == "(":
            depth += 1
        elif t.text == ")":
            depth -= 1
        elif depth == 0 and t.upper in _WRITE_VERBS | {"SELECT", "VALUES"}:
            return t.upper
    return "WITH"


@lru_cache(maxsize=512)
def scan(sql: str) -> Statement:
    """Scan and classify one statement; raises ``RawUsageError`` for what the raw
    connection refuses on every engine."""
    if not isinstance(sql, str):
        raise RawUsageError(f"SQL must be a str, not {type(sql).__name__}")
    tokens = tokenize(sql)
    code = _code(tokens)
    for n, i in enumerate(code):
        if tokens[i].text == ";" and n != len(code) - 1 and any(
                tokens[j].text != ";" for j in code[n + 1:]):
            raise RawUsageError("You can only execute one statement at a time.")
    verb = _main_verb(tokens, code)
    if verb in _REFUSED_VERBS:
        raise _refuse(verb)
    if verb in ("SELECT", "VALUES", "EXPLAIN"):
        kind = READ
    elif verb in _WRITE_VERBS:
        kind = WRITE
    elif verb == "PRAGMA":
        if any(tokens[i].text == "=" for i in code):
            raise RawUsageError(
                "PRAGMA … = … through SessionDB._conn is not supported: it would change a "
                "connection the store shares between calls (its pragmas are set on connect)"
            )
        kind = READ
    else:
        raise RawUsageError(f"unrecognised statement through SessionDB._conn: {sql.strip()[:60]!r}")
    params = [tokens[i].text for i in code if tokens[i].kind == "param"]
    positional = sum(1 for p in params if p == "?")
    named = tuple(p[1:] for p in params if p[0] == ":")
    if positional and named:
        raise RawUsageError("a statement mixes ? and :name placeholders")
    return Statement(sql, tuple(tokens), kind, verb, positional, named)


# --------------------------------------------------------------------------- PostgreSQL

ENGINE = "PostgreSQL"

#: functions whose SQLite answer PostgreSQL would not give for the same text (or lacks)
_SQLITE_ONLY_FUNCTIONS = {
    "time", "datetime", "julianday", "strftime", "unixepoch", "timediff",
    "group_concat", "instr", "printf", "format", "typeof", "total", "last_insert_rowid",
    "changes", "total_changes", "random", "randomblob", "hex", "unhex", "quote",
    "zeroblob", "likelihood", "likely", "unlikely", "iif", "char", "unicode", "substr",
    "substring", "lower", "upper", "round", "soundex", "load_extension", "glob", "like",
    "trim", "ltrim", "rtrim", "octet_length", "concat", "concat_ws", "sign",
}
_SQLITE_ONLY_WORDS = {
    "LIKE": "LIKE (SQLite's ignores ASCII case, PostgreSQL's does not)",
    "GLOB": "GLOB", "REGEXP": "REGEXP", "MATCH": "MATCH (FTS5)",
    "COLLATE": "COLLATE (SQLite's collations)",
    "ROWID": "rowid", "_ROWID_": "rowid", "OID": "rowid",
    "INDEXED": "INDEXED BY",
}
_SQLITE_ONLY_TABLES = {"sqlite_master", "sqlite_schema", "sqlite_sequence",
                       "sqlite_temp_master", "sqlite_stat1"}


def _unsupported(what: str) -> UnsupportedStatementError:
    return UnsupportedStatementError(
        f"{what} in a raw statement cannot be answered on {ENGINE} as SQLite answers it; "
        "nothing was run. Use the SessionDB methods, or write the statement without it"
    )


def _next_code(tokens: list[Token], i: int) -> int | None:
    for j in range(i + 1, len(tokens)):
        if tokens[j].kind not in ("ws", "comment"):
            return j
    return None


def _prev_code(tokens: list[Token], i: int) -> int | None:
    for j in range(i - 1, -1, -1):
        if tokens[j].kind not in ("ws", "comment"):
            return j
    return None


def _call_args(tokens: list[Token], open_paren: int) -> tuple[list[tuple[int, int]], int]:
    """The argument spans ``[start, end)`` of the call whose ``(`` is at ``open_paren``,
    and the index of its ``)``."""
    depth, start, spans = 0, open_paren + 1, []
    for j in range(open_paren, len(tokens)):
        text = tokens[j].text
        if tokens[j].kind != "op":
            continue
        if text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
            if depth == 0:
                spans.append((start, j))
                return spans, j
        elif text == "," and depth == 1:
            spans.append((start, j))
            start = j + 1
    raise _unsupported("an unclosed parenthesis")


def _text(tokens: list[Token], start: int, end: int) -> str:
    return "".join(t.text for t in tokens[start:end]).strip()


def _sql(text: str) -> Token:
    return Token("sql", text)


def _cast_type(tokens: list[Token], start: int, end: int) -> tuple[int, str] | None:
    """The index of the top-level ``AS`` in a CAST's argument and the type after it."""
    depth = 0
    for j in range(start, end):
        t = tokens[j]
        if t.kind == "op" and t.text == "(":
            depth += 1
        elif t.kind == "op" and t.text == ")":
            depth -= 1
        elif depth == 0 and t.upper == "AS":
            return j, " ".join(x.upper or x.text.upper() for x in tokens[j + 1:end]
                               if x.kind not in ("ws", "comment"))
    return None


def _rewrite_functions(tokens: list[Token]) -> list[Token]:
    out: list[Token] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.kind != "word":
            out.append(t)
            i += 1
            continue
        nxt = _next_code(tokens, i)
        is_call = nxt is not None and tokens[nxt].text == "("
        prev = _prev_code(tokens, i)
        if prev is not None and tokens[prev].text == ".":  # a qualified name
            if t.upper in ("ROWID", "_ROWID_", "OID"):
                raise _unsupported("rowid")
            out.append(t)
            i += 1
            continue
        word, name = t.upper, t.text.lower()
        if word == "OR" and prev is not None and tokens[prev].upper in ("INSERT", "UPDATE"):
            raise _unsupported(f"{tokens[prev].upper} OR {tokens[nxt].text.upper()}")
        if word == "REPLACE" and not is_call:
            raise _unsupported("REPLACE INTO")
        if word in _SQLITE_ONLY_WORDS and not is_call:
            raise _unsupported(_SQLITE_ONLY_WORDS[word])
        if name in _SQLITE_ONLY_TABLES:
            raise _unsupported(f"the SQLite catalog table {name}")
        if not is_call:
            out.append(t)
            i += 1
            continue
        if name.startswith(("json", "sqlite_", "fts5", "highlight", "snippet", "bm25")) \
                or name in _SQLITE_ONLY_FUNCTIONS:
            raise _unsupported(f"the SQLite function {t.text}()")
        if name not in ("date", "avg", "ifnull", "max", "min", "cast"):
            out.append(t)
            i += 1
            continue
        spans, close = _call_args(tokens, nxt)
        args = [_rewrite_functions(tokens[a:b]) for a, b in spans]
        shown = f"{t.text}({', '.join(_text(tokens, a, b) for a, b in spans)})"
        if name == "date":
            if len(spans) != 2 or _text(tokens, *spans[1]).lower() != "'unixepoch'":
                raise _unsupported(shown)
            out += [_sql("to_char(to_timestamp("), *args[0],
                    _sql(") AT TIME ZONE 'UTC', 'YYYY-MM-DD')")]
        elif name == "avg":
            out += [_sql("CAST(avg("), *args[0], _sql(") AS DOUBLE PRECISION)")]
        elif name == "ifnull":
            if len(spans) != 2:
                raise _unsupported(shown)
            out += [_sql("coalesce("), *args[0], _sql(", "), *args[1], _sql(")")]
        elif name in ("max", "min"):
            if len(spans) != 1:
                raise _unsupported(f"{shown} (SQLite's scalar {name} of several values)")
            out += [_sql(f"{t.text}("), *args[0], _sql(")")]
        else:  # cast
            found = _cast_type(tokens, *spans[0]) if len(spans) == 1 else None
            kind = found[1] if found else ""
            if kind in ("TEXT", "BLOB"):
                out += [t, *tokens[i + 1:close + 1]]
            elif kind in ("REAL", "FLOAT", "DOUBLE", "DOUBLE PRECISION"):
                a, _ = spans[0]
                out += [_sql("CAST("), *_rewrite_functions(tokens[a:found[0]]),
                        _sql(" AS DOUBLE PRECISION)")]
            else:
                raise _unsupported(f"{shown} (SQLite's CAST truncates and keeps 64 bits; "
                                   "PostgreSQL's INTEGER rounds and has 32)")
        i = close + 1
    return out


_ORDER_END = {"LIMIT", "OFFSET", "UNION", "EXCEPT", "INTERSECT", "ROWS", "RANGE",
              "GROUPS", "WINDOW", "FETCH", "FOR", "RETURNING", "ON"}


def _nulls_as_sqlite(tokens: list[Token]) -> list[Token]:
    """After each ORDER BY term: NULLS FIRST when ascending, NULLS LAST when descending
    (SQLite's order; PostgreSQL's default is the opposite)."""
    out: list[Token] = []
    stack: list[bool] = [False]  # per paren depth: inside an ORDER BY list?
    seen_nulls = [False]
    direction = ["ASC"]

    def close_term():
        if stack[-1] and not seen_nulls[-1]:
            out.append(_sql(f" NULLS {'LAST' if direction[-1] == 'DESC' else 'FIRST'} "))
        seen_nulls[-1] = False
        direction[-1] = "ASC"

    for i, t in enumerate(tokens):
        if t.text == "(" and t.kind == "op":
            stack.append(False)
            seen_nulls.append(False)
            direction.append("ASC")
            out.append(t)
            continue
        if t.text == ")" and t.kind == "op":
            close_term()
            stack.pop(), seen_nulls.pop(), direction.pop()
            out.append(t)
            continue
        if stack[-1]:
            if t.text == "," and t.kind == "op":
                close_term()
                out.append(t)
                continue
            if t.upper in _ORDER_END or t.text == ";":
                close_term()
                stack[-1] = False
            elif t.upper in ("ASC", "DESC"):
                direction[-1] = t.upper
            elif t.upper == "NULLS":
                seen_nulls[-1] = True
        if t.upper == "BY":
            prev = _prev_code(tokens, i)
            if prev is not None and tokens[prev].upper == "ORDER":
                out.append(t)
                stack[-1] = True
                seen_nulls[-1] = False
                direction[-1] = "ASC"
                continue
        out.append(t)
    close_term()
    return out


@lru_cache(maxsize=512)
def for_postgresql(sql: str, with_params: bool) -> str:
    """The statement for psycopg: SQLite's answer in PostgreSQL's SQL (module docstring).
    Raises ``UnsupportedStatementError`` naming what cannot be answered that way."""
    statement = scan(sql)
    if statement.verb in ("PRAGMA", "EXPLAIN"):
        raise _unsupported(statement.verb)
    tokens = list(statement.tokens)
    for t in tokens:
        if t.kind == "param" and t.text != "?" and t.text[0] != ":":
            raise _unsupported(f"the placeholder {t.text} (use ? or :name)")
    if any(t.kind == "op" and t.text == "/" for t in tokens) and any(
            t.upper == "SUM" and (j := _next_code(tokens, i)) is not None and tokens[j].text == "("
            for i, t in enumerate(tokens)):
        # sum() of integers is numeric on PostgreSQL: a division by it would keep the
        # fraction that SQLite's integer division drops (7 / 2: 3.5 instead of 3)
        raise _unsupported("a division in a statement with sum()")
    tokens = _nulls_as_sqlite(_rewrite_functions(tokens))
    parts = []
    for t in tokens:
        text = t.text
        if t.kind == "ident" and text[0] in "`[":
            inner = text[1:-1] if text[0] == "`" else text[1:-1]
            text = '"' + inner.replace('"', '""') + '"'
        if with_params and t.kind != "param":
            text = text.replace("%", "%%")
        if t.kind == "param":
            text = "%s" if text == "?" else f"%({text[1:]})s"
        parts.append(text)
    return "".join(parts)


# --------------------------------------------------------------------------- column names

STAR = object()  # a ``*`` / ``t.*`` result column: as many names as the table has
_ITEM_END = {"FROM", "WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "UNION", "EXCEPT",
             "INTERSECT", "WINDOW"}
_NOT_ALIAS = {"END", "NULL", "TRUE", "FALSE", "AND", "OR", "NOT", "ELSE", "THEN",
              "CURRENT_TIMESTAMP", "CURRENT_DATE", "CURRENT_TIME", "DISTINCT", "ALL"}


def _unquote(token: Token) -> str:
    text = token.text
    if token.kind == "ident":
        return text[1:-1].replace(text[0] * 2, text[0]) if text[0] in "\"`" else text[1:-1]
    return text


def _item_name(item: list[Token]):
    code = [t for t in item if t.kind not in ("ws", "comment")]
    if not code:
        return None
    names = [t for t in code if t.text not in ("(", ")")]
    if code[-1].text == "*" and all(
            t.kind in ("word", "ident") or t.text == "." for t in code[:-1]):
        return STAR
    if len(code) >= 2 and code[-2].upper == "AS" and code[-1].kind in ("word", "ident"):
        return _unquote(code[-1])
    if all(t.kind in ("word", "ident") or t.text in (".", "(", ")") for t in code) and not any(
            t.upper in _NOT_ALIAS for t in code) and not (
            len(names) > 1 and any(n.text != "." for n in names[1::2])):
        return None  # a column: PostgreSQL names it by the column, as SQLite does
    last, before = code[-1], code[-2] if len(code) >= 2 else None
    if last.kind in ("word", "ident") and last.upper not in _NOT_ALIAS and before is not None \
            and (before.text == ")" or before.kind in ("word", "ident", "number", "string")) \
            and before.upper not in ("AS", "CASE", "WHEN", "ELSE", "THEN", "IS", "NOT"):
        return _unquote(last)  # an alias without AS
    return "".join(t.text for t in item).strip()  # SQLite names it by the text as written


@lru_cache(maxsize=512)
def result_names(sql: str) -> tuple | None:
    """The names SQLite gives the main SELECT's result columns, where PostgreSQL's would
    differ: an alias as written (PostgreSQL folds it to lower case), an expression by its
    text (``COUNT(*)``, where PostgreSQL says ``count``); None for a column (both name it
    by the column) and ``STAR`` for ``*``. None when there is no plain SELECT list."""
    tokens = list(scan(sql).tokens)
    depth, start = 0, None
    for i, t in enumerate(tokens):
        if t.kind == "op" and t.text == "(":
            depth += 1
        elif t.kind == "op" and t.text == ")":
            depth -= 1
        elif depth == 0 and t.upper == "SELECT":
            start = i + 1
            break
    if start is None:
        return None
    items, current, depth = [], [], 0
    for t in tokens[start:]:
        if t.kind == "op" and t.text == "(":
            depth += 1
        elif t.kind == "op" and t.text == ")":
            depth -= 1
        if depth == 0 and (t.upper in _ITEM_END or t.text == ";"):
            break
        if depth == 0 and t.kind == "op" and t.text == ",":
            items.append(current)
            current = []
            continue
        if not items and not any(x.kind not in ("ws", "comment") for x in current) \
                and t.upper in ("DISTINCT", "ALL"):
            continue
        current.append(t)
    items.append(current)
    return tuple(_item_name(item) for item in items)


def sqlite_names(sql: str, server_names: tuple[str, ...]) -> tuple[str, ...]:
    """``server_names`` (PostgreSQL's) with SQLite's spelling where it differs."""
    wanted = result_names(sql)
    if not wanted:
        return server_names
    stars = sum(1 for w in wanted if w is STAR)
    if stars > 1 or len(wanted) - stars > len(server_names):
        return server_names
    width = len(server_names) - (len(wanted) - 1) if stars else 1
    if not stars and len(wanted) != len(server_names):
        return server_names
    names, at = [], 0
    for w in wanted:
        span = width if w is STAR else 1
        if w is None or w is STAR:
            names.extend(server_names[at:at + span])
        else:
            names.append(w)
        at += span
    return tuple(names)
