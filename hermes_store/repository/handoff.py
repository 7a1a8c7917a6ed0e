"""Handoff concern: moving a live session from the CLI to a messaging platform.

The state lives on the session row (``handoff_state``, ``handoff_platform``,
``handoff_error``)::

    NULL / completed / failed --request--> pending --claim--> running
    (any state) --complete--> completed        (any state) --fail--> failed

The CLI requests and then polls for a terminal state; a gateway watcher lists pending
handoffs, claims one and completes or fails it. Only two transitions are guarded, as
upstream guards them: a request is refused while one is pending or running, and only a
pending handoff can be claimed. ``complete`` and ``fail`` record the outcome whatever
the state, so a watcher can always report it.

Every transition is one conditional ``UPDATE`` of the session row: the row lock decides
between two claimers (the second re-reads the row and finds it no longer pending); on
PostgreSQL each unit also holds the session's lock, as every unit of a session does.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from .. import schema, unit_locks
from .base import RepositoryBase
from .rows import row_dict, session_columns
from ..sql.constructs import text_order

S = schema.sessions

PENDING = "pending"
RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
#: states from which a new handoff may be requested (NULL: never handed off)
_REQUESTABLE = (COMPLETED, FAILED)
#: upstream keeps the first 500 characters of a failure reason
MAX_ERROR_CHARS = 500


class HandoffMixin(RepositoryBase):
    def request_handoff(self, session_id: str, platform: str) -> bool:
        """Mark the session pending handoff to ``platform`` and clear the last error.

        False when the session does not exist or a handoff is already pending or
        running; a completed or failed one may be requested again.
        """
        stmt = (
            sa.update(S)
            .where(
                S.c.id == session_id,
                sa.or_(S.c.handoff_state.is_(None), S.c.handoff_state.in_(_REQUESTABLE)),
            )
            .values(handoff_state=PENDING, handoff_platform=platform, handoff_error=None)
        )
        return self._write(lambda conn: conn.execute(stmt).rowcount,
                           locks=unit_locks.sessions(session_id)) > 0

    def claim_handoff(self, session_id: str) -> bool:
        """Move a pending handoff to running; True for exactly one claimer.

        The test and the change are one conditional UPDATE, and the winner is whoever's
        UPDATE changed the row. SQLite's write lock already serialises the units, but
        the claim does not rely on it: on an engine whose transactions run side by
        side (PostgreSQL, READ COMMITTED), the second UPDATE waits for the first one's
        row lock and then re-checks ``handoff_state = 'pending'`` against the committed
        row, so it changes nothing. A SELECT-then-UPDATE would let both claim.
        """
        stmt = (
            sa.update(S)
            .where(S.c.id == session_id, S.c.handoff_state == PENDING)
            .values(handoff_state=RUNNING)
        )
        return self._write(lambda conn: conn.execute(stmt).rowcount,
                           locks=unit_locks.sessions(session_id)) > 0

    def complete_handoff(self, session_id: str) -> None:
        """Record success (whatever the current state) and clear the error."""
        stmt = (
            sa.update(S)
            .where(S.c.id == session_id)
            .values(handoff_state=COMPLETED, handoff_error=None)
        )
        self._write(lambda conn: conn.execute(stmt), locks=unit_locks.sessions(session_id))

    def fail_handoff(self, session_id: str, error: str) -> None:
        """Record failure (whatever the current state) with the reason, cut to its
        first 500 characters. ``error`` must be text."""
        if not isinstance(error, str):
            raise TypeError(
                f"error must be the failure reason as text, got {type(error).__name__}"
            )
        stmt = (
            sa.update(S)
            .where(S.c.id == session_id)
            .values(handoff_state=FAILED, handoff_error=error[:MAX_ERROR_CHARS])
        )
        self._write(lambda conn: conn.execute(stmt), locks=unit_locks.sessions(session_id))

    def get_handoff_state(self, session_id: str) -> dict[str, Any] | None:
        """``{"state", "platform", "error"}`` of the session (all None when it was
        never handed off), or None when the session does not exist."""
        with self._read() as conn:
            row = conn.execute(
                sa.select(S.c.handoff_state, S.c.handoff_platform, S.c.handoff_error)
                .where(S.c.id == session_id)
            ).first()
        if row is None:
            return None
        return {"state": row.handoff_state, "platform": row.handoff_platform,
                "error": row.handoff_error}

    def list_pending_handoffs(self) -> list[dict[str, Any]]:
        """Session rows with a pending handoff, oldest session first."""
        stmt = (
            sa.select(*session_columns())
            .where(S.c.handoff_state == PENDING)
            .order_by(S.c.started_at.asc(), text_order(S.c.id).asc())
        )
        with self._read() as conn:
            return [row_dict(r) for r in conn.execute(stmt)]
