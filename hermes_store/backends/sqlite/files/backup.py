"""A state.db as a file: an online backup, and what SQLite says of its health.

``backup(source, dest)`` — a consistent copy taken while writers run (SQLite's backup
API in one step: a single read snapshot, which under WAL does not block writers).
``file_health(path)`` — ``integrity_check``, ``foreign_key_check``, journal mode and free
pages, read-only; ``journal_mode(path)`` without changing it.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ....errors import RecoveryError
from ..library import SQLITE as sqlite3
from ..library import integrity_problems
from .stamp import restamp
from .uri import absolute, file_uri

SIDECARS = ("-wal", "-shm", "-journal")


@dataclass
class BackupResult:
    source: str
    dest: str
    bytes: int
    pages: int
    integrity: str
    sessions: int | None
    messages: int | None
    seconds: float

    def as_dict(self) -> dict:
        return asdict(self)


def backup(
    source: str | os.PathLike,
    dest: str | os.PathLike,
    *,
    overwrite: bool = False,
    busy_timeout: float = 30.0,
) -> BackupResult:
    """Copy ``source`` to ``dest`` consistently while other processes keep writing.

    The copy is made under a temporary name, checked with ``quick_check``, switched to
    ``journal_mode=DELETE`` (one self-contained file), given an identity of its own
    (``stamp.restamp``: restored over a live store, it is seen as another file), made
    0600, then renamed into place: ``dest`` is either the old file or a complete backup,
    never half of one.
    """
    started = time.monotonic()
    source = absolute(source)
    dest = absolute(dest)
    if not source.is_file():
        from ....errors import StoreNotFoundError

        raise StoreNotFoundError(f"no database at {source}: nothing to back up")
    if dest.exists() and not overwrite:
        raise RecoveryError(f"{dest} already exists; choose a new name or pass --force to replace it")
    if dest.exists() and dest.resolve() == source.resolve():
        raise RecoveryError("the backup must go to another file than the database itself")
    if not dest.parent.is_dir():
        raise RecoveryError(f"{dest.parent} is not a directory: create it first")
    tmp = dest.with_name(f".{dest.name}.partial")
    for leftover in [tmp] + [Path(f"{tmp}{s}") for s in SIDECARS]:
        leftover.unlink(missing_ok=True)

    src = sqlite3.connect(file_uri(source, mode="ro"), uri=True, timeout=busy_timeout)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        out = sqlite3.connect(tmp, isolation_level=None)
        try:
            try:
                src.backup(out)  # pages=-1: one step, one snapshot
            except sqlite3.DatabaseError as exc:
                from ..errors import translate_error

                mapped = translate_error(exc, source)
                raise (mapped or RecoveryError(f"backup of {source} failed: {exc}")) from exc
            out.execute("PRAGMA journal_mode=DELETE")
            restamp(out)
            problems = integrity(out, quick=True)
            counts = {}
            for table in ("sessions", "messages"):
                try:
                    counts[table] = out.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
                except sqlite3.DatabaseError:
                    counts[table] = None
            pages = out.execute("PRAGMA page_count").fetchone()[0]
        finally:
            out.close()
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        src.close()
    if problems:
        tmp.unlink(missing_ok=True)
        from ....errors import RECOVER_HINT, DatabaseDamagedError

        raise DatabaseDamagedError(
            f"the copy of {source} fails its integrity check ({problems[0]}); the source is "
            f"damaged: {RECOVER_HINT}"
        )
    os.replace(tmp, dest)
    return BackupResult(
        source=str(source),
        dest=str(dest),
        bytes=dest.stat().st_size,
        pages=pages,
        integrity="ok",
        sessions=counts["sessions"],
        messages=counts["messages"],
        seconds=round(time.monotonic() - started, 3),
    )


# --------------------------------------------------------------------------- health

@dataclass
class FileHealth:
    """What SQLite itself says about a file (read-only; nothing is written)."""

    integrity: list[str]
    foreign_keys: dict[str, int]
    journal_mode: str | None
    page_size: int | None
    freelist_pages: int | None


def file_health(path: str | os.PathLike, *, quick: bool = False, limit: int = 20) -> FileHealth:
    """``integrity_check`` (or ``quick_check``), ``foreign_key_check`` (violations per
    table), journal mode and free pages, through a read-only connection."""
    conn = sqlite3.connect(file_uri(path, mode="ro"), uri=True, timeout=5.0)
    try:
        problems = integrity(conn, limit, quick=quick)
        violations: dict[str, int] = {}
        try:
            for table, *_ in conn.execute("PRAGMA foreign_key_check"):
                violations[table] = violations.get(table, 0) + 1
        except sqlite3.DatabaseError as exc:
            problems.append(f"foreign_key_check could not run: {exc}")

        def pragma(name: str):
            try:
                return conn.execute(f"PRAGMA {name}").fetchone()[0]
            except sqlite3.DatabaseError:
                return None

        return FileHealth(
            integrity=problems,
            foreign_keys=violations,
            journal_mode=pragma("journal_mode"),
            page_size=pragma("page_size"),
            freelist_pages=pragma("freelist_count"),
        )
    finally:
        conn.close()


def journal_mode(path: str | os.PathLike) -> str | None:
    """The file's journal mode, read without changing it (None when unreadable)."""
    try:
        conn = sqlite3.connect(file_uri(path, mode="ro"), uri=True, timeout=5.0)
    except sqlite3.Error:
        return None
    try:
        return conn.execute("PRAGMA journal_mode").fetchone()[0]
    except sqlite3.DatabaseError:
        return None
    finally:
        conn.close()


def integrity(conn: sqlite3.Connection, limit: int = 20, *, quick: bool = False) -> list[str]:
    """SQLite's findings, empty when the file is sound."""
    pragma = "quick_check" if quick else "integrity_check"
    try:
        # full-text index drift is not damage to the file (the indexes are rebuilt from
        # messages; the FTS checks report it): library.integrity_problems
        rows, _fts = integrity_problems(conn, pragma, max(limit, 100))
    except sqlite3.DatabaseError as exc:
        return [f"{pragma} could not run: {exc}"]
    return rows[:limit]


__all__ = ["BackupResult", "FileHealth", "RecoveryError", "SIDECARS", "backup", "file_health",
           "integrity", "journal_mode"]
