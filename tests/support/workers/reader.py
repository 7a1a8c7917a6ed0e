"""Load reader: a fixed number of read operations through its own SessionDB.

    reader.py DB COUNT SHARED_SESSION

DB is a SQLite file's path or a PostgreSQL URL. Cycles search_messages /
list_sessions_rich / get_messages / session_count / a snapshot check, and prints
{"done", "ops", "elapsed", "hits", "snapshots"}. The snapshot check reads, in one
read snapshot (``_read``) and several statements, every session's counters and
token totals, then the rows they count: a unit seen half-applied (a message without
its count, tokens without their per-model row) fails it. Any exception exits non-zero.
"""

from __future__ import annotations

import json
import sys
import time

import sqlalchemy as sa

from _common import open_store, say

from hermes_store import schema

M, S, U = schema.messages, schema.sessions, schema.session_model_usage


def _tool_calls(raw) -> int:
    value = json.loads(raw)
    return len(value) if isinstance(value, list) else 1


def check_snapshot(db) -> None:
    with db._read() as conn:  # one snapshot for every statement below
        sessions = conn.execute(sa.select(S.c.id, S.c.message_count, S.c.tool_call_count,
                                          S.c.input_tokens)).all()
        messages: dict[str, int] = {}
        calls: dict[str, int] = {}
        for session_id, role, tool_calls in conn.execute(
                sa.select(M.c.session_id, M.c.role, M.c.tool_calls)):
            messages[session_id] = messages.get(session_id, 0) + 1
            if tool_calls is not None and role != "tool":
                calls[session_id] = calls.get(session_id, 0) + _tool_calls(tool_calls)
        usage = dict(conn.execute(sa.select(U.c.session_id, sa.func.sum(U.c.input_tokens))
                                  .group_by(U.c.session_id)).all())
    for session_id, message_count, tool_call_count, input_tokens in sessions:
        seen = (message_count, tool_call_count, input_tokens)
        counted = (messages.get(session_id, 0), calls.get(session_id, 0),
                   int(usage.get(session_id) or 0))
        assert seen == counted, f"half a unit seen in {session_id}: {seen} vs rows {counted}"


def main() -> None:
    path, count, shared = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    db = open_store(path)
    hits = snapshots = 0
    start = time.perf_counter()
    for i in range(count):
        op = i % 5
        if op == 0:
            result = db.search_messages("loadmark", limit=20)
            assert isinstance(result, list)
            hits += len(result)
        elif op == 1:
            rows = db.list_sessions_rich(limit=10)
            assert isinstance(rows, list)
        elif op == 2:
            msgs = db.get_messages(shared, limit=50)
            assert isinstance(msgs, list)
        elif op == 3:
            assert db.session_count() >= 1
        else:
            check_snapshot(db)
            snapshots += 1
    elapsed = time.perf_counter() - start
    say(done=True, ops=count, elapsed=elapsed, hits=hits, snapshots=snapshots)
    db.close()


if __name__ == "__main__":
    main()
