"""What every writer of a file's schema shares, and nothing else: creating the file
owner-only, and the lock that makes schema changes of one file take turns (migrations,
the one-step creation of a new file, schema repair). Imports nothing of the package.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator


def create_private_file(path: Path) -> None:
    """Create an empty database file readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return  # created meanwhile by another process: use it as found
    os.close(fd)


@contextlib.contextmanager
def migration_lock(path: Path) -> Iterator[None]:
    """Serialize schema changes of one file across processes: migrations, the one-step
    creation of a new file (``create``), schema repair.

    Alembic decides which steps to run from the version it read before the first
    step's transaction, so two processes upgrading at once would both try to apply
    the same step. An advisory lock on ``<db>.migrate.lock`` makes the second wait,
    then find the work done. (The database file itself cannot be flock()ed safely:
    closing any descriptor of it drops SQLite's own POSIX locks.)
    """
    try:
        import fcntl
    except ImportError:  # Windows: SQLite's BEGIN IMMEDIATE is the only guard
        yield
        return
    lock_path = Path(f"{path}.migrate.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:  # read-only directory: nothing will be written anyway
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


__all__ = ["create_private_file", "migration_lock"]
