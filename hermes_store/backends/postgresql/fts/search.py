"""The full-text route on PostgreSQL (decision D12): ``Backend.search`` of this backend.

The query text is sanitized and routed exactly as on SQLite (``query.sanitize_fts5_query``,
``query.plan_search`` — the PostgreSQL indexes carry the FTS5 tables' names, so
:func:`available_indexes` answers in the same terms). What differs is how a route is
expressed in SQL:

``ROUTE_FTS`` (word index)
    :func:`tsquery_text` turns the sanitized FTS5 expression into ``to_tsquery`` input:
    terms and phrases become lexemes (split where the document is split: at every run of
    characters that is not a letter or digit), a phrase or a term that splits is joined
    by ``<->``, ``term*`` becomes ``'term':*``, implicit and explicit ``AND`` become
    ``&``, ``OR`` becomes ``|``, FTS5's binary ``a NOT b`` becomes ``a & !b``, with FTS5's
    precedence (NOT, then AND, then OR). :func:`matches` is the ``@@`` condition on
    ``messages.fts_document``; :func:`rank` is ``-ts_rank`` so that, as with FTS5's
    ``rank``, lower is better; :func:`word_snippet` is FTS5's ``snippet()`` computed in
    Python from the row (``fts.snippet``: the same tokens and phrases, the same text as
    SQLite's; ``ts_headline`` marks what *its* parser sees: ``chat-send`` as two marks).
``ROUTE_TRIGRAM`` (substrings, CJK)
    ``PostgresqlSearch.condition``: each term is a case-insensitive substring (``ILIKE``, escaped)
    of the trigram document (:func:`trigram_document`), combined with the same AND/OR/NOT
    rules, restricted to the index's scope (``fts_trigram_scope``) — the shape
    ``messages_fts_trigram`` serves.
``ROUTE_LIKE`` (CJK terms too short for trigrams)
    Needs no index, so it is written once for both engines in ``repository.search``
    (``dialect.like_nocase``: LIKE as SQLite matches it).

Every function takes the ``messages`` table (or an alias of it) whose row is searched,
and returns a Core expression; nothing here executes SQL but :func:`available_indexes`.

:data:`SEARCH` (a :class:`PostgresqlSearch`) packs these pieces behind the interface of
``backends.base.SearchRoute`` (SQLite's is ``SQLiteSearch``), which the repository asks
its backend for (``Backend.search``): the
word route binds the tsquery text as one parameter; the trigram route's statement has
one ``ILIKE`` parameter per term, so its shape is the AND/OR/NOT structure of the terms,
and its snippets (``>>>``/``<<<`` around each matched substring) are cut in Python
(:func:`substring_snippet`). Each hit's neighbours (the context) are LATERAL rows
(``lateral_context``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import sqlalchemy as sa

from ....fts.layout import FTS_TABLE, TOOL_CONTENT_PREFIX_CHARS, TRIGRAM_TABLE
from ....fts.query import (
    FTS_OPERATORS,
    LIKE_SNIPPET_CHARS,
    LIKE_SNIPPET_LEAD,
    SNIPPET_CLOSE,
    SNIPPET_ELLIPSIS,
    SNIPPET_OPEN,
    Term,
    query_terms,
)
from ....fts.snippet import Phrase, SnippetQuery
from ...facets import SearchRoute
from ..errors import sqlstate_of
from .ddl import (
    DOCUMENT_COLUMN,
    TRIGRAM_DOCUMENT_FUNCTION,
    TRIGRAM_INDEX,
    TRIGRAM_SCOPE_COLUMN,
    TS_CONFIG,
    WORD_INDEX,
)

# The sanitized FTS5 expression: "phrases" (with "" escapes) and barewords, either one
# optionally glued to a "*"; whitespace between them.
_ITEM = re.compile(r'(?P<string>"(?:[^"]|"")*")(?P<sprefix>\*)?|(?P<word>[^\s"*]+)(?P<wprefix>\*)?|\S')
#: the tokens a term splits into: runs of letters and digits (the document's rule)
_WORDS = re.compile(r"[^\W_]+")


def _lexemes(text: str) -> list[str]:
    return _WORDS.findall(text)


def _quoted(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _term(text: str, prefix: bool) -> "Phrase | None":
    """One FTS5 term or phrase as its words (as written: ``to_tsquery`` folds the case
    itself); None when it holds no word."""
    words = tuple(_lexemes(text))
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


@functools.lru_cache(maxsize=256)
def tsquery_text(sanitized: str) -> str | None:
    """``to_tsquery('simple', …)`` input for a sanitized FTS5 expression (None: nothing
    searchable is left). Kept per expression, as ``snippet_query``: a search repeated
    (the next page, a refreshed view) need not parse it again."""
    parts = [p for p in (o.render() for o in _operands(sanitized)) if p is not None]
    return " | ".join(parts) if parts else None


@functools.lru_cache(maxsize=256)
def rank_text(sanitized: str) -> str | None:
    """The ``tsquery`` a match is ranked by: every word of the query's positive phrases,
    OR-ed. As BM25 sums each term's score, ``ts_rank`` scores an OR by each word's
    frequency, in one pass over the document; an AND or a phrase makes it pair the
    words' positions, at several times the cost on long messages, for the same first
    page (docs/performance.md, 2026-12-03)."""
    words = []
    for operand in _operands(sanitized):
        if not operand.matchable:
            continue
        for negated, phrase in operand.terms:
            if negated:
                continue
            words += [_quoted(w) for w in phrase.words]
            if phrase.prefix:
                words[-1] += ":*"
    return " | ".join(dict.fromkeys(words)) or None


@functools.lru_cache(maxsize=256)
def snippet_query(sanitized: str) -> SnippetQuery:
    """The query as ``fts.snippet`` takes it: every phrase (lower-cased, in the order
    the expression names them) and the OR-operands as (phrase number, negated).
    Kept per expression (immutable): every hit of a search needs it again."""
    phrases: list[Phrase] = []
    operands = []
    for operand in _operands(sanitized):
        numbered = []
        for negated, phrase in operand.terms:
            numbered.append((len(phrases), negated))
            phrases.append(Phrase(tuple(w.lower() for w in phrase.words), phrase.prefix))
        operands.append(tuple(numbered))
    return SnippetQuery(phrases, operands)


def word_snippet(expression: str, row: dict) -> str:
    """The word route's snippet as FTS5's ``snippet()`` writes it for the same row
    (``fts.snippet``), from the indexed columns: the content (a tool row's first
    ``TOOL_CONTENT_PREFIX_CHARS`` characters), the tool name, the tool calls."""
    content = row["content"]
    if row["role"] == "tool" and isinstance(content, str):
        content = content[:TOOL_CONTENT_PREFIX_CHARS]
    return snippet_query(expression).snippet((content, row["tool_name"], row["tool_calls"]))


# --------------------------------------------------------------------------- SQL pieces


def document(messages: sa.FromClause) -> sa.ColumnElement:
    """The word index's ``tsvector`` column of ``messages`` (not in the Core metadata)."""
    return sa.literal_column(f"{messages.name}.{DOCUMENT_COLUMN}")


def tsquery(expression: str | sa.BindParameter) -> sa.ColumnElement:
    """``to_tsquery('simple', expression)``; ``expression`` is text or a bind parameter."""
    if not isinstance(expression, sa.BindParameter):
        expression = sa.bindparam(None, expression, type_=sa.Text)
    return sa.func.to_tsquery(sa.literal_column(f"'{TS_CONFIG}'::regconfig"), expression)


def matches(messages: sa.FromClause, query: sa.ColumnElement) -> sa.ColumnElement[bool]:
    """The word-index condition (served by ``messages_fts``)."""
    return document(messages).op("@@", return_type=sa.Boolean)(query)


#: ``ts_rank``'s normalization: the rank divided by 1 + the logarithm of the document's
#: length, so that — as FTS5's bm25 does — a short message that holds the terms ranks
#: above a long one that mentions them in passing, while a term said twice still counts
#: (dividing by the length itself, 2, tied "docker … docker" in 15 words with "docker"
#: in 12, where bm25 and upstream's agent pick the first). The best-first page then is
#: SQLite's: 19–20 of its 20 messages for most of the benchmark's queries at 100k,
#: against 0–5 unnormalized (docs/performance.md, 2026-12-03)
RANK_NORMALIZATION = 1


def rank(messages: sa.FromClause, query: sa.ColumnElement) -> sa.ColumnElement:
    """Relevance with FTS5's sign: lower is better (``ORDER BY rank`` = best first)."""
    return -sa.func.ts_rank(document(messages), query,
                            sa.literal_column(str(RANK_NORMALIZATION)), type_=sa.Float)


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def trigram_document(messages: sa.FromClause) -> sa.ColumnElement[str]:
    m = messages.c
    return getattr(sa.func, TRIGRAM_DOCUMENT_FUNCTION)(m.content, m.tool_name, type_=sa.Text)


_PRESENT = sa.text(
    "SELECT relname FROM pg_class WHERE relkind = 'i' AND relname IN (:a, :b) "
    "AND relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())"
)


def available_indexes(conn: sa.Connection) -> frozenset[str]:
    """The indexes search can use, by the FTS5 tables' names (``plan_search``'s terms)."""
    names = {WORD_INDEX: FTS_TABLE, TRIGRAM_INDEX: TRIGRAM_TABLE}
    rows = conn.execute(_PRESENT, {"a": WORD_INDEX, "b": TRIGRAM_INDEX}).scalars()
    return frozenset(names[name] for name in rows)


# --------------------------------------------------------------------------- the routes


def _trigram_groups(terms: list[Term]) -> list[list[tuple[bool, str]]]:
    """The terms as OR-groups of (negated, text), with FTS5's precedence: NOT binds to
    the next term, AND (implicit or written) joins the terms of a group, OR separates
    groups."""
    groups: list[list[tuple[bool, str]]] = [[]]
    negate_next = False
    for term in terms:
        if term.is_operator:
            if term.text == "OR":
                groups.append([])
            negate_next = term.text == "NOT"
            continue
        groups[-1].append((negate_next, term.text))
        negate_next = False
    return [g for g in groups if g]


def _trigram_param(group: int, position: int) -> str:
    return f"trigram_{group}_{position}"


def substring_snippet(texts, terms) -> str:
    """The trigram route's snippet: up to ``LIKE_SNIPPET_CHARS`` characters of the
    first text holding a term (content, then tool name), starting ``LIKE_SNIPPET_LEAD``
    before the first match, each match (any case) marked ``>>>…<<<``, ``...`` where
    the text was cut. No match (cannot happen for a found row): the content's start."""
    terms = sorted({t for t in terms if t}, key=len, reverse=True)
    texts = [t for t in texts if isinstance(t, str) and t]
    if terms:
        pattern = re.compile("|".join(map(re.escape, terms)), re.IGNORECASE)
        for text in texts:
            first = pattern.search(text)
            if first is None:
                continue
            start = max(0, first.start() - LIKE_SNIPPET_LEAD)
            end = min(len(text), max(start + LIKE_SNIPPET_CHARS, first.end()))
            piece = pattern.sub(lambda m: f"{SNIPPET_OPEN}{m.group()}{SNIPPET_CLOSE}",
                                text[start:end])
            return ((SNIPPET_ELLIPSIS if start > 0 else "") + piece
                    + (SNIPPET_ELLIPSIS if end < len(text) else ""))
    return texts[0][:LIKE_SNIPPET_CHARS] if texts else ""


def _once(value: sa.ColumnElement) -> sa.ColumnElement:
    """``value`` (built from bound parameters only) as an uncorrelated scalar subquery:
    PostgreSQL computes it once per execution (an InitPlan), and its planner cannot
    see it.

    Both matter for the search statements. Seen by the planner, a query text makes
    every search plan anew (``plan_cache_mode=auto`` keeps choosing custom plans, as
    their estimates for rare terms are cheaper: docs/postgres.md); unseen, every search
    has the same plan, so the prepared statement's generic plan is kept (the plan shapes
    were the same). And where the value is an expression (``to_tsquery(…)``), a generic plan
    would otherwise evaluate it again for every candidate row (rank, recheck).
    """
    return sa.select(value).scalar_subquery()


#: SQLSTATEs of a statement naming what does not exist: undefined column, function, table
_LAYER_MISSING = frozenset({"42703", "42883", "42P01"})


class PostgresqlSearch(SearchRoute):
    """How a full-text route is written on PostgreSQL (``backends.base.SearchRoute``): the indexes live on ``messages`` itself, so a route's
    source is ``messages`` and its row id ``messages.id``."""

    name = "postgresql"
    #: a failed statement aborts the whole read transaction here, so the LIKE scan
    #: cannot answer in its place (nor is there an index to be damaged: the conditions
    #: are evaluated on the rows when an index is missing)
    falls_back_to_like = False
    #: the matches are sorted by rank here: pick the page from (id, rank) first, read
    #: its rows after (``repository.search_statements.ranked``)
    page_first = True
    present_indexes = _PRESENT
    present_indexes_values = {"a": WORD_INDEX, "b": TRIGRAM_INDEX}
    #: "both present" is kept per connection (``repository.search._present_indexes``):
    #: without an index the conditions are evaluated on the rows, same results; without
    #: the layer's columns or functions the statement fails (``search_layer_missing``)
    keeps_present_indexes = True
    #: the page's LIMIT is written in, so the generic plan is kept
    #: (``repository.search_statements.written_page_size``)
    page_size_in_sql = True
    #: each hit's neighbours as LATERAL subqueries of their rows
    #: (``repository.search_statements._context``)
    lateral_context = True

    def search_layer_missing(self, exc: BaseException) -> bool:
        """A search statement failed on a missing column, function or relation: the
        full-text layer (``fts.postgres.drop_fts``) is gone."""
        return sqlstate_of(exc) in _LAYER_MISSING

    def prepare(self, index: str, expression: str):
        if index == FTS_TABLE:
            text = tsquery_text(expression)
            if text is None:
                return None
            return None, {"expression": text, "rank_expression": rank_text(expression)}
        groups = _trigram_groups(query_terms(expression))
        if not groups:
            return None
        shape = tuple(tuple(negated for negated, _ in group) for group in groups)
        values = {_trigram_param(g, i): f"%{_escape_like(text)}%"
                  for g, group in enumerate(groups) for i, (_, text) in enumerate(group)}
        return shape, values

    def source(self, index: str, messages: sa.Table) -> sa.FromClause:
        return messages

    def row_id(self, index: str, messages: sa.Table) -> sa.ColumnElement:
        return messages.c.id

    @staticmethod
    def _tsquery(name: str = "expression") -> sa.ColumnElement:
        return _once(tsquery(sa.bindparam(name, type_=sa.Text)))

    def condition(self, index: str, messages: sa.Table, shape) -> sa.ColumnElement[bool]:
        if index == FTS_TABLE:
            return matches(messages, self._tsquery())
        doc = trigram_document(messages)
        groups = []
        for g, group in enumerate(shape):
            parts = []
            for i, negated in enumerate(group):
                found = doc.ilike(_once(sa.bindparam(_trigram_param(g, i), type_=sa.Text)),
                                  escape="\\")
                parts.append(sa.not_(found) if negated else found)
            groups.append(sa.and_(*parts))
        scope = sa.literal_column(f"{messages.name}.{TRIGRAM_SCOPE_COLUMN}", sa.Boolean)
        return sa.and_(scope, sa.or_(*groups))

    def rank(self, index: str, messages: sa.Table, shape) -> sa.ColumnElement:
        if index == FTS_TABLE:
            return rank(messages, self._tsquery("rank_expression"))
        # substrings have no relevance here (an expression: PostgreSQL refuses a bare
        # constant in ORDER BY)
        return sa.cast(sa.literal_column("0"), sa.Float)

    def best_first(self, index: str, messages: sa.Table, shape) -> tuple:
        # the id breaks ties, so a page boundary does not depend on the plan
        if index == FTS_TABLE:
            return (self.rank(index, messages, shape), messages.c.id)
        # Substrings have no rank, so this is id order, which the primary key provides:
        # with the pattern unseen (``_once``) the planner would walk the key and test
        # every row until 20 match (the whole table for a rare term: docs/postgres.md).
        # As an expression the order is the index's to serve: its matches are read and
        # sorted, as on the word route.
        return (messages.c.id + 0,)

    def snippet(self, index: str, messages: sa.Table, shape) -> sa.ColumnElement | None:
        # Both routes' snippets are cut in Python from the row (``text_snippet``); on
        # the word route as FTS5's snippet() writes them (``ts_headline`` marks the words
        # its own parser finds, and costs the server a parse per row).
        return None

    def text_snippet(self, index: str, expression: str, row: dict) -> str:
        if index == FTS_TABLE:
            return word_snippet(expression, row)
        terms = [text for group in _trigram_groups(query_terms(expression))
                 for negated, text in group if not negated]
        return substring_snippet((row["content"], row["tool_name"]), terms)


SEARCH = PostgresqlSearch()


__all__ = [
    "SEARCH",
    "PostgresqlSearch",
    "available_indexes",
    "document",
    "matches",
    "rank",
    "rank_text",
    "snippet_query",
    "substring_snippet",
    "trigram_document",
    "tsquery",
    "tsquery_text",
    "word_snippet",
]
