"""The search concern of ``SessionDB``: ``search_messages`` over the full-text indexes.

The query text goes through ``hermes_store.fts.query``: sanitized (any input yields a
valid FTS5 expression or nothing), then routed:

* Latin/other text → ``messages_fts`` (unicode61, BM25 ``rank``); when that finds
  nothing at all and every term has ≥ 3 characters, the trigram index is tried (a
  word glued to CJK text, ``修改youer服务端``, is one unicode61 token);
* CJK text whose terms all have ≥ 3 characters (and ≥ 3 CJK characters when they
  contain CJK) → ``messages_fts_trigram`` (substring match; it leaves out tool rows
  and cron/subagent/delegate sessions, as upstream does);
* shorter CJK terms → a ``LIKE`` scan bounded to the newest
  ``short_query_scan_rows`` message ids (default 20,000), terms OR-ed, newest first.
  The bound keeps a 1–2 character query from reading a multi-gigabyte table; older
  matches are not found by such a query.

If an index is missing or stale (found damaged and detached from the writes, issue 31
row 1) or a MATCH still fails (a damaged index), the bounded LIKE scan answers instead
and the reason is logged, so a search is never silently empty because of the index.
Every route applies the same filters (visibility, sources, roles) and the same result
shape.

How a route is written in SQL depends on the engine (FTS5 tables on SQLite, a
``tsvector`` column and ``pg_trgm`` on PostgreSQL): the backend's route (``Backend.search``)
hands over the pieces, and the statements below are built from them, once per engine,
index and shape (``search_statements``).
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Iterable

import sqlalchemy as sa

from ..backends.base import backend_of
from ..backends.facets import SearchRoute
from ..fts import query as fq
from ..fts.layout import FTS_TABLE, TRIGRAM_TABLE
from .base import LazyReads, RepositoryBase
from .message_rows import content_preview, decode_content
from ..sql.prebuilt import Prebuilt
from ..sql.values import like_containing
from .search_statements import (
    CONTEXT_CHARS,
    RESULT_KEYS,
    Shape,
    by_time,
    ids_by_time,
    like_details,
    like_page,
    like_rows,
    match_details,
    numbered,
    ranked,
    shape_and_values,
    written_page_size,
)

log = logging.getLogger(__name__)

#: rows the short-CJK LIKE fallback may examine (the newest message ids)
DEFAULT_SHORT_QUERY_SCAN_ROWS = 20_000


def _normalized_sort(sort: Any) -> str | None:
    if isinstance(sort, str) and sort.strip().lower() in ("newest", "oldest"):
        return sort.strip().lower()
    return None


@functools.lru_cache(maxsize=None)
def _present_indexes_query(sql: SearchRoute) -> Prebuilt:
    return Prebuilt(sql.present_indexes)


#: key of the present indexes kept with a server connection (``Connection.info``)
_KNOWN_INDEXES = "hermes_store.search.present_indexes"


def _present_indexes(reads: LazyReads, sql: SearchRoute, use_known: bool
                     ) -> tuple[list[str], bool]:
    """The full-text indexes search may use, and whether the answer was one kept from
    an earlier search on this connection.

    Where the engine allows it (``sql.keeps_present_indexes``: PostgreSQL) the answer
    "both present" is kept with the server connection (``Connection.info``, dropped
    with the connection), saving a round trip per search. It cannot mislead: without an
    index the same conditions are evaluated on the rows (same results, slower), and
    without the full-text columns or functions the statement fails, which
    ``search_messages`` answers by looking again. Any other answer is never kept.
    """
    info = reads.conn.info if sql.keeps_present_indexes else None
    if info is not None and use_known:
        known = info.get(_KNOWN_INDEXES)
        if known is not None:
            return known, True
    present = [name for (name,) in reads.rows(_present_indexes_query(sql),
                                               sql.present_indexes_values, data=False)]
    if info is not None:
        if set(present) == {FTS_TABLE, TRIGRAM_TABLE}:
            info[_KNOWN_INDEXES] = present
        else:
            info.pop(_KNOWN_INDEXES, None)
    return present, False


class SearchMixin(RepositoryBase):
    """``search_messages`` and the sanitizer helpers upstream exposes on the class."""

    #: bound of the short-CJK LIKE fallback (newest message ids examined)
    short_query_scan_rows: int = DEFAULT_SHORT_QUERY_SCAN_ROWS

    _sanitize_fts5_query = staticmethod(fq.sanitize_fts5_query)
    sanitize_fts5_query = staticmethod(fq.sanitize_fts5_query)
    _contains_cjk = staticmethod(fq.contains_cjk)
    _count_cjk = staticmethod(fq.count_cjk)
    _is_cjk_codepoint = staticmethod(fq.is_cjk_codepoint)

    def search_messages(
        self,
        query: str,
        source_filter: list[str] | None = None,
        exclude_sources: list[str] | None = None,
        role_filter: list[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        sort: str | None = None,
        include_inactive: bool = False,
    ) -> list[dict]:
        """Messages matching ``query``, best match first (or ``sort="newest"/"oldest"``).

        Each result: ``id, session_id, role, snippet, timestamp, tool_name, source,
        model, session_started, context`` (``context`` = previous message, the match,
        next message, each ``{"role", "content"}`` cut to 200 characters). Rewound
        rows are left out unless ``include_inactive``; compaction-archived rows are
        kept. ``source_filter=[]`` matches nothing; ``exclude_sources``/``role_filter``
        empty mean no restriction. Never raises for any ``query`` text.
        """
        if not isinstance(query, str) or not query.strip():
            return []
        limit = None if limit is None else int(limit)
        offset = max(0, int(offset or 0))
        if limit == 0:
            return []
        sanitized = fq.sanitize_fts5_query(query)
        shape, values = shape_and_values(source_filter, exclude_sources, role_filter,
                                         include_inactive, limit, offset)
        sort = _normalized_sort(sort)
        answer: dict = {}
        alone = self._joined() is None  # the snapshot is this search's own

        def search(reads: LazyReads, *, known_indexes: bool = True) -> list[dict]:
            answer.clear()
            sql = backend_of(reads.conn).search
            present, answer["known"] = _present_indexes(reads, sql, known_indexes)
            plan = fq.plan_search(sanitized, present)
            if plan is None:
                return []
            if not sql.page_first and (sort is not None or plan.route == fq.ROUTE_LIKE):
                reads.need_snapshot()  # a page of ids, then the page's rows
            rows, index_failed = self._run_plan(reads, sql, plan, shape, values, sort)
            results = [_with_context(row) for row in rows]
            if index_failed and alone:
                raise _ScanAnswered(results)
            return results

        try:
            return self._read_lazily(search)
        except _ScanAnswered as scanned:
            return scanned.results
        except sa.exc.DBAPIError as exc:
            sql = self._backend.search
            if not (answer.get("known") and sql.search_layer_missing(exc)):
                raise
            # the full-text layer went away since this connection last looked: look
            # again (and route accordingly)
            return self._read_lazily(functools.partial(search, known_indexes=False))

    # ------------------------------------------------------------------ routes

    def _run_plan(self, reads: LazyReads, sql: SearchRoute, plan: fq.SearchPlan,
                  shape: Shape, values: dict, sort) -> tuple[list, bool]:
        """The page of rows, and whether a full-text index failed (LIKE answered)."""
        if plan.route == fq.ROUTE_LIKE:
            return self._like_search(reads, sql, plan.like_terms, shape, values), False
        index = TRIGRAM_TABLE if plan.route == fq.ROUTE_TRIGRAM else FTS_TABLE
        try:
            rows = _match_search(reads, sql, index, plan.match, shape, values, sort)
            if rows or plan.retry_trigram is None:
                return rows, False
            if shape.offset:
                first = shape._replace(limited=True, offset=False)
                if _match_search(reads, sql, index, plan.match, first,
                                 {**values, "page_limit": 1}, sort):
                    return rows, False  # past the last page, not "nothing found"
            return _match_search(reads, sql, TRIGRAM_TABLE, plan.retry_trigram, shape, values,
                                 sort), False
        except sa.exc.DatabaseError as exc:
            if not sql.falls_back_to_like:
                raise
            log.warning("full-text search on %s failed (%s); answering %r with the bounded "
                        "LIKE scan instead", index, getattr(exc, "orig", exc), plan.match)
            rows = self._like_search(reads, sql, plan.fallback_like_terms, shape, values)
            return rows, True

    def _like_search(self, reads: LazyReads, sql: SearchRoute, terms: Iterable[str],
                     shape: Shape, values: dict):
        terms = [t for t in terms if t]
        if not terms:
            return []
        values = {**values, **numbered("term", [like_containing(t) for t in terms]),
                  "scan_rows": max(0, int(self.short_query_scan_rows))}
        if sql.page_first:
            statement = like_rows(shape, len(terms))
            rows = _dicts(statement, reads.rows(statement, values))
        else:
            page = [row[0] for row in reads.rows(like_page(shape, len(terms)), values)]
            if not page:
                return []
            details = like_details(len(page))
            rows = _in_page_order(page, _dicts(details, reads.rows(
                details, numbered("page_id", page))))
        # the snippet shows the column that matched, tool name and tool calls included
        for row in rows:
            row["snippet"] = fq.like_snippet(
                (row["content"], row["tool_name"], row["tool_calls"]), terms)
        return rows


class _ScanAnswered(Exception):
    """A full-text index failed and the LIKE scan answered: carried out of the search's
    read snapshot so that it ends in a rollback. FTS5 keeps the error of a failed
    rank-ordered MATCH and reports it once more at COMMIT, where it would read as a
    damaged file."""

    def __init__(self, results: list[dict]) -> None:
        super().__init__("answered by the LIKE scan")
        self.results = results


def _dicts(statement: Prebuilt, rows) -> list[dict]:
    keys = statement.keys
    return [dict(zip(keys, row)) for row in rows]


def _match_search(reads: LazyReads, sql: SearchRoute, index: str, expression: str,
                  shape: Shape, values: dict, sort):
    prepared = sql.prepare(index, expression)
    if prepared is None:
        return []  # nothing searchable left for this engine's index
    form, bound = prepared
    values = {**values, **bound}
    if sort is None:
        best = ranked(sql, index, form, shape, written_page_size(sql, shape, values))
        rows = _with_snippets(sql, index, expression, _dicts(best, reads.rows(best, values)))
        # ties in rank are ordered by id within the page, where it is free
        return sorted(rows, key=lambda row: (row["rank"], row["id"]))
    if sql.page_first:
        timed = by_time(sql, index, form, sort, shape, written_page_size(sql, shape, values))
        return _with_snippets(sql, index, expression, _dicts(timed, reads.rows(timed, values)))
    page = [row[0] for row in reads.rows(ids_by_time(sql, index, form, sort, shape), values)]
    if not page:
        return []
    details = match_details(sql, index, form, len(page))
    return _in_page_order(page, _with_snippets(sql, index, expression, _dicts(details, reads.rows(
        details, {**bound, **numbered("page_id", page)}))))


def _with_snippets(sql: SearchRoute, index: str, expression: str,
                   rows: list[dict]) -> list[dict]:
    """Snippets the engine does not write in SQL (PostgreSQL's: ``text_snippet``)."""
    for row in rows:
        if row["snippet"] is None:
            row["snippet"] = sql.text_snippet(index, expression, row)
    return rows


def _in_page_order(page: list, rows: list[dict]) -> list[dict]:
    """``rows`` in the order of ``page``; an id the first statement gave that the second
    did not find is no result (both run in one snapshot, so only a view of the file that
    is no longer whole does that: the chaos run met it once, in a reader whose log was
    taken away under it — docs/reliability.md, row 3)."""
    by_id = {row["id"]: row for row in rows}
    return [by_id[message_id] for message_id in page if message_id in by_id]


def _with_context(fields: dict) -> dict:
    result = {key: fields[key] for key in RESULT_KEYS}
    around = ((fields["prev_role"], fields["prev_content"]), (result["role"], fields["content"]),
              (fields["next_role"], fields["next_content"]))
    result["context"] = [
        {"role": role, "content": content_preview(decode_content(content))[:CONTEXT_CHARS]}
        for role, content in around if role is not None
    ]
    return result
