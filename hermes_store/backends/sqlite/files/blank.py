"""A state.db that holds nothing SQLite can read: set aside, and a fresh store started
(issue 31, row 8; upstream #102198, #97568, #68474).

A crash on a filesystem that loses data can leave the file empty (0 bytes) or zeroed
(NUL bytes where SQLite's 100-byte header belongs), sometimes beside a ``-wal`` that
still holds the last commits. Nothing in the file itself can be read, so nothing is
lost by moving it; refusing to open would only stop the agent, and opening it as it is
would be worse: SQLite deletes the ``-wal`` of an empty file on any open, read-only
included, and a store created over an empty file looks like a new install (upstream
#97568 ran seven days without its history before anyone noticed).

So an open that finds such a file renames it, with its sidecars, to
``<name>.empty-<UTC>`` / ``<name>.zeroed-<UTC>`` (+ ``-wal``, ``-shm``, ``-journal``),
never deleting a byte, creates a fresh file in its place and logs a warning that says
where it went (:func:`set_aside_if_empty`, :func:`set_aside_if_zeroed`). It happens
under the file's migration lock, and is decided again there, so two processes opening
at once set it aside once and both open the one fresh store. A read-only open never
moves anything: it is refused (``probe.probe_database``).

What counts as found empty. A store creating a new file makes it empty first, then
gives it its schema under the migration lock: for that moment another opener sees a
zero-length file that is nobody's loss (with a ``-journal`` beside it while SQLite
writes its first page). An empty file is taken for a lost one when this open did not
just create it and either a ``-wal`` with frames is beside it (switching a file to WAL
writes its first page into the file, so a live WAL store is never empty) or it is
:data:`NEW_FILE_SECONDS` old or more.
Zeroed: the file's first 100 bytes are all zero (any length), read by a child process
(decision D19), and only after SQLite has refused it as not a database.

Any other file that is not SQLite is refused as before: it may be something else
entirely, and it is not ours to move.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path

from .ops import create_private_file, head_in_child, migration_lock
from .probe import log_size

log = logging.getLogger("hermes_store.backends.sqlite")

#: an empty file without sidecars younger than this may be a new store that another
#: opener is creating: it is used as a new store, not set aside
NEW_FILE_SECONDS = 30.0
#: SQLite's file header: zeroed when every one of these bytes is zero
HEADER_BYTES = 100
SIDECARS = ("-wal", "-shm", "-journal")


def _sidecars(path: Path) -> list[str]:
    return [s for s in SIDECARS if os.path.lexists(f"{path}{s}")]


def _regular_size(path: Path) -> int | None:
    """The size of the regular file at ``path``; None for none (or a FIFO, a device…:
    never read, never moved)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _found_empty(path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size:
        return False
    return log_size(path) > 0 or time.time() - st.st_mtime >= NEW_FILE_SECONDS



def _zeroed(path: Path) -> bool:
    if not _regular_size(path):
        return False
    try:
        head = head_in_child(path, HEADER_BYTES)
    except OSError:
        return False
    return not any(head)


def set_aside_if_empty(path: Path) -> Path | None:
    """Before SQLite opens ``path`` for writing: when it is an empty file found there
    (see the module docstring), set it aside and put a fresh empty file in its place.
    Returns where it went, or None (the usual case: one ``stat``)."""
    if _regular_size(path) != 0:
        return None
    return _set_aside(path, "empty", _found_empty)


def set_aside_if_zeroed(path: Path) -> bool:
    """After SQLite refused ``path`` as not a database: when its header is all zeros,
    set it aside and put a fresh empty file in its place. True when the caller may
    open the path again (set aside here, or meanwhile by another process); False when
    it is some other file, which must be refused."""
    return _zeroed_aside(path)[0]


def set_aside_blank(path: Path) -> Path | None:
    """Either of the above for a caller that only suspects the file (a repair): where
    the empty or zeroed file went, or None when it is neither."""
    return set_aside_if_empty(path) or _zeroed_aside(path)[1]


def _zeroed_aside(path: Path) -> tuple[bool, Path | None]:
    with migration_lock(path):
        if not _zeroed(path):
            return _still_a_database_or_new(path), None
        return True, _move_aside(path, "zeroed")


def _still_a_database_or_new(path: Path) -> bool:
    """Under the lock, after the file turned out not zeroed: another opener may have set
    the zeroed one aside already (a fresh or new store at the path now)."""
    from .probe import probe_database
    from ....errors import NotADatabaseError

    try:
        probe_database(path)
    except NotADatabaseError:
        return False
    except Exception:  # noqa: BLE001 - anything else: the open that follows says it
        return True
    return True


def _set_aside(path: Path, kind: str, still) -> Path | None:
    with migration_lock(path):
        if not still(path):  # another opener set it aside, or is creating it
            return None
        return _move_aside(path, kind)


def _move_aside(path: Path, kind: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest, n = path.with_name(f"{path.name}.{kind}-{stamp}"), 1
    while any(os.path.lexists(f"{dest}{s}") for s in ("",) + SIDECARS):
        n += 1
        dest = path.with_name(f"{path.name}.{kind}-{stamp}-{n}")
    # the sidecars first: a log left at the path would be read as the fresh file's own
    moved = []
    for suffix in _sidecars(path):
        os.rename(f"{path}{suffix}", f"{dest}{suffix}")
        moved.append(f"{dest.name}{suffix}")
    os.rename(path, dest)
    create_private_file(path)
    what = ("was empty (0 bytes)" if kind == "empty" else
            f"began with {HEADER_BYTES} zero bytes where SQLite's header belongs")
    with_sidecars = f" (with {', '.join(moved)})" if moved else ""
    log.warning(
        "%s %s, so nothing in it could be read: it was set aside as %s%s, every byte "
        "kept, and a fresh store was started in its place. If it held your history, "
        "restore state.db from a backup; see docs/reliability.md, \"A zero-length or "
        "zeroed state.db\", for reading what the set-aside log still holds.",
        path, what, dest, with_sidecars)
    return dest


__all__ = ["HEADER_BYTES", "NEW_FILE_SECONDS", "set_aside_blank", "set_aside_if_empty",
           "set_aside_if_zeroed"]
