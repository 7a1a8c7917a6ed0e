"""Load reader: a fixed number of read operations through its own SessionDB.

    reader.py DB COUNT SHARED_SESSION

Cycles search_messages / list_sessions_rich / get_messages / session_count and
prints {"done", "ops", "elapsed", "hits"}. Any exception exits non-zero.
"""

from __future__ import annotations

import sys
import time

from _common import open_store, say


def main() -> None:
    path, count, shared = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    db = open_store(path)
    hits = 0
    start = time.perf_counter()
    for i in range(count):
        op = i % 4
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
        else:
            assert db.session_count() >= 1
    elapsed = time.perf_counter() - start
    say(done=True, ops=count, elapsed=elapsed, hits=hits)
    db.close()


if __name__ == "__main__":
    main()
