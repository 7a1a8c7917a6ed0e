"""Another program that has the database open and is idle (plain sqlite3).

    idle_holder.py DB

Reads once (so its connection holds the file, as any open WAL-mode connection does,
with its schema cached), prints "open", then waits for a line on stdin before closing.
"""

from __future__ import annotations

from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import sys

from _common import signal_line


def main() -> None:
    conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
    conn.execute("SELECT count(*) FROM sessions").fetchone()
    signal_line("open")
    sys.stdin.readline()
    conn.close()
    signal_line("closed")


if __name__ == "__main__":
    main()
