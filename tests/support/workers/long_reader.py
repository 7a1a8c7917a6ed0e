"""Another program's long read: holds one read snapshot open (plain sqlite3).

    long_reader.py DB

Prints "holding" once the snapshot is taken, then waits for a line on stdin
(the parent's "release") before ending the transaction and exiting.
"""

from __future__ import annotations

from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import sys

from _common import signal_line


def main() -> None:
    conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
    conn.execute("BEGIN")
    (count,) = conn.execute("SELECT count(*) FROM messages").fetchone()
    signal_line("holding")
    sys.stdin.readline()
    (again,) = conn.execute("SELECT count(*) FROM messages").fetchone()
    conn.execute("COMMIT")
    conn.close()
    # The snapshot must have been stable while the writers worked.
    signal_line("stable" if again == count else f"unstable {count} {again}")


if __name__ == "__main__":
    main()
