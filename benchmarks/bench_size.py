#!/usr/bin/env python3
"""File size: bytes per message, and the share of each full-text index (dbstat).

Both stores hold the same generated conversations (ours at head, FTS layout 3, vs
upstream 0.19.0's inline layout that stores every message's text again inside each
FTS table). Sizes are measured after a TRUNCATE checkpoint, page-exact from dbstat.
"""

from __future__ import annotations

from hermes_store.backends.sqlite.files.uri import file_uri
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _stores  # noqa: E402
from _common import human, log, main_for  # noqa: E402

NAME = "size"


def group_of(name: str, tbl: str) -> str:
    for fts in ("messages_fts_trigram", "messages_fts_cjk", "messages_fts"):
        if name == fts or name.startswith(fts + "_") or tbl.startswith(fts + "_"):
            return fts
    if tbl == "messages":
        return "messages (rows)" if name == "messages" else "messages (b-tree indexes)"
    return "everything else"


def breakdown(path: Path) -> tuple[int, dict[str, int], int]:
    conn = sqlite3.connect(file_uri(path, mode="ro"), uri=True)
    try:
        owners = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master"))
        groups: dict[str, int] = defaultdict(int)
        for name, size in conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"):
            groups[group_of(name, owners.get(name, name))] += size
        n_msgs = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0] * page
    finally:
        conn.close()
    groups["free pages"] = free
    return n_msgs, dict(groups), path.stat().st_size


def ours_fts_sizes(path: Path) -> dict | None:
    """Our own maintenance API's figures, to cross-check dbstat."""
    try:
        from hermes_store.backends.sqlite.engine import create_engine
        from hermes_store.fts.maintenance import fts_sizes
    except ImportError:
        return None
    engine = create_engine(path, read_only=True)
    try:
        with engine.connect() as conn:
            return fts_sizes(conn)
    finally:
        engine.dispose()


def run(args, report) -> None:
    for n in args.size_list:
        ours = _stores.store("head", n, log=lambda m: log(args, m))
        sides = {"ours": breakdown(ours)}
        if not args.no_upstream:
            sides["upstream"] = breakdown(_stores.store("upstream", n, log=lambda m: log(args, m)))
        o_n, o_groups, o_bytes = sides["ours"]
        u_n, u_groups, u_bytes = sides.get("upstream", (None, {}, None))
        report.add(NAME, f"{human(n)} messages", "bytes per message", "B", o_bytes / o_n, None,
                   (u_bytes / u_n) if u_bytes else None, file_bytes_ours=o_bytes, file_bytes_upstream=u_bytes,
                   groups_ours=o_groups, groups_upstream=u_groups, fts_sizes_api=ours_fts_sizes(ours))
        report.add(NAME, f"{human(n)} messages", "file size", "MB", o_bytes / 1e6, None,
                   (u_bytes / 1e6) if u_bytes else None)
        for group in sorted(set(o_groups) | set(u_groups)):
            o = o_groups.get(group, 0) / o_bytes * 100
            u = (u_groups.get(group, 0) / u_bytes * 100) if u_bytes else None
            report.add(NAME, f"{human(n)}: {group}", "share of file", "%", o, None, u,
                       bytes_ours=o_groups.get(group, 0), bytes_upstream=u_groups.get(group))


if __name__ == "__main__":
    sys.exit(main_for(NAME, __doc__.split("\n")[1], run))
