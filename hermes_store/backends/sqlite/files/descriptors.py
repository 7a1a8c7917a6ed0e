"""The one kind of descriptor of a live database file this process opens itself: a
read-only one per watched file, kept, to read its header (issue 31, row 4).

Reading a live file's bytes needs a descriptor, and closing any descriptor of a file
drops every POSIX lock this process holds on it, SQLite's included (decision D19). So
the watch of a writable store (``identity.FileWatch``) holds one read-only descriptor
of its database file, shared by every store of this process on that file (one per
inode) and read with ``os.pread`` (one system call, no file position). It is closed
only when ``/proc/self/fd`` shows no other descriptor of this process on the file: then
no SQLite connection has it open here, and there is no lock to drop. Until then it
lingers, and every later :func:`hold` or :func:`release` looks again; where
``/proc/self/fd`` does not exist it stays open until the process ends (one per file).
One window is left: a connection opened by another thread to a file no store of this
process uses any more, between that look and the close (microseconds).

``open_descriptors() -> {(st_dev, st_ino): [fd, …]} | None``  this process's open
    files, from ``/proc/self/fd``, the kept descriptors left out (None where there is no
    such list)
``hold(path, identity) -> int | None``  the kept descriptor of the file at ``path``
    whose identity is ``identity`` (None: another file is there now, or it cannot be
    opened)
``release(identity)``  a holder is done with it
``sweep()``  close what can be closed now (after a store's connections closed)
"""

from __future__ import annotations

import os
import threading

#: where Linux lists this process's open files
PROC_FDS = "/proc/self/fd"

#: identity -> [descriptor, holders]; holders 0: lingering until it can be closed
_HELD: dict[tuple[int, int], list[int]] = {}
#: descriptors opened on a file that turned out to be another one: kept the same way
_SPARE: list[tuple[tuple[int, int], int]] = []
_LOCK = threading.Lock()


def open_descriptors() -> dict[tuple[int, int], list[int]] | None:
    """(st_dev, st_ino) -> this process's descriptors of it, the kept ones left out (a
    file is open here only if something else has it open: SQLite, the host); None where
    unknown."""
    found = _scan()
    if found is None:
        return None
    with _LOCK:
        ours = _ours()
    return {ident: rest for ident, fds in found.items()
            if (rest := [fd for fd in fds if fd not in ours])}


def _ours() -> set[int]:
    return {held[0] for held in _HELD.values()} | {fd for _, fd in _SPARE}


def _scan() -> dict[tuple[int, int], list[int]] | None:
    try:
        names = os.listdir(PROC_FDS)
    except OSError:
        return None
    found: dict[tuple[int, int], list[int]] = {}
    for name in names:
        try:
            st = os.stat(f"{PROC_FDS}/{name}")
        except OSError:
            continue
        found.setdefault((st.st_dev, st.st_ino), []).append(int(name))
    return found


def hold(path: str | os.PathLike, identity: tuple[int, int]) -> int | None:
    """The kept read-only descriptor of the file at ``path``, if it is ``identity``."""
    with _LOCK:
        _sweep()
        held = _HELD.get(identity)
        if held is not None:
            held[1] += 1
            return held[0]
        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(path, flags)
        except OSError:
            return None
        st = os.fstat(fd)
        found = (st.st_dev, st.st_ino)
        if found != identity:  # replaced meanwhile: kept like any other (its locks)
            if found in _HELD:
                _SPARE.append((found, fd))
            else:
                _HELD[found] = [fd, 0]
            return None
        _HELD[identity] = [fd, 1]
        return fd


def release(identity: tuple[int, int]) -> None:
    """One holder of ``identity``'s descriptor is done; it is closed once it is safe."""
    with _LOCK:
        held = _HELD.get(identity)
        if held is not None and held[1] > 0:
            held[1] -= 1
        _sweep()


def sweep() -> None:
    """Close the lingering descriptors that can be closed now (a store's connections
    have all closed: its engine was disposed)."""
    with _LOCK:
        _sweep()


def _sweep() -> None:
    """Close the lingering descriptors of files no other descriptor of this process
    has open (``_LOCK`` held)."""
    lingering = [(ident, held[0]) for ident, held in _HELD.items() if held[1] == 0]
    lingering += _SPARE
    if not lingering:
        return
    open_now = _scan()
    if open_now is None:
        return  # no way to tell: kept until the process ends
    ours = _ours()
    for ident, fd in lingering:
        others = [n for n in open_now.get(ident, ()) if n not in ours]
        if others or _HELD.get(ident, [None, 0])[1] > 0:
            continue
        os.close(fd)
        if _HELD.get(ident, [None])[0] == fd:
            del _HELD[ident]
        else:
            _SPARE.remove((ident, fd))


__all__ = ["PROC_FDS", "hold", "open_descriptors", "release", "sweep"]
