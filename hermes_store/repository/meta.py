"""Meta and locks concern: the ``state_meta`` key/value store, per-session
compression locks, compression-failure cooldowns and the fallback streak.

Compression locks stop two agents that share a session id from compressing it at the
same time (each would end the parent and fork its own continuation). A lock is a row
with a lease (``expires_at``); an expired lease is reclaimed by the next caller, so a
crashed holder cannot block a session for ever. Lock calls fail *closed*: on a
database error they report "not acquired" and log, so compression is skipped rather
than raced.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import sqlalchemy as sa

from .. import schema, unit_locks
from ..errors import HermesStoreError
from .base import RepositoryBase
from ..sql.constructs import insert_for

log = logging.getLogger(__name__)

S = schema.sessions
L = schema.compression_locks
META = schema.state_meta

DEFAULT_LOCK_TTL = 300.0


class MetaMixin(RepositoryBase):
    # ------------------------------------------------------------------ state_meta

    def get_meta(self, key: str) -> str | None:
        with self._read() as conn:
            return conn.execute(sa.select(META.c.value).where(META.c.key == key)).scalar()

    def set_meta(self, key: str, value: Any) -> None:
        """Insert or replace ``key`` (values are stored as text; None stays None)."""
        def unit(conn: sa.Connection) -> None:
            stmt = insert_for(conn, META).values(key=key, value=value)
            conn.execute(stmt.on_conflict_do_update(
                index_elements=[META.c.key], set_={"value": stmt.excluded.value}
            ))

        self._write(unit, locks=unit_locks.ROWS)  # one upsert: atomic by itself

    # ------------------------------------------------------------------ compression locks

    def try_acquire_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = DEFAULT_LOCK_TTL
    ) -> bool:
        """Take the session's compression lock; True when ``holder`` owns it now
        (re-acquiring one's own lock renews nothing and succeeds)."""
        if not session_id:
            return False
        now = time.time()

        def unit(conn: sa.Connection) -> bool:
            conn.execute(sa.delete(L).where(L.c.session_id == session_id, L.c.expires_at < now))
            conn.execute(
                insert_for(conn, L)
                .values(session_id=session_id, holder=holder, acquired_at=now,
                        expires_at=now + ttl_seconds)
                .on_conflict_do_nothing()
            )
            owner = conn.execute(sa.select(L.c.holder).where(L.c.session_id == session_id)).scalar()
            return owner == holder

        return self._lock_call("try_acquire_compression_lock", session_id, unit, False)

    def refresh_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = DEFAULT_LOCK_TTL
    ) -> bool:
        """Extend the lease; only the current holder of an unexpired lock can."""
        if not session_id or not holder:
            return False
        now = time.time()

        def unit(conn: sa.Connection) -> bool:
            return conn.execute(
                sa.update(L)
                .where(L.c.session_id == session_id, L.c.holder == holder, L.c.expires_at >= now)
                .values(expires_at=now + ttl_seconds)
            ).rowcount > 0

        return self._lock_call("refresh_compression_lock", session_id, unit, False)

    def release_compression_lock(self, session_id: str, holder: str) -> None:
        """Release the lock if ``holder`` still owns it (a late caller cannot free
        a lock someone else took over)."""
        if not session_id:
            return

        def unit(conn: sa.Connection) -> None:
            conn.execute(sa.delete(L).where(L.c.session_id == session_id, L.c.holder == holder))

        self._lock_call("release_compression_lock", session_id, unit, None)

    def get_compression_lock_holder(self, session_id: str) -> str | None:
        """The holder of the session's unexpired lock, or None."""
        if not session_id:
            return None
        with self._read() as conn:
            return conn.execute(
                sa.select(L.c.holder)
                .where(L.c.session_id == session_id, L.c.expires_at >= time.time())
            ).scalar()

    def _lock_call(self, name: str, session_id: str, unit, failed_result):
        try:
            return self._write(unit, locks=unit_locks.sessions(session_id))
        except (sa.exc.DBAPIError, HermesStoreError) as exc:
            if isinstance(exc, HermesStoreError) and not _is_database_failure(exc):
                raise
            log.warning("%s(%s) failed: %s", name, session_id, exc)
            return failed_result

    # ------------------------------------------------------------------ cooldown / streak

    def record_compression_failure_cooldown(
        self, session_id: str, cooldown_until: float, error: str | None = None
    ) -> None:
        """Do not retry compressing this session before ``cooldown_until`` (epoch)."""
        if not session_id:
            return
        stmt = sa.update(S).where(S.c.id == session_id).values(
            compression_failure_cooldown_until=float(cooldown_until),
            compression_failure_error=error,
        )
        self._write(lambda conn: conn.execute(stmt),
                    locks=unit_locks.sessions(session_id))

    def get_compression_failure_cooldown(self, session_id: str) -> dict[str, Any] | None:
        """``{"cooldown_until", "remaining_seconds", "error"}`` while a cooldown runs."""
        if not session_id:
            return None
        with self._read() as conn:
            row = conn.execute(
                sa.select(S.c.compression_failure_cooldown_until, S.c.compression_failure_error)
                .where(S.c.id == session_id)
            ).first()
        if row is None or row.compression_failure_cooldown_until is None:
            return None
        remaining = float(row.compression_failure_cooldown_until) - time.time()
        if remaining <= 0:
            return None
        return {
            "cooldown_until": float(row.compression_failure_cooldown_until),
            "remaining_seconds": remaining,
            "error": row.compression_failure_error,
        }

    def clear_compression_failure_cooldown(self, session_id: str) -> None:
        if not session_id:
            return
        stmt = sa.update(S).where(S.c.id == session_id).values(
            compression_failure_cooldown_until=None, compression_failure_error=None
        )
        self._write(lambda conn: conn.execute(stmt),
                    locks=unit_locks.sessions(session_id))

    def get_compression_fallback_streak(self, session_id: str) -> int:
        if not session_id:
            return 0
        with self._read() as conn:
            value = conn.execute(
                sa.select(S.c.compression_fallback_streak).where(S.c.id == session_id)
            ).scalar()
        try:
            return max(0, int(value or 0))
        except (TypeError, ValueError):
            return 0

    def set_compression_fallback_streak(self, session_id: str, streak: int) -> None:
        """Store the streak (negative values are stored as 0)."""
        if not session_id:
            return
        stmt = sa.update(S).where(S.c.id == session_id).values(
            compression_fallback_streak=max(0, int(streak))
        )
        self._write(lambda conn: conn.execute(stmt),
                    locks=unit_locks.sessions(session_id))


def _is_database_failure(exc: HermesStoreError) -> bool:
    """Failures of the database itself (not misuse such as a closed or read-only store)."""
    from ..errors import (
        DatabaseDamagedError,
        NotADatabaseError,
        StoreBusyError,
        StoreFullError,
    )
    return isinstance(exc, (DatabaseDamagedError, NotADatabaseError, StoreBusyError,
                            StoreFullError))
