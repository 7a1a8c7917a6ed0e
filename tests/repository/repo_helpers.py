"""Helpers shared by the repository tests (direct row edits the public API has no call for)."""

from __future__ import annotations

import itertools
import time

import sqlalchemy as sa

from hermes_store import schema

_clock = itertools.count(1)


def add_message(db, session_id: str, role: str, content, *, timestamp: float | None = None,
                active: int = 1, tool_name=None) -> int:
    """Insert a message row directly (tests of listing/lineage do not depend on the
    messages concern); keeps sessions.message_count in step like append_message."""
    ts = timestamp if timestamp is not None else time.time() + next(_clock) * 1e-3

    def unit(conn):
        new_id = conn.execute(sa.insert(schema.messages).values(
            session_id=session_id, role=role, content=content, timestamp=ts, active=active,
            tool_name=tool_name,
        )).inserted_primary_key[0]
        conn.execute(sa.update(schema.sessions).where(schema.sessions.c.id == session_id)
                     .values(message_count=schema.sessions.c.message_count + 1))
        return new_id

    return db._write(unit)


def set_fields(db, session_id: str, **values) -> None:
    """Set session columns directly (e.g. a started_at in the past)."""
    db._write(lambda conn: conn.execute(
        sa.update(schema.sessions).where(schema.sessions.c.id == session_id).values(**values)
    ))


def fts_hits(db, word: str) -> int:
    with db._read() as conn:
        return conn.exec_driver_sql(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?", (word,)
        ).scalar()
