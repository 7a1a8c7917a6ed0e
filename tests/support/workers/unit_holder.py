"""A writer that is inside a write unit when it is killed.

    unit_holder.py DB SESSION

DB is a SQLite file's path or a PostgreSQL URL. Opens its own SessionDB and starts one
write unit that appends a message marked "halfmark" and accounts tokens on SESSION (the
calls join the unit), then prints "inside" and sleeps inside the unit, holding the
store's write lock (SQLite) or unit lock (PostgreSQL), until the parent kills it.
"""

from __future__ import annotations

import sys
import time

from _common import open_store, signal_line


def main() -> None:
    path, session = sys.argv[1], sys.argv[2]
    db = open_store(path)

    def unit(conn):
        db.append_message(session, role="user", content="halfmark never committed")
        db.update_token_counts(session, input_tokens=1000, output_tokens=1, api_call_count=1,
                               model="m-load")
        signal_line("inside")
        time.sleep(120)

    db._write(unit)


if __name__ == "__main__":
    main()
