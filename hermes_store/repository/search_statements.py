"""The statements ``search_messages`` runs (``search.py``), built from the pieces the
engine's route hands over (``Backend.search``, a ``SearchRoute``) and cached once per
engine, index and shape: one statement per shape, not per search, so each is compiled
once.

Every route's statement has the same filters (visibility, sources, roles; ``Shape``)
and the same result columns: the message, its session's source and model, a snippet,
and the neighbouring messages for the result's ``context``.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import sqlalchemy as sa

from .. import schema
from ..backends.facets import SearchRoute
from ..sql.constructs import head_or_whole, like_nocase
from ..sql.prebuilt import Prebuilt
from ..sql.values import LIKE_ESCAPE, scrub_surrogates

M = schema.messages
S = schema.sessions

_RESULT_COLUMNS = (
    M.c.id, M.c.session_id, M.c.role, M.c.timestamp, M.c.tool_name,
    S.c.source, S.c.model, S.c.started_at.label("session_started"),
)
RESULT_KEYS = ("id", "session_id", "role", "snippet", "timestamp", "tool_name", "source",
               "model", "session_started")
#: characters of each neighbouring message shown in a result's ``context``
CONTEXT_CHARS = 200


def _context_text(content: sa.ColumnElement) -> sa.ColumnElement:
    """A neighbour's content as far as its context shows it (a long tool output's head
    only, where the engine can cut it exactly: ``head_or_whole``)."""
    return head_or_whole(content, CONTEXT_CHARS)


def _nearest(before: bool) -> tuple:
    """(a ``probe`` alias of messages, the condition that it lies before (after) the
    hit in (timestamp, id) order, the order that puts the nearest first).

    A row-value comparison, not ``t < :t OR (t = :t AND id < :id)``: SQLite turns it into
    a range of ``idx_messages_session`` (session_id, timestamp; the id rides along as
    the rowid), where the OR walked the session from one end.
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


# The context travels in the result query (two index probes per returned row), not in
# two statements per hit. Built on first use (a process that never searches does not
# pay for it at start-up).
@functools.lru_cache(maxsize=None)
def _neighbours() -> tuple:
    """(previous message alias, next message alias, the context columns)."""
    prev, nxt = M.alias("prev_message"), M.alias("next_message")
    columns = (
        prev.c.role.label("prev_role"), _context_text(prev.c.content).label("prev_content"),
        nxt.c.role.label("next_role"), _context_text(nxt.c.content).label("next_content"),
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
    columns = (before.c.role.label("prev_role"),
               _context_text(before.c.content).label("prev_content"),
               after.c.role.label("next_role"),
               _context_text(after.c.content).label("next_content"))
    return columns, lambda from_clause: (
        from_clause.outerjoin(before, sa.true()).outerjoin(after, sa.true()))


def _context(sql: SearchRoute):
    """(the context columns, the join that brings them) for the engine: LATERAL where
    it has it (``sql.lateral_context``), else the probe-for-id joins."""
    if not sql.lateral_context:
        return _context_columns(), _with_neighbours
    return _lateral_context()


def _as_list(values: Any) -> list | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    # stored text never holds lone surrogates (and the driver cannot bind them)
    return [scrub_surrogates(v) for v in values]


class Shape(NamedTuple):
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


def numbered(name: str, values: list | None) -> dict:
    return {f"{name}_{i}": value for i, value in enumerate(values or ())}


def shape_and_values(source_filter, exclude_sources, role_filter, include_inactive,
                     limit, offset) -> tuple[Shape, dict]:
    sources, excluded, roles = (_as_list(source_filter), _as_list(exclude_sources),
                                _as_list(role_filter))
    shape = Shape(visible_only=not include_inactive,
                   sources=None if sources is None else len(sources),
                   excluded=len(excluded or ()), roles=len(roles or ()),
                   limited=limit is not None and limit >= 0, offset=offset > 0)
    values = {**numbered(_SOURCES, sources), **numbered(_EXCLUDED, excluded),
              **numbered(_ROLES, roles), "page_limit": limit, "page_offset": offset}
    return shape, values


def _params(name: str, count: int) -> list[sa.BindParameter]:
    return [sa.bindparam(f"{name}_{i}", type_=sa.Text) for i in range(count)]


def _filters(shape: Shape) -> list[sa.ColumnElement]:
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


def _filters_sessions(shape: Shape) -> bool:
    """Whether ``_filters(shape)`` reads ``sessions`` (the source filters)."""
    return shape.sources is not None or bool(shape.excluded)


def _page(stmt, shape: Shape, page_size: int | None = None):
    """LIMIT and OFFSET of a page: bound (``:page_limit``), or ``page_size`` written
    into the statement (see ``ranked``)."""
    if page_size is not None:
        stmt = stmt.limit(page_size)
    elif shape.limited:
        stmt = stmt.limit(sa.bindparam("page_limit", type_=sa.Integer))
    if shape.offset:
        stmt = stmt.offset(sa.bindparam("page_offset", type_=sa.Integer))
    return stmt


def _paging(shape: Shape, page_size: int | None = None) -> tuple[str, ...]:
    """The page's bound numbers in ``_page``'s statement (``Prebuilt(paging=…)``)."""
    return ((("page_limit",) if shape.limited and page_size is None else ())
            + (("page_offset",) if shape.offset else ()))


def _matches(sql: SearchRoute, index: str):
    return sql.source(index, M).join(S, S.c.id == M.c.session_id)


def _snippet(sql: SearchRoute, index: str, form) -> tuple[sa.ColumnElement, ...]:
    """The snippet column; where it is cut in Python (``search._with_snippets``), NULL and the
    indexed column the row does not carry otherwise (its tool calls)."""
    written = sql.snippet(index, M, form)
    if written is not None:
        return (written.label("snippet"),)
    return (sa.null().label("snippet"), M.c.tool_calls)


#: bound of each statement cache below (shapes × filter lengths × page lengths)
_SHAPES_CACHED = 512


@functools.lru_cache(maxsize=_SHAPES_CACHED)
def ranked(sql: SearchRoute, index: str, form, shape: Shape,
           page_size: int | None = None) -> Prebuilt:
    """A page of matches best first, snippet and context included.

    On SQLite, ORDER BY rank alone lets FTS5 hand rows over best first, so snippet()
    and the context run for the returned page only; any second key (the id) makes
    SQLite compute every match and sort them itself (``sql.best_first``).

    Where the engine ranks by sorting the matches itself (``sql.page_first``:
    PostgreSQL), the page is picked first from the matches' ids and ranks alone, and
    the page's rows are joined to it afterwards: the sort then carries two numbers per
    match instead of whole rows, and snippets and context are computed for the page
    only, whatever the planner guesses about the number of matches. The engine writes
    that page (``sql.best_page``): it may rank only the matches that can reach it.

    ``page_size`` (``sql.page_size_in_sql``: PostgreSQL) is the LIMIT written into the
    statement rather than bound: see ``written_page_size``.
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
    page = _page(sql.best_page(index, M, form, source, tuple(_filters(shape)), page_size),
                 shape, page_size).subquery("page")
    context, joined = _context(sql)
    columns = (*_RESULT_COLUMNS, *_snippet(sql, index, form), M.c.content, *context)
    return Prebuilt(
        sa.select(*columns, page.c.page_rank.label("rank"))
        .select_from(joined(page.join(M, M.c.id == page.c.page_id)
                            .join(S, S.c.id == M.c.session_id)))
        .order_by(page.c.page_rank, page.c.page_id),
        paging=_paging(shape, page_size),
    )


def written_page_size(sql: SearchRoute, shape: Shape, values: dict) -> int | None:
    """The page size to write into a full-text page statement, or None to bind it.

    Written in, PostgreSQL keeps one generic plan per statement instead of planning
    every search anew (it plans a LIMIT it cannot see as a tenth of the matches);
    there is one statement per page size (callers use a handful). Pages with an
    offset keep it bound, to leave paging one statement.
    """
    if not (sql.page_size_in_sql and shape.limited and not shape.offset):
        return None
    return values["page_limit"]


@functools.lru_cache(maxsize=_SHAPES_CACHED)
def ids_by_time(sql: SearchRoute, index: str, form, sort: str, shape: Shape) -> Prebuilt:
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
def by_time(sql: SearchRoute, index: str, form, sort: str, shape: Shape,
            page_size: int | None = None) -> Prebuilt:
    """``ids_by_time`` and ``match_details`` as one statement, where the engine picks
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
def match_details(sql: SearchRoute, index: str, form, count: int) -> Prebuilt:
    """Result rows (snippet, context) of the ``count`` matches with the given ids."""
    return Prebuilt(
        sa.select(*_RESULT_COLUMNS, *_snippet(sql, index, form), M.c.content,
                  *_context_columns())
        .select_from(_with_neighbours(_matches(sql, index)))
        .where(sql.condition(index, M, form),
               sql.row_id(index, M).in_(_page_ids(count)))
    )


@functools.lru_cache(maxsize=_SHAPES_CACHED)
def like_details(count: int) -> Prebuilt:
    """Result rows of the LIKE route's page (``count`` ids)."""
    return Prebuilt(
        sa.select(*_RESULT_COLUMNS, M.c.content, M.c.tool_calls, *_context_columns())
        .select_from(_with_neighbours(M.join(S, S.c.id == M.c.session_id)))
        .where(M.c.id.in_(_page_ids(count)))
    )


def _like_matches(shape: Shape, terms: int, *columns) -> sa.Select:
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
def like_page(shape: Shape, terms: int) -> Prebuilt:
    """Ids of the LIKE route's page (``_like_matches``): time order needs a sort of
    every row found, so ids first, details for the page (``like_details``)."""
    return Prebuilt(_like_matches(shape, terms, M.c.id))


@functools.lru_cache(maxsize=_SHAPES_CACHED)
def like_rows(shape: Shape, terms: int) -> Prebuilt:
    """``like_page`` and ``like_details`` as one statement (``sql.page_first``, as
    ``by_time``)."""
    page = _like_matches(shape, terms, M.c.id.label("page_id"),
                         M.c.timestamp.label("page_time")).subquery("page")
    return Prebuilt(
        sa.select(*_RESULT_COLUMNS, M.c.content, M.c.tool_calls, *_context_columns())
        .select_from(_with_neighbours(page.join(M, M.c.id == page.c.page_id)
                                      .join(S, S.c.id == M.c.session_id)))
        .order_by(page.c.page_time.desc(), page.c.page_id.desc())
    )
