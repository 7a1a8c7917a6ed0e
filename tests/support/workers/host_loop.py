"""The store and a host's own ``import sqlite3`` in one process, on one file.

    host_loop.py DB ROUNDS

Opens ``SessionDB(DB)`` on whatever library the environment chooses
(``HERMES_STATE_SQLITE_MODULE``), then ROUNDS times: the store's ``create_session`` and
``append_message`` (what returned is acknowledged); the standard library's ``sqlite3``
— as a host's own code would use it — connects to DB, runs an ``UPDATE sessions``,
commits and closes; the store's ``list_sessions_rich(limit=5)``. Then ``close()``.
Prints one JSON object: the store's library and the standard library's SQLite versions,
what was acknowledged, and the failed calls by call and exception class (with one
message of each). Never raises for a failed call: the test judges.
"""

from __future__ import annotations

import collections
import json
import sqlite3  # the host's own: the standard library's, whatever the store runs on
import sys


def main() -> None:
    path, rounds = sys.argv[1], int(sys.argv[2])
    from hermes_store import SessionDB
    from hermes_store.backends.sqlite.library import library

    failed: collections.Counter = collections.Counter()
    samples: dict[str, str] = {}
    sessions: list[str] = []
    messages: list[list] = []  # [id, session_id, content]

    def attempt(what: str, call):
        try:
            return True, call()
        except Exception as exc:  # noqa: BLE001 - counted by class, judged by the test
            key = f"{what}: {type(exc).__name__}"
            failed[key] += 1
            samples.setdefault(key, str(exc)[:300])
            return False, None

    db = SessionDB(path)
    for i in range(rounds):
        sid = f"s{i:03d}"
        ok, _ = attempt("create_session", lambda: db.create_session(sid, source="cli"))
        if ok:
            sessions.append(sid)
            content = f"round {i} message"
            ok, mid = attempt("append_message",
                              lambda: db.append_message(sid, role="user", content=content))
            if ok:
                messages.append([mid, sid, content])

        def host_write():
            conn = sqlite3.connect(path, timeout=10)
            try:
                conn.execute("UPDATE sessions SET last_activity_description = ? WHERE id = ?",
                             (f"host touched round {i}", sid))
                conn.commit()
            finally:
                conn.close()

        attempt("host sqlite3 UPDATE", host_write)
        attempt("list_sessions_rich", lambda: db.list_sessions_rich(limit=5))
    attempt("close", db.close)

    lib = library()
    print(json.dumps({
        "library": lib.name, "module": lib.module.__name__,
        "library_sqlite_version": lib.version_text,
        "stdlib_sqlite_version": sqlite3.sqlite_version,
        "rounds": rounds, "sessions": sessions, "messages": messages,
        "failed": dict(failed), "samples": samples,
    }))


if __name__ == "__main__":
    main()
