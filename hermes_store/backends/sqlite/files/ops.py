"""What every writer of a file's schema shares, and nothing else: creating the file
owner-only, and the lock that makes schema changes of one file take turns (migrations,
the one-step creation of a new file, schema repair); and reading a live file's bytes.
Imports nothing of the package.

A live database file, its ``-wal``, ``-shm`` or ``-journal`` is never opened by this
process's own file calls: closing any descriptor of a file drops every POSIX lock the
process holds on it, SQLite's included (sqlite.org/howtocorrupt.html §2.2; decision
D19). Whoever needs its bytes (a repair's backup, a recovery's working copy, a
fingerprint, a header) asks a child process: :func:`copy_in_child`,
:func:`digests_in_child`, :func:`head_in_child`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Sequence

#: the child of the ``*_in_child`` functions (no site, no
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
    "elif what == 'quick_check':\n"
    "    import sqlite3\n"
    "    try:\n"
    "        conn = sqlite3.connect(args[0], uri=True, timeout=5)\n"
    "        rows = [str(r[0]) for r in conn.execute('PRAGMA quick_check(10)')]\n"
    "    except sqlite3.Error as exc:\n"
    "        rows = [f'cannot be checked: {exc}']\n"
    "    print('\\n'.join(rows))\n"
    "elif what == 'head':\n"
    "    with open(args[0], 'rb') as fh:\n"
    "        print(fh.read(int(args[1])).hex())\n"
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


def quick_check_in_child(uri: str) -> list[str]:
    """SQLite's ``quick_check`` rows for the database at ``uri`` (a read-only file: URI),
    run by a child process: its connections share nothing with this process's (SQLite
    shares one ``-shm`` mapping between the connections of a process, so a log taken
    away under this process would mislead a check made here). Raises ``OSError`` when
    the child cannot run."""
    done = _child("quick_check", [uri])
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()
        raise OSError(f"cannot check {uri}: {tail[-1] if tail else done.returncode}")
    return done.stdout.splitlines()


def head_in_child(path: Path, length: int) -> bytes:
    """The first ``length`` bytes of the file (fewer when it is shorter), read by a child
    process. Raises ``OSError`` when the child cannot read them."""
    done = _child("head", [path, str(length)])
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()
        raise OSError(f"cannot read {path}: {tail[-1] if tail else done.returncode}")
    return bytes.fromhex(done.stdout.strip())


def create_private_file(path: Path) -> bool:
    """Create an empty database file readable by its owner only; False when a file
    was there already (another process created it meanwhile: use it as found)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return False
    os.close(fd)
    return True


@contextlib.contextmanager
def migration_lock(path: Path) -> Iterator[None]:
    """Serialize schema changes of one file across processes: migrations, the one-step
    creation of a new file (``create``), schema repair, setting a blank file aside.

    Alembic decides which steps to run from the version it read before the first
    step's transaction, so two processes upgrading at once would both try to apply
    the same step. An advisory lock on ``<db>.migrate.lock`` makes the second wait,
    then find the work done. (The database file itself cannot be flock()ed safely:
    closing any descriptor of it drops SQLite's own POSIX locks.)
    """
    with _lock_beside(path, "migrate", blocking=True):
        yield


@contextlib.contextmanager
def maintenance_lock(path: Path) -> Iterator[bool]:
    """One process at a time runs auto-maintenance on a file (issue 31, row 9): yields
    True when this process has the turn, False at once when another has it (it skips,
    never waits). An advisory lock on ``<db>.maintenance.lock``."""
    with _lock_beside(path, "maintenance", blocking=False) as held:
        yield held


@contextlib.contextmanager
def fts_rebuild_lock(path: Path) -> Iterator[bool]:
    """One process at a time rebuilds a file's stale full-text index (issue 31, row 1):
    yields True when this process has the turn, False at once when another is
    rebuilding it (it skips). An advisory lock on ``<db>.fts.lock``."""
    with _lock_beside(path, "fts", blocking=False) as held:
        yield held


@contextlib.contextmanager
def ledger_lock(path: Path) -> Iterator[None]:
    """Updates of a file's repair ledger (``repair_limits``) take turns across processes:
    an advisory lock on ``<db>.repair-ledger.lock``. Taken inside the migration lock,
    never around it."""
    with _lock_beside(path, "repair-ledger", blocking=True):
        yield


@contextlib.contextmanager
def _lock_beside(path: Path, purpose: str, *, blocking: bool) -> Iterator[bool]:
    """An advisory lock on ``<db>.<purpose>.lock``; yields whether it is held (always
    True when ``blocking``; also True where nothing can be locked: Windows, where
    SQLite's own locks are the only guard, and a read-only directory, where nothing
    will be written anyway).

    The lock file exists only while a holder has it, so a store leaves nothing beside
    it: the holder unlinks it before it lets go, and a waiter that then gets the lock
    of the unlinked file sees that the path names another file (or none) and takes the
    lock again at the path.
    """
    try:
        import fcntl
    except ImportError:
        yield True
        return
    lock_path = Path(f"{path}.{purpose}.lock")
    mode = fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB
    fd = _take(lock_path, mode)
    if fd is None or fd == _NO_LOCK_FILE:
        yield fd == _NO_LOCK_FILE
        return
    try:
        yield True
    finally:
        try:
            os.unlink(lock_path)
        except OSError:
            pass
        os.close(fd)


#: :func:`_take`'s answer where the lock file cannot be created (a read-only directory)
_NO_LOCK_FILE = -1


def _take(lock_path: Path, mode: int) -> int | None:
    """The descriptor of the lock file at ``lock_path``, locked; None when a
    non-blocking ``mode`` found it held; ``_NO_LOCK_FILE`` when it cannot be created."""
    import fcntl

    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return _NO_LOCK_FILE
        try:
            fcntl.flock(fd, mode)
            held = os.fstat(fd)
            try:
                now = os.stat(lock_path)
            except FileNotFoundError:
                now = None
        except BlockingIOError:  # another process has it (non-blocking only)
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            return fd  # the lock of the file at the path: ours
        os.close(fd)  # the previous holder unlinked it: take the new one


__all__ = ["copy_in_child", "create_private_file", "digests_in_child", "fts_rebuild_lock",
           "maintenance_lock", "migration_lock"]
