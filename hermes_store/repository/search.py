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

How a route is written in SQL depends on the engine (FTS5 tables on SQLite, a
``tsvector`` column and ``pg_trgm`` on PostgreSQL): the backend's route (``Backend.search``)
hands over the pieces, and the statements below are built from them, once per engine,
index and shape.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Iterable, NamedTuple

import sqlalchemy as sa

from .. import schema
from ..backends.base import backend_of
from ..errors import DatabaseDamagedError
from ..fts import query as fq
from ..fts.layout import FTS_TABLE, TRIGRAM_TABLE
from .base import LazyReads, RepositoryBase
from ..sql.constructs import like_nocase
from .message_rows import content_preview, decode_content
from ..sql.prebuilt import Prebuilt
from ..sql.values import LIKE_ESCAPE, like_containing, scrub_surrogates

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


def _nearest(before: bool) -> tuple:
    """(a ``probe`` alias of messages, the condition that it lies before (after) the
    hit in (timestamp, id) order, the order that puts the nearest first).

    A row-value comparison, not ``t < :t OR (t = :t AND id < :id)``: SQLite turns it into
    a range of ``idx_messages_session`` (session_id, timestamp; the id rides along as
    the rowid), where the OR walked the session from one end — 6 ms per neighbour in a
    20,000-message session, against microseconds.
    """
    probe = M.alias("probe")
    position = sa.tuple_(probe.c.timestamp, probe.c.id)
    hit = sa.tuple_(M.c.timestamp, M.c.id)
    if before:
        return probe, position < hit, (probe.c.timestamp.desc(), probe.c.id.desc())
    return probe, position > hit, (probe.c.timestamp.asc(), probe.c.id.asc())


@functools.lru_cache(maxsize=None)
def _neighbour_id(before: bool) -> sa.ScalarSelect:
    """The id of the message just before (after) the hit in its session, by
    (timestamp, id), whatever its visibility."""
    probe, nearer, order = _nearest(before)
    return (sa.select(probe.c.id).where(probe.c.session_id == M.c.session_id, nearer)
            .order_by(*order).limit(1).scalar_subquery())


# The context travels in the result query (two index probes per returned row) rather
# than in two statements per hit: 40 round trips through SQLAlchemy cost more than the
# whole search. Built on first use (a process that never searches does not pay for it
# at start-up).
@functools.lru_cache(maxsize=None)
def _neighbours() -> tuple:
    """(previous message alias, next message alias, the context columns)."""
    prev, nxt = M.alias("prev_message"), M.alias("next_message")
    columns = (
        prev.c.role.label("prev_role"), prev.c.content.label("prev_content"),
        nxt.c.role.label("next_role"), nxt.c.content.label("next_content"),
    )
    return prev, nxt, columns


def _context_columns() -> tuple:
    return _neighbours()[2]


def _with_neighbours(from_clause):
    """``from_clause`` (which holds ``messages``) joined to each hit's neighbours."""
    prev, nxt, _ = _neighbours()
    return (from_clause.outerjoin(prev, prev.c.id == _neighbour_id(True))
            .outerjoin(nxt, nxt.c.id == _neighbour_id(False)))


def _neighbour_row(before: bool) -> sa.Lateral:
    """The message just before (after) the hit, as a LATERAL subquery of its role and
    content: one index probe per neighbour, where ``_with_neighbours`` probes for the
    id and then reads the row by its key."""
    probe, nearer, order = _nearest(before)
    return (sa.select(probe.c.role, probe.c.content)
            .where(probe.c.session_id == M.c.session_id, nearer)
            .order_by(*order).limit(1).lateral("prev_message" if before else "next_message"))


@functools.cache
def _lateral_context():
    """The LATERAL neighbours' columns and the join that brings them (built on first use:
    only an engine with LATERAL asks, and a cold start need not pay for them)."""
    before, after = _neighbour_row(True), _neighbour_row(False)
    columns = (before.c.role.label("prev_role"), before.c.content.label("prev_content"),
               after.c.role.label("next_role"), after.c.content.label("next_content"))
    return columns, lambda from_clause: (
        from_clause.outerjoin(before, sa.true()).outerjoin(after, sa.true()))


def _context(sql: fq.Fts5Search):
    """(the context columns, the join that brings them) for the engine: LATERAL where
    it has it (``sql.lateral_context``), else the probe-for-id joins."""
    if not sql.lateral_context:
        return _context_columns(), _with_neighbours
    return _lateral_context()


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


class _Shape(NamedTuple):
    """What a search's statements depend on besides bound values: one statement is
    built (and compiled once) per shape, not per search. A filter list's length is part
    of the shape (one parameter per value), so the statement needs no expanding IN."""

    visible_only: bool
    sources: int | None  # len(source_filter); None: no filter ([] matches nothing)
    excluded: int  # len(exclude_sources)
    roles: int  # len(role_filter)
    limited: bool
    offset: bool


# Names of the filters' parameters: not a column's name, which SQLAlchemy gives its own
# anonymous parameters (``role_1`` for ``role = 'tool'`` in PostgreSQL's snippet).
_SOURCES, _EXCLUDED, _ROLES = "only_source", "not_source", "only_role"


def _numbered(name: str, values: list | None) -> dict:
    return {f"{name}_{i}": value for i, value in enumerate(values or ())}


def _shape_and_values(source_filter, exclude_sources, role_filter, include_inactive,
                      limit, offset) -> tuple[_Shape, dict]:
    sources, excluded, roles = (_as_list(source_filter), _as_list(exclude_sources),
                                _as_list(role_filter))
    shape = _Shape(visible_only=not include_inactive,
                   sources=None if sources is None else len(sources),
                   excluded=len(excluded or ()), roles=len(roles or ()),
                   limited=limit is not None and limit >= 0, offset=offset > 0)
    values = {**_numbered(_SOURCES, sources), **_numbered(_EXCLUDED, excluded),
              **_numbered(_ROLES, roles), "page_limit": limit, "page_offset": offset}
    return shape, values


def _params(name: str, count: int) -> list[sa.BindParameter]:
    return [sa.bindparam(f"{name}_{i}", type_=sa.Text) for i in range(count)]


def _filters(shape: _Shape) -> list[sa.ColumnElement]:
    filters: list[sa.ColumnElement] = []
    if shape.visible_only:
        filters.append(schema.VISIBLE_MESSAGE)
        # rows a UI marked hidden (display_kind) are not part of the conversation
        filters.append(sa.func.coalesce(M.c.display_kind, "") != "hidden")
    if shape.sources is not None:
        filters.append(S.c.source.in_(_params(_SOURCES, shape.sources)) if shape.sources
                       else sa.false())
    if shape.excluded:
        filters.append(S.c.source.not_in(_params(_EXCLUDED, shape.excluded)))
    if shape.roles:
        filters.append(M.c.role.in_(_params(_ROLES, shape.roles)))
    return filters


def _filters_sessions(shape: _Shape) -> bool:
    """Whether ``_filters(shape)`` reads ``sessions`` (the source filters)."""
    return shape.sources is not None or bool(shape.excluded)


def _page(stmt, shape: _Shape, page_size: int | None = None):
    """LIMIT and OFFSET of a page: bound (``:page_limit``), or ``page_size`` written
    into the statement (see ``_ranked``)."""
    if page_size is not None:
        stmt = stmt.limit(page_size)
    elif shape.limited:
        stmt = stmt.limit(sa.bindparam("page_limit", type_=sa.Integer))
    if shape.offset:
        stmt = stmt.offset(sa.bindparam("page_offset", type_=sa.Integer))
    return stmt


def _paging(shape: _Shape, page_size: int | None = None) -> tuple[str, ...]:
    """The page's bound numbers in ``_page``'s statement (``Prebuilt(paging=…)``)."""
    return ((("page_limit",) if shape.limited and page_size is None else ())
            + (("page_offset",) if shape.offset else ()))


def _matches(sql: fq.Fts5Search, index: str):
    return sql.source(index, M).join(S, S.c.id == M.c.session_id)


def _snippet(sql: fq.Fts5Search, index: str, form) -> tuple[sa.ColumnElement, ...]:
    """The snippet column; where it is cut in Python (``_with_snippets``), NULL and the
    indexed column the row does not carry otherwise (its tool calls)."""
    written = sql.snippet(index, M, form)
    if written is not None:
        return (written.label("snippet"),)
    return (sa.null().label("snippet"), M.c.tool_calls)


#: bound of each statement cache below (shapes × filter lengths × page lengths)
_SHAPES_CACHED = 512


@functools.lru_cache(maxsize=_SHAPES_CACHED)
def _ranked(sql: fq.Fts5Search, index: str, form, shape: _Shape,
            page_size: int | None = None) -> Prebuilt:
    """A page of matches best first, snippet and context included.

    On SQLite, ORDER BY rank alone lets FTS5 hand rows over best first, so snippet()
    and the context run for the returned page only; any second key (the id) makes
    SQLite compute every match and sort them itself (``sql.best_first``).

    Where the engine ranks by sorting the matches itself (``sql.page_first``:
    PostgreSQL), the page is picked first from the matches' ids and ranks alone, and
    the page's rows are joined to it afterwards: the sort then carries two numbers per
    match instead of whole rows, and snippets and context are computed for the page
    only, whatever the planner guesses about the number of matches.

    ``page_size`` (``sql.page_size_in_sql``: PostgreSQL) is the LIMIT written into the
    statement rather than bound: see ``_page_size``.
    """
    rank = sql.rank(index, M, form)
    columns = (*_RESULT_COLUMNS, *_snippet(sql, index, form), M.c.content, *_context_columns())
    if not sql.page_first:
        return Prebuilt(_page(
            sa.select(*columns, rank.label("rank"))
            .select_from(_with_neighbours(_matches(sql, index)))
            .where(sql.condition(index, M, form), *_filters(shape))
            .order_by(*sql.best_first(index, M, form)),
            shape,
        ), paging=_paging(shape))
    # sessions only when a filter reads them: joining every match to its session
    # (a hash of the whole table) cost more than ranking the matches
    source = _matches(sql, index) if _filters_sessions(shape) else sql.source(index, M)
    page = _page(
        sa.select(sql.row_id(index, M).label("page_id"), rank.label("page_rank"))
        .select_from(source)
        .where(sql.condition(index, M, form), *_filters(shape))
        .order_by(*sql.best_first(index, M, form)),
        shape, page_size,
    ).subquery("page")
    context, joined = _context(sql)
    columns = (*_RESULT_COLUMNS, *_snippet(sql, index, form), M.c.content, *context)
    return Prebuilt(
        sa.select(*columns, page.c.page_rank.label("rank"))
        .select_from(joined(page.join(M, M.c.id == page.c.page_id)
                            .join(S, S.c.id == M.c.session_id)))
        .order_by(page.c.page_rank, page.c.page_id),
        paging=_paging(shape, page_size),
    )


def _page_size(sql: fq.Fts5Search, shape: _Shape, values: dict) -> int | None:
    """The page size to write into a full-text page statement, or None to bind it.

    PostgreSQL plans a LIMIT it cannot see as a tenth of the matches, so a prepared
    statement's generic plan looked dearer than the plan made for each search, and
    every search was planned anew (~0.5 ms). Written in, the generic plan is kept
    (PostgreSQL's ``fts.search._once`` hides the query text from the planner for the same reason);
    there is one statement per page size (callers use a handful). Pages with an
    offset keep it bound, to leave paging one statement.
    """
    if not (sql.page_size_in_sql and shape.limited and not shape.offset):
        return None
    return values["page_limit"]


@functools.lru_cache(maxsize=_SHAPES_CACHED)
def _ids_by_time(sql: fq.Fts5Search, index: str, form, sort: str, shape: _Shape) -> Prebuilt:
    """A page of match ids in time order (then relevance): the sort cannot be pushed
    into FTS5, so it runs on ids alone and the page's details are read afterwards."""
    when = M.c.timestamp.desc() if sort == "newest" else M.c.timestamp.asc()
    return Prebuilt(_page(
        sa.select(M.c.id).select_from(_matches(sql, index))
        .where(sql.condition(index, M, form), *_filters(shape))
        .order_by(when, sql.rank(index, M, form), M.c.id),
        shape,
    ), paging=_paging(shape))


@functools.lru_cache(maxsize=_SHAPES_CACHED)
def _by_time(sql: fq.Fts5Search, index: str, form, sort: str, shape: _Shape,
             page_size: int | None = None) -> Prebuilt:
    """``_ids_by_time`` and ``_match_details`` as one statement, where the engine picks
    a page before reading its rows anyway (``sql.page_first``: PostgreSQL): the page
    of (id, time, rank) is a subquery, its rows are joined to it. One statement is one
    snapshot, so the search needs no transaction (``_read_lazily``)."""
    rank = sql.rank(index, M, form)
    newest = sort == "newest"
    source = _matches(sql, index) if _filters_sessions(shape) else sql.source(index, M)
    page = _page(
        sa.select(M.c.id.label("page_id"), M.c.timestamp.label("page_time"),
                  rank.label("page_rank"))
        .select_from(source)
        .where(sql.condition(index, M, form), *_filters(shape))
        .order_by(M.c.timestamp.desc() if newest else M.c.timestamp.asc(), rank, M.c.id),
        shape, page_size,
    ).subquery("page")
    context, joined = _context(sql)
    return Prebuilt(
        sa.select(*_RESULT_COLUMNS, *_snippet(sql, index, form), M.c.content, *context)
        .select_from(joined(page.join(M, M.c.id == page.c.page_id)
                            .join(S, S.c.id == M.c.session_id)))
        .order_by(page.c.page_time.desc() if newest else page.c.page_time.asc(),
                  page.c.page_rank, page.c.page_id),
        paging=_paging(shape, page_size),
    )


def _page_ids(count: int) -> list[sa.BindParameter]:
    return [sa.bindparam(f"page_id_{i}", type_=sa.Integer) for i in range(count)]


@functools.lru_cache(maxsize=_SHAPES_CACHED)
def _match_details(sql: fq.Fts5Search, index: str, form, count: int) -> Prebuilt:
    """Result rows (snippet, context) of the ``count`` matches with the given ids."""
    return Prebuilt(
        sa.select(*_RESULT_COLUMNS, *_snippet(sql, index, form), M.c.content,
                  *_context_columns())
        .select_from(_with_neighbours(_matches(sql, index)))
        .where(sql.condition(index, M, form),
               sql.row_id(index, M).in_(_page_ids(count)))
    )


@functools.lru_cache(maxsize=_SHAPES_CACHED)
def _like_details(count: int) -> Prebuilt:
    """Result rows of the LIKE route's page (``count`` ids)."""
    return Prebuilt(
        sa.select(*_RESULT_COLUMNS, M.c.content, M.c.tool_calls, *_context_columns())
        .select_from(_with_neighbours(M.join(S, S.c.id == M.c.session_id)))
        .where(M.c.id.in_(_page_ids(count)))
    )


def _like_matches(shape: _Shape, terms: int, *columns) -> sa.Select:
    """``columns`` of the newest messages (within ``:scan_rows`` of the newest id)
    holding any of ``terms`` substrings (``:term_0``… as LIKE patterns), newest first,
    one page."""
    newest_id = sa.select(sa.func.max(M.c.id)).scalar_subquery()
    # ids only grow (AUTOINCREMENT), so this is a bounded range scan of the key
    in_window = M.c.id > newest_id - sa.bindparam("scan_rows", type_=sa.Integer)
    # LIKE as SQLite matches: ASCII letters in either case (like_nocase)
    any_term = sa.or_(*(
        sa.or_(*(like_nocase(column, pattern, escape=LIKE_ESCAPE)
                 for column in (M.c.content, M.c.tool_name, M.c.tool_calls)))
        for pattern in _params("term", terms)
    ))
    return _page(
        sa.select(*columns).select_from(M.join(S, S.c.id == M.c.session_id))
        .where(in_window, any_term, *_filters(shape))
        .order_by(M.c.timestamp.desc(), M.c.id.desc()), shape,
    )


@functools.lru_cache(maxsize=_SHAPES_CACHED)
def _like_page(shape: _Shape, terms: int) -> Prebuilt:
    """Ids of the LIKE route's page (``_like_matches``): time order needs a sort of
    every row found, so ids first, details for the page (``_like_details``)."""
    return Prebuilt(_like_matches(shape, terms, M.c.id))


@functools.lru_cache(maxsize=_SHAPES_CACHED)
def _like_rows(shape: _Shape, terms: int) -> Prebuilt:
    """``_like_page`` and ``_like_details`` as one statement (``sql.page_first``, as
    ``_by_time``)."""
    page = _like_matches(shape, terms, M.c.id.label("page_id"),
                         M.c.timestamp.label("page_time")).subquery("page")
    return Prebuilt(
        sa.select(*_RESULT_COLUMNS, M.c.content, M.c.tool_calls, *_context_columns())
        .select_from(_with_neighbours(page.join(M, M.c.id == page.c.page_id)
                                      .join(S, S.c.id == M.c.session_id)))
        .order_by(page.c.page_time.desc(), page.c.page_id.desc())
    )


@functools.lru_cache(maxsize=None)
def _present_indexes_query(sql: fq.Fts5Search) -> Prebuilt:
    return Prebuilt(sql.present_indexes)


#: key of the present indexes kept with a server connection (``Connection.info``)
_KNOWN_INDEXES = "hermes_store.search.present_indexes"


def _present_indexes(reads: LazyReads, sql: fq.Fts5Search, use_known: bool
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
        shape, values = _shape_and_values(source_filter, exclude_sources, role_filter,
                                          include_inactive, limit, offset)
        sort = _normalized_sort(sort)
        answer: dict = {}

        def search(reads: LazyReads, *, known_indexes: bool = True) -> list[dict]:
            answer.clear()
            sql = backend_of(reads.conn).search
            present, answer["known"] = _present_indexes(reads, sql, known_indexes)
            plan = fq.plan_search(sanitized, present)
            if plan is None:
                return []
            if not sql.page_first and (sort is not None or plan.route == fq.ROUTE_LIKE):
                reads.need_snapshot()  # a page of ids, then the page's rows
            rows, answer["index_failed"] = self._run_plan(reads, sql, plan, shape, values, sort)
            answer["results"] = [_with_context(row) for row in rows]
            return answer["results"]

        try:
            try:
                return self._read_lazily(search)
            except sa.exc.DBAPIError as exc:
                sql = self._backend.search
                if not (answer.get("known") and sql.search_layer_missing(exc)):
                    raise
                # the full-text layer went away since this connection last looked: look
                # again (and route accordingly)
                return self._read_lazily(functools.partial(search, known_indexes=False))
        except DatabaseDamagedError:
            # FTS5 keeps the error of a failed rank-ordered MATCH and reports it once more
            # when the read snapshot commits; the fallback has already read the answer.
            if not answer.get("index_failed"):
                raise
            return answer["results"]

    # ------------------------------------------------------------------ routes

    def _run_plan(self, reads: LazyReads, sql: fq.Fts5Search, plan: fq.SearchPlan,
                  shape: _Shape, values: dict, sort) -> tuple[list, bool]:
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

    def _like_search(self, reads: LazyReads, sql: fq.Fts5Search, terms: Iterable[str],
                     shape: _Shape, values: dict):
        terms = [t for t in terms if t]
        if not terms:
            return []
        values = {**values, **_numbered("term", [like_containing(t) for t in terms]),
                  "scan_rows": max(0, int(self.short_query_scan_rows))}
        if sql.page_first:
            statement = _like_rows(shape, len(terms))
            rows = _dicts(statement, reads.rows(statement, values))
        else:
            page = [row[0] for row in reads.rows(_like_page(shape, len(terms)), values)]
            if not page:
                return []
            details = _like_details(len(page))
            rows = _in_page_order(page, _dicts(details, reads.rows(
                details, _numbered("page_id", page))))
        # the snippet shows the column that matched, tool name and tool calls included
        for row in rows:
            row["snippet"] = fq.like_snippet(
                (row["content"], row["tool_name"], row["tool_calls"]), terms)
        return rows


def _dicts(statement: Prebuilt, rows) -> list[dict]:
    keys = statement.keys
    return [dict(zip(keys, row)) for row in rows]


def _match_search(reads: LazyReads, sql: fq.Fts5Search, index: str, expression: str, shape: _Shape,
                  values: dict, sort):
    prepared = sql.prepare(index, expression)
    if prepared is None:
        return []  # nothing searchable left for this engine's index
    form, bound = prepared
    values = {**values, **bound}
    if sort is None:
        ranked = _ranked(sql, index, form, shape, _page_size(sql, shape, values))
        rows = _with_snippets(sql, index, expression, _dicts(ranked, reads.rows(ranked, values)))
        # ties in rank are ordered by id within the page, where it is free
        return sorted(rows, key=lambda row: (row["rank"], row["id"]))
    if sql.page_first:
        timed = _by_time(sql, index, form, sort, shape, _page_size(sql, shape, values))
        return _with_snippets(sql, index, expression, _dicts(timed, reads.rows(timed, values)))
    page = [row[0] for row in reads.rows(_ids_by_time(sql, index, form, sort, shape), values)]
    if not page:
        return []
    details = _match_details(sql, index, form, len(page))
    return _in_page_order(page, _with_snippets(sql, index, expression, _dicts(details, reads.rows(
        details, {**bound, **_numbered("page_id", page)}))))


def _with_snippets(sql: fq.Fts5Search, index: str, expression: str,
                   rows: list[dict]) -> list[dict]:
    """Snippets the engine does not write in SQL (PostgreSQL's: ``text_snippet``)."""
    for row in rows:
        if row["snippet"] is None:
            row["snippet"] = sql.text_snippet(index, expression, row)
    return rows


def _in_page_order(page: list, rows: list[dict]) -> list[dict]:
    by_id = {row["id"]: row for row in rows}
    return [by_id[message_id] for message_id in page]


def _with_context(fields: dict) -> dict:
    result = {key: fields[key] for key in _RESULT_KEYS}
    around = ((fields["prev_role"], fields["prev_content"]), (result["role"], fields["content"]),
              (fields["next_role"], fields["next_content"]))
    result["context"] = [
        {"role": role, "content": content_preview(decode_content(content))[:CONTEXT_CHARS]}
        for role, content in around if role is not None
    ]
    return result
