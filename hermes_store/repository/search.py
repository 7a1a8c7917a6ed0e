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

If an index is missing or a MATCH still fails (a damaged index), the bounded LIKE
scan answers instead and the reason is logged, so a search is never silently empty
because of the index. Every route applies the same filters (visibility, sources,
roles) and the same result shape.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

import sqlalchemy as sa

from .. import schema
from ..fts import query as fq
from ..fts.ddl import FTS_TABLE, TRIGRAM_TABLE
from .base import RepositoryBase
from .messages import content_preview, decode_content
from .values import scrub_surrogates

log = logging.getLogger(__name__)

M = schema.messages
S = schema.sessions

#: characters of each neighbouring message shown in a result's ``context``
CONTEXT_CHARS = 200
#: rows the short-CJK LIKE fallback may examine (the newest message ids)
DEFAULT_SHORT_QUERY_SCAN_ROWS = 20_000

_RESULT_COLUMNS = (
    M.c.id, M.c.session_id, M.c.role, M.c.timestamp, M.c.tool_name,
    S.c.source, S.c.model, S.c.started_at.label("session_started"),
)
_RESULT_KEYS = ("id", "session_id", "role", "snippet", "timestamp", "tool_name", "source",
                "model", "session_started")


def _normalized_sort(sort: Any) -> str | None:
    if isinstance(sort, str) and sort.strip().lower() in ("newest", "oldest"):
        return sort.strip().lower()
    return None


def _as_list(values: Any) -> list | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    # stored text never holds lone surrogates (and the driver cannot bind them)
    return [scrub_surrogates(v) for v in values]


def _page(stmt, limit: int | None, offset: int):
    if limit is not None and limit >= 0:
        stmt = stmt.limit(limit)
    if offset and offset > 0:
        stmt = stmt.offset(offset)
    return stmt


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
        with self._read() as conn:
            plan = fq.plan_search(sanitized, fq.available_indexes(conn))
            if plan is None:
                return []
            filters = self._search_filters(source_filter, exclude_sources, role_filter,
                                           include_inactive)
            rows = self._run_plan(conn, plan, filters, _normalized_sort(sort), limit, offset)
            return [self._with_context(conn, row) for row in rows]

    # ------------------------------------------------------------------ routes

    @staticmethod
    def _search_filters(source_filter, exclude_sources, role_filter,
                        include_inactive) -> list[sa.ColumnElement]:
        filters: list[sa.ColumnElement] = []
        if not include_inactive:
            filters.append(schema.VISIBLE_MESSAGE)
            # rows a UI marked hidden (display_kind) are not part of the conversation
            filters.append(sa.func.coalesce(M.c.display_kind, "") != "hidden")
        sources = _as_list(source_filter)
        if sources is not None:
            filters.append(S.c.source.in_(sources))
        excluded = _as_list(exclude_sources)
        if excluded:
            filters.append(S.c.source.not_in(excluded))
        roles = _as_list(role_filter)
        if roles:
            filters.append(M.c.role.in_(roles))
        return filters

    def _run_plan(self, conn, plan: fq.SearchPlan, filters, sort, limit, offset) -> list:
        if plan.route == fq.ROUTE_LIKE:
            return self._like_search(conn, plan.like_terms, filters, limit, offset)
        index = TRIGRAM_TABLE if plan.route == fq.ROUTE_TRIGRAM else FTS_TABLE
        try:
            rows = self._match_search(conn, index, plan.match, filters, sort, limit, offset)
            if rows or plan.retry_trigram is None:
                return rows
            if offset and self._match_search(conn, index, plan.match, filters, sort, 1, 0):
                return rows  # past the last page, not "nothing found"
            return self._match_search(conn, TRIGRAM_TABLE, plan.retry_trigram, filters,
                                      sort, limit, offset)
        except sa.exc.DatabaseError as exc:
            log.warning("full-text search on %s failed (%s); answering %r with the bounded "
                        "LIKE scan instead", index, getattr(exc, "orig", exc), plan.match)
            return self._like_search(conn, plan.fallback_like_terms, filters, limit, offset)

    @staticmethod
    def _match_search(conn, index: str, expression: str, filters, sort, limit, offset):
        source = fq.fts_source(index)
        rank = fq.rank(index)
        if sort == "newest":
            order = (M.c.timestamp.desc(), rank, M.c.id)
        elif sort == "oldest":
            order = (M.c.timestamp.asc(), rank, M.c.id)
        else:
            order = (rank, M.c.id)
        stmt = (
            sa.select(*_RESULT_COLUMNS, fq.snippet(index).label("snippet"), M.c.content)
            .select_from(source.join(M, M.c.id == source.c.rowid)
                         .join(S, S.c.id == M.c.session_id))
            .where(fq.match(index, expression), *filters)
            .order_by(*order)
        )
        return conn.execute(_page(stmt, limit, offset)).all()

    def _like_search(self, conn, terms: Iterable[str], filters, limit, offset):
        terms = [t for t in terms if t]
        if not terms:
            return []
        newest_id = sa.select(sa.func.max(M.c.id)).scalar_subquery()
        # ids only grow (AUTOINCREMENT), so this is a bounded range scan of the key
        in_window = M.c.id > newest_id - max(0, int(self.short_query_scan_rows))
        any_term = sa.or_(*(
            sa.or_(M.c.content.contains(t, autoescape=True),
                   M.c.tool_name.contains(t, autoescape=True),
                   M.c.tool_calls.contains(t, autoescape=True))
            for t in terms
        ))
        stmt = (
            sa.select(*_RESULT_COLUMNS, fq.like_snippet(M.c.content, terms[0]).label("snippet"),
                      M.c.content)
            .select_from(M.join(S, S.c.id == M.c.session_id))
            .where(in_window, any_term, *filters)
            .order_by(M.c.timestamp.desc(), M.c.id.desc())
        )
        return conn.execute(_page(stmt, limit, offset)).all()

    # ------------------------------------------------------------------ context

    @staticmethod
    def _with_context(conn, row) -> dict:
        result = {key: getattr(row, key) for key in _RESULT_KEYS}
        try:
            same_session = M.c.session_id == row.session_id
            before = sa.or_(M.c.timestamp < row.timestamp,
                            sa.and_(M.c.timestamp == row.timestamp, M.c.id < row.id))
            after = sa.or_(M.c.timestamp > row.timestamp,
                           sa.and_(M.c.timestamp == row.timestamp, M.c.id > row.id))
            prev = conn.execute(
                sa.select(M.c.role, M.c.content).where(same_session, before)
                .order_by(M.c.timestamp.desc(), M.c.id.desc()).limit(1)
            ).first()
            nxt = conn.execute(
                sa.select(M.c.role, M.c.content).where(same_session, after)
                .order_by(M.c.timestamp, M.c.id).limit(1)
            ).first()
            neighbours = [prev, (row.role, row.content), nxt]
            result["context"] = [
                {"role": role, "content": content_preview(decode_content(content))[:CONTEXT_CHARS]}
                for role, content in (n for n in neighbours if n is not None)
            ]
        except sa.exc.DatabaseError as exc:
            log.warning("search context for message %s unavailable: %s", row.id, exc)
            result["context"] = []
        return result
