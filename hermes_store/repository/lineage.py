"""Lineage and listing concern: parent/child walks, compression tips, the rich
session list, activity-ordered listing and token statistics.

Walks are bounded (100 hops, 32 for resume) and cycle-safe: parent links written by
other programs are not trusted to form a tree.
"""

from __future__ import annotations

import functools
import re
from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from .. import schema
from . import kinds
from .base import RepositoryBase
from ..sql.constructs import (
    ascii_lower, flat_head, int_sum, like_nocase, limit_or_all, offset_or_zero, text_order,
)
from ..sql.prebuilt import Prebuilt
from .rows import as_cache_key, listing_filters, row_dict, session_columns
from ..sql.values import LIKE_ESCAPE, like_containing

S = schema.sessions
M = schema.messages
U = schema.session_model_usage

MAX_HOPS = 100
RESUME_MAX_HOPS = 32
PREVIEW_CHARS = 60
#: fields a projected compression root takes from its live tip
_TIP_FIELDS = (
    "id", "ended_at", "end_reason", "message_count", "tool_call_count", "title",
    "last_active", "preview", "model", "system_prompt", "cwd", "git_branch", "git_repo_root",
)


def last_active_of(s) -> sa.ColumnElement:
    """Latest message timestamp of the session, else its start."""
    latest = sa.select(sa.func.max(M.c.timestamp)).where(M.c.session_id == s.c.id)
    return sa.func.coalesce(latest.scalar_subquery(), s.c.started_at)


#: ``role`` spelled into the SQL, not bound: SQLite re-prepares a statement on every
#: run when a bound value is compared with a column that a partial index's WHERE names
#: (``messages.role`` is one)
_USER_ROLE = sa.literal_column("'user'")


def preview_source_of(s) -> sa.ColumnElement:
    """The first user message (by time, then id), line breaks as spaces, cut to 63
    (as SQLite's ``substr``: a multimodal ``"\\x00json:…"`` message previews as "")."""
    first = (
        sa.select(flat_head(M.c.content, PREVIEW_CHARS + 3))
        .where(M.c.session_id == s.c.id, M.c.role == _USER_ROLE, M.c.content.is_not(None))
        .order_by(M.c.timestamp, M.c.id)
        .limit(1)
    )
    return sa.func.coalesce(first.scalar_subquery(), "")


def rich_columns(s, *, compact: bool = False) -> list:
    if s is S:
        return _rich_columns_of_sessions(compact)
    return _build_rich_columns(s, compact)


def _build_rich_columns(s, compact: bool) -> list:
    return [
        *session_columns(s, compact=compact),
        preview_source_of(s).label("_preview_raw"),
        last_active_of(s).label("last_active"),
    ]


# Statements are built once, with bind parameters, and reused: building a select of
# the 60-column ``sessions`` table (or an alias of it) costs far more than running
# it, and a listing runs several per compression root. Built on first use, not at
# import: a process that never lists sessions (every cold start) does not pay for them.
@functools.cache
def _rich_columns_of_sessions(compact: bool) -> list:
    return _build_rich_columns(S, compact)



def _build_tip_step() -> sa.Select:
    """Id and end reason of the preferred continuation of ``:current`` (none unless
    ``:current`` ended by compression)."""
    parent, child = S.alias("parent"), S.alias("child")
    preference = sa.case(
        (child.c.end_reason == kinds.COMPRESSION, 0),
        (child.c.ended_at.is_(None), 1),
        else_=2,
    )
    return (
        sa.select(child.c.id, child.c.end_reason)
        .select_from(parent.join(child, child.c.parent_session_id == parent.c.id))
        .where(
            parent.c.id == sa.bindparam("current"),
            parent.c.end_reason == kinds.COMPRESSION,
            kinds.is_continuation_candidate(child),
        )
        .order_by(preference, last_active_of(child).desc(),
                  child.c.started_at.desc(), text_order(child.c.id).desc())
        .limit(1)
    )


@functools.cache
def _tip_step() -> Prebuilt:
    return Prebuilt(_build_tip_step())


@functools.cache
def _rich_row(compact: bool) -> Prebuilt:
    return Prebuilt(sa.select(*_rich_columns_of_sessions(compact))
                    .where(S.c.id == sa.bindparam("sid")))

_LINEAGE_NODE_COLUMNS = (S.c.id, S.c.parent_session_id, S.c.end_reason,
                         kinds.branched_from(S).label("branched_from"))
_LINEAGE_NODE = sa.select(*_LINEAGE_NODE_COLUMNS).where(S.c.id == sa.bindparam("sid"))
_LINEAGE_NEXT = (
    sa.select(*_LINEAGE_NODE_COLUMNS)
    .where(S.c.parent_session_id == sa.bindparam("sid"), kinds.branched_from(S).is_(None))
    .order_by(S.c.started_at.asc())
    .limit(1)
)
_PARENT_OF = sa.select(S.c.parent_session_id).where(S.c.id == sa.bindparam("sid"))
_HAS_MESSAGES = sa.select(M.c.id).where(M.c.session_id == sa.bindparam("sid")).limit(1)
_RESUME_NEXT = (
    sa.select(S.c.id)
    .where(S.c.parent_session_id == sa.bindparam("sid"), kinds.is_continuation_candidate(S))
    .order_by(S.c.started_at.desc(), text_order(S.c.id).desc())
    .limit(1)
)


def finish_rich_row(row) -> dict[str, Any]:
    """A listing row (an SQLAlchemy Row) with ``preview`` built from the raw cut."""
    return _finish_rich(row_dict(row))


def _finish_rich_rows(keys, rows) -> list[dict[str, Any]]:
    return [_finish_rich(dict(zip(keys, row))) for row in rows]


def _finish_rich(data: dict[str, Any]) -> dict[str, Any]:
    """A listing row with ``preview`` built from the raw cut (60 chars + "...")."""
    raw = (data.pop("_preview_raw", None) or "").strip()
    data["preview"] = raw[:PREVIEW_CHARS] + ("..." if len(raw) > PREVIEW_CHARS else "")
    data.pop("_effective_last_active", None)
    return data


def _contains(column, needle: str) -> sa.ColumnElement:
    """``needle`` (lower case) in ``column``, ASCII letters in either case."""
    return like_nocase(column, like_containing(needle), escape=LIKE_ESCAPE)


def _squashed_title(column) -> sa.ColumnElement:
    """Lower-cased title without ``- _ .`` and spaces, so ``an94`` finds ``AN-94``."""
    text = ascii_lower(sa.func.coalesce(column, ""))
    for ch in ("-", "_", ".", " "):
        text = sa.func.replace(text, ch, "")
    return text


@lru_cache(maxsize=64)
def _listing_statement(
    source, exclude_sources, cwd_prefix, min_message_count, include_archived,
    archived_only, include_children, compact, order_by_last_active, id_query,
    search_query, no_limit, no_offset,
) -> Prebuilt:
    """The listing's statement for one set of filters, ``:limit``/``:offset`` bound.

    Cached: the same filters (a picker asks with the same ones over and over) reuse one
    statement, compiled once.
    """
    return Prebuilt(_build_listing(
        source, exclude_sources, cwd_prefix, min_message_count, include_archived,
        archived_only, include_children, compact, order_by_last_active, id_query,
        search_query, no_limit, no_offset,
    ), paging=(() if no_limit else ("limit",)) + (() if no_offset else ("offset",)))


def _build_listing(
    source, exclude_sources, cwd_prefix, min_message_count, include_archived,
    archived_only, include_children, compact, order_by_last_active, id_query,
    search_query, no_limit, no_offset,
) -> sa.Select:
    terms = listing_filters(
        S,
        source=source,
        exclude_sources=exclude_sources,
        cwd_prefix=cwd_prefix,
        min_message_count=min_message_count,
        include_archived=include_archived,
        archived_only=archived_only,
        listable_only=not include_children,
    )
    stmt = sa.select(*rich_columns(S, compact=compact)).where(*terms)
    if order_by_last_active:
        stmt = _activity_ordered(stmt, terms, id_query, search_query)
    else:
        stmt = stmt.order_by(S.c.started_at.desc())
    if not no_limit:
        stmt = stmt.limit(limit_or_all(sa.bindparam("limit", type_=sa.Integer)))
    if not no_offset:
        stmt = stmt.offset(offset_or_zero(sa.bindparam("offset", type_=sa.Integer)))
    return stmt


def compression_chains(terms) -> sa.CTE:
    """``(root_id, cur_id)`` for every row matching ``terms`` (a root) and each
    compression continuation below it, the root itself included."""
    parent, child = S.alias("chain_parent"), S.alias("chain_child")
    chain = (
        sa.select(S.c.id.label("root_id"), S.c.id.label("cur_id"))
        .where(*terms)
        .cte("chain", recursive=True)
    )
    return chain.union_all(
        sa.select(chain.c.root_id, child.c.id)
        .select_from(chain.join(parent, parent.c.id == chain.c.cur_id)
                     .join(child, child.c.parent_session_id == chain.c.cur_id))
        .where(parent.c.end_reason == kinds.COMPRESSION,
               kinds.is_continuation_candidate(child))
    )


def with_chain_activity(stmt: sa.Select, chain: sa.CTE) -> tuple[sa.Select, sa.ColumnElement]:
    """``stmt`` (over ``sessions`` roots) joined to the latest activity anywhere in each
    root's chain, as ``_effective_last_active``; returns the statement and that value."""
    member = S.alias("member")
    member_active = sa.func.coalesce(
        sa.select(sa.func.max(M.c.timestamp))
        .where(M.c.session_id == chain.c.cur_id).scalar_subquery(),
        sa.select(member.c.started_at).where(member.c.id == chain.c.cur_id).scalar_subquery(),
    )
    chain_max = (
        sa.select(chain.c.root_id, sa.func.max(member_active).label("effective"))
        .group_by(chain.c.root_id)
        .subquery("chain_max")
    )
    effective = sa.func.coalesce(chain_max.c.effective, S.c.started_at)
    stmt = stmt.add_columns(effective.label("_effective_last_active")).outerjoin(
        chain_max, chain_max.c.root_id == S.c.id
    )
    return stmt, effective


def _activity_ordered(stmt, terms, id_query, search_query):
    """Order by the latest activity anywhere in each row's compression chain."""
    chain = compression_chains(terms)
    stmt, effective = with_chain_activity(stmt, chain)
    id_needle = (id_query or "").strip().lower()
    search_needle = (search_query or "").strip().lower()
    if id_needle:
        stmt = stmt.where(sa.exists().where(
            chain.c.root_id == S.c.id, _contains(chain.c.cur_id, id_needle)
        ))
    if search_needle:
        named = S.alias("named")
        matches = [_contains(sa.func.coalesce(named.c.title, ""), search_needle),
                   _contains(chain.c.cur_id, search_needle)]
        squashed = re.sub(r"[\W_]+", "", search_needle)
        if squashed:
            matches.append(_contains(_squashed_title(named.c.title), squashed))
        stmt = stmt.where(sa.exists().where(
            chain.c.root_id == S.c.id, named.c.id == chain.c.cur_id, sa.or_(*matches)
        ))
    return stmt.order_by(effective.desc(), S.c.started_at.desc(), text_order(S.c.id).desc())


def _walk_to_tip(conn: sa.Connection, session_id: str) -> str:
    """Follow compression continuations from ``session_id`` to the last one."""
    current, seen = session_id, {session_id}
    for _ in range(MAX_HOPS):
        steps = _tip_step().rows(conn, {"current": current})
        if not steps or steps[0][0] in seen:
            break
        step_id, step_end_reason = steps[0]
        seen.add(step_id)
        current = step_id
        if step_end_reason != kinds.COMPRESSION:
            break  # only a compression-ended session has continuations: no query needed
    return current


class LineageMixin(RepositoryBase):
    # ------------------------------------------------------------------ walks

    def get_compression_tip(self, session_id: str) -> str | None:
        """Follow compression continuations forward; the input when there are none.

        Among several continuations of one parent, prefer one that was itself
        compressed, then a live one, then the most recently active.
        """
        with self._read() as conn:
            return self._compression_tip(conn, session_id)

    def _compression_tip(self, conn: sa.Connection, session_id: str) -> str | None:
        return _walk_to_tip(conn, session_id)

    def get_compression_lineage(self, session_id: str) -> list[str]:
        """Root→tip ids of the compression chain holding the session; ``[id]`` for a
        branch, ``[]`` for an unknown id."""
        with self._read() as conn:
            def fetch(sid):
                return conn.execute(_LINEAGE_NODE, {"sid": sid}).first()

            session = fetch(session_id)
            if session is None:
                return []
            if session.branched_from is not None:
                return [session_id]
            root, seen = session, {session.id}
            while root.parent_session_id and root.branched_from is None:
                parent = fetch(root.parent_session_id)
                if parent is None or parent.end_reason != kinds.COMPRESSION or parent.id in seen:
                    break
                root = parent
                seen.add(root.id)
            lineage, current = [root.id], root
            while current.end_reason == kinds.COMPRESSION:
                nxt = conn.execute(_LINEAGE_NEXT, {"sid": current.id}).first()
                if nxt is None or nxt.id in lineage:
                    break
                lineage.append(nxt.id)
                current = nxt
        return lineage if session_id in lineage else [session_id]

    def get_conversation_root(self, session_id: str) -> str:
        """The root of the parent chain (any kind of child); the input for a root."""
        chain = self._parent_chain(session_id)
        return chain[-1] if chain else session_id

    def _parent_chain(self, session_id: str) -> list[str]:
        """``[session_id, parent, grandparent, …]`` as far as rows exist (bounded)."""
        if not session_id:
            return []
        chain: list[str] = []
        current = session_id
        with self._read() as conn:
            for _ in range(MAX_HOPS):
                if not current or current in chain:
                    break
                chain.append(current)
                current = conn.execute(_PARENT_OF, {"sid": current}).scalar()
        return chain

    def resolve_resume_session_id(self, session_id: str) -> str:
        """The session a resume should load: the compression tip, then the deepest
        continuation that holds messages; the input when none does."""
        if not session_id:
            return session_id
        with self._read() as conn:
            start = self._compression_tip(conn, session_id) or session_id
            current, seen, best = start, {start}, None
            for _ in range(RESUME_MAX_HOPS):
                has_messages = conn.execute(_HAS_MESSAGES, {"sid": current}).first()
                if has_messages is not None:
                    best = current
                nxt = conn.execute(_RESUME_NEXT, {"sid": current}).scalar()
                if nxt is None or nxt in seen:
                    break
                seen.add(nxt)
                current = nxt
        return best if best is not None else start

    def get_session_ancestors(self, session_id: str) -> list[dict[str, Any]]:
        """The parent, grandparent, … up to the root (nearest first), as session rows."""
        up = sa.select(S.c.parent_session_id.label("id"), sa.literal(1).label("depth")).where(
            S.c.id == session_id
        ).cte("ancestors", recursive=True)
        up = up.union_all(
            sa.select(S.c.parent_session_id, up.c.depth + 1)
            .where(S.c.id == up.c.id, up.c.depth < MAX_HOPS)
        )
        return self._rows_by_depth(up, exclude=session_id)

    def get_session_descendants(self, session_id: str) -> list[dict[str, Any]]:
        """Every child, grandchild, … (any kind), nearest generation first."""
        down = sa.select(S.c.id, sa.literal(1).label("depth")).where(
            S.c.parent_session_id == session_id
        ).cte("descendants", recursive=True)
        down = down.union_all(
            sa.select(S.c.id, down.c.depth + 1)
            .where(S.c.parent_session_id == down.c.id, down.c.depth < MAX_HOPS)
        )
        return self._rows_by_depth(down, exclude=session_id)

    def _rows_by_depth(self, cte, *, exclude: str) -> list[dict[str, Any]]:
        stmt = (
            sa.select(*session_columns(), cte.c.depth)
            .join(cte, cte.c.id == S.c.id)
            .order_by(cte.c.depth, S.c.started_at, text_order(S.c.id))
        )
        out, seen = [], {exclude}
        with self._read() as conn:
            for row in conn.execute(stmt):
                data = row_dict(row)
                data.pop("depth")
                if data["id"] not in seen:  # a cycle in the links repeats ids
                    seen.add(data["id"])
                    out.append(data)
        return out

    # ------------------------------------------------------------------ listings

    def list_sessions_rich(
        self,
        source: str | None = None,
        exclude_sources: list[str] | None = None,
        cwd_prefix: str | None = None,
        limit: int = 20,
        offset: int = 0,
        include_children: bool = False,
        min_message_count: int = 0,
        project_compression_tips: bool = True,
        order_by_last_active: bool = False,
        include_archived: bool = False,
        archived_only: bool = False,
        id_query: str | None = None,
        search_query: str | None = None,
        compact_rows: bool = False,
    ) -> list[dict[str, Any]]:
        """Session rows with ``preview`` and ``last_active``, newest first.

        Children (delegate runs, compression continuations) are hidden unless
        ``include_children``; a compression root is shown as its live tip (keeping
        the root's ``started_at``, with ``_lineage_root_id``). ``id_query`` and
        ``search_query`` apply with ``order_by_last_active=True``.
        """
        if not order_by_last_active:
            id_query = search_query = None  # they only apply to the activity order
        try:
            stmt = _listing_statement(
                source, as_cache_key(exclude_sources), cwd_prefix, min_message_count,
                include_archived, archived_only, include_children, compact_rows,
                order_by_last_active, id_query, search_query, limit is None, offset is None,
            )
        except TypeError:  # an unhashable argument: build it anyway, so its error shows
            stmt = _listing_statement.__wrapped__(
                source, exclude_sources, cwd_prefix, min_message_count,
                include_archived, archived_only, include_children, compact_rows,
                order_by_last_active, id_query, search_query, limit is None, offset is None,
            )
        page = {"limit": limit, "offset": offset}
        if not project_compression_tips or include_children:  # one statement
            return _finish_rich_rows(stmt.keys, self._query(stmt, page))
        with self._read() as conn:  # the page and its tips: one snapshot
            rows = _finish_rich_rows(stmt.keys, stmt.rows(conn, page))
            return [self._project_to_tip(conn, r, compact_rows) for r in rows]

    def _project_to_tip(self, conn: sa.Connection, row: dict, compact: bool) -> dict:
        if row.get("end_reason") != kinds.COMPRESSION:
            return row
        tip_id = _walk_to_tip(conn, row["id"])
        if tip_id == row["id"]:
            return row
        statement = _rich_row(compact)
        tips = statement.rows(conn, {"sid": tip_id})
        if not tips:
            return row
        tip_row = _finish_rich(dict(zip(statement.keys, tips[0])))
        merged = dict(row)
        for key in _TIP_FIELDS:
            if key in tip_row:
                merged[key] = tip_row[key]
        merged["_lineage_root_id"] = row["id"]
        return merged

    def search_sessions(
        self, source: str | None = None, limit: int | None = 20, offset: int = 0
    ) -> list[dict[str, Any]]:
        """Every session (children and archived included) with ``last_active``,
        most recently active first. ``limit=None`` (or negative) means no limit."""
        latest = (
            sa.select(M.c.session_id, sa.func.max(M.c.timestamp).label("last_message"))
            .group_by(M.c.session_id)
            .subquery("latest")
        )
        last_active = sa.func.coalesce(latest.c.last_message, S.c.started_at)
        stmt = (
            sa.select(*session_columns(), last_active.label("last_active"))
            .outerjoin(latest, latest.c.session_id == S.c.id)
            .order_by(last_active.desc(), S.c.started_at.desc(), text_order(S.c.id).desc())
            .offset(offset_or_zero(offset))
        )
        if source:
            stmt = stmt.where(S.c.source == source)
        if limit is not None and limit >= 0:
            stmt = stmt.limit(limit)
        with self._read() as conn:
            return [row_dict(r) for r in conn.execute(stmt)]

    # ------------------------------------------------------------------ token statistics

    def token_stats_by_model(self) -> list[dict[str, Any]]:
        """Per model (sessions with a model): sessions, input/output tokens and
        estimated cost, most expensive first. Uses each session's summary row."""
        cost = sa.func.coalesce(sa.func.sum(S.c.estimated_cost_usd), 0.0)
        stmt = (
            sa.select(
                S.c.model,
                sa.func.count().label("sessions"),
                sa.func.coalesce(int_sum(S.c.input_tokens), 0).label("input_tokens"),
                sa.func.coalesce(int_sum(S.c.output_tokens), 0).label("output_tokens"),
                cost.label("estimated_cost_usd"),
            )
            .where(S.c.model.is_not(None))
            .group_by(S.c.model)
            .order_by(cost.desc(), text_order(S.c.model))
        )
        with self._read() as conn:
            return [row_dict(r) for r in conn.execute(stmt)]

    def top_sessions_by_tokens(self, limit: int = 10) -> list[dict[str, Any]]:
        """The sessions with the most input+output tokens, biggest first."""
        total = sa.func.coalesce(S.c.input_tokens, 0) + sa.func.coalesce(S.c.output_tokens, 0)
        stmt = (
            sa.select(
                S.c.id, S.c.title, S.c.source, S.c.model, S.c.started_at,
                S.c.input_tokens, S.c.output_tokens, total.label("total_tokens"),
                S.c.estimated_cost_usd,
            )
            .order_by(total.desc(), S.c.started_at.desc(), text_order(S.c.id))
            .limit(None if limit is None else limit_or_all(limit))
        )
        with self._read() as conn:
            return [row_dict(r) for r in conn.execute(stmt)]

    def model_usage_breakdown(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Usage per (model, provider, task) from ``session_model_usage`` — exact across
        mid-session model switches and auxiliary calls; one session or all."""
        group = (U.c.model, U.c.billing_provider, U.c.task)
        cost = sa.func.sum(U.c.estimated_cost_usd)
        stmt = sa.select(
            *group,
            sa.func.count(sa.distinct(U.c.session_id)).label("sessions"),
            int_sum(U.c.api_call_count).label("api_call_count"),
            int_sum(U.c.input_tokens).label("input_tokens"),
            int_sum(U.c.output_tokens).label("output_tokens"),
            int_sum(U.c.cache_read_tokens).label("cache_read_tokens"),
            int_sum(U.c.cache_write_tokens).label("cache_write_tokens"),
            int_sum(U.c.reasoning_tokens).label("reasoning_tokens"),
            cost.label("estimated_cost_usd"),
            sa.func.sum(U.c.actual_cost_usd).label("actual_cost_usd"),
        ).group_by(*group).order_by(cost.desc(), *map(text_order, group))
        if session_id is not None:
            stmt = stmt.where(U.c.session_id == session_id)
        with self._read() as conn:
            return [row_dict(r) for r in conn.execute(stmt)]
