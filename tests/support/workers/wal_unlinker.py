"""A sibling's close that takes a store's log away while the store waits for the lock
(issue 31, row 3): what SQLite's close does when another copy of the POSIX locks was
dropped, done by hand so it happens while a writer is queued.

    wal_unlinker.py DB HOLD_SECONDS

Takes the writer lock (``BEGIN IMMEDIATE``), prints "locked", copies every frame of
the log into the file (a second connection's checkpoint, which may not truncate under
the lock but copies), waits HOLD_SECONDS (the store's append queues on the lock), then
unlinks ``-wal`` and ``-shm`` and lets the lock go. Prints "released".
"""

from __future__ import annotations

import os
import sqlite3  # another program's own: the standard library's (the store is not imported)
import sys
import time

from _common import signal_line


def main() -> None:
    path, hold = sys.argv[1], float(sys.argv[2])
    holder = sqlite3.connect(path, isolation_level=None, timeout=30)
    holder.execute("PRAGMA wal_autocheckpoint=0")
    holder.execute("BEGIN IMMEDIATE")
    signal_line("locked")
    copier = sqlite3.connect(path, isolation_level=None, timeout=30)
    busy, log, done = copier.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    if busy or log != done:
        raise SystemExit(f"the log was not copied whole: {busy, log, done}")
    time.sleep(hold)
    for suffix in ("-wal", "-shm"):
        os.unlink(f"{path}{suffix}")
    holder.execute("ROLLBACK")
    signal_line("released")
    os._exit(0)  # no close: the unlinked log stays with this process, as with a sibling


if __name__ == "__main__":
    main()
