"""What every writer of a file's schema shares, and nothing else: creating the file
owner-only, and the lock that makes schema changes of one file take turns (migrations,
the one-step creation of a new file, schema repair); and reading a live file's bytes.
Imports nothing of the package.

A live database file, its ``-wal``, ``-shm`` or ``-journal`` is never opened by this
process's own file calls: closing any descriptor of a file drops every POSIX lock the
process holds on it, SQLite's included (sqlite.org/howtocorrupt.html §2.2; decision
D19). Whoever needs its bytes (a repair's backup, a recovery's working copy, a
fingerprint) asks a child process: :func:`copy_in_child`, :func:`digests_in_child`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Sequence

#: the child of :func:`copy_in_child` and :func:`digests_in_child` (no site, no
#: environment: nothing of the parent's path is imported)
_CHILD = (
    "import hashlib, os, shutil, sys\n"
    "what, args = sys.argv[1], sys.argv[2:]\n"
    "if what == 'copy':\n"
    "    for src, dst in zip(args[::2], args[1::2]):\n"
    "        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)\n"
    "        with open(src, 'rb') as fin, os.fdopen(fd, 'wb') as fout:\n"
    "            shutil.copyfileobj(fin, fout, 1 << 20)\n"
    "            fout.flush()\n"
    "            os.fsync(fout.fileno())\n"
    "else:\n"
    "    for path in args:\n"
    "        try:\n"
    "            st = os.stat(path)\n"
    "            digest = hashlib.sha256()\n"
    "            with open(path, 'rb') as fh:\n"
    "                for block in iter(lambda: fh.read(1 << 20), b''):\n"
    "                    digest.update(block)\n"
    "            print(st.st_size, st.st_mtime_ns, digest.hexdigest())\n"
    "        except FileNotFoundError:\n"
    "            print('-')\n"
)


def _child(what: str, args: Sequence[str | os.PathLike]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable or "python3", "-I", "-S", "-c", _CHILD, what,
                           *map(os.fspath, args)], capture_output=True, text=True)


def copy_in_child(pairs: Sequence[tuple[Path, Path]]) -> subprocess.CompletedProcess:
    """Byte copies ``src -> dst`` of each pair, made by a child process: each ``dst`` is
    new (never over a file), owner-only and fsynced. The caller reads ``returncode``
    and ``stderr`` (and removes what a failed copy left)."""
    return _child("copy", [x for pair in pairs for x in pair])


def digests_in_child(paths: Sequence[Path]) -> list[tuple[int, int, str] | None]:
    """``(size, mtime_ns, sha256)`` of each file (None where it does not exist), read
    by a child process. Raises ``OSError`` when the child cannot read them."""
    done = _child("digest", paths)
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != len(paths):
        tail = done.stderr.strip().splitlines()
        raise OSError(f"cannot read {paths[0]}: {tail[-1] if tail else done.returncode}")
    out: list[tuple[int, int, str] | None] = []
    for line in lines:
        if line == "-":
            out.append(None)
        else:
            size, mtime, digest = line.split()
            out.append((int(size), int(mtime), digest))
    return out


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

    The lock file exists only while a holder has it, so a store leaves nothing beside
    it: the holder unlinks it before it lets go, and a waiter that then gets the lock
    of the unlinked file sees that the path names another file (or none) and takes the
    lock again at the path.
    """
    try:
        import fcntl
    except ImportError:  # Windows: SQLite's BEGIN IMMEDIATE is the only guard
        yield
        return
    lock_path = Path(f"{path}.migrate.lock")
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:  # read-only directory: nothing will be written anyway
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                now = os.stat(lock_path)
            except FileNotFoundError:
                now = None
        except BaseException:
            os.close(fd)
            raise
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            break  # the lock of the file at the path: ours
        os.close(fd)  # the previous holder unlinked it: take the new one
    try:
        yield
    finally:
        try:
            os.unlink(lock_path)
        except OSError:
            pass
        os.close(fd)


__all__ = ["copy_in_child", "create_private_file", "digests_in_child", "migration_lock"]
