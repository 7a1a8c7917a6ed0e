"""A state.db file before it is opened: its path, its mode bits, a read-only probe.

Opening a file (``SQLiteBackend.open_store``) goes through these steps, in order: refuse
a symlink planted at the path or a sidecar; create the folder and, for a new database,
the file with mode 0600 (``fileops.create_private_file``; SQLite gives ``-wal``/``-shm``
the database file's mode); check
through SQLite that the file is a readable database before any write
(:func:`probe_database`); then ``migrate/commands.ensure_schema`` brings the schema to
head, or refuses with the command to run.
"""

from __future__ import annotations

import os
from pathlib import Path

from ....errors import UnsafePathError
from ....policy import DEFAULT_BUSY_TIMEOUT, RetryPolicy, tried_through_io_errors
from ..errors import is_busy_error, is_io_error
from ..library import SQLITE as sqlite3
from ..library import integrity_problems
from .uri import file_uri

#: a non-empty -wal at open is verified with quick_check up to this database size;
#: beyond it the full scan would make every open slow, so only the schema is read
WAL_QUICK_CHECK_MAX_BYTES = 256 * 1024 * 1024
SIDECARS = ("", "-wal", "-shm", "-journal")


def check_not_symlink(path: Path) -> None:
    for suffix in SIDECARS:
        candidate = Path(f"{path}{suffix}")
        if candidate.is_symlink():
            raise UnsafePathError(
                f"{candidate} is a symbolic link (to {os.readlink(candidate)}); refusing to "
                "open it, since writes would land wherever it points. Remove the link or "
                "pass the real file's path."
            )


def make_private(path: Path) -> None:
    """Take group/other access away from a database we own (it holds whole
    conversations); SQLite gives new -wal/-shm files the database's mode."""
    for suffix in ("", "-wal", "-shm"):
        candidate = Path(f"{path}{suffix}")
        try:
            st = candidate.stat()
        except FileNotFoundError:
            continue
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            candidate.chmod(st.st_mode & 0o700)


def _wal_needs_verifying(path: Path) -> bool:
    wal = Path(f"{path}-wal")
    try:
        return wal.stat().st_size > 0 and path.stat().st_size <= WAL_QUICK_CHECK_MAX_BYTES
    except FileNotFoundError:
        return False


def log_size(path: Path) -> int:
    """The size of the ``-wal`` beside ``path`` (0: none). Switching a file to WAL writes
    its first page into the file itself, so a log with frames beside an empty file is a
    loss; a ``-journal`` (or an empty ``-wal``) beside it is a store being created."""
    try:
        return os.stat(f"{path}-wal").st_size
    except OSError:
        return 0


def _refuse_empty_with_log(path: Path) -> None:
    """An empty file with a log beside it (:func:`log_size`) is never opened: SQLite
    deletes the ``-wal`` of an empty database on open, read-only included, and it may
    hold the last commits."""
    from ....errors import NotADatabaseError

    try:
        if path.stat().st_size != 0:
            return
    except FileNotFoundError:
        return
    if log_size(path):
        raise NotADatabaseError(
            f"{path} is empty (0 bytes) but {path.name}-wal is beside it: the file lost "
            "its data, and its log may hold the last commits. Nothing was opened or "
            "changed. Opening the store writable sets them aside together and starts a "
            "fresh store (docs/reliability.md, \"A zero-length or zeroed state.db\")."
        )


def probe_database(path: str | os.PathLike, *, io_retry: RetryPolicy | None = None) -> None:
    """Read the file's header and schema through a read-only connection.

    Raises ``NotADatabaseError`` for a file that is not SQLite and
    ``DatabaseDamagedError`` for an unreadable schema — before anything writes to it —
    and ``StoreIOError`` for a disk I/O error, which says nothing about the file's
    contents. ``io_retry`` (a read-only open's policy) reads again on the same
    connection after such an error, within ``io_attempts``; a writable open never does.
    SQLite (not a raw ``open()``) reads the file: closing a raw descriptor would drop
    the POSIX locks other connections of this process hold on it.
    """
    from ....errors import RECOVER_HINT, DatabaseDamagedError, NotADatabaseError, StoreIOError

    _refuse_empty_with_log(Path(path))
    uri = file_uri(path, mode="ro")
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=DEFAULT_BUSY_TIMEOUT)
    except sqlite3.Error as exc:
        raise DatabaseDamagedError(f"{path} cannot be opened ({exc}); {RECOVER_HINT}") from exc
    try:
        if io_retry is None:
            _read_schema(conn, path)
        else:
            tried_through_io_errors(lambda: _read_schema(conn, path), is_io_error, io_retry)
    except sqlite3.DatabaseError as exc:
        name = getattr(exc, "sqlite_errorname", "")
        if is_io_error(exc):
            attempts, pause = (io_retry.io_attempts, io_retry.io_pause) if io_retry else (1, 0)
            detail = f"{exc}, {name}" if name else str(exc)
            raise StoreIOError(path, detail, attempts, pause) from exc
        if name == "SQLITE_NOTADB" or "not a database" in str(exc):
            raise NotADatabaseError(
                f"{path} is not a SQLite database ({exc}); it was left untouched. "
                f"If it is a damaged state.db, {RECOVER_HINT}"
            ) from exc
        if is_busy_error(exc):
            return  # locked by a writer: readable, the open proper will wait its turn
        raise DatabaseDamagedError(f"{path} is damaged ({exc}); {RECOVER_HINT}") from exc
    finally:
        conn.close()


def _read_schema(conn, path: str | os.PathLike) -> None:
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    if _wal_needs_verifying(Path(path)):
        # A -wal left by a crash (or copied in from another file) is replayed on
        # read; a foreign one shows up only as damage in the pages it overlays.
        # (Full-text index drift is not damage to the file: integrity_problems.)
        problems, _fts = integrity_problems(conn, "quick_check")
        if problems:
            raise sqlite3.DatabaseError("; ".join(problems[:5]))


__all__ = ["SIDECARS", "WAL_QUICK_CHECK_MAX_BYTES", "check_not_symlink", "log_size", "make_private",
           "probe_database"]
