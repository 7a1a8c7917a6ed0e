"""Lookups concern: finding a session by (part of) its id, the working directories
sessions ran in, a cron job's runs, and the two transcript projections a resume needs.

``search_sessions_by_id`` ranks in SQL over *every* matching row: a row whose
compression chain holds the id itself comes first, then one holding an id that starts
with the query, then one that merely contains it, each tier most recently active
first. Upstream 0.19.0 ranked only among the 4×limit most recently active matches, so
the session whose id *is* the query could be missing from its answer.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from .. import schema
from .base import RepositoryBase
from .conversation import CONVERSATION_COLUMNS
from ..sql.constructs import ascii_lower, like_nocase, starts_with, text_order
from .lineage import (
    compression_chains,
    finish_rich_row,
    rich_columns,
    with_chain_activity,
)
from .rows import listing_filters
from ..sql.values import LIKE_ESCAPE, like_containing, like_prefix

S = schema.sessions
M = schema.messages

CRON_SOURCE = "cron"
#: match tiers of ``search_sessions_by_id``, best first
_EXACT, _PREFIX, _SUBSTRING = 0, 1, 2


def _count(value: Any, name: str) -> int | None:
    """A LIMIT/OFFSET value: an integer, or None (no bound)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise TypeError(f"{name} must be an integer, got {value!r}")


class LookupsMixin(RepositoryBase):
    # ------------------------------------------------------------------ by id

    def search_sessions_by_id(
        self,
        query: str,
        limit: int = 20,
        include_archived: bool = True,
    ) -> list[dict[str, Any]]:
        """Listing rows (``list_sessions_rich`` shape) whose id — or an id in their
        compression chain — contains ``query``, case-insensitively: exact matches
        first, then prefix matches, then the rest, each most recently active first.

        A compression chain is shown as its live tip with ``_lineage_root_id``, so a
        pasted id of an old segment finds the conversation. Children that a listing
        hides (delegate runs) are not searched. A blank query or ``limit <= 0``: ``[]``.
        """
        needle = (query or "").strip().lower()
        if not needle:
            return []
        if _count(limit, "limit") is None:
            raise TypeError("limit must be an integer, got None")
        if limit <= 0:
            return []
        terms = listing_filters(S, include_archived=include_archived, listable_only=True)
        chain = compression_chains(terms)
        member = ascii_lower(chain.c.cur_id)
        tier = sa.case(
            (member == needle, _EXACT),
            (like_nocase(member, like_prefix(needle), escape=LIKE_ESCAPE), _PREFIX),
            else_=_SUBSTRING,
        )
        best = (
            sa.select(chain.c.root_id, sa.func.min(tier).label("tier"))
            .where(like_nocase(member, like_containing(needle), escape=LIKE_ESCAPE))
            .group_by(chain.c.root_id)
            .subquery("id_match")
        )
        stmt = sa.select(*rich_columns(S)).join(best, best.c.root_id == S.c.id)
        stmt, effective = with_chain_activity(stmt, chain)
        stmt = stmt.order_by(
            best.c.tier, effective.desc(), S.c.started_at.desc(), text_order(S.c.id).desc()
        ).limit(limit)
        with self._read() as conn:
            rows = [finish_rich_row(r) for r in conn.execute(stmt)]
            # lineage concern: show a compression root as its tip, in this snapshot
            return [self._project_to_tip(conn, row, False) for row in rows]

    # ------------------------------------------------------------------ listings

    def distinct_session_cwds(self, include_archived: bool = False) -> list[dict[str, Any]]:
        """Each non-blank working directory with how many sessions ran there (children
        included) and the latest end or start among them, ordered by directory."""
        terms = [S.c.cwd.is_not(None), sa.func.trim(S.c.cwd) != ""]
        if not include_archived:
            terms.append(S.c.archived == 0)
        stmt = (
            sa.select(
                S.c.cwd,
                sa.func.count().label("sessions"),
                sa.func.max(sa.func.coalesce(S.c.ended_at, S.c.started_at, 0))
                .label("last_active"),
            )
            .where(*terms)
            .group_by(S.c.cwd)
            .order_by(text_order(S.c.cwd))
        )
        with self._read() as conn:
            rows = conn.execute(stmt).all()
        return [
            {"cwd": r.cwd, "sessions": int(r.sessions or 0),
             "last_active": float(r.last_active or 0)}
            for r in rows
        ]

    def list_cron_job_runs(
        self,
        job_id: str,
        limit: int = 20,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """The sessions one cron job ran (``source='cron'``, id ``cron_<job_id>_…``),
        newest first, in the ``list_sessions_rich`` row shape (``preview``,
        ``last_active``). ``limit`` None or negative: no limit.

        The id prefix is matched exactly, as an index range over ``(source, id)``: the
        work grows with the page asked for, not with the whole cron history.
        """
        limit, offset = _count(limit, "limit"), _count(offset, "offset")
        prefix = f"cron_{job_id}_"
        stmt = (
            sa.select(*rich_columns(S))
            .where(S.c.source == CRON_SOURCE, starts_with(S.c.id, prefix))
            .order_by(S.c.started_at.desc(), text_order(S.c.id).desc())
        )
        if limit is not None and limit >= 0:
            stmt = stmt.limit(limit)
        if offset:
            stmt = stmt.offset(max(offset, 0))
        with self._read() as conn:
            return [finish_rich_row(r) for r in conn.execute(stmt)]

    # ------------------------------------------------------------------ resume

    def get_resume_conversations(
        self, session_id: str
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``(model_history, display_history)`` of a resume, from one read.

        ``model_history`` is the session's own active transcript with alternation
        repaired (``get_messages_as_conversation(id, repair_alternation=True)``);
        ``display_history`` the whole parent chain's, root first
        (``get_messages_as_conversation(id, include_ancestors=True)``).
        """
        rows = self._lineage_conversation_rows(session_id)
        own = [row for row in rows if row.session_id == session_id]
        model_history = self._rows_to_conversation(
            own, include_ancestors=False, repair_alternation=True)
        display_history = self._rows_to_conversation(
            rows, include_ancestors=True, repair_alternation=False)
        return model_history, display_history

    def get_ancestor_display_prefix(self, session_id: str) -> list[dict[str, Any]]:
        """The display messages that come from the session's ancestors only — what a
        resume shows before the session's own history; ``[]`` for a root."""
        rows = self._lineage_conversation_rows(session_id, ancestors_only=True)
        if not rows:
            return []
        return self._rows_to_conversation(rows, include_ancestors=True,
                                          repair_alternation=False)

    def _lineage_conversation_rows(self, session_id: str, *, ancestors_only: bool = False):
        """Active conversation rows of the parent chain (root first, id order), each
        with its ``session_id``."""
        with self._read() as conn:
            # lineage concern: the bounded, cycle-safe parent walk, in this snapshot
            chain = self._parent_chain(session_id)
            ids = chain[1:] if ancestors_only else chain
            if not ids:
                return []
            return conn.execute(
                sa.select(M.c.session_id, *CONVERSATION_COLUMNS)
                .where(M.c.session_id.in_(ids), M.c.active == 1)
                .order_by(M.c.id)
            ).all()
