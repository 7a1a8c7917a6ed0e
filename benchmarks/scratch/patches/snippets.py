import sys
root = sys.argv[1]
def edit(path, pairs):
    p = f"{root}/{path}"
    s = open(p).read()
    for old, new in pairs:
        if callable(old):
            s = old(s); continue
        assert old in s, (path, old[:80])
        s = s.replace(old, new)
    open(p, "w").write(s)

NEW_PARSE = '''def _term(text: str, prefix: bool) -> "Phrase | None":
    """One FTS5 term or phrase as its words (lower-cased, as the index holds them);
    None when it holds no word."""
    words = tuple(w.lower() for w in _lexemes(text))
    return Phrase(words, prefix) if words else None


def _rendered(phrase: Phrase) -> str:
    """A phrase as tsquery text: its words joined by ``<->``, ``:*`` on a prefix."""
    lexemes = [_quoted(w) for w in phrase.words]
    if phrase.prefix:
        lexemes[-1] += ":*"
    return lexemes[0] if len(lexemes) == 1 else "(" + " <-> ".join(lexemes) + ")"


@dataclass
class _Operand:
    """One OR-operand: phrases AND-ed, each possibly negated (FTS5's binary NOT)."""

    terms: list[tuple[bool, Phrase]]

    @property
    def matchable(self) -> bool:
        return any(not negated for negated, _ in self.terms)  # else FTS5 matches nothing

    def render(self) -> str | None:
        if not self.matchable:
            return None
        kept = [f"!{_rendered(p)}" if negated else _rendered(p) for negated, p in self.terms]
        return "(" + " & ".join(kept) + ")"


def _operands(sanitized: str) -> list[_Operand]:
    """The sanitized FTS5 expression as OR-operands of (negated, phrase), with FTS5's
    precedence (NOT, then AND, then OR)."""
    operands: list[_Operand] = [_Operand([])]
    negate_next = False
    for m in _ITEM.finditer(sanitized):
        if m.group("string") is not None:
            phrase = _term(m.group("string")[1:-1].replace('""', '"'), bool(m.group("sprefix")))
        elif m.group("word") is not None:
            word = m.group("word")
            if word in FTS_OPERATORS and not m.group("wprefix"):
                if word == "OR":
                    operands.append(_Operand([]))
                    negate_next = False
                elif word == "NOT":
                    negate_next = True
                continue  # AND: the implicit conjunction
            phrase = _term(word, bool(m.group("wprefix")))
        else:
            continue  # a stray character the sanitizer left: no meaning in a tsquery
        if phrase is not None:
            operands[-1].terms.append((negate_next, phrase))
        negate_next = False
    return operands


def tsquery_text(sanitized: str) -> str | None:
    """``to_tsquery('simple', …)`` input for a sanitized FTS5 expression (None: nothing
    searchable is left)."""
    parts = [p for p in (o.render() for o in _operands(sanitized)) if p is not None]
    return " | ".join(parts) if parts else None


def snippet_phrases(sanitized: str) -> list[Phrase]:
    """The phrases a word-route snippet marks: every phrase that is not negated, of
    every operand that can match (what FTS5 reports as the row's phrase instances)."""
    return [phrase for operand in _operands(sanitized) if operand.matchable
            for negated, phrase in operand.terms if not negated]


def word_snippet(expression: str, row: dict) -> str:
    """The word route's snippet as FTS5's ``snippet()`` writes it for the same row
    (``fts.snippet``), from the indexed columns: the content (a tool row's first
    ``TOOL_CONTENT_PREFIX_CHARS`` characters), the tool name, the tool calls."""
    content = row["content"]
    if row["role"] == "tool" and isinstance(content, str):
        content = content[:TOOL_CONTENT_PREFIX_CHARS]
    return snippet_text((content, row["tool_name"], row["tool_calls"]),
                        snippet_phrases(expression))


'''

def replace_parse(s):
    i = s.index("def _term(text: str, prefix: bool) -> str | None:")
    j = s.index("# --------------------------------------------------------------------------- SQL pieces")
    return s[:i] + NEW_PARSE + s[j:]

edit("hermes_store/fts/query_pg.py", [
    (replace_parse, None),
    ("from .query import (\n", "from .snippet import Phrase\nfrom .snippet import snippet as snippet_text\nfrom .query import (\n"),
    ('''    def snippet(self, index: str, messages: sa.Table, shape) -> sa.ColumnElement | None:
        return snippet(messages, self._tsquery()) if index == FTS_TABLE else None

    def text_snippet(self, expression: str, content, tool_name) -> str:
        terms = [text for group in _trigram_groups(query_terms(expression))
                 for negated, text in group if not negated]
        return substring_snippet((content, tool_name), terms)''',
     '''    def snippet(self, index: str, messages: sa.Table, shape) -> sa.ColumnElement | None:
        # Both routes' snippets are cut in Python from the row (``text_snippet``); on
        # the word route as FTS5's snippet() writes them (``ts_headline`` cost ~0.1 ms
        # a row on the server, and marked the words its own parser found).
        return None

    def text_snippet(self, index: str, expression: str, row: dict) -> str:
        if index == FTS_TABLE:
            return word_snippet(expression, row)
        terms = [text for group in _trigram_groups(query_terms(expression))
                 for negated, text in group if not negated]
        return substring_snippet((row["content"], row["tool_name"]), terms)'''),
])
edit("hermes_store/fts/query.py", [
    ('''    def text_snippet(self, expression: str, content: Any, tool_name: Any) -> str:''',
     '''    def text_snippet(self, index: str, expression: str, row: dict) -> str:'''),
])
edit("hermes_store/repository/search.py", [
    ('''def _snippet(sql: fq.Fts5Search, index: str, form) -> sa.ColumnElement:
    written = sql.snippet(index, M, form)  # None: cut in Python (_with_snippets)
    return (written if written is not None else sa.null()).label("snippet")
''', '''def _snippet(sql: fq.Fts5Search, index: str, form) -> tuple[sa.ColumnElement, ...]:
    """The snippet column; where it is cut in Python (``_with_snippets``), NULL and the
    indexed column the row does not carry otherwise (its tool calls)."""
    written = sql.snippet(index, M, form)
    if written is not None:
        return (written.label("snippet"),)
    return (sa.null().label("snippet"), M.c.tool_calls)
'''),
    ("columns = (*_RESULT_COLUMNS, _snippet(sql, index, form), M.c.content, *_CONTEXT_COLUMNS)",
     "columns = (*_RESULT_COLUMNS, *_snippet(sql, index, form), M.c.content, *_CONTEXT_COLUMNS)"),
    ("sa.select(*_RESULT_COLUMNS, _snippet(sql, index, form), M.c.content,",
     "sa.select(*_RESULT_COLUMNS, *_snippet(sql, index, form), M.c.content,"),
    ("rows = _with_snippets(sql, expression, _dicts(ranked,", "rows = _with_snippets(sql, index, expression, _dicts(ranked,"),
    ("return _with_snippets(sql, expression, _dicts(timed,", "return _with_snippets(sql, index, expression, _dicts(timed,"),
    ("_in_page_order(page, _with_snippets(sql, expression, _dicts(details,", "_in_page_order(page, _with_snippets(sql, index, expression, _dicts(details,"),
    ('''def _with_snippets(sql: fq.Fts5Search, expression: str, rows: list[dict]) -> list[dict]:
    """Snippets the engine does not write in SQL (PostgreSQL's substring route)."""
    for row in rows:
        if row["snippet"] is None:
            row["snippet"] = sql.text_snippet(expression, row["content"], row["tool_name"])
    return rows''', '''def _with_snippets(sql: fq.Fts5Search, index: str, expression: str,
                   rows: list[dict]) -> list[dict]:
    """Snippets the engine does not write in SQL (PostgreSQL's: ``text_snippet``)."""
    for row in rows:
        if row["snippet"] is None:
            row["snippet"] = sql.text_snippet(index, expression, row)
    return rows'''),
])
print("ok")
