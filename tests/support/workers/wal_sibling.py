"""Another process that takes a store's ``-wal``/``-shm`` generation away (issue 31, row 3).

    wal_sibling.py DB close     open DB with plain sqlite3, read, close: SQLite's close
                                checkpoints and unlinks -wal/-shm when no other process
                                holds a lock on the file (upstream #105670, #125184)
    wal_sibling.py DB replace   unlink -wal and -shm, then open a store on DB, append one
                                message to session "sibling" and end without closing (a
                                live sibling: its new log stays at the path)

Prints one JSON line: {"wal": bool, "shm": bool} (whether each sidecar is still at the
path when it is done) and, for ``replace``, the message it appended:
{"id": …, "session": …, "content": …}.
"""

from __future__ import annotations

import os
import sys

from _common import say


def main() -> None:
    path, how = sys.argv[1], sys.argv[2]
    appended = {}
    if how == "close":
        from hermes_store.backends.sqlite.library import dbapi

        conn = dbapi().connect(path, isolation_level=None, timeout=10)
        conn.execute("SELECT count(*) FROM sessions").fetchone()
        conn.close()
    else:
        for suffix in ("-wal", "-shm"):
            os.unlink(f"{path}{suffix}")
        from hermes_store import SessionDB

        db = SessionDB(path)
        db.create_session("sibling", "cli")
        content = "written by the sibling into the new log"
        appended = {"id": db.append_message("sibling", "user", content),
                    "session": "sibling", "content": content}
    say(wal=os.path.exists(f"{path}-wal"), shm=os.path.exists(f"{path}-shm"), **appended)
    sys.stdout.flush()
    os._exit(0)  # no close: a live sibling's log stays at the path


if __name__ == "__main__":
    main()
