"""The full-text route on SQLite: FTS5 tables joined to ``messages`` by rowid.

``SEARCH`` is ``Backend.search`` of the SQLite backend: ``MATCH`` on the sanitized
expression (``hermes_store.fts.query``), FTS5's BM25 ``rank`` and ``snippet()``; the SQL
pieces (``fts_source``, ``match``, ``rank``, ``snippet``, ``available_indexes``) are public
for tests and tools.
"""

from __future__ import annotations

import functools
from typing import Any

import sqlalchemy as sa

from ....fts.layout import FTS_STALE_KEY, FTS_TABLE, TRIGRAM_TABLE
from ....fts.query import SNIPPET_CLOSE, SNIPPET_ELLIPSIS, SNIPPET_OPEN, SNIPPET_TOKENS
from ...facets import SearchRoute

#: which of the two FTS5 tables the open file has and search may use (run with
#: ``PRESENT_INDEXES_VALUES``): none while they are stale (found damaged and detached,
#: ``maintenance.detach_damaged``), so every query takes the bounded LIKE scan, which
#: also finds the messages written since
PRESENT_INDEXES = sa.text(
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (:a, :b) "
    "AND NOT EXISTS (SELECT 1 FROM state_meta WHERE key = :stale)"
)
PRESENT_INDEXES_VALUES = {"a": FTS_TABLE, "b": TRIGRAM_TABLE, "stale": FTS_STALE_KEY}


def available_indexes(conn: sa.Connection) -> frozenset[str]:
    """The FTS5 tables of the open file that search can use."""
    rows = conn.execute(PRESENT_INDEXES, PRESENT_INDEXES_VALUES)
    return frozenset(name for (name,) in rows)


@functools.lru_cache(maxsize=None)
def fts_source(index: str) -> sa.TableClause:
    """The FTS5 table as a FROM item: its ``rowid`` (= messages.id) and ``rank``.

    One object per index, so ``rank(index)`` and a join on ``fts_source(index)`` name
    the same FROM item (two objects would be a cartesian product).
    """
    return sa.table(index, sa.column("rowid"), sa.column("rank"))


def match(index: str, expression: str | sa.BindParameter) -> sa.ColumnElement[bool]:
    """``index MATCH expression``; ``expression`` is the text or a named bind parameter."""
    if not isinstance(expression, sa.BindParameter):
        expression = sa.bindparam(None, expression, type_=sa.Text)
    return sa.literal_column(index).op("MATCH")(expression)


def rank(index: str) -> sa.ColumnElement:
    return fts_source(index).c.rank


def snippet(index: str) -> sa.ColumnElement[str]:
    """Matched tokens in ``>>>…<<<``, ≤ 40 tokens, from the best-matching column."""
    return sa.func.snippet(
        sa.literal_column(index), -1, SNIPPET_OPEN, SNIPPET_CLOSE, SNIPPET_ELLIPSIS,
        SNIPPET_TOKENS, type_=sa.Text,
    )






class SQLiteSearch(SearchRoute):
    """How a full-text route is written on SQLite: the FTS5 table joined to
    ``messages`` by rowid, ``MATCH`` on the sanitized expression, FTS5's BM25 ``rank``
    (best first is ``ORDER BY rank`` alone: FTS5 then hands rows over in that order and
    ``snippet()`` runs for the returned page only) and ``snippet()``.

    The interface is ``backends.base.SearchRoute`` (PostgreSQL's ``PostgresqlSearch`` has the
    same).
    """

    name = "sqlite"
    #: a MATCH that fails (a damaged index) may be answered by the bounded LIKE scan
    falls_back_to_like = True
    #: FTS5 hands matches over best first: the page is read in one pass (see
    #: ``repository.search_statements.ranked``)
    page_first = False
    present_indexes = PRESENT_INDEXES
    present_indexes_values = PRESENT_INDEXES_VALUES
    #: whether "both indexes present" may be kept per connection instead of asked per
    #: search: not here, where a missing FTS5 table must send the search to the LIKE
    #: scan (and asking costs microseconds)
    keeps_present_indexes = False
    #: whether a best-first page's LIMIT is written into the statement
    #: (``repository.search_statements.written_page_size``); here it is bound
    page_size_in_sql = False

    def search_layer_missing(self, exc: BaseException) -> bool:
        """Whether a search statement failed because the full-text layer is gone
        (answered by looking for the indexes again); never on SQLite, where a failed
        MATCH falls back to the LIKE scan instead."""
        return False

    def prepare(self, index: str, expression: str) -> tuple[Any, dict] | None:
        return None, {"expression": expression}

    def source(self, index: str, messages: sa.Table) -> sa.FromClause:
        fts = fts_source(index)
        return fts.join(messages, messages.c.id == fts.c.rowid)

    def row_id(self, index: str, messages: sa.Table) -> sa.ColumnElement:
        return fts_source(index).c.rowid

    def condition(self, index: str, messages: sa.Table, shape) -> sa.ColumnElement[bool]:
        return match(index, sa.bindparam("expression", type_=sa.Text))

    def rank(self, index: str, messages: sa.Table, shape) -> sa.ColumnElement:
        return rank(index)

    def best_first(self, index: str, messages: sa.Table, shape) -> tuple:
        return (rank(index),)

    def snippet(self, index: str, messages: sa.Table, shape) -> sa.ColumnElement | None:
        return snippet(index)

    def text_snippet(self, index: str, expression: str, row: dict) -> str:
        raise NotImplementedError("FTS5 writes its snippets in SQL")  # pragma: no cover


SEARCH = SQLiteSearch()


__all__ = [
    "SEARCH",
    "SQLiteSearch",
    "PRESENT_INDEXES",
    "PRESENT_INDEXES_VALUES",
    "available_indexes",
    "fts_source",
    "match",
    "rank",
    "snippet",
]
