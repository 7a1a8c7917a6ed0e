"""The ``-wal``/``-shm`` generation a store's connections opened, and what is kept when
it is lost (issue 31, row 3; upstream #105670, #105567, #110054, #125184).

In WAL mode SQLite goes on through the descriptors it holds. When the sidecars are
unlinked (``rm state.db-wal``; a sibling's close that found itself alone because a
stray close in this process dropped SQLite's locks, D19) or replaced by a sibling's new
generation, this process's commits land in a log no other connection reads, indexed by
a ``-shm`` nobody else shares: acknowledged rows vanish at close, or a close-time
checkpoint copies them over what the sibling wrote.

So a writable store records (device, inode) of both sidecars once its first connection
has them open, and compares them with the path's before each write unit: two ``stat``
calls. A difference alone is no loss: once every connection of this process to the
file has closed, the next one rightly opens what is at the path. It is judged by
``/proc/self/fd``: lost while this process still holds the generation it recorded
(without that list every difference counts as a loss).

A lost log is copied aside, never deleted: a child process reads it through
``/proc/<pid>/fd/<n>`` (an unlinked file can be reached no other way, and a child's close
drops none of this process's locks: ``ops.copy_in_child``) into
``<db>.orphaned-wal-<inode>-<salts>/`` (the first process that finds it lost copies
it, the others point there), with the database file as it is now and a ``README.txt``. The directory is a database and its log under the database's own
names: ``hermes-store --db <dir>/<name> recover --output NEW.db`` salvages every row.

``Generation(path)``   records what is at the path now (nothing while a sidecar is missing)
``.lost() -> [Path] | None``  the sidecars lost (None: the generation is still in place)
``.preserve() -> Lost``  copy the lost log aside once; what to tell the user
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import NamedTuple

from .descriptors import open_descriptors


class Lost(NamedTuple):
    """What ``WalGenerationLostError`` says: the sidecars, what changed, and the rest."""

    names: str
    detail: str
    aftermath: str
    preserved: Path | None


def _signature(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Generation:
    """The sidecars of one database file as its store's connections opened them."""

    __slots__ = ("path", "wal", "shm", "recorded", "_names", "_held")

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.wal, self.shm = Path(f"{path}-wal"), Path(f"{path}-shm")
        self._names = (f"{path}-wal", f"{path}-shm")  # what ``stat`` takes fastest
        self.recorded: tuple | None = None
        self._held: dict | None = None
        self._record()

    def _now(self) -> tuple:
        wal, shm = self._names
        return _signature(wal), _signature(shm)

    def _record(self) -> None:
        now = self._now()
        self.recorded = None if None in now else now

    def lost(self) -> list[Path] | None:
        """The recorded sidecars no longer at the path while this process holds them;
        None while they are (two ``stat`` calls), or when it let go of them."""
        recorded = self.recorded
        wal, shm = self._names
        try:  # the usual case, as few calls as it takes
            a, b = os.stat(wal), os.stat(shm)
            now = ((a.st_dev, a.st_ino), (b.st_dev, b.st_ino))
        except OSError:
            now = self._now()
        if now == recorded:
            return None
        if recorded is None:  # not there when the store opened: take them as they come
            self._record()
            return None
        held = open_descriptors()
        if held is not None and not any(r in held for r in recorded):
            self._record()  # every connection here closed: the next one opens the path's
            return None
        self._held = held
        return [p for p, was, is_ in zip((self.wal, self.shm), recorded, now) if was != is_]

    def preserve(self, lost: list[Path]) -> Lost:
        """Copy a lost log (and the database file) aside; say where and how to recover."""
        names = " and ".join(str(p) for p in lost)
        gone = [_signature(p) is None for p in lost]
        what = "deleted" if all(gone) else "replaced by another file" if not any(gone) \
            else "deleted or replaced"
        were, ones = ("were", "ones") if len(lost) > 1 else ("was", "one")
        detail = (f"{names} {were} {what}; this store's connections still have the old "
                  f"{ones} open")
        if self.wal not in lost:
            return Lost(names, detail, (
                f"The log at {self.wal} is intact and holds every commit; only its index "
                "is no longer shared with other connections."), None)
        where, why = self._copy_aside()
        if where is None:
            return Lost(names, detail, (
                f"The log this store wrote to could not be copied aside ({why}): what was "
                "committed to it since the last checkpoint is reachable only while this "
                "process runs."), None)
        command = (f"hermes-store --db {shlex.quote(str(where / self.path.name))} "
                   "recover --output NEW.db")
        return Lost(names, detail, (
            f"Nothing committed to the old log is lost: it was copied, with the database "
            f"file, to {where} (README.txt there). To get its rows back, run `{command}` "
            "(NEW.db: a new file; nothing else is changed)."), where)

    def _copy_aside(self) -> tuple[Path | None, str]:
        held = self._held
        if held is None:
            return None, "this system has no /proc/self/fd to reach an unlinked file through"
        fds = held.get(self.recorded[0], [])
        if not fds:
            return None, "no descriptor of it is open in this process"
        from .ops import copy_in_child

        fd, pid = fds[0], os.getpid()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        where = self.path.with_name(f"{self.path.name}.orphaned-wal-{_generation_key(fd)}")
        try:
            os.mkdir(where, 0o700)
        except FileExistsError:
            # every process that held this log finds it lost: the first one copies it,
            # the others point to that copy (three writers made three copies of every
            # lost log, 9 GB in ten minutes of the chaos run)
            return where, ""
        except OSError as exc:
            return None, f"cannot create {where}: {exc}"
        copy_wal = where / f"{self.path.name}-wal"
        try:
            done = copy_in_child([(Path(f"/proc/{pid}/fd/{fd}"), copy_wal),
                                  (self.path, where / self.path.name)])
        except OSError as exc:  # no child could be started
            return None, f"copying it to {where} failed: {exc}"
        # the descriptor still the log's after the copy: the child read the right file
        if done.returncode != 0 or _signature(f"/proc/self/fd/{fd}") != self.recorded[0]:
            tail = done.stderr.strip().splitlines()
            return None, f"copying it to {where} failed: {tail[-1] if tail else done.returncode}"
        try:
            (where / "README.txt").write_text(_readme(self.path, copy_wal, lost_at=stamp,
                                                      pid=pid))
        except OSError:
            pass  # the copies are what matters; the error message says the rest
        return where, ""


def _generation_key(fd: int) -> str:
    """Names one log generation for every process that held it: its inode and the salts
    in its header (a later log that gets the freed inode number has other salts), read
    with ``pread`` on SQLite's own descriptor (nothing opened or closed)."""
    st = os.fstat(fd)
    try:
        salts = os.pread(fd, 8, 16).hex()
    except OSError:
        salts = "nosalt"
    return f"{st.st_ino}-{salts}"


def _readme(path: Path, copy_wal: Path, *, lost_at: str, pid: int) -> str:
    db = copy_wal.parent / path.name
    return (
        f"hermes_store wrote this directory at {lost_at} (process {pid}): the write-ahead "
        f"log of\n{path} was deleted or replaced while a store had it open, so the store "
        "refused\nto write on and copied what it still held.\n\n"
        f"{copy_wal.name}  that log: every commit since the last checkpoint, which the file\n"
        f"    at {path} may not have\n"
        f"{path.name}  {path} as it was then\n\n"
        "Get the rows back into a new file (nothing here or at the live path changes):\n\n"
        f"    hermes-store --db {shlex.quote(str(db))} recover --output NEW.db\n\n"
        "Sessions missing from the live store can then be carried over with\n"
        "`hermes-store --db NEW.db sessions export -o s.jsonl` and `hermes-store sessions "
        "import s.jsonl`\n(sessions already there are skipped: compare them with `sessions "
        "show`).\nhermes_store never deletes this directory; remove it once you have what "
        "you need.\n"
    )


__all__ = ["Generation", "Lost"]
