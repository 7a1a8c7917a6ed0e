"""Row shapes and selections the concerns share: a row as a dict, the ``sessions``
columns a read returns, the listing filters, and the compression-lineage walk.

The concern modules build their statements from these, so a session read anywhere
(``get_session``, listings, titles, gateway and handoff lookups) has one shape.
"""

from __future__ import annotations

from typing import Any, Iterable

import sqlalchemy as sa

from .. import schema
from ..sql.constructs import like_nocase
from ..sql.values import LIKE_ESCAPE, like_prefix
from . import kinds
from .system_prompts import resolved_system_prompt

S = schema.sessions


def row_dict(row) -> dict[str, Any]:
    return dict(row._mapping)


def session_columns(s=S, *, compact: bool = False) -> list:
    """Every ``sessions`` column with ``system_prompt`` resolved (dropped when compact)."""
    cols = []
    for col in s.c:
        if col.name == "system_prompt":
            if not compact:
                cols.append(resolved_system_prompt(s).label("system_prompt"))
        else:
            cols.append(col)
    return cols


def cwd_under(s, cwd_prefix: str) -> sa.ColumnElement:
    """The session's cwd equals the prefix or lies below it (``/`` or ``\\`` separated)."""
    prefix = cwd_prefix.rstrip("/\\") or cwd_prefix
    return sa.or_(
        s.c.cwd == prefix,
        like_nocase(s.c.cwd, like_prefix(prefix + "/"), escape=LIKE_ESCAPE),
        like_nocase(s.c.cwd, like_prefix(prefix + "\\"), escape=LIKE_ESCAPE),
    )


def listing_filters(
    s,
    *,
    source: str | None = None,
    exclude_sources: Iterable[str] | None = None,
    cwd_prefix: str | None = None,
    min_message_count: int = 0,
    include_archived: bool = False,
    archived_only: bool = False,
    listable_only: bool = False,
) -> list:
    """The WHERE terms shared by ``list_sessions_rich`` and ``session_count``."""
    terms = []
    if listable_only:
        terms.append(kinds.is_listable(s))
    if source:
        terms.append(s.c.source == source)
    if exclude_sources:
        terms.append(s.c.source.not_in(list(exclude_sources)))
    if cwd_prefix:
        terms.append(cwd_under(s, cwd_prefix))
    if min_message_count and min_message_count > 0:
        terms.append(s.c.message_count >= min_message_count)
    if archived_only:
        terms.append(s.c.archived == 1)
    elif not include_archived:
        terms.append(s.c.archived == 0)
    return terms


def as_cache_key(values):
    """A list argument as a hashable key for a statement cache (lru_cache)."""
    return tuple(values) if isinstance(values, (list, tuple, set, frozenset)) else values


def compression_lineage_ids(conn: sa.Connection, session_id: str) -> list[str]:
    """The session plus every ancestor and descendant linked through a parent that
    ended with ``'compression'`` (empty when the session does not exist)."""
    child, parent = S.alias("child"), S.alias("parent")
    up = sa.select(sa.literal(session_id).label("id")).where(
        sa.exists().where(S.c.id == session_id)
    ).cte("ancestors", recursive=True)
    up = up.union(
        sa.select(parent.c.id)
        .select_from(up.join(child, child.c.id == up.c.id)
                     .join(parent, parent.c.id == child.c.parent_session_id))
        .where(parent.c.end_reason == kinds.COMPRESSION)
    )
    down = sa.select(sa.literal(session_id).label("id")).where(
        sa.exists().where(S.c.id == session_id)
    ).cte("descendants", recursive=True)
    down = down.union(
        sa.select(child.c.id)
        .select_from(down.join(parent, parent.c.id == down.c.id)
                     .join(child, child.c.parent_session_id == parent.c.id))
        .where(parent.c.end_reason == kinds.COMPRESSION)
    )
    ids = conn.execute(sa.union(sa.select(up.c.id), sa.select(down.c.id))).scalars().all()
    return list(ids)
