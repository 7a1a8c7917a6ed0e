"""Another program damages a full-text index the way users met it (issue 31, row 1).

    fts_damager.py DB TABLE structure|short|leaves

Through a plain sqlite3 connection of its own, while the store may have the file open:
``structure`` overwrites the FTS5 structure record (``TABLE_data`` row 10) with junk
bytes; ``short`` cuts it to two bytes; ``leaves`` deletes the index's leaf blocks (every ``TABLE_data`` row past the
structure record). Prints "damaged" when committed.
"""

from __future__ import annotations

import sqlite3  # another program's own: the standard library's (the store is not imported)
import sys

from _common import signal_line

#: not a structure record: FTS5 refuses it ("corrupt structure record")
JUNK = bytes(range(0xA0, 0xE0))
DAMAGE = {
    "structure": ("UPDATE {table}_data SET block = ? WHERE id = 10", (JUNK,)),
    "short": ("UPDATE {table}_data SET block = x'0102' WHERE id = 10", ()),
    "leaves": ("DELETE FROM {table}_data WHERE id > 10", ()),
}


def main() -> None:
    path, table, kind = sys.argv[1:4]
    sql, args = DAMAGE[kind]
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        changed = conn.execute(sql.format(table=table), args).rowcount
    finally:
        conn.close()
    if changed < 1:
        raise SystemExit(f"nothing to damage in {table} ({kind})")
    signal_line("damaged")


if __name__ == "__main__":
    main()
