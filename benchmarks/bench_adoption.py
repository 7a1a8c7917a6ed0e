#!/usr/bin/env python3
"""Adoption: upgrading a file hermes-agent 0.19.0 wrote (schema 22) to head.

Input: a copy of ``tests/data/fixtures/upstream-0.19.0-v22.db`` bulk-filled to 100k and
1M messages (``--sizes full``; 10k and 100k with ``small``) with 0.19.0's own triggers
live. Each round upgrades a fresh copy with ``hermes_store.migrate.upgrade(path)`` in a
child process; reported are wall time and the child's peak RSS (``ru_maxrss``).

The floor is the least a layout change has to do: a child running plain sqlite3 FTS5
``'rebuild'`` of both head indexes on an already-adopted copy, in one transaction with
``synchronous=FULL``. Upstream 0.19.0 has no such operation (it leaves old files on the
inline layout), so there is no upstream column.

Target: peak RSS < 200 MB at 1M messages.
"""

from __future__ import annotations

from hermes_store.backends.sqlite.files.uri import file_uri
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _stores  # noqa: E402
from _common import human, log, main_for, run_measured  # noqa: E402

NAME = "adoption"
RSS_TARGET_MB = 200

UPGRADE = (
    "import sys\n"
    "from hermes_store.migrate import upgrade\n"
    "upgrade(sys.argv[1])\n"
)
REBUILD_FLOOR = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "c.execute('PRAGMA synchronous=FULL'); c.execute('PRAGMA journal_mode=WAL')\n"
    "c.execute('BEGIN IMMEDIATE')\n"
    "for t in ('messages_fts', 'messages_fts_trigram'):\n"
    "    c.execute(f\"INSERT INTO {t}({t}) VALUES ('rebuild')\")\n"
    "c.execute('COMMIT'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()\n"
)


def _counts(path: Path) -> dict:
    conn = sqlite3.connect(file_uri(path, mode="ro"), uri=True)
    try:
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("sessions", "messages")}
    finally:
        conn.close()


def _sizes(args) -> list[int]:
    return [s for s in args.size_list if s >= 100_000] if args.sizes == "full" else list(args.size_list)


def run(args, report) -> None:
    for n in _sizes(args):
        work = args.workdir / f"adoption-{human(n)}"
        src = _stores.store("v22", n, log=lambda m: log(args, m))
        before = _counts(src)
        ours_runs, floor_runs = [], []
        adopted = None
        rounds = max(1, min(args.rounds, 3 if n < 1_000_000 else 2))
        for r in range(rounds):
            copy = _stores.working_copy(src, work, "adopt.db")
            log(args, f"adoption {human(n)} round {r + 1}: upgrading")
            ours_runs.append(run_measured([sys.executable, "-c", UPGRADE, str(copy)]))
            after = _counts(copy)
            if after != before:
                raise RuntimeError(f"adoption changed row counts: {before} -> {after}")
            adopted = _stores.working_copy(copy, work, "floor.db")
            floor_runs.append(run_measured([sys.executable, "-c", REBUILD_FLOOR, str(adopted)]))
            size_after = _stores.file_bytes(copy)
        med = lambda runs, k: statistics.median(x[k] for x in runs)  # noqa: E731
        case = f"0.19.0 file, {human(n)} messages"
        report.add(NAME, case, "time", "s", med(ours_runs, "seconds"), med(floor_runs, "seconds"), None,
                   runs=ours_runs, floor_runs=floor_runs, size_before=src.stat().st_size,
                   size_after=size_after)
        rss = med(ours_runs, "peak_rss_mb")
        report.add(NAME, case, "peak RSS", "MB", rss, med(floor_runs, "peak_rss_mb"), None,
                   target=f"< {RSS_TARGET_MB} MB at 1M", met=rss < RSS_TARGET_MB)
        report.add(NAME, case, "file size, 0.19.0 input", "MB", src.stat().st_size / 1e6)
        report.add(NAME, case, "file size, adopted", "MB", size_after / 1e6)
        for p in work.glob("*"):
            p.unlink()


if __name__ == "__main__":
    sys.exit(main_for(NAME, __doc__.split("\n")[1], run))
