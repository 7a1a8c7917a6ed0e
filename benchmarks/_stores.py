"""Build (and cache) the store files the benchmarks run against.

Three kinds, all filled from the same ``_workload.Generator`` stream:

* ``head``      — an empty file upgraded to head by *our* migrations
                  (``hermes_store.migrate.upgrade``), then bulk-filled. Ours and the raw
                  floor both run on copies of it.
* ``upstream``  — an empty file initialised by upstream ``hermes_state.SessionDB`` 0.19.0
                  (schema 22, inline FTS), then bulk-filled.
* ``v22``       — a copy of ``tests/data/fixtures/upstream-0.19.0-v22.db`` (a real file
                  0.19.0 wrote), bulk-filled: the input of the adoption benchmark.

Bulk fill is plain ``sqlite3`` inserts in large transactions with every trigger of the
file live, so the FTS indexes are built the way the application builds them. Built files
are cached under ``benchmarks/results/cache/stores`` keyed by the workload version and a
hash of the schema code, and every benchmark works on a fresh copy.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from _common import CACHE, ROOT, human
from _workload import WORKLOAD_VERSION, Generator

from hermes_store.backends.sqlite.library import dbapi  # noqa: E402

sqlite3 = dbapi()  # the store's SQLite library (one copy of SQLite per process)

FIXTURE_V22 = ROOT / "tests" / "data" / "fixtures" / "upstream-0.19.0-v22.db"
STORES = CACHE / "stores"
LONG_SESSION = 20_000
COMMIT_EVERY = 50_000


def schema_key() -> str:
    """Changes whenever the code that shapes a head file changes (the migrations and
    the DDL they use; not query or maintenance code, which reads the file)."""
    h = hashlib.sha256(f"workload{WORKLOAD_VERSION}".encode())
    pkg = ROOT / "hermes_store"
    files = sorted((ROOT / "migrations").rglob("*.py"))
    files += [pkg / "backends" / "sqlite" / "fts" / "ddl.py", pkg / "display_order.py",
              pkg / "backends" / "sqlite" / "display_order.py", pkg / "schema.py"]
    for f in files:
        if f.is_file():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def fill(path: Path, gen: Generator, *, progress=None) -> dict:
    """Bulk-insert the generator's sessions and messages with the file's triggers on."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")  # a multi-GB WAL would only slow the load
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-262144")
        scols = [c for c in columns(conn, "sessions")]
        mcols = set(columns(conn, "messages"))
        mkeys = [k for k in ("session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
                             "timestamp", "token_count", "finish_reason", "active") if k in mcols]
        msql = f"INSERT INTO messages ({', '.join(mkeys)}) VALUES ({', '.join('?' * len(mkeys))})"
        n_msgs = n_sessions = pending = 0
        conn.execute("BEGIN")
        for session, msgs in gen.sessions():
            srow = {k: v for k, v in session.items() if k in scols}
            conn.execute(
                f"INSERT INTO sessions ({', '.join(srow)}) VALUES ({', '.join('?' * len(srow))})",
                list(srow.values()),
            )
            rows = []
            for m in msgs:
                m = dict(m, session_id=session["id"], active=1)
                if m.get("tool_calls"):
                    m["tool_calls"] = json.dumps(m["tool_calls"])
                rows.append([m.get(k) for k in mkeys])
            conn.executemany(msql, rows)
            n_msgs += len(rows)
            n_sessions += 1
            pending += len(rows)
            if pending >= COMMIT_EVERY:
                conn.execute("COMMIT")
                conn.execute("BEGIN")
                pending = 0
                if progress:
                    progress(n_msgs)
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()
    return {"messages": n_msgs, "sessions": n_sessions}


def _create_head(path: Path) -> None:
    from hermes_store.migrate import upgrade

    upgrade(path)


def _create_upstream(path: Path, home: Path) -> None:
    import _upstream

    hs = _upstream.load(home)
    db = hs.SessionDB(path)
    db.close()


def _create_v22(path: Path) -> None:
    shutil.copyfile(FIXTURE_V22, path)
    path.chmod(0o600)


def store(kind: str, n_messages: int, *, log=None, long_session: int = LONG_SESSION) -> Path:
    """The cached, filled store of this kind and size (built on first use)."""
    STORES.mkdir(parents=True, exist_ok=True)
    key = schema_key() if kind == "head" else f"w{WORKLOAD_VERSION}"
    final = STORES / f"{kind}-{human(n_messages)}-{key}.db"
    if final.exists():
        return final
    partial = final.with_suffix(".partial")
    for p in STORES.glob(partial.name + "*"):
        p.unlink()
    if log:
        log(f"building {kind} store with {human(n_messages)} messages (cached for next runs)")
    if kind == "head":
        _create_head(partial)
    elif kind == "upstream":
        _create_upstream(partial, CACHE / "upstream-home")
    elif kind == "v22":
        _create_v22(partial)
    else:
        raise ValueError(kind)
    gen = Generator(n_messages, long_session=long_session)
    fill(partial, gen, progress=(lambda n: log(f"  {kind}: {n:,} messages")) if log else None)
    checkpoint(partial)
    for suffix in ("-wal", "-shm"):
        Path(str(partial) + suffix).unlink(missing_ok=True)
    partial.rename(final)
    return final


def checkpoint(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def working_copy(src: Path, workdir: Path, name: str) -> Path:
    """A private copy of a cached store (benchmarks write to their copy)."""
    workdir.mkdir(parents=True, exist_ok=True)
    dst = workdir / name
    for suffix in ("", "-wal", "-shm"):
        Path(str(dst) + suffix).unlink(missing_ok=True)
    shutil.copyfile(src, dst)
    dst.chmod(0o600)
    return dst


def file_bytes(path: Path) -> int:
    return sum(Path(str(path) + s).stat().st_size for s in ("", "-wal") if Path(str(path) + s).exists())
