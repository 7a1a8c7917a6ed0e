"""The full-text route on PostgreSQL (decision D12): ``Backend.search`` of this backend.

The query text is sanitized and routed exactly as on SQLite (``query.sanitize_fts5_query``,
``query.plan_search`` — the PostgreSQL indexes carry the FTS5 tables' names, so
:func:`available_indexes` answers in the same terms). What differs is how a route is
expressed in SQL:

``ROUTE_FTS`` (word index)
    ``fts/tsquery.py`` turns the sanitized FTS5 expression into ``to_tsquery`` input
    (:func:`tsquery_text`, with FTS5's grammar and precedence). :func:`matches` is the
    ``@@`` condition on ``messages.fts_document``; :func:`rank` is ``-relevance`` so that,
    as with FTS5's ``rank``, lower is better (:func:`relevance`: ``ts_rank`` normalized
    by length, with a bound for a long message known from its length alone, so that a
    first page ranks only the matches that can reach it: ``PostgresqlSearch.best_page``);
    :func:`word_snippet` is FTS5's
    ``snippet()`` computed in Python from the row (``fts.snippet``: the same tokens and
    phrases, the same text as SQLite's; ``ts_headline`` marks what *its* parser sees).
``ROUTE_TRIGRAM`` (substrings, CJK)
    ``PostgresqlSearch.condition``: each term is a case-insensitive substring (``ILIKE``,
    escaped; ``LIKE`` for a term without cased letters) of the trigram document
    (:func:`trigram_document`), combined with the same AND/OR/NOT rules, restricted to
    the index's scope (``fts_trigram_scope``) — the shape ``messages_fts_trigram`` serves.
    Its pages are in id order; a first page reads about as many matches as it holds
    where the term is common (``PostgresqlSearch._substring_page``).
``ROUTE_LIKE`` (CJK terms too short for trigrams)
    Needs no index, so it is written once for both engines in ``repository.search``
    (``dialect.like_nocase``: LIKE as SQLite matches it).

Every function takes the ``messages`` table (or an alias of it) whose row is searched,
and returns a Core expression; nothing here executes SQL but :func:`available_indexes`.

:data:`SEARCH` (a :class:`PostgresqlSearch`) packs these pieces behind the interface of
``backends.facets.SearchRoute`` (SQLite's is ``SQLiteSearch``), which the repository asks
its backend for (``Backend.search``): the
word route binds the tsquery text as one parameter; the trigram route's statement has
one ``ILIKE`` parameter per term, so its shape is the AND/OR/NOT structure of the terms,
and its snippets (``>>>``/``<<<`` around each matched substring) are cut in Python
(``substrings.substring_snippet``). Each hit's neighbours (the context) are LATERAL rows
(``lateral_context``).
"""

from __future__ import annotations

import functools
import math

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, aggregate_order_by
from sqlalchemy.sql.util import ClauseAdapter

from ....fts.layout import FTS_TABLE, TOOL_CONTENT_PREFIX_CHARS, TRIGRAM_TABLE
from ....fts.query import query_terms
from ....fts.snippet import Phrase, SnippetQuery
from ...facets import SearchRoute
from ..constructs import before_nul, unescaped
from ..errors import sqlstate_of
from .ddl import (
    DOCUMENT_COLUMN,
    TRIGRAM_DOCUMENT_FUNCTION,
    TRIGRAM_INDEX,
    TRIGRAM_SCOPE_COLUMN,
    TS_CONFIG,
    WORD_INDEX,
)
from .substrings import escape_like, substring_snippet, term_groups
from .tsquery import candidate_text, rank_share, rank_text, tsquery_text
from .tsquery import operands as expression_operands


@functools.lru_cache(maxsize=256)
def snippet_query(sanitized: str) -> SnippetQuery:
    """The query as ``fts.snippet`` takes it: every phrase (lower-cased, in the order
    the expression names them) and the OR-operands as (phrase number, negated).
    Kept per expression (immutable): every hit of a search needs it again."""
    phrases: list[Phrase] = []
    operands = []
    for operand in expression_operands(sanitized):
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
        # as SQLite's substr() cuts it: up to a NUL (so a multimodal output is empty)
        content = content.split("\x00", 1)[0][:TOOL_CONTENT_PREFIX_CHARS]
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
    return matches_vector(document(messages), query)


def matches_vector(vector: sa.ColumnElement, query: sa.ColumnElement) -> sa.ColumnElement[bool]:
    """``vector @@ query``: a ``tsvector`` read elsewhere matches the query."""
    return vector.op("@@", return_type=sa.Boolean)(query)


#: ``ts_rank``'s normalization: the rank divided by 1 + the logarithm of the document's
#: length, so that — as FTS5's bm25 does — a short message that holds the terms ranks
#: above a long one that mentions them in passing, while a term said twice still counts
#: (dividing by the length itself, 2, tied "docker … docker" in 15 words with "docker"
#: in 12, where bm25 and upstream's agent pick the first). The best-first page then is
#: SQLite's: 19–20 of its 20 messages for most of the benchmark's queries at 100k,
#: against 0–5 unnormalized (docs/performance.md, 2026-12-03)
RANK_NORMALIZATION = 1
#: A long message (content over ``LONG_BYTES`` bytes, where the vector may be
#: stored out of line) counts at least one word per ``BYTES_PER_WORD`` bytes: its rank is
#: at most what the fewest words a match holds (``tsquery.rank_share``), each said ever
#: more often (``RANK_CAP``), rank in that many words — a bound known from the row's
#: length alone, before its vector is read (``PostgresqlSearch.best_page``). Text has
#: words of a few bytes: only a long message of longer ones (a run of CJK, an encoded
#: blob), or holding more of an OR's words or a prefix's, ranks lower than ``ts_rank``
#: alone would rank it.
LONG_BYTES, BYTES_PER_WORD, RANK_CAP = 2048, 64, 0.1
#: a first page is picked from this many pages of matches (long ones at their bound)
FIRST_PAGES = 4
#: the trigram route's first page (``PostgresqlSearch._substring_page``): reading one
#: match's heap page costs about what this many ids of the primary key's range cost in
#: a bitmap (25–45 on the benchmark machine: docs/performance.md)
IDS_PER_MATCH_READ = 32
#: its three ways: the first matches read are all of them; the key's range up to the
#: largest of theirs; every match, sorted
_WHOLE, _NARROW, _EVERY = 0, 1, 2
#: the word route's shape (``PostgresqlSearch.prepare``) for an expression with a phrase
#: (``tsquery.candidate_text``): its first page checks a long match's word order only
#: where the match can reach the page (``PostgresqlSearch.best_page``)
PHRASED = "phrased"


def _sql(value) -> sa.ColumnElement:
    """A constant written into the statement (not a parameter: the plan stays one)."""
    return sa.literal_column(repr(value) + ("::float8" if isinstance(value, float) else ""),
                             sa.Float if isinstance(value, float) else sa.Integer)


def indexed_bytes(messages: sa.FromClause) -> sa.ColumnElement:
    """The length of a row's content in bytes, read without decompressing it
    (``octet_length``); NULL without content (never a long row)."""
    return sa.func.octet_length(messages.c.content)


def _divided(a: sa.ColumnElement, b: sa.ColumnElement) -> sa.ColumnElement:
    """``a / b`` in double precision, written without the CASTs SQLAlchemy adds (the
    statement is kept short: psycopg keeps the parsed form of one of up to 4 kB only)."""
    return a.op("/", precedence=8, return_type=sa.Float)(b)  # 8: as SQLAlchemy's own /


def _words_norm(nbytes: sa.ColumnElement) -> sa.ColumnElement:
    """ln(1 + ``nbytes`` ÷ ``BYTES_PER_WORD``): the least length normalization (× ln 2)."""
    return sa.func.ln(_sql(1.0) + _divided(nbytes, _sql(float(BYTES_PER_WORD))),
                      type_=sa.Float)


def _ts_rank(vector: sa.ColumnElement, query: sa.ColumnElement) -> sa.ColumnElement:
    return sa.func.ts_rank(vector, query, _sql(RANK_NORMALIZATION), type_=sa.Float)


def relevance_bound(norm: sa.ColumnElement) -> sa.ColumnElement:
    """What no long row's relevance exceeds, from its ``_words_norm`` alone (the bound
    parameter ``rank_bound``: ``RANK_CAP`` × the query's ``rank_share`` × ln 2)."""
    return _divided(sa.bindparam("rank_bound", type_=sa.Float), norm)


def relevance(messages: sa.FromClause, query: sa.ColumnElement) -> sa.ColumnElement:
    """A match's relevance (higher is better): ``ts_rank`` normalized by length, at most
    ``relevance_bound`` for a long row (``LONG_BYTES`` above)."""
    nbytes = indexed_bytes(messages)
    return sa.func.least(_ts_rank(document(messages), query), sa.case(  # NULL: no bound
        (nbytes > _sql(LONG_BYTES), relevance_bound(_words_norm(nbytes)))), type_=sa.Float)


def rank(messages: sa.FromClause, query: sa.ColumnElement) -> sa.ColumnElement:
    """Relevance with FTS5's sign: lower is better (``ORDER BY rank`` = best first)."""
    return -relevance(messages, query)


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


def _trigram_param(group: int, position: int) -> str:
    return f"trigram_{group}_{position}"


def _trigram_found(doc: sa.ColumnElement, shape, *, positive: bool = False):
    """The terms found in ``doc`` (``positive``: the positive ones, what the index serves)."""
    groups = []
    for g, group in enumerate(shape):
        parts = []
        for i, (negated, caseless) in enumerate(group):
            if not (negated and positive):
                pattern = _once(sa.bindparam(_trigram_param(g, i), type_=sa.Text))
                # a term without cased letters (CJK) is found alike in either case: LIKE
                # compares bytes, where ILIKE folds every candidate's text first
                # (escaped with backslashes, PostgreSQL's default: ``escape_like``)
                found = (doc.like if caseless else doc.ilike)(pattern)
                parts.append(sa.not_(found) if negated else found)
        groups.append(sa.and_(sa.true(), *parts))
    return sa.or_(*groups)


def _once(value: sa.ColumnElement) -> sa.ColumnElement:
    """``value`` (built from bound parameters, or read from a CTE of the statement) as an
    uncorrelated scalar subquery: PostgreSQL computes it once per execution (an
    InitPlan), and its planner cannot see it (``_substring_page`` gates its branches so).

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
    """How a full-text route is written on PostgreSQL (``backends.facets.SearchRoute``):
    the indexes live on ``messages`` itself, so a route's source is ``messages`` and its
    row id ``messages.id``."""

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
            values = {"expression": text, "rank_expression": rank_text(expression),
                      "rank_bound": RANK_CAP * rank_share(expression) * math.log(2)}
            candidates = candidate_text(expression)
            if candidates is None:
                return None, values
            # a phrase: its words' order is checked where the vector is at hand
            # (``best_page``); the shape names the statement that does so
            return PHRASED, {**values, "candidates": candidates}
        groups = term_groups(query_terms(expression))
        if not groups:
            return None
        # per term: negated, and whether it has no cased letter (``_trigram_found``)
        shape = tuple(tuple((negated, text.lower() == text.upper() == text.casefold())
                            for negated, text in group) for group in groups)
        values = {_trigram_param(g, i): f"%{escape_like(text)}%"
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
        m = messages.c
        scope = sa.literal_column(f"{messages.name}.{TRIGRAM_SCOPE_COLUMN}", sa.Boolean)
        found = _trigram_found(trigram_document(messages), shape)
        # FTS5's trigram tokenizer reads each text up to its first NUL: a row holding
        # one (rare) is matched again on what SQLite indexed
        plain = sa.and_(unescaped(m.content), unescaped(m.tool_name))
        as_sqlite = _trigram_found(getattr(sa.func, TRIGRAM_DOCUMENT_FUNCTION)(
            before_nul(m.content), before_nul(m.tool_name), type_=sa.Text), shape)
        if not any(negated for group in shape for negated, _ in group):
            # every row SQLite finds holds the terms here too: the index's candidates
            return sa.and_(scope, found, sa.or_(plain, as_sqlite))
        candidates = _trigram_found(trigram_document(messages), shape, positive=True)
        return sa.and_(scope, candidates, sa.case((plain, found), else_=as_sqlite))

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

    def best_page(self, index: str, messages: sa.Table, shape, source: sa.FromClause,
                  filters: tuple, rows: int | None) -> sa.Select:
        """A first page of the word route, ranking only what can reach it (the trigram
        route's: ``_substring_page``).

        Ranking reads a match's ``tsvector``; a long message's is stored out of line, and
        reading those was most of a search for a word found in many long tool outputs.
        So ``FIRST_PAGES`` pages of matches are picked first with every long match
        (``LONG_BYTES``) at its bound (``relevance_bound``: from its length alone, never
        below its relevance), its vector unread; then the long ones among them are
        ranked. When the page-th best relevance there is above the last one's bound or
        relevance, no match outside them can reach the page (or they are all the
        matches): the page is theirs. Otherwise the matches are ranked again, once,
        with that relevance as the threshold: a long match whose bound is below it still
        cannot reach the page and keeps its bound.

        A phrase (``shape`` ``PHRASED``) is found by GIN only with the words' order
        checked on each candidate's vector, and a long message's is stored out of line:
        reading those was most of a search for a phrase found in long tool outputs. So
        the first pages are picked from the candidates (``tsquery.candidate_text``:
        the words in any order, which GIN answers alone), a short one's order checked
        as it is read, a long one's only once it is among them (``hit``): a long
        candidate that is no match takes a place there, no page. The page is the one
        ranking every match gives (tested)."""
        if rows is None:
            return super().best_page(index, messages, shape, source, filters, rows)
        if index != FTS_TABLE:
            return self._substring_page(index, messages, shape, source, filters, rows)
        # Written once each (``_divided``; short names: the statement's length counts):
        # the queries, in a one-row CTE (q), and the row's length, in a LATERAL subquery (z);
        # p1: the first pages, e1: their relevances, f1: the threshold, p2: the page
        phrased = shape == PHRASED
        named = (("expression", "m"), ("rank_expression", "r"),
                 *((("candidates", "c"),) if phrased else ()))
        queries = sa.select(*(sa.func.to_tsquery(sa.literal_column(f"'{TS_CONFIG}'"),
                                                 sa.bindparam(name, type_=sa.Text)).label(label)
                              for name, label in named)).cte("q")
        subquery = {label: sa.select(column).scalar_subquery()
                    for (_, label), column in zip(named, queries.c)}
        match_query, query = subquery["m"], subquery["r"]
        full = matches(messages, match_query)
        length = sa.select(indexed_bytes(messages).label("n")).correlate(messages).subquery("b")
        # the bound of a long one only (a short one is ranked): a logarithm less per match
        long_row = length.c.n > _sql(LONG_BYTES)
        sized = (sa.select(long_row.label("long"), sa.case(
                     (long_row, relevance_bound(_words_norm(length.c.n)))).label("bound"))
                 .correlate(messages).lateral("z"))
        source, long = source.join(sized, sa.true()), sized.c.long
        bound, exact = sized.c.bound, _ts_rank(document(messages), query)
        key = (-sa.case((long, bound), else_=exact)).label("key1")
        # the vector of a long one only, to be ranked (a short one's rank is its key)
        vector = sa.case((long, document(messages))).label("vector")
        # a phrase's candidates: its order checked now where the vector is in the row
        found = sa.and_(matches(messages, subquery["c"]), sa.or_(long, full)) if phrased \
            else full
        first = (sa.select(self.row_id(index, messages).label("page_id"), key, long, vector,
                           bound)
                 .select_from(source).where(found, *filters)
                 .order_by(key, messages.c.id).limit(FIRST_PAGES * rows).cte("p1"))
        ranked = sa.case((first.c.long, sa.func.least(_ts_rank(first.c.vector, query),
                                                      first.c.bound)),
                         else_=-first.c.key1)
        # a match (``phrased``: a long candidate's order checked here, vector in hand)
        hit = (sa.or_(sa.not_(first.c.long), matches_vector(first.c.vector, match_query))
               .label("hit"),) if phrased else ()
        exacts = sa.select(first.c.page_id, first.c.key1, first.c.long,
                           ranked.label("exact"), *hit).cte("e1")
        # the page-th best relevance among the matches; of all of them: how many, the
        # last one's key, any long
        best = sa.func.array_agg(aggregate_order_by(exacts.c.exact,
                                                    exacts.c.exact.desc().nulls_last()),
                                 type_=ARRAY(sa.Float))
        if phrased:
            best = best.filter(exacts.c.hit)
        seen = sa.select(best[rows].label("f"), sa.func.count().label("n"),
                         sa.func.max(exacts.c.key1).label("k"),
                         sa.func.bool_or(exacts.c.long).label("l")).subquery("s")
        # a tie with the last one is settled by the id, which only a long one's bound hides
        done = sa.or_(seen.c.n < _sql(FIRST_PAGES * rows), seen.c.f > -seen.c.k,
                      sa.and_(seen.c.f == -seen.c.k, sa.not_(seen.c.l)))
        stats = sa.select(sa.func.coalesce(done, sa.false()).label("done"),
                          seen.c.f.label("floor")).cte("f1")
        done = sa.select(stats.c.done).scalar_subquery()
        beyond = sa.and_(long, bound < sa.select(stats.c.floor).scalar_subquery())
        kept = sa.select(exacts.c.page_id, -exacts.c.exact).where(
            done, *((exacts.c.hit,) if phrased else ()))
        again = (sa.select(self.row_id(index, messages), -sa.case(
                     (beyond, bound), else_=sa.func.least(exact, sa.case((long, bound)))))
                 .select_from(source)
                 .where(sa.not_(done), full, *filters))
        page = sa.union_all(kept, again).subquery("p2")
        page_id, page_rank = page.c
        return (sa.select(page_id.label("page_id"), page_rank.label("page_rank"))
                .order_by(page_rank, page_id))

    def _substring_page(self, index: str, messages: sa.Table, shape, source: sa.FromClause,
                        filters: tuple, rows: int) -> sa.Select:
        """A first page of the trigram route: the ``rows`` matches of smallest id, reading
        about as many matches as the page holds when the term is common.

        Sorting every match by id reads each one's heap page (the ``LIKE`` recheck, the
        filters): a CJK term in one message in seventy was 1,365 pages a page. So the
        first ``rows`` matches are read as the index hands them over (``t1``: the
        order they are stored in, which is about id order, as messages are appended).
        Fewer than ``rows``: they are every match. Otherwise ``rows`` matches have an id
        up to the largest of theirs (x), so the page is the smallest ids among the
        matches of the key's range from the table's first id to x, read through the
        primary key and the trigram index together (a ``BitmapAnd``); where that range
        is too wide to pay (``IDS_PER_MATCH_READ``), every match is sorted as before.
        Each way the page is the one sorting every match gives (tested); the order
        things are stored in decides the cost only."""
        # the matches are read three ways: under a one-letter name, the statement stays
        # short enough for psycopg to keep its parsed form (4 kB: ``_divided``)
        short = messages.alias("m")
        m, adapted = short.c, ClauseAdapter(short).traverse
        source, filters = adapted(source), tuple(adapted(f) for f in filters)

        def matching() -> sa.Select:
            return (sa.select(m.id.label("page_id")).select_from(source)
                    .where(self.condition(index, short, shape), *filters))

        first = matching().limit(rows).cte("t1")
        seen = sa.select(sa.func.count().label("n"),
                         sa.func.max(first.c.page_id).label("x")).subquery("s")
        ends = sa.select(sa.func.min(m.id).label("lo"), sa.func.max(m.id).label("hi")) \
            .subquery("e")
        # the way the page is read (``_WHOLE``, ``_NARROW``, ``_EVERY``): matches expected in
        # all ≈ rows × (hi − lo) ÷ (x − lo); reading the key's range of x − lo ids pays
        # when it costs less than reading each of them
        width = sa.cast(seen.c.x - ends.c.lo, sa.Float)
        way = sa.case(
            (seen.c.n < _sql(rows), _sql(_WHOLE)),
            (width * width < _sql(float(IDS_PER_MATCH_READ * rows)) * (ends.c.hi - ends.c.lo),
             _sql(_NARROW)),
            else_=_sql(_EVERY))
        gate = (sa.select(seen.c.x, ends.c.lo, way.label("way"))
                .select_from(seen.join(ends, sa.true())).cte("t2"))

        def read(this_way: int) -> sa.ColumnElement[bool]:
            return _once(gate.c.way) == _sql(this_way)

        page = sa.union_all(
            sa.select(first.c.page_id).where(read(_WHOLE)),
            matching().where(read(_NARROW), m.id.between(_once(gate.c.lo), _once(gate.c.x))),
            matching().where(read(_EVERY)),
        ).subquery("p")
        return (sa.select(page.c.page_id, self.rank(index, messages, shape).label("page_rank"))
                .order_by(page.c.page_id))

    def snippet(self, index: str, messages: sa.Table, shape) -> sa.ColumnElement | None:
        # Both routes' snippets are cut in Python from the row (``text_snippet``); on
        # the word route as FTS5's snippet() writes them (``ts_headline`` marks the words
        # its own parser finds, and costs the server a parse per row).
        return None

    def text_snippet(self, index: str, expression: str, row: dict) -> str:
        if index == FTS_TABLE:
            return word_snippet(expression, row)
        return substring_snippet((row["content"], row["tool_name"]), expression)


SEARCH = PostgresqlSearch()


__all__ = [
    "PHRASED",
    "SEARCH",
    "PostgresqlSearch",
    "available_indexes",
    "candidate_text",
    "document",
    "indexed_bytes",
    "matches",
    "matches_vector",
    "rank",
    "rank_text",
    "relevance",
    "relevance_bound",
    "snippet_query",
    "trigram_document",
    "tsquery",
    "tsquery_text",
    "word_snippet",
]
