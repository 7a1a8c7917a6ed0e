"""Helpers for the migration tests: checksums, schema dumps, FTS checks, the alembic CLI.

(A module rather than conftest so test files can import it by name.)
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import subprocess
import sys
from pathlib import Path
from typing import Iterator

from support import schema_dump

REPO = Path(__file__).resolve().parents[2]

#: present in every file we manage, never in an upstream one
ALEMBIC_OBJECTS = {"tables.alembic_version", "indexes.sqlite_autoindex_alembic_version_1"}


def file_digest(path: Path) -> str:
    """Bytes of the file and of its -wal sidecar, if any: "unchanged" means both."""
    h = hashlib.sha256(Path(path).read_bytes())
    wal = Path(f"{path}-wal")
    if wal.exists():
        h.update(wal.read_bytes())
    return h.hexdigest()


@contextlib.contextmanager
def connect_ro(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection that is really closed afterwards (sqlite3's own context
    manager only ends the transaction): a connection left open until garbage
    collection keeps the -wal alive, and whichever process closes last then
    checkpoints it, changing the file's bytes at a random moment."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        yield conn
    finally:
        conn.close()


def ordinary_tables(conn: sqlite3.Connection) -> list[str]:
    return [
        name
        for (name,) in conn.execute(
            "SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table' "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
    ]


def fts_tables(conn: sqlite3.Connection) -> list[str]:
    return [
        name
        for (name, sql) in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
        if sql and re.match(r"(?is)\s*create\s+virtual\s+table.*using\s+fts5", sql)
    ]


def data_digest(path: Path) -> str:
    """Every row of every ordinary table, in rowid order (FTS shadow tables aside)."""
    h = hashlib.sha256()
    with connect_ro(path) as conn:
        for table in ordinary_tables(conn):
            h.update(table.encode())
            for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid'):
                h.update(repr(row).encode())
    return h.hexdigest()


def row_counts(path: Path) -> dict[str, int]:
    with connect_ro(path) as conn:
        return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in ordinary_tables(conn)}


def fts_integrity_errors(path: Path) -> list[str]:
    """FTS5 integrity-check (rank = 1: the index must also match its content) per index."""
    problems = []
    conn = sqlite3.connect(path)
    try:
        for table in fts_tables(conn):
            try:
                conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
            except sqlite3.DatabaseError as exc:
                problems.append(f"{table}: {exc}")
    finally:
        conn.close()
    return problems


def schema_version(path: Path) -> list[int] | None:
    with connect_ro(path) as conn:
        try:
            return [v for (v,) in conn.execute("SELECT version FROM schema_version")]
        except sqlite3.OperationalError:
            return None


def alembic_revision(path: Path) -> str | None:
    with connect_ro(path) as conn:
        try:
            return conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        except sqlite3.OperationalError:
            return None


def schema(path_or_dump, *, drop=()) -> dict:
    """Normalized schema (column order aside), with the named dotted keys removed."""
    raw = path_or_dump if isinstance(path_or_dump, dict) else schema_dump.load(str(path_or_dump))
    prepared = schema_dump._prepare(raw, column_order=False, schema_only=True, ignore_meta=[])
    prepared.pop("pragmas", None)
    for key in drop:
        section, _, name = key.partition(".")
        prepared.get(section, {}).pop(name, None)
    return prepared


def schema_diff(a, b, *, drop=()) -> list[str]:
    return schema_dump.diff(schema(a, drop=drop), schema(b, drop=drop))


def run_alembic(*args: str, db: Path | None, home: Path) -> subprocess.CompletedProcess:
    """The real alembic CLI from the repository root, with an isolated $HERMES_HOME."""
    cmd = [sys.executable, "-m", "alembic"]
    if db is not None:
        cmd += ["-x", f"db={db}"]
    env = dict(os.environ, HERMES_HOME=str(home))
    return subprocess.run(
        cmd + list(args), cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
