"""Titles concern: sanitising, unique titles, lookups and lineage numbering.

Titles are unique across all sessions, compared exactly (case-sensitive). The one
exception to "first come, first served": a compression continuation may take the
title of its own (hidden, ended) compression ancestor — the title moves to it.
Error texts are upstream's, word for word, because callers show them to users.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from .. import schema, unit_locks
from ..errors import TitleError
from ..patterns import LazyPattern
from . import kinds
from ..units import hold
from .base import RepositoryBase
from ..sql.constructs import like_nocase
from ..sql.prebuilt import Prebuilt
from .rows import row_dict, session_columns
from ..sql.values import LIKE_ESCAPE, like_prefix, scrub_surrogates

S = schema.sessions

# A title is written on a live session's turn: its statements are prebuilt.
_CLAIMANT = sa.bindparam("claimant", type_=sa.Text)
_CLAIMED = sa.bindparam("claimed", type_=sa.Text)
#: another session already holding the title claimed
_TITLE_HOLDER = Prebuilt(sa.select(S.c.id).where(S.c.title == _CLAIMED, S.c.id != _CLAIMANT)
                         .limit(1))
_CURRENT_TITLE = Prebuilt(sa.select(S.c.title).where(S.c.id == _CLAIMANT))
_WRITE_TITLE = Prebuilt(sa.update(S).where(S.c.id == _CLAIMANT).values(title=_CLAIMED))
_WRITE_TITLE_IF_EMPTY = Prebuilt(sa.update(S).where(S.c.id == _CLAIMANT, S.c.title.is_(None))
                                 .values(title=_CLAIMED))

MAX_TITLE_LENGTH = 100

# Controls except tab/LF/CR (those become spaces in the whitespace step).
_ASCII_CONTROLS = LazyPattern(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Zero-width, bidi overrides/isolates, line/paragraph separators, BOM, interlinear
# annotation marks and the object replacement character.
_INVISIBLE = LazyPattern("[\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffc]")
_WHITESPACE_RUN = LazyPattern(r"\s+")
_NUMBERED = LazyPattern(r"^(.*?) #(\d+)$")
_NUMBER_SUFFIX = LazyPattern(r"^.* #(\d+)$")


def sanitize_title(title: str | None) -> str | None:
    """The cleaned title, None for an empty one; ``TitleError`` when too long."""
    if not title:
        return None
    cleaned = _ASCII_CONTROLS.sub("", scrub_surrogates(title))
    cleaned = _INVISIBLE.sub("", cleaned)
    cleaned = _WHITESPACE_RUN.sub(" ", cleaned).strip()
    if not cleaned:
        return None
    if len(cleaned) > MAX_TITLE_LENGTH:
        raise TitleError(f"Title too long ({len(cleaned)} chars, max {MAX_TITLE_LENGTH})")
    return cleaned


def is_compression_ancestor(conn: sa.Connection, ancestor_id: str, descendant_id: str) -> bool:
    """True when walking up from ``descendant_id`` through compression-ended parents
    reaches ``ancestor_id``."""
    if not ancestor_id or not descendant_id or ancestor_id == descendant_id:
        return False
    child, parent = S.alias("child"), S.alias("parent")
    chain = sa.select(sa.literal(descendant_id).label("id")).cte("chain", recursive=True)
    chain = chain.union(
        sa.select(parent.c.id)
        .select_from(chain.join(child, child.c.id == chain.c.id)
                     .join(parent, parent.c.id == child.c.parent_session_id))
        .where(parent.c.end_reason == kinds.COMPRESSION)
    )
    hit = conn.execute(sa.select(chain.c.id).where(chain.c.id == ancestor_id).limit(1)).first()
    return hit is not None


def _like_variants(base: str) -> sa.ColumnElement:
    """Titles of the form ``"<base> #<anything>"`` (ASCII letters in either case, as
    SQLite's LIKE matches them)."""
    return like_nocase(S.c.title, like_prefix(base + " #"), escape=LIKE_ESCAPE)


class TitlesMixin(RepositoryBase):
    MAX_TITLE_LENGTH = MAX_TITLE_LENGTH
    sanitize_title = staticmethod(sanitize_title)

    def set_session_title(self, session_id: str, title: str | None) -> bool:
        """Set (or, with an empty title, clear) the title.

        True when the session exists. ``TitleError`` (a ``ValueError``) when the title
        is too long or held by another session that is not a compression ancestor.
        """
        return self._set_title(session_id, title, only_if_empty=False)

    def set_auto_title_if_empty(self, session_id: str, title: str | None) -> bool:
        """Set the title only while it is still NULL (checked in the same unit, so a
        concurrent manual rename wins). True when it was written."""
        return self._set_title(session_id, title, only_if_empty=True)

    def _set_title(self, session_id: str, title: str | None, *, only_if_empty: bool) -> bool:
        clean = sanitize_title(title)
        claim = {"claimant": session_id, "claimed": clean}

        def unit(conn: sa.Connection) -> int:
            if only_if_empty:
                current = _CURRENT_TITLE.rows(conn, claim)
                if not current or current[0][0] is not None:
                    return 0
            if clean:
                holder = _TITLE_HOLDER.scalar(conn, claim)
                if holder is not None:
                    if not is_compression_ancestor(conn, holder, session_id):
                        raise TitleError(
                            f"Title '{clean}' is already in use by session {holder}"
                        )
                    # the ancestor's row changes: its lock first; it may have renamed
                    # itself meanwhile (that holds its lock, not this title's), so the
                    # hand-over takes the title only from a row that still holds it
                    hold(conn, unit_locks.sessions(holder))
                    conn.execute(sa.update(S).where(S.c.id == holder, S.c.title == clean)
                                 .values(title=None))
            written = _WRITE_TITLE_IF_EMPTY if only_if_empty else _WRITE_TITLE
            return written.execute(conn, claim).rowcount

        # the session, and the title it claims (unique: claims of one title queue)
        return self._write(unit, locks=unit_locks.sessions(session_id)
                           | unit_locks.title(clean)) > 0

    def get_session_title(self, session_id: str) -> str | None:
        with self._read() as conn:
            return conn.execute(sa.select(S.c.title).where(S.c.id == session_id)).scalar()

    def get_session_by_title(self, title: str) -> dict[str, Any] | None:
        """The session with exactly this title (case-sensitive), or None."""
        with self._read() as conn:
            row = conn.execute(sa.select(*session_columns()).where(S.c.title == title)).first()
        return row_dict(row) if row is not None else None

    def resolve_session_by_title(self, title: str) -> str | None:
        """The most recently started ``"<title> #…"`` variant, else the exact title's
        session, else None."""
        with self._read() as conn:
            newest_variant = conn.execute(
                sa.select(S.c.id).where(_like_variants(title))
                .order_by(S.c.started_at.desc()).limit(1)
            ).scalar()
            if newest_variant is not None:
                return newest_variant
            return conn.execute(sa.select(S.c.id).where(S.c.title == title)).scalar()

    def get_next_title_in_lineage(self, base_title: str) -> str:
        """``"base"`` when free, else ``"base #N"`` with N one above the highest number
        in use (the bare base counts as #1). Not length-checked."""
        numbered = _NUMBERED.match(base_title)
        base = numbered.group(1) if numbered else base_title
        with self._read() as conn:
            existing = conn.execute(
                sa.select(S.c.title).where(sa.or_(S.c.title == base, _like_variants(base)))
            ).scalars().all()
        if not existing:
            return base
        highest = 1
        for taken in existing:
            suffix = _NUMBER_SUFFIX.match(taken)
            if suffix:
                highest = max(highest, int(suffix.group(1)))
        return f"{base} #{highest + 1}"
