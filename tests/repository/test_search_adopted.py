"""On a file adopted from each upstream fixture, every message still reads and is found
by search (decision D5: adoption loses no row and every message stays searchable)."""

from __future__ import annotations

import re
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process

from hermes_store import SessionDB

WORD = re.compile(r"[A-Za-z]{5,}")


def test_every_adopted_message_reads_and_is_found(upstream_fixture):
    with SessionDB(upstream_fixture) as db:
        conn = sqlite3.connect(upstream_fixture)
        rows = conn.execute("SELECT id, session_id, content, tool_name FROM messages").fetchall()
        conn.close()
        assert rows

        for session_id in {sid for _, sid, _, _ in rows}:
            stored = db.get_messages(session_id, include_inactive=True)
            assert {m["id"] for m in stored} == {i for i, sid, _, _ in rows if sid == session_id}
            db.get_messages_as_conversation(session_id, include_ancestors=True)

        searched = 0
        for message_id, _, content, tool_name in rows:
            words = WORD.findall(content if isinstance(content, str) else "") or WORD.findall(
                tool_name or "")
            if not words:
                continue
            hits = db.search_messages(words[-1], include_inactive=True, limit=-1)
            assert message_id in {h["id"] for h in hits}, (message_id, words[-1])
            searched += 1
        assert searched >= len(rows) // 2  # the fixtures are mostly Latin text
