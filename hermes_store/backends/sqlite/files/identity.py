"""Is the file at the store's path still the one it opened?

A restore script, a sync tool or any write-temp-then-rename can put a new file at the
path while a store has the old one open (upstream #89332). SQLite's connections keep
the old file (its inode) and go on writing into it — into a file nobody will read
again — and a repair run then would work on the wrong file. So a store records the
file's identity (``st_dev``, ``st_ino``) at open, and checks it before a write unit, a
checkpoint or a repair touches the file: a mismatch is ``StoreReplacedError`` naming the
path, and nothing is written through the old handles. The new file is picked up only by
a new open (or ``SessionDB.reopen()``).

The check is ``os.stat`` on the path, never ``open()`` (closing a raw descriptor would
drop the POSIX locks SQLite holds on the file). It fails open where the filesystem has
no stable identity (``st_ino == 0``, some FUSE and Windows filesystems).

Out of reach: a file truncated and rewritten *in place* (``cp new.db state.db``) keeps
its identity; see docs/operations.md, "Where to put state.db".

A replaced WAL file leaves one more trap: its ``-wal`` and ``-shm`` stay at the path's
sidecar names (SQLite's own close does not delete them for a moved file), and the next
opener of the *new* file would read the old file's log as its own — the old schema and
rows over the new file, and a checkpoint would write them into it. So when a store finds
its file replaced, it moves the sidecars it still holds open aside
(``set_aside_sidecars``: ``<path>.replaced-<UTC>-wal``/``-shm``, kept, since that log
holds the old file's last commits). "Still holds open" is read from ``/proc/self/fd``
(Linux): only a sidecar this process provably has open, beside a database file it
provably does not, is moved; elsewhere nothing is moved and the warning says what to do.

``FileIdentity.of(path) -> FileIdentity | None``  None: missing or no stable identity
``FileWatch(path)``  records at creation; ``check()`` raises, ``replaced()`` answers
``set_aside_sidecars(path) -> list[Path]``  the stale sidecars moved (see above)
"""

from __future__ import annotations

import logging
import os
import time
from typing import NamedTuple
from pathlib import Path

from .latch import latched_identity, refusal

log = logging.getLogger("hermes_store.backends.sqlite")
#: where Linux lists this process's open files
PROC_FDS = "/proc/self/fd"


class FileIdentity(NamedTuple):
    dev: int
    ino: int

    @classmethod
    def of(cls, path: str | os.PathLike) -> "FileIdentity | None":
        """The identity of the file at ``path`` now; None when there is none to compare
        (no file there, or a filesystem that reports inode 0)."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        if st.st_ino == 0:
            return None
        return cls(st.st_dev, st.st_ino)

    def __str__(self) -> str:
        return f"device {self.dev}, inode {self.ino}"


class FileWatch:
    """The identity of one database file, recorded when created (at the store's open).

    ``check()`` costs one ``stat`` (about two microseconds; ten to twenty when SQLite's
    work has just pushed the kernel's path lookup out of the CPU's caches). With
    ``set_aside=True`` (a writable store) the first ``check()`` that finds the file replaced also moves the
    old file's log out of the new file's way (``set_aside_sidecars``).
    """

    __slots__ = ("path", "identity", "_set_aside", "moved")

    def __init__(self, path: str | os.PathLike, *, set_aside: bool = False) -> None:
        self.path = Path(path)
        #: None: nothing to compare with (the check then always passes)
        self.identity = FileIdentity.of(self.path)
        self._set_aside = set_aside
        #: the sidecars moved aside when the replacement was found
        self.moved: list[Path] = []

    def problem(self) -> str | None:
        """What changed at the path, or None while it is still the recorded file."""
        recorded = self.identity
        if recorded is None:
            return None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return "no file is at that path any more: it was moved away or deleted"
        except OSError:
            return None  # unreadable right now: not evidence of a replacement
        if st.st_ino == 0 or (st.st_dev == recorded.dev and st.st_ino == recorded.ino):
            return None
        return (f"the file there now is {FileIdentity(st.st_dev, st.st_ino)}, the one it "
                f"opened was {recorded}")

    def replaced(self) -> bool:
        return self.problem() is not None

    def settle(self) -> str | None:
        """At close: what changed (None: nothing), moving the old log aside as ``check``
        would, without raising."""
        from ....errors import DatabaseDamagedError, StoreReplacedError

        try:
            self.check()
        except (StoreReplacedError, DatabaseDamagedError) as exc:
            return str(exc)
        return None

    def check(self) -> None:
        """Raise ``StoreReplacedError`` when the path holds another file (or none), and
        the latched ``DatabaseDamagedError`` when this process found it damaged."""
        first = latched_identity(self.identity, self.path)
        if first is not None:
            raise refusal(first) from first
        problem = self.problem()
        if problem is not None:
            from ....errors import StoreReplacedError

            if self._set_aside:
                self._set_aside = False  # once: later checks find nothing of ours there
                self.moved = set_aside_sidecars(self.path)
            raise StoreReplacedError(self.path, problem)


def _open_inodes() -> set[tuple[int, int]] | None:
    """(st_dev, st_ino) of every file this process has open; None where unknown."""
    try:
        names = os.listdir(PROC_FDS)
    except OSError:
        return None
    found = set()
    for name in names:
        try:
            st = os.stat(f"{PROC_FDS}/{name}")
        except OSError:
            continue
        found.add((st.st_dev, st.st_ino))
    return found


def set_aside_sidecars(path: str | os.PathLike) -> list[Path]:
    """Move the ``-wal``/``-shm`` of a replaced database file out of the new file's way.

    Only when it is certain: this process holds each moved sidecar open and does *not*
    hold the file now at ``path`` open (it was replaced under us). Returns what was
    moved (nothing where ``/proc/self/fd`` is not available).
    """
    path = Path(path)
    held = _open_inodes()
    now = FileIdentity.of(path)
    if held is None or (now is not None and (now.dev, now.ino) in held):
        return []
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved = []
    for suffix in ("-wal", "-shm"):
        sidecar = Path(f"{path}{suffix}")
        ident = FileIdentity.of(sidecar)
        if ident is None or (ident.dev, ident.ino) not in held:
            continue
        target = Path(f"{path}.replaced-{stamp}{suffix}")
        try:
            os.rename(sidecar, target)
        except OSError as exc:
            log.warning("could not move the replaced file's %s aside: %s", sidecar, exc)
            continue
        moved.append(target)
    if moved:
        log.warning("%s was replaced while open: its old log was moved out of the new "
                    "file's way, to %s (it holds the replaced file's last commits)",
                    path, ", ".join(map(str, moved)))
    return moved
