"""A process that opens a store whose full-text index is stale, at the same moment as
another one (issue 31, row 1: the rebuild at open runs once).

    fts_opener.py DB GO

Waits until the file GO exists, opens DB with ``SessionDB`` (a writable open rebuilds a
stale index, under a cross-process lock), closes it, and prints one JSON line:
``{"rebuilt": true|false}`` — whether this process's open logged that it rebuilt the
index.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from _common import say


class _Rebuilds(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen = []

    def emit(self, record: logging.LogRecord) -> None:
        if "rebuilt the full-text" in record.getMessage():
            self.seen.append(record.getMessage())


def main() -> None:
    path, go = sys.argv[1:3]
    rebuilds = _Rebuilds()
    logger = logging.getLogger("hermes_store")
    logger.addHandler(rebuilds)
    logger.setLevel(logging.INFO)
    from hermes_store import SessionDB

    deadline = time.monotonic() + 30
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise SystemExit("never told to go")
        time.sleep(0.002)
    SessionDB(path).close()
    say(rebuilt=bool(rebuilds.seen))


if __name__ == "__main__":
    main()
