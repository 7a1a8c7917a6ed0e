"""Process entry points for the cleanup concurrency test (importable by spawned children)."""

from __future__ import annotations

import time

import sqlalchemy as sa

from hermes_store import SessionDB, schema


def write_first_message_slowly(path: str, session_id: str, written, hold_seconds: float) -> None:
    """Insert the session's first message in one unit, tell the parent, and commit only
    after ``hold_seconds`` (the parent's unit must wait for it, then see the message)."""
    db = SessionDB(path)

    def unit(conn):
        conn.execute(sa.insert(schema.messages).values(
            session_id=session_id, role="user", content="just in time", timestamp=1.0))
        conn.execute(sa.update(schema.sessions).where(schema.sessions.c.id == session_id)
                     .values(message_count=1))
        written.set()
        time.sleep(hold_seconds)  # the lock stays held meanwhile

    db._write(unit)
    db.close()
