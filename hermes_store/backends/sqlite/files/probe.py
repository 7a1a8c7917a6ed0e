"""A state.db file before it is opened: its path, its mode bits, a read-only probe.

Opening a file (``SQLiteBackend.open_store``) goes through these steps, in order: refuse
a symlink planted at the path or a sidecar; create the folder and, for a new database,
the file with mode 0600 (``fileops.create_private_file``; SQLite gives ``-wal``/``-shm``
the database file's mode); check
through SQLite that the file is a readable database before any write
(:func:`probe_database`); bring the schema to head (:func:`ensure_schema`), or refuse
with the command to run.
"""

from __future__ import annotations

import os
from pathlib import Path

from ....errors import SchemaOutOfDateError, SchemaTooNewError, UnsafePathError
from ....policy import DEFAULT_BUSY_TIMEOUT
from ..errors import is_busy_error
from ..migrate.head import stamped_at_head
from ..library import SQLITE as sqlite3
from ..library import integrity_problems
from .uri import file_uri

#: a non-empty -wal at open is verified with quick_check up to this database size;
#: beyond it the full scan would make every open slow, so only the schema is read
WAL_QUICK_CHECK_MAX_BYTES = 256 * 1024 * 1024
SIDECARS = ("", "-wal", "-shm", "-journal")


def upgrade_hint(path: Path) -> str:
    return (f"run `hermes-store db upgrade --db {path}` (or `alembic -x db={path} upgrade "
            "head`), or open it with auto_upgrade=True")


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


def ensure_schema(path: Path, *, auto_upgrade: bool, read_only: bool) -> None:
    """Bring the file to head, or raise the error that says what to run."""
    if stamped_at_head(path):
        return  # the usual open: answered without importing Alembic
    from ....migrate.scripts import head as newest
    from ..migrate import topics
    from ..migrate.commands import upgrade_file
    from ..migrate.inspect import inspect_file

    head = newest()
    at = inspect_file(path).revision
    if at == head:
        return
    if at is not None and at > head:
        raise SchemaTooNewError(
            f"{path} has schema revision {at}, newer than this hermes_store knows ({head}); "
            "it was not touched. Upgrade hermes_store to open it."
        )
    if read_only or not auto_upgrade:
        state = "has no schema yet" if at is None else f"is at schema revision {at}"
        why = "it is opened read-only" if read_only else "auto_upgrade=False"
        raise SchemaOutOfDateError(
            f"{path} {state}, head is {head}, and {why}: {upgrade_hint(path)}"
        )
    upgrade_file(path, "head")
    # Topic tables a user already opted into (e.g. in upstream Hermes) come along;
    # absent ones are never created here.
    topics.upgrade_file(path, "head", only_if_present=True)


def _wal_needs_verifying(path: Path) -> bool:
    wal = Path(f"{path}-wal")
    try:
        return wal.stat().st_size > 0 and path.stat().st_size <= WAL_QUICK_CHECK_MAX_BYTES
    except FileNotFoundError:
        return False


def probe_database(path: str | os.PathLike) -> None:
    """Read the file's header and schema through a read-only connection.

    Raises ``NotADatabaseError`` for a file that is not SQLite and
    ``DatabaseDamagedError`` for an unreadable schema — before anything writes to it.
    SQLite (not a raw ``open()``) reads the file: closing a raw descriptor would drop
    the POSIX locks other connections of this process hold on it.
    """
    from ....errors import RECOVER_HINT, DatabaseDamagedError, NotADatabaseError

    uri = file_uri(path, mode="ro")
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=DEFAULT_BUSY_TIMEOUT)
    except sqlite3.Error as exc:
        raise DatabaseDamagedError(f"{path} cannot be opened ({exc}); {RECOVER_HINT}") from exc
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if _wal_needs_verifying(Path(path)):
            # A -wal left by a crash (or copied in from another file) is replayed on
            # read; a foreign one shows up only as damage in the pages it overlays.
            # (Full-text index drift is not damage to the file: integrity_problems.)
            problems, _fts = integrity_problems(conn, "quick_check")
            if problems:
                raise sqlite3.DatabaseError("; ".join(problems[:5]))
    except sqlite3.DatabaseError as exc:
        name = getattr(exc, "sqlite_errorname", "")
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


__all__ = ["SIDECARS", "WAL_QUICK_CHECK_MAX_BYTES", "check_not_symlink", "ensure_schema",
           "make_private", "probe_database", "upgrade_hint"]
