"""Is the file at the store's path still the one it opened, with the log it opened?

A restore script, a sync tool or any write-temp-then-rename can put a new file at the
path while a store has the old one open (upstream #89332). SQLite's connections keep
the old file (its inode) and go on writing into it — into a file nobody will read
again — and a repair run then would work on the wrong file. So a store records the
file's identity (``st_dev``, ``st_ino``) at open, and checks it before a write unit, a
checkpoint or a repair touches the file: a mismatch is ``StoreReplacedError`` naming the
path, and nothing is written through the old handles. The new file is picked up only by
a new open (or ``SessionDB.reopen()``). The check is ``os.stat`` on the path, never
``open()`` (closing a raw descriptor would drop the POSIX locks SQLite holds on the
file). It fails open where the filesystem has no stable identity (``st_ino == 0``, some
FUSE and Windows filesystems).

A writable store's watch is armed once its engine is ready (:meth:`FileWatch.arm`) and
then sees three more failures users met (issue 31), each refused with a sticky error
(every later write too), and each leaving the log as it is at close (no close-time
checkpoint: ``latch.leave_log_on_close``):

* the directory of the file deleted (a profile home removed, upstream #94590):
  ``StoreDirectoryVanishedError`` naming it; nothing creates it again (row 10);
* the file overwritten *in place*, same inode (``cp backup.db state.db``): the identity
  stamped in its header (``stamp.py``) is read from the file itself through a kept
  descriptor (``descriptors.py``: ``os.pread``, one system call) and compared:
  ``StoreOverwrittenError``; the store's log, which belongs to the overwritten content,
  is moved out of the new content's way (row 4);
* the ``-wal``/``-shm`` generation deleted or replaced (``generation.py``: two ``stat``
  calls): ``WalGenerationLostError``, the lost log copied aside with instructions (row 3).

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
``FileWatch(path)``  records at creation; ``arm(engine)`` for a writable store;
    ``check()`` raises, ``replaced()`` answers, ``settle()`` at close
``set_aside_sidecars(path) -> list[Path]``  the stale sidecars moved (see above)
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from functools import partial
from pathlib import Path
from typing import NamedTuple

from sqlalchemy import event

from ....errors import (DatabaseDamagedError, StoreDirectoryVanishedError,
                        StoreOverwrittenError, StoreReplacedError, WalGenerationLostError)
from . import descriptors, stamp
from .descriptors import open_descriptors
from .generation import Generation
from .latch import latched_identity, leave_log_on_close, refusal

log = logging.getLogger("hermes_store.backends.sqlite")


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
    """The identity of one database file, recorded when created (at the store's open),
    and for a writable store (:meth:`arm`) its stamp and its log's generation.

    ``check()`` costs one ``stat`` (about two microseconds; ten to twenty when SQLite's
    work has just pushed the kernel's path lookup out of the CPU's caches); an armed
    watch adds one ``pread`` of the header and, in WAL mode, a ``stat`` of each sidecar.
    With ``set_aside=True`` (a writable store) the first ``check()`` that finds the file
    replaced also moves the old file's log out of the new file's way
    (``set_aside_sidecars``). A file replaced by a rename is judged again at every check
    (put back, it passes); the failures an armed watch sees are sticky.
    """

    __slots__ = ("path", "identity", "_set_aside", "moved", "_refusal", "_leave_log",
                 "_fd", "_release", "_expected", "_before", "_generation", "__weakref__")

    def __init__(self, path: str | os.PathLike, *, set_aside: bool = False) -> None:
        self.path = Path(path)
        #: None: nothing to compare with (the check then always passes)
        self.identity = FileIdentity.of(self.path)
        self._set_aside = set_aside
        #: the sidecars moved aside when the replacement was found
        self.moved: list[Path] = []
        #: makes the sticky error (a fresh one each time), once one was found
        self._refusal = None
        #: the store's connections close without checkpointing (a problem was found)
        self._leave_log = False
        #: armed: the kept descriptor, the header bytes of the stamp, and the bytes the
        #: file showed before the stamp reached it (accepted until it does)
        self._fd: int | None = None
        self._release = None  # gives the descriptor back, once: at close, or when collected
        self._expected = self._before = None
        self._generation: Generation | None = None

    def arm(self, engine) -> None:
        """Watch a writable store's file more closely, once its engine is ready: stamp
        its identity if it has none (``stamp.ensure``: a store's first writable open of
        an upstream file), keep a descriptor to read it back from the file, and record
        the sidecar generation (WAL mode) its connections opened."""
        if self.identity is None:
            return  # no stable identity: nothing to compare, as for the path
        # its connections close without a checkpoint once a problem was found, and the
        # kept descriptor is closed once they all are (``descriptors``)
        event.listen(engine, "close", self.before_close)
        event.listen(engine, "engine_disposed", _disposed)
        raw = engine.raw_connection()
        try:
            conn = raw.driver_connection
            identity = stamp.ensure(conn)
            wal = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"
            if wal:  # this connection has the sidecars open now
                self._generation = Generation(self.path)
        finally:
            raw.close()
        if identity is None or not hasattr(os, "pread"):
            return  # not stamped yet (``stamp.ensure``), or no pread (Windows)
        self._fd = descriptors.hold(self.path, self.identity)
        if self._fd is None:
            return
        self._release = weakref.finalize(self, descriptors.release, self.identity)
        self._expected = stamp.header_bytes(identity)
        if self._header() != self._expected:
            # The stamp is still in the log (just written, or another process's not yet
            # checkpointed): copy it into the file now, so a copy written over the file
            # cannot pass for it; until then the bytes found are accepted.
            self._before = self._header()
            _checkpoint_once(self.path)
            if self._header() == self._expected:
                self._before = None

    def _header(self) -> bytes:
        return os.pread(self._fd, stamp.HEADER_SIZE, stamp.HEADER_OFFSET)

    def _find(self):
        """What is wrong now, as a maker of the error to raise; None while nothing is.
        The failures an armed watch finds are kept (sticky)."""
        recorded = self.identity
        if recorded is None:
            return None
        path = self.path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if not os.path.isdir(path.parent):
                return self._keep(partial(StoreDirectoryVanishedError, path,
                                          path.parent))
            return self._replaced("no file is at that path any more: it was moved away "
                                  "or deleted")
        except OSError:
            return None  # unreadable right now: not evidence of a replacement
        if st.st_ino != 0 and (st.st_dev != recorded.dev or st.st_ino != recorded.ino):
            return self._replaced(f"the file there now is {FileIdentity(st.st_dev, st.st_ino)}"
                                  f", the one it opened was {recorded}")
        if self._fd is not None:
            header = os.pread(self._fd, stamp.HEADER_SIZE, stamp.HEADER_OFFSET)
            if header != self._expected:
                if header != self._before:
                    return self._overwritten(header)
            elif self._before is not None:
                self._before = None  # the stamp reached the file: nothing else passes now
        generation = self._generation
        if generation is not None:
            lost = generation.lost()
            if lost:
                kept = generation.preserve(lost)
                return self._keep(partial(WalGenerationLostError, path, kept.names,
                                          kept.detail, kept.aftermath, kept.preserved))
        return None

    def _replaced(self, detail: str):
        if self._set_aside:
            self._set_aside = False  # once: later checks find nothing of ours there
            self.moved = set_aside_sidecars(self.path)
        return partial(StoreReplacedError, self.path, detail)

    def _overwritten(self, header: bytes):
        found = int.from_bytes(header, "big", signed=True) if len(header) == 4 else None
        detail = (f"its header carries identity {found}, the file this store opened "
                  f"carried {int.from_bytes(self._expected, 'big', signed=True)}"
                  if found is not None else "its header is gone")
        moved = []
        generation = self._generation
        if generation is not None and generation.lost() is None:
            moved = _move_aside(self.path, ("-wal", "-shm"))  # this store's own log
        self.moved = moved
        return self._keep(partial(StoreOverwrittenError, self.path, detail, moved))

    def _keep(self, make):
        self._refusal = make
        self._leave_log = True
        log.warning("%s", make())
        return make

    def _detect(self):
        return self._refusal or self._find()

    def replaced(self) -> bool:
        """Whether the file (or its log) is no longer the one the store opened."""
        return self._detect() is not None

    def check(self) -> None:
        """Raise ``StoreReplacedError`` (or the subclass that says what happened) when
        the path holds another file, none, or another log; and the latched
        ``DatabaseDamagedError`` when this process found it damaged."""
        first = latched_identity(self.identity, self.path)
        if first is not None:
            raise refusal(first) from first
        make = self._refusal or self._find()
        if make is not None:
            raise make()

    def check_before_commit(self) -> None:
        """Inside a write unit, its lock held, just before COMMIT: raise when the log's
        generation was lost meanwhile (two ``stat`` calls). A sibling that unlinked the
        sidecars while this unit waited for the lock would otherwise have it commit into
        the unlinked log, acknowledged and missing from the file; raised here, the unit
        rolls back and nothing was acknowledged."""
        generation = self._generation
        if generation is None or self._refusal is not None or not generation.lost():
            return
        make = self._find()  # the whole check: a file renamed over says so first
        if make is not None:
            raise make()

    def settle(self) -> str | None:
        """At close: what changed (None: nothing), moving the old log aside as ``check``
        would, without raising; the store's connections then close without
        checkpointing, and the kept descriptor is given back."""
        try:
            self.check()
        except (StoreReplacedError, DatabaseDamagedError) as exc:
            self._leave_log = True
            return str(exc)
        finally:
            if self._release is not None:
                self._fd = None
                self._release()
        return None

    def before_close(self, dbapi_conn, _record=None) -> None:
        """A pool ``close`` listener: a connection of a store that found its file or log
        gone or replaced closes without SQLite's close-time checkpoint, which would copy
        a log into a file it does not belong to and delete the path's log by name."""
        if self._leave_log:
            leave_log_on_close(dbapi_conn)


def _disposed(_engine) -> None:
    descriptors.sweep()


def _checkpoint_once(path: Path) -> None:
    """The store's checkpoint (``engine.checkpoint``: under the writer lock, D19) on
    connections of its own, closed after: none is left in the store's pool for a thread
    to take without the connect hook's check."""
    import sqlalchemy as sa

    from ....connections import autocommit
    from ..engine import checkpoint, create_engine

    engine = create_engine(path, journal_mode=None, poolclass=sa.pool.NullPool)
    try:
        checkpoint(autocommit(engine), path)
    finally:
        engine.dispose()


def _move_aside(path: Path, suffixes: tuple[str, ...], held=None) -> list[Path]:
    """Rename ``path``'s sidecars to ``<path>.replaced-<UTC><suffix>`` (those in
    ``held``, a set of identities, when given); what was moved."""
    stamp_ = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved = []
    for suffix in suffixes:
        sidecar = Path(f"{path}{suffix}")
        ident = FileIdentity.of(sidecar)
        if ident is None or (held is not None and (ident.dev, ident.ino) not in held):
            continue
        target = Path(f"{path}.replaced-{stamp_}{suffix}")
        try:
            os.rename(sidecar, target)
        except OSError as exc:
            log.warning("could not move %s aside: %s", sidecar, exc)
            continue
        moved.append(target)
    return moved


def set_aside_sidecars(path: str | os.PathLike) -> list[Path]:
    """Move the ``-wal``/``-shm`` of a replaced database file out of the new file's way.

    Only when it is certain: this process holds each moved sidecar open and does *not*
    hold the file now at ``path`` open (it was replaced under us). Returns what was
    moved (nothing where ``/proc/self/fd`` is not available).
    """
    path = Path(path)
    held = open_descriptors()
    now = FileIdentity.of(path)
    if held is None or (now is not None and (now.dev, now.ino) in held):
        return []
    moved = _move_aside(path, ("-wal", "-shm"), set(held))
    if moved:
        log.warning("%s was replaced while open: its old log was moved out of the new "
                    "file's way, to %s (it holds the replaced file's last commits)",
                    path, ", ".join(map(str, moved)))
    return moved
