"""Export and bulk-delete concern: export one/all sessions, delete, prune, archive in
bulk. Every delete goes through ``deletion`` (children detached, delegate runs of a
deleted session deleted with it, transcript files removed after the commit).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterable, Iterator

import sqlalchemy as sa

from .. import schema, unit_locks
from ..units import hold
from .base import RepositoryBase
from ..sql.constructs import ascii_lower, like_nocase
from ..sql.values import LIKE_ESCAPE, like_containing
from .deletion import delegate_children, delete_rows, remove_session_files
from .rows import compression_lineage_ids, cwd_under, row_dict

S = schema.sessions

_SECONDS_PER_DAY = 86400


def prune_filter(
    *,
    started_before: float | None = None,
    started_after: float | None = None,
    source: str | None = None,
    title_like: str | None = None,
    end_reason: str | None = None,
    cwd_prefix: str | None = None,
    min_messages: int | None = None,
    max_messages: int | None = None,
    archived: bool | None = None,
    model_like: str | None = None,
    provider: str | None = None,
    user_id: str | None = None,
    chat_id: str | None = None,
    chat_type: str | None = None,
    branch_like: str | None = None,
    min_tokens: int | None = None,
    max_tokens: int | None = None,
    min_cost: float | None = None,
    max_cost: float | None = None,
    min_tool_calls: int | None = None,
    max_tool_calls: int | None = None,
) -> list:
    """WHERE terms of a bulk prune/archive selection. Only ended sessions qualify.

    Substring filters (``*_like``) are case-insensitive; ``archived`` is tri-state
    (None both, True only archived, False only unarchived). An unknown filter name is
    a ``TypeError``, as for any Python call.
    """
    def lower_contains(column, needle):
        return like_nocase(sa.func.coalesce(column, ""), like_containing(needle.lower()),
                           escape=LIKE_ESCAPE)

    tokens = sa.func.coalesce(S.c.input_tokens, 0) + sa.func.coalesce(S.c.output_tokens, 0)
    cost = sa.func.coalesce(S.c.actual_cost_usd, S.c.estimated_cost_usd, 0)
    tool_calls = sa.func.coalesce(S.c.tool_call_count, 0)
    terms = [S.c.ended_at.is_not(None)]
    optional = [
        (started_before is not None, lambda: S.c.started_at < started_before),
        (started_after is not None, lambda: S.c.started_at >= started_after),
        (bool(source), lambda: S.c.source == source),
        (bool(title_like), lambda: lower_contains(S.c.title, title_like)),
        (bool(end_reason), lambda: S.c.end_reason == end_reason),
        (bool(cwd_prefix), lambda: cwd_under(S, cwd_prefix)),
        (min_messages is not None, lambda: S.c.message_count >= min_messages),
        (max_messages is not None, lambda: S.c.message_count <= max_messages),
        (bool(model_like), lambda: lower_contains(S.c.model, model_like)),
        (bool(provider), lambda: ascii_lower(sa.func.coalesce(S.c.billing_provider, ""))
         == provider.lower()),
        (bool(user_id), lambda: S.c.user_id == user_id),
        (bool(chat_id), lambda: S.c.chat_id == chat_id),
        (bool(chat_type), lambda: S.c.chat_type == chat_type),
        (bool(branch_like), lambda: lower_contains(S.c.git_branch, branch_like)),
        (min_tokens is not None, lambda: tokens >= min_tokens),
        (max_tokens is not None, lambda: tokens <= max_tokens),
        (min_cost is not None, lambda: cost >= min_cost),
        (max_cost is not None, lambda: cost <= max_cost),
        (min_tool_calls is not None, lambda: tool_calls >= min_tool_calls),
        (max_tool_calls is not None, lambda: tool_calls <= max_tool_calls),
        (archived is True, lambda: S.c.archived == 1),
        (archived is False, lambda: S.c.archived == 0),
    ]
    terms.extend(make() for wanted, make in optional if wanted)
    return terms


def _with_age(filters: dict, older_than_days: float | None) -> dict:
    if filters.get("started_before") is None and older_than_days is not None:
        filters["started_before"] = time.time() - older_than_days * _SECONDS_PER_DAY
    return filters


class PortabilityMixin(RepositoryBase):
    # ------------------------------------------------------------------ export

    def export_session(self, session_id: str) -> dict[str, Any] | None:
        """The session row plus its active ``messages`` (one snapshot), or None."""
        with self._read():
            session = self.get_session(session_id)
            if session is None:
                return None
            return {**session, "messages": self.get_messages(session_id)}

    def export_session_lineage(self, session_id: str) -> dict[str, Any] | None:
        """A compression chain as one logical session: the tip's row, every segment,
        ``lineage_session_ids``, and all messages concatenated root→tip."""
        with self._read():
            segments = [
                seg for sid in self.get_compression_lineage(session_id)
                if (seg := self.export_session(sid)) is not None
            ]
        if not segments:
            return None
        merged = dict(segments[-1])
        merged["segments"] = segments
        merged["lineage_session_ids"] = [seg["id"] for seg in segments]
        merged["messages"] = [m for seg in segments for m in seg["messages"]]
        merged["message_count"] = len(merged["messages"])
        return merged

    def iter_export(self, source: str | None = None) -> Iterator[dict[str, Any]]:
        """Like ``export_all`` but one session at a time (bounded memory)."""
        with self._read():
            ids = [row["id"] for row in self.search_sessions(source=source, limit=None)]
        for sid in ids:
            exported = self.export_session(sid)
            if exported is not None:  # deleted meanwhile
                yield exported

    def export_all(self, source: str | None = None) -> list[dict[str, Any]]:
        """Every session (archived and children included) with its messages and
        ``last_active``, most recently active first."""
        with self._read():
            sessions = self.search_sessions(source=source, limit=None)
            return [{**s, "messages": self.get_messages(s["id"])} for s in sessions]

    # ------------------------------------------------------------------ delete

    def delete_session(self, session_id: str, sessions_dir: Path | str | None = None) -> bool:
        """Delete the session, its messages and its delegate runs; detach other
        children. False when the id is unknown."""
        return self.delete_sessions([session_id], sessions_dir=sessions_dir) == 1

    def delete_sessions(
        self, session_ids: Iterable[Any], sessions_dir: Path | str | None = None
    ) -> int:
        """Bulk ``delete_session`` in one unit; unknown ids and non-strings are skipped.
        Returns how many of the given sessions existed and were deleted."""
        wanted = sorted({sid for sid in session_ids or () if isinstance(sid, str) and sid})
        if not wanted:
            return 0

        def unit(conn: sa.Connection) -> tuple[list[str], list[str]]:
            existing = conn.execute(sa.select(S.c.id).where(S.c.id.in_(wanted))).scalars().all()
            if not existing:
                return [], []
            # The cascade, under the lock of every session in it: a delegate run found
            # is locked, then the runs are looked for again (one may have been added to
            # it before its lock was taken) until no new one turns up. New children of
            # a locked session wait (create_session holds the parent) and then find no
            # parent.
            held: set[str] = set()
            delegates = delegate_children(conn, existing)
            while not set(delegates) <= held:
                held.update(delegates)
                hold(conn, unit_locks.sessions(*sorted(held)))
                delegates = delegate_children(conn, existing)
            delete_rows(conn, sorted(set(existing) | set(delegates)))
            return list(existing), delegates

        existing, delegates = self._write(unit, locks=unit_locks.sessions(*wanted))
        for sid in [*existing, *delegates]:
            remove_session_files(sessions_dir, sid)
        return len(existing)

    # ------------------------------------------------------------------ prune / archive

    def list_prune_candidates(
        self, older_than_days: float | None = None, source: str | None = None, **filters
    ) -> list[dict[str, Any]]:
        """What ``prune_sessions``/``archive_sessions`` would touch, oldest first."""
        terms = prune_filter(source=source, **_with_age(filters, older_than_days))
        stmt = (
            sa.select(S.c.id, S.c.source, S.c.title, S.c.model, S.c.started_at,
                      S.c.ended_at, S.c.message_count, S.c.archived)
            .where(*terms)
            .order_by(S.c.started_at.asc())
        )
        with self._read() as conn:
            return [row_dict(r) for r in conn.execute(stmt)]

    def prune_sessions(
        self,
        older_than_days: float | None = 90,
        source: str | None = None,
        sessions_dir: Path | str | None = None,
        **filters,
    ) -> int:
        """Delete ended sessions started more than ``older_than_days`` ago (None: any
        age) that match every filter; children outside the selection are detached,
        delegate runs included. Live sessions are never pruned. Returns the count."""
        terms = prune_filter(source=source, **_with_age(filters, older_than_days))

        def unit(conn: sa.Connection) -> list[str]:
            ids = conn.execute(sa.select(S.c.id).where(*terms)).scalars().all()
            delete_rows(conn, list(ids))
            return list(ids)

        removed = self._write(unit, locks=unit_locks.STORE)  # chosen by a condition: alone
        for sid in removed:
            remove_session_files(sessions_dir, sid)
        return len(removed)

    def archive_sessions(
        self, older_than_days: float | None = None, source: str | None = None, **filters
    ) -> int:
        """Archive every prune candidate with its compression lineage (nothing is
        deleted). Only unarchived rows are selected unless ``archived`` is given, so
        a repeat run is a no-op. Returns the number of sessions matched."""
        filters.setdefault("archived", False)
        terms = prune_filter(source=source, **_with_age(filters, older_than_days))

        def unit(conn: sa.Connection) -> int:
            ids = conn.execute(sa.select(S.c.id).where(*terms)).scalars().all()
            lineage: set[str] = set()
            for sid in ids:
                lineage.update(compression_lineage_ids(conn, sid))
            if lineage:
                conn.execute(sa.update(S).where(S.c.id.in_(sorted(lineage))).values(archived=1))
            return len(ids)

        return self._write(unit, locks=unit_locks.STORE)  # chosen by a condition: alone
