"""Cleanup concern: empty sessions, TUI ghosts, orphaned compression continuations.

The selections are upstream 0.19.0's, one predicate each (below), and every delete goes
through ``deletion.delete_rows`` — the one path that detaches surviving children,
removes messages, lets usage rows go by ``ON DELETE CASCADE`` and drops system prompts
nobody references any more — so ``sessions.parent_session_id`` stays valid inside the
unit. Transcript files under ``sessions_dir`` are removed after the commit.

A **ghost** is a TUI session that was started and left without a word: ``source='tui'``,
no title, ended, started more than 24 hours ago, no message rows at all. A ghost that is
another session's parent is **kept**, because the parent link is the only record of
where the child came from; once the child is deleted, the ghost qualifies at the next
prune (why not detach the child, and how upstream 0.19.0 fails here: docs/api.md,
"Empty and ghost sessions"). Ghosts whose children are themselves ghosts pruned in the
same call go together.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable

import sqlalchemy as sa

from .. import schema, unit_locks
from . import kinds
from .base import RepositoryBase
from .deletion import chunks, delete_rows, remove_session_files

S = schema.sessions
M = schema.messages

#: a TUI session younger than this is never a ghost (it may still be in use)
GHOST_MIN_AGE_SECONDS = 86400
#: a compression continuation untouched for this long is finalized as orphaned
ORPHANED_COMPRESSION_MIN_AGE_SECONDS = 7 * 86400
ORPHANED_COMPRESSION = "orphaned_compression"


def _has_messages(s=S) -> sa.ColumnElement[bool]:
    """Any message row, active or not (a rewound transcript is still content)."""
    return sa.exists().where(M.c.session_id == s.c.id)


def _has_children(s=S) -> sa.ColumnElement[bool]:
    child = S.alias("child")
    return sa.exists().where(child.c.parent_session_id == s.c.id)


def _empty_terms() -> list[sa.ColumnElement[bool]]:
    """``count_empty_sessions``/``delete_empty_sessions``: ended, unarchived, no
    messages counted. Live sessions are never selected (their first message may not
    have landed yet), nor archived ones (the user chose to keep them)."""
    return [S.c.message_count == 0, S.c.ended_at.is_not(None), S.c.archived == 0]


def _ghost_terms(cutoff: float) -> list[sa.ColumnElement[bool]]:
    return [
        S.c.source == "tui",
        S.c.title.is_(None),
        S.c.ended_at.is_not(None),
        S.c.started_at < cutoff,
        ~_has_messages(),
    ]


def _prunable_ghosts(conn: sa.Connection, ghosts: Iterable[str]) -> list[str]:
    """The ghosts that can go without taking a parent away from a surviving session:
    a ghost stays while any child of it stays (repeated, so a chain of ghosts above a
    real session stays whole)."""
    prunable = set(ghosts)
    links: list[tuple[str, str]] = []
    for chunk in chunks(sorted(prunable)):
        links += conn.execute(
            sa.select(S.c.id, S.c.parent_session_id).where(S.c.parent_session_id.in_(chunk))
        ).all()
    changed = True
    while changed:
        keep = {parent for child, parent in links if parent in prunable and child not in prunable}
        changed = bool(keep)
        prunable -= keep
    return sorted(prunable)


class CleanupMixin(RepositoryBase):
    # ------------------------------------------------------------------ empty sessions

    def count_empty_sessions(self) -> int:
        """How many sessions ``delete_empty_sessions`` would delete now: ended,
        unarchived, ``message_count = 0``."""
        stmt = sa.select(sa.func.count()).select_from(S).where(*_empty_terms())
        with self._read() as conn:
            return conn.execute(stmt).scalar_one()

    def delete_empty_sessions(self, sessions_dir: Path | None = None) -> int:
        """Delete every ended, unarchived session with ``message_count = 0`` in one unit.

        Children of a deleted session are detached (``parent_session_id → NULL``) and
        kept, delegate runs included. Returns the number of sessions deleted.
        """
        def unit(conn: sa.Connection) -> list[str]:
            ids = conn.execute(sa.select(S.c.id).where(*_empty_terms())).scalars().all()
            delete_rows(conn, list(ids))
            return list(ids)

        return self._removed(self._write(unit, locks=unit_locks.STORE), sessions_dir)

    def delete_session_if_empty(
        self, session_id: str, sessions_dir: Path | None = None
    ) -> bool:
        """Delete the session only if it never gained anything to resume: no title, no
        message rows, no child sessions (a parent that spawned work is not empty).

        The check and the delete are one unit, so a message another process writes
        meanwhile is never lost. Live sessions qualify too (this backs the exit path of
        a session that was opened and left at once). True when it was deleted.
        """
        if not isinstance(session_id, str) or not session_id:
            return False
        stmt = sa.select(S.c.id).where(
            S.c.id == session_id, S.c.title.is_(None), ~_has_messages(), ~_has_children()
        )

        def unit(conn: sa.Connection) -> list[str]:
            ids = conn.execute(stmt).scalars().all()
            delete_rows(conn, list(ids))
            return list(ids)

        # no title, messages or children: units that add them hold this session (a
        # child is created holding its parent), so the check stays true until COMMIT
        return self._removed(self._write(unit, locks=unit_locks.sessions(session_id)),
                             sessions_dir) == 1

    # ------------------------------------------------------------------ ghosts

    def prune_empty_ghost_sessions(self, sessions_dir: Path | None = None) -> int:
        """Delete TUI ghost sessions (see the module docstring): ``source='tui'``, no
        title, ended, started more than 24 hours ago, no messages. A ghost that is the
        parent of a session that stays is kept, so one such ghost no longer stops all
        the others from being pruned. Returns the number deleted."""
        terms = _ghost_terms(time.time() - GHOST_MIN_AGE_SECONDS)

        def unit(conn: sa.Connection) -> list[str]:
            ghosts = conn.execute(sa.select(S.c.id).where(*terms)).scalars().all()
            doomed = _prunable_ghosts(conn, ghosts)
            delete_rows(conn, doomed)
            return doomed

        return self._removed(self._write(unit, locks=unit_locks.STORE), sessions_dir)

    # ------------------------------------------------------------------ compression

    def finalize_orphaned_compression_sessions(self) -> int:
        """End compression continuations that were never finalized.

        Selects children of a parent ended with ``'compression'`` that have messages
        but made no API call (``api_call_count = 0``), were never ended, and started
        more than 7 days ago; sets ``ended_at`` to now and
        ``end_reason='orphaned_compression'``. Nothing is deleted. Returns the count.
        """
        parent = S.alias("parent")
        compressed_parent = sa.exists().where(
            parent.c.id == S.c.parent_session_id,
            parent.c.end_reason == kinds.COMPRESSION,
            parent.c.ended_at.is_not(None),
        )

        def unit(conn: sa.Connection) -> int:
            now = time.time()
            return conn.execute(
                sa.update(S)
                .where(
                    S.c.api_call_count == 0,
                    S.c.end_reason.is_(None),
                    S.c.ended_at.is_(None),
                    S.c.started_at < now - ORPHANED_COMPRESSION_MIN_AGE_SECONDS,
                    S.c.parent_session_id.is_not(None),
                    compressed_parent,
                    _has_messages(),
                )
                .values(ended_at=now, end_reason=ORPHANED_COMPRESSION)
            ).rowcount

        return self._write(unit, locks=unit_locks.STORE)

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _removed(ids: list[str], sessions_dir: Path | str | None) -> int:
        """Remove the deleted sessions' transcript files (after the commit); the count."""
        for sid in ids:
            remove_session_files(sessions_dir, sid)
        return len(ids)
