"""A reader that keeps going while its PostgreSQL server restarts.

    restart_reader.py URL SHARED_SESSION

Opens one SessionDB (never reopened) and loops until its stdin is closed, through the
public API only: a search, a listing, the shared session's transcript, a count, and one
read snapshot of a whole session (``export_session``: its row and its messages), whose
``message_count`` must equal the messages it holds — a half unit seen would fail it.
Each call's outcome is one JSON line, {"op", "ok"} or {"op", "error", "message"} when the
package raised one of its errors; any other exception (or a snapshot that saw half a
unit) ends the process with a traceback. At the end: {"done", "ops", "snapshots"}.
"""

from __future__ import annotations

import sys
import threading
import time

from _common import open_store, say

from hermes_store.errors import HermesStoreError


def main() -> None:
    url, shared = sys.argv[1], sys.argv[2]
    db = open_store(url)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    ops = snapshots = 0

    def snapshot():
        exported = db.export_session(shared)
        assert exported["message_count"] == len(exported["messages"]), \
            f"half a unit: {exported['message_count']} vs {len(exported['messages'])} rows"
        return len(exported["messages"])

    calls = [
        ("search", lambda: len(db.search_messages("restartmark", limit=20))),
        ("list", lambda: len(db.list_sessions_rich(limit=10))),
        ("messages", lambda: len(db.get_messages(shared, limit=50))),
        ("count", lambda: db.session_count()),
        ("snapshot", snapshot),
    ]
    while not stop.is_set():
        op, call = calls[ops % len(calls)]
        try:
            result = call()
        except HermesStoreError as exc:
            say(op=op, error=type(exc).__name__, message=str(exc), at=time.time())
            time.sleep(0.02)
        else:
            say(op=op, ok=result, at=time.time())
            snapshots += op == "snapshot"
        ops += 1
    say(done=True, ops=ops, snapshots=snapshots)
    db.close()


if __name__ == "__main__":
    main()
