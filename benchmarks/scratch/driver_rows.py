"""Row fetching in the two SQLite DB-API modules themselves, no store (issue 20).

    python benchmarks/scratch/driver_rows.py [STATE_DB]

One process, both libraries (scratch only: the store never mixes two SQLite libraries
in a process), the same statements on each, best of 7 × 20,000. With STATE_DB (a head
file; a copy is read, read-only) also ``SELECT * FROM sessions WHERE id = ?``, the
statement ``get_session`` sends.
"""
import shutil
import sqlite3
import sys
import tempfile
import timeit
from pathlib import Path

import pysqlite3.dbapi2 as pysqlite3

N = 20_000


def best(fn) -> float:
    return min(timeit.repeat(fn, number=N, repeat=7)) / N * 1e6


def main() -> None:
    libs = {"sqlite3": sqlite3, "pysqlite3": pysqlite3}
    conns = {name: lib.connect(":memory:") for name, lib in libs.items()}
    for c in conns.values():
        c.execute("CREATE TABLE t(i INTEGER, r REAL, s TEXT)")
        c.execute("INSERT INTO t VALUES (123456, 1.5, 'hello world text value')")
    cases = {"1 integer column": "SELECT i FROM t",
             "40 integer columns": "SELECT " + ",".join(["i"] * 40) + " FROM t",
             "40 real columns": "SELECT " + ",".join(["r"] * 40) + " FROM t",
             "40 text columns": "SELECT " + ",".join(["s"] * 40) + " FROM t",
             "40 NULLs": "SELECT " + ",".join(["NULL"] * 40) + " FROM t"}
    rows = [(case, {name: best(lambda c=c, q=q: c.execute(q).fetchall()) for name, c in conns.items()})
            for case, q in cases.items()]
    if len(sys.argv) > 1:
        copy = Path(tempfile.mkdtemp()) / "state.db"
        shutil.copy(sys.argv[1], copy)
        files = {name: lib.connect(f"file:{copy}?mode=ro", uri=True) for name, lib in libs.items()}
        sid = files["sqlite3"].execute("SELECT id FROM sessions LIMIT 1").fetchone()[0]
        q = "SELECT * FROM sessions WHERE id = ?"
        rows.append(("sessions row (get_session's statement)",
                     {name: best(lambda c=c: c.execute(q, (sid,)).fetchall()) for name, c in files.items()}))
    print(f"SQLite {sqlite3.sqlite_version} (sqlite3) vs {pysqlite3.sqlite_version} (pysqlite3)")
    print("| statement, fetchall | sqlite3 µs | pysqlite3 µs | pysqlite3 ÷ sqlite3 |")
    print("|---|---:|---:|---:|")
    for case, t in rows:
        print(f"| {case} | {t['sqlite3']:.2f} | {t['pysqlite3']:.2f} | {t['pysqlite3'] / t['sqlite3']:.2f} |")


if __name__ == "__main__":
    main()
