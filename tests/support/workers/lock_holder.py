"""Holds SQLite's write lock (BEGIN IMMEDIATE via plain sqlite3) for a while.

    lock_holder.py DB SECONDS

Prints "locked" once it has the lock; commits after SECONDS.
"""

from __future__ import annotations

from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import sys
import time

from _common import signal_line


def main() -> None:
    conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
    conn.execute("BEGIN IMMEDIATE")
    signal_line("locked")
    time.sleep(float(sys.argv[2]))
    conn.execute("COMMIT")
    conn.close()


if __name__ == "__main__":
    main()
